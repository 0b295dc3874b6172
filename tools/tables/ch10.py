"""Chapter 10's measured tables (chapters/10_decoding/README.md), from the files in results/.

Sources: the rows `./chapter10 --csv` appended during one run of tools/bench_decoding.sh (the
ladder, the split sweeps) and what tools/pytorch_decoding.py wrote in the same run; the logs of
same-run comparisons (`### [tag round R] ./chapter10 ARGS` blocks, each ending in the program's
summary table). The decoding CSV carries no `# key: value` header (bench_decoding.sh does not write
one), so the GPU, driver, CUDA version and date come from the env.txt written beside it.
"""

import os
import re
from collections import defaultdict

from . import common

DOC_DIR = "chapters/10_decoding"
RUN = "results/dev-2026-11-26c/call5"            # tools/bench_decoding.sh, the ladder as the code stands
LADDER_CSV = RUN + "/bench10/decoding.csv"
TORCH_CSV = RUN + "/bench10/pytorch-decoding.csv"
HEURISTIC_LOG = "results/dev-2026-11-26c/call7/ch10-heuristic.txt"
TIMELINE_LOG = "results/dev-2026-11-26c/call4/timelines.txt"
TIMELINE_DIFF = "results/dev-2026-11-26c/call4-timeline-batched.diff"
FLOOR_LOG = "results/dev-2026-11-26b/call7/ch10-before-after.txt"

# The ladder's columns: (label in the CSV, title).
KERNELS = [("1-fa2-grid", "1 fa2-grid"), ("2-split-kv", "2 split-kv"), ("3-gqa", "3 gqa"),
           ("4-paged P=64", "4 paged (P = 64)"), ("5-tuned", "5 tuned"), ("5-tuned P=64", "5 tuned, P = 64")]



def link(rel):
    return common.link(rel, DOC_DIR)


def env_of(folder):
    """(gpu, driver, CUDA release, date) of a run's env.txt."""
    gpu, driver, cuda, _, date = common.env_of(folder)
    return gpu, driver, cuda, date


def provenance(folder, command, sources):
    gpu, driver, cuda, date = env_of(folder)
    return "%s (driver %s, CUDA %s), %s, `%s`; %s" % (gpu, driver, cuda, date, command,
                                                     "; ".join(link(s) for s in sources))


def ladder_rows():
    _, rows = common.read_csv(LADDER_CSV)
    return rows


def pct(x):
    return "%.0f%%" % (100 * x)


def change(before, after):
    """The relative change from before to after, in whole percent ("0%" rather than "-0%")."""
    c = round(100 * (after / before - 1))
    return "%+d%%" % c if c else "0%"


# ---- the ladder ------------------------------------------------------------------------------------

LADDER_SHAPES = [  # (title, batch, q_len, max_len, checked)
    ("B = 1, N = 4096", 1, 1, 4096, True),
    ("B = 1, N = 8192", 1, 1, 8192, True),
    ("B = 1, N = 16384", 1, 1, 16384, True),
    ("B = 1, N = 32768", 1, 1, 32768, True),
    ("B = 1, N = 131072", 1, 1, 131072, True),
    ("B = 1, N = 32768, q_len = 4", 1, 4, 32768, True),
    ("B = 64, N = 4096", 64, 1, 4096, True),
    ("B = 4, lengths 1, 17, 4097, 100000", 4, 1, 100000, True),
    ("B = 1, N = 256 (timed only)", 1, 1, 256, False),
]


def ladder_cell(rows, label, batch, q_len, max_len, checked):
    found = common.select(rows, label=label, batch=batch, q_len=q_len, max_len=max_len, candidate=-1)
    if checked:
        found = [r for r in found if r["check"] != "skipped"]
    if not found:
        return "—"
    if len(found) != 1:
        raise common.TableError("%s: %d rows for %s at B=%d q_len=%d N=%d" % (LADDER_CSV, len(found), label,
                                                                            batch, q_len, max_len))
    r = found[0]
    if checked and r["check"] != "PASS":
        raise common.TableError("%s: %s at N=%d did not pass its check" % (LADDER_CSV, label, max_len))
    return "%.1f / %.0f (%s)" % (r["median_us"], r["kv_gbps"], pct(r["kv_gbps"] / r["read_gbps"]))


def ladder_table():
    rows = ladder_rows()
    body = [[title] + [ladder_cell(rows, label, b, q, n, c) for label, _ in KERNELS]
            for title, b, q, n, c in LADDER_SHAPES]
    reads = [r["read_gbps"] for r in rows if "dirty-flush" not in r["label"]]
    return ("%s. bf16, H_q = 32, H_kv = 8 (g = 4), D = 128, q_len = 1 unless given. Each cell: µs (median "
            "of 20, L2 flushed) / GB/s of K and V read (share of the read-only kernel's %.0f–%.0f GB/s in the "
            "same process). Every row but the last passed the 2× rule against float64.\n\n"
            % (provenance(RUN, "tools/bench_decoding.sh OUT", [LADDER_CSV]), min(reads), max(reads))
            + common.md_table(["shape"] + [t for _, t in KERNELS], body))


# ---- kernel 5 beside PyTorch and the read-only kernel ---------------------------------------------

def torch_best():
    _, rows = common.read_csv(TORCH_CSV)
    best = {}
    for r in rows:
        k = (r["batch"], r["q_len"], r["seq"])
        if k not in best or r["kv_gbps"] > best[k]["kv_gbps"]:
            best[k] = r
    return best


def targets_table():
    rows, torch = ladder_rows(), torch_best()

    def ours(label, b, q, n):
        return common.one(rows, "kernel %s" % label, label=label, batch=b, q_len=q, max_len=n, candidate=-1,
                          check="PASS")

    body = []
    for title, b, q, n in [("B = 1, N = 8192", 1, 1, 8192), ("B = 1, N = 32768", 1, 1, 32768),
                           ("B = 1, N = 131072", 1, 1, 131072), ("B = 1, N = 32768, q_len = 4", 1, 4, 32768),
                           ("B = 64, N = 4096", 64, 1, 4096)]:
        k5 = ours("5-tuned", b, q, n)
        paged = ours("5-tuned P=64", b, q, n)
        t = torch[(b, q, n)]
        body.append([title, "%.0f" % k5["kv_gbps"], pct(k5["kv_gbps"] / k5["read_gbps"]),
                     "%.0f (%s)" % (t["kv_gbps"], t["backend"]), "%.2f" % (k5["kv_gbps"] / t["kv_gbps"]),
                     "%.2f" % (paged["kv_gbps"] / k5["kv_gbps"])])
    return ("Same run as the ladder; PyTorch's `scaled_dot_product_attention(..., enable_gqa=True)`, the best "
            "of its backends on each shape, timed the same way by `tools/pytorch_decoding.py`: %s.\n\n"
            % link(TORCH_CSV)
            + common.md_table(["shape", "kernel 5 (GB/s)", "of the read-only kernel", "PyTorch (GB/s)",
                               "kernel 5 / PyTorch", "pages of 64 / contiguous"], body))


# ---- the split sweep ----------------------------------------------------------------------------

def sweep_table():
    rows = [r for r in ladder_rows() if r["candidate"] >= 0 and r["max_len"] == 32768]
    counts = sorted({r["splits"] for r in rows if not r["label"].endswith("heuristic")})
    if counts[0] != 1:
        raise common.TableError("%s: the sweep at N = 32768 has no one-split row" % LADDER_CSV)
    body = []
    for c in sorted({r["candidate"] for r in rows}):
        mine = [r for r in rows if r["candidate"] == c]
        plain = {r["splits"]: r["median_us"] for r in mine if not r["label"].endswith("heuristic")}
        heur = [r for r in mine if r["label"].endswith("heuristic")]
        if len(heur) != 1:
            raise common.TableError("%s: candidate %d has %d heuristic rows" % (LADDER_CSV, c, len(heur)))
        best = min(plain.values())
        cells = [("**%.1f**" % plain[s] if plain[s] == best else "%.1f" % plain[s]) if s in plain else "—"
                 for s in counts]
        body.append(["c%d" % c] + cells + ["%d: %.1f" % (heur[0]["splits"], heur[0]["median_us"])])
    return ("µs, kernel 5, B = 1, N = 32768, q_len = 1, contiguous cache, `./chapter10 --sweep --seq 32768 "
            "--no-check` in the ladder's run (%s; the run also swept N = 8192). Candidates "
            "(`kernel/candidates.h`): c0 4 warps, 2 stages; c1 4 warps, 3 stages (the default); c2 4 warps, "
            "4 stages; c3 8 warps (B_c = 128), 2 stages; c4 as c1 with the L2 prefetch before `lens[b]`. "
            "Bold: the candidate's fastest split count.\n\n"
            % link(LADDER_CSV)
            + common.md_table(["candidate", "1 split"] + ["%d" % s for s in counts[1:]] + ["heuristic"], body))


# ---- same-run comparisons from logs ---------------------------------------------------------------

SUMMARY = re.compile(r"^(\d-[a-z0-9-]+(?: P=\d+)?)\s+(\d+) x (\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+%\s+(\S+)")


def best_of_rounds(rel, header):
    """{(args, kernel, tag): (best µs over rounds, plan)} from a log of `### ...` blocks; header is a
    regex with groups tag and args."""
    with open(common.path(rel)) as f:
        text = f.read()
    best, cur = {}, None
    for line in text.splitlines():
        m = header.match(line)
        if m:
            cur = (m.group("args").strip(), m.group("tag"))
            continue
        m = SUMMARY.match(line)
        if m and cur:
            if m.group(6) == "FAIL":
                raise common.TableError("%s: %s failed its check" % (rel, m.group(1)))
            key = (cur[0], m.group(1), cur[1])
            us, plan = float(m.group(4)), "%s × %s" % (m.group(2), m.group(3))
            if key not in best or us < best[key][0]:
                best[key] = (us, plan)
    if not best:
        raise common.TableError("%s: no summary lines" % rel)
    return best


def heuristic_table():
    best = best_of_rounds(HEURISTIC_LOG, re.compile(r"^### \[(?P<tag>\w+) round \d+\] (?P<args>.*)"))
    body = []
    for args, title in [("--kernel 5 --seq 131072", "kernel 5, N = 131072"),
                        ("--kernel 3 --seq 131072", "kernel 3, N = 131072"),
                        ("--kernel 5 --batch 4 --cache-lens 1,17,4097,100000 --check-rows 512",
                         "kernel 5, lengths 1, 17, 4097, 100000"),
                        ("--kernel 5 --seq 32768", "kernel 5, N = 32768"),
                        ("--kernel 5 --seq 8192", "kernel 5, N = 8192")]:
        kernel = "5-tuned" if "--kernel 5" in args else "3-gqa"
        b, a = best[(args, kernel, "before")], best[(args, kernel, "after")]
        body.append([title, b[1], a[1], "%.1f" % b[0], "%.1f" % a[0], change(b[0], a[0])])
    return ("%s, B = 1 unless given. µs, best of three rounds of each, run alternately; every row "
            "passed its check. Before: the share rounded up to whole tiles; after: the smallest chunk whose "
            "blocks fit the SMs.\n\n"
            % provenance(os.path.dirname(HEURISTIC_LOG), "./chapter10 ARGS", [HEURISTIC_LOG])
            + common.md_table(["shape", "plan before", "plan now", "before", "now", "change"], body))


def floor_table():
    best = best_of_rounds(FLOOR_LOG, re.compile(r"^### round \d+, (?P<tag>\w+): \./chapter10 (?P<args>.*)"))
    body = []
    for kernel in ("3-gqa", "4-paged P=64", "5-tuned", "5-tuned P=64"):
        row = [kernel]
        for n in (4096, 8192):
            args = "--ladder --seq %d --check-rows 64 --page-sizes 64" % n
            b, a = best[(args, kernel, "before")], best[(args, kernel, "after")]
            row.append("%s → %s: %.1f → %.1f (%s)" % (b[1], a[1], b[0], a[0], change(b[0], a[0])))
        body.append(row)
    return ("%s, B = 1. Plan and µs without → with the floor, best of two rounds, run alternately; every "
            "row passed its check. (The build with the floor carried other changes too; at N = 32768 and "
            "131072, where the floor changes no plan, the same comparison moved each kernel by 5%% or less.)\n\n"
            % provenance(os.path.dirname(FLOOR_LOG), "./chapter10 --ladder --seq N", [FLOOR_LOG])
            + common.md_table(["kernel", "N = 4096", "N = 8192"], body))


# ---- where a step's time goes: per-block timestamps -------------------------------------------------

POINTS = [("len known", "`lens[b]` read"), ("tile 0 landed", "first K/V tile landed"),
          ("loop done", "key loop done"), ("partial written", "partial (O_s, L_s) written"),
          ("end", "block ends (the last blocks after the combine)")]


def timelines():
    """{args: {point: (median, max), 'events': µs, 'same bytes': (GB/s, µs)}} of the [b round 1] runs."""
    with open(common.path(TIMELINE_LOG)) as f:
        text = f.read()
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^### \[(\w+) round (\d+)\] \./chapter10 (.*?) --check-rows", line)
        if m:
            cur = m.group(3) if (m.group(1), m.group(2)) == ("b", "1") else None
            if cur:
                out[cur] = {}
            continue
        if not cur:
            continue
        m = re.match(r"^\s+(\w[\w ]*?)\s+since first entry \(us\): min\s+[\d.]+\s+median\s+([\d.]+)\s+max\s+([\d.]+)", line)
        if m:
            out[cur][m.group(1)] = (float(m.group(2)), float(m.group(3)))
        m = re.match(r"^EXPERIMENT read of the same \d+ bytes: ([\d.]+) GB/s, ([\d.]+) us", line)
        if m:
            out[cur]["same bytes"] = (float(m.group(1)), float(m.group(2)))
        m = re.match(r"^\s+time\s+median\s+([\d.]+) us", line)
        if m:
            out[cur]["events"] = float(m.group(1))
    return out


def timeline_table():
    t = timelines()
    shapes = [("--kernel 5 --seq 8192", "N = 8192"), ("--kernel 5 --seq 32768", "N = 32768"),
              ("--kernel 5 --seq 32768 --q-len 4", "N = 32768, q_len = 4")]
    for args, _ in shapes:
        if args not in t or any(p not in t[args] for p, _ in POINTS) or "events" not in t[args]:
            raise common.TableError("%s: no complete timeline for %s" % (TIMELINE_LOG, args))
    body = [[title] + ["%.1f / %.1f" % t[a][p] for a, _ in shapes] for p, title in POINTS]
    body.append(["the step, CUDA events"] + ["%.1f" % t[a]["events"] for a, _ in shapes])
    body.append(["read-only kernel over the same bytes"]
                + ["%.1f" % t[a]["same bytes"][1] if "same bytes" in t[a] else "—" for a, _ in shapes])
    return ("%s, B = 1. µs since the first block started, median / last block over the 128 blocks of one "
            "launch (16 splits × 8 KV heads), from an instrumented copy of kernel 5 (%s: thread 0 of each "
            "block reads `%%globaltimer`) whose combine already batched its loads; the last row times a "
            "read-only kernel over the same bytes in the same process.\n\n"
            % (provenance(os.path.dirname(TIMELINE_LOG), "./chapter10 --kernel 5 --seq N --repeat 10",
                          [TIMELINE_LOG]), link(TIMELINE_DIFF))
            + common.md_table(["point in the block"] + [s for _, s in shapes], body))


# ---- step 6: the fp8 cache beside kernel 5 --------------------------------------------------------

FP8_RUN = "results/ch10/h100-2026-11-28-fp8-f16"  # tools/bench_decoding.sh with kernel 6 in the ladder
FP8_CSV = FP8_RUN + "/decoding.csv"


def fp8_table():
    _, rows = common.read_csv(FP8_CSV)

    def one(label, b, q, n):
        return common.one(rows, "kernel %s" % label, label=label, batch=b, q_len=q, max_len=n, candidate=-1,
                          page_size=0, check="PASS")

    body = []
    for title, b, q, n in [("B = 1, N = 4096", 1, 1, 4096), ("B = 1, N = 8192", 1, 1, 8192),
                           ("B = 1, N = 16384", 1, 1, 16384), ("B = 1, N = 32768", 1, 1, 32768),
                           ("B = 1, N = 131072", 1, 1, 131072), ("B = 1, N = 32768, q_len = 4", 1, 4, 32768),
                           ("B = 64, N = 4096", 64, 1, 4096)]:
        k5, k6 = one("5-tuned", b, q, n), one("6-fp8-kv", b, q, n)
        body.append([title, "%.1f" % k5["median_us"], "%.1f" % k6["median_us"],
                     "%.2f" % (k5["median_us"] / k6["median_us"]), "%.0f" % k6["kv_gbps"],
                     "%.2e" % k5["o_rel_l2"], "%.2e" % k6["o_rel_l2"], "%.2e" % k6["o_rel_l2_vs_16bit"]])
    return ("%s. bf16 Q and O, H_q = 32, H_kv = 8, D = 128, contiguous caches; µs are medians of 20 with the L2 "
            "flushed; kernel 6's GB/s count the bytes it reads (one per element). Relative L2 errors of O over "
            "the checked rows: against float64 attention over the 16-bit cache (kernel 5, kernel 6), and "
            "kernel 6 against O of the 16-bit cache. Every row passed the 2× rule.\n\n"
            % provenance(FP8_RUN, "tools/bench_decoding.sh OUT", [FP8_CSV])
            + common.md_table(["shape", "kernel 5 (µs)", "kernel 6 fp8 (µs)", "kernel 5 / kernel 6",
                               "kernel 6 (GB/s)", "O error, 16-bit cache", "O error, fp8 cache",
                               "fp8 vs 16-bit O"], body))


# ---- a step of the whole model: plain launches beside one CUDA graph ------------------------------

MODEL_STEP_RUN = "results/ch10/h200-2026-11-28-model-step"        # the folder of `./chapter10 --model-step --csv` and env.txt
MODEL_STEP_CSV = MODEL_STEP_RUN + "/model-step.csv"
MODEL_STEP_LABEL = re.compile(r"model-step L=(\d+) (plain|graph)$")
MODEL_STEP_SAME = {"dtype": "bf16", "heads_q": 32, "heads_kv": 8, "q_len": 1, "dim": 128, "page_size": 0}


def model_step_table():
    _, rows = common.read_csv(MODEL_STEP_CSV)
    steps = defaultdict(dict)  # (variant, batch, N, layers) -> {"plain": row, "graph": row}
    for r in rows:
        m = MODEL_STEP_LABEL.search(r["label"])
        if not m:
            continue
        if any(r[k] != v for k, v in MODEL_STEP_SAME.items()) or r["check"] != "PASS":
            raise common.TableError("%s: %s is not a passed bf16 step of the chapter's heads" % (MODEL_STEP_CSV,
                                                                                               r["label"]))
        steps[(r["variant"], r["batch"], r["max_len"], int(m.group(1)))][m.group(2)] = r
    if not steps:
        raise common.TableError("%s: no model-step rows" % MODEL_STEP_CSV)
    body = []
    for (variant, b, n, layers), pair in sorted(steps.items()):
        if set(pair) != {"plain", "graph"}:
            raise common.TableError("%s: %s at B=%d N=%d has no pair of plain and graph rows"
                                    % (MODEL_STEP_CSV, variant, b, n))
        plain, graph = pair["plain"]["median_us"], pair["graph"]["median_us"]
        body.append(["B = %d, N = %d" % (b, n), variant, "%d" % layers, "%.1f" % plain, "%.1f" % graph,
                     "%.1f (%s)" % (plain - graph, pct((plain - graph) / plain)), "%.2f" % (plain / layers),
                     "%.2f" % (graph / layers)])
    return ("%s. bf16, H_q = 32, H_kv = 8, D = 128, q_len = 1, contiguous caches, each layer its own; a step: "
            "each layer's append, then its kernel. µs are medians of 20 steps, the L2 flushed before each. In "
            "every row the first layer passed the 2× rule and the graph's O and L equalled the plain "
            "launches' bit for bit.\n\n"
            % provenance(MODEL_STEP_RUN, "./chapter10 --model-step --layers L --batch B --seq N --kernel K",
                         [MODEL_STEP_CSV])
            + common.md_table(["shape", "kernel", "layers", "plain launches (µs a step)", "CUDA graph (µs a step)",
                               "the graph saves (µs a step)", "plain (µs a layer)", "graph (µs a layer)"], body))


TABLES = {
    "ch10-fp8": fp8_table,
    "ch10-ladder": ladder_table,
    "ch10-targets": targets_table,
    "ch10-sweep": sweep_table,
    "ch10-heuristic": heuristic_table,
    "ch10-floor": floor_table,
    "ch10-timeline": timeline_table,
    "ch10-model-step": model_step_table,
}


# ---- the top README's lines (tools/tables/top.py) -------------------------------------------------

def headline():
    rows, torch = ladder_rows(), torch_best()
    ratios = []
    for b, q, n in ((1, 1, 8192), (1, 1, 32768), (1, 1, 131072), (1, 4, 32768), (64, 1, 4096)):
        k5 = common.one(rows, "kernel 5", label="5-tuned", batch=b, q_len=q, max_len=n, candidate=-1, check="PASS")
        ratios.append(k5["kv_gbps"] / torch[(b, q, n)]["kv_gbps"])
    return ("kernel 5 at %s× PyTorch's best backend over the chapter's decoding shapes (behind cuDNN at "
            "one query token, ahead at four)" % common.span(ratios))
