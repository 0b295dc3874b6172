"""Chapter 9's measured tables (chapters/09_hopper/README.md), from the files in results/.

  ch9-ladder       steps 1-6 at N = 8192 (bf16, D = 128 and 64, causal and not), each step over the
                   one before
  ch9-candidates   step 6's tile candidates over N: ring depth x schedule, two or three consumers (three
                   in turns going round is FlashAttention-3's choice at D = 64), a persistent grid
  ch9-pytorch      step 6 beside PyTorch's flash and cuDNN backends, same run

  ch9-vs-ch7       step 6's default tiles beside chapter 7's kernel 6, timed by one script on one GPU

Sources: the files under results/ch09/ (`make bench BENCH_CHAPTERS=9` for the ladder, `./chapter9
--sweep --csv` for the candidates, `./chapter7 --kernel 6 --csv` for chapter 7's row, the last two
in one script run), each with '# key: value' header lines. A candidate's name in a CSV says its
configuration ("6-tuned-c2-s3-2wg-free").
"""

import os
import re

from . import common

DOC_DIR = "chapters/09_hopper"
N_LADDER = 8192

LADDER = "results/ch09/ladder.csv"
CH7 = "results/ch09/ch7-kernel6.csv"
SWEEP = "results/ch09/candidates.csv"  # the same run as CH7
PYTORCH = "results/dev-2026-11-26b/call2/pytorch-fwd.csv"
# step 6's default candidate per head dim (kernel/hopper_config.h, Step6Tiles), as (stages,
# consumers, turns, persistent)
DEFAULTS = {128: (3, 2, True, False), 64: (4, 3, True, False)}

STEPS = ["1-wgmma", "2-tma", "3-warp-specialized", "4-pingpong", "5-intra-wg-overlap", "6-tuned"]
WHAT = {
    "1-wgmma": "`wgmma` from swizzled shared memory; `cp.async` loads by every thread",
    "2-tma": "TMA loads into a ring of three mbarrier-counted buffers",
    "3-warp-specialized": "a producer warpgroup, `setmaxnreg`; no block-wide barrier in the loop",
    "4-pingpong": "the consumers take turns at the tensor cores",
    "5-intra-wg-overlap": "the softmax of S_k under the warpgroup's own P̃·V_{k−1}",
    "6-tuned": "O by TMA store; tiles per head dim (D = 64: three consumers in turns, four stages)",
}
COLUMNS = [(128, 0), (128, 1), (64, 0), (64, 1)]



def link(rel):
    """rel (a path from the repository root) as a link target from the chapter's folder."""
    return common.relative(rel, DOC_DIR)


def col_title(d, causal):
    return "D=%d%s" % (d, " causal" if causal else "")


def ratio(a, b):
    return "%.2f" % (a / b) if a and b else ""


# ---- the ladder ---------------------------------------------------------------------------------

def ladder_table():
    header, rows = common.read_csv(LADDER)
    rows = [r for r in rows if r["chapter"] == 9 and r["dtype"] == "bf16" and r["seq"] == N_LADDER]
    titles = ["step", "what it adds"]
    for d, c in COLUMNS:
        titles += [col_title(d, c) + " TF/s", "× before"]
    table, before = [], {k: None for k in COLUMNS}
    for step in STEPS:
        cells = [step, WHAT[step]]
        for d, c in COLUMNS:
            r = common.one(rows, "%s: step %s" % (LADDER, step), variant=step, dim=d, causal=c)
            cells += [common.fmt(r["tflops"]), ratio(r["tflops"], before[(d, c)])]
            before[(d, c)] = r["tflops"]
        table.append(cells)
    first = common.one(rows, LADDER, variant=STEPS[0], dim=128, causal=0)
    log = os.path.splitext(LADDER)[0] + ".log"  # make bench's log beside its CSV: registers, 2x rule
    line = (common.provenance(header, LADDER, DOC_DIR) + "; the run's [log](%s)" % link(log) +
            "; N = %d, B = %d, H = 2048 / D, bf16, median of the run's repeats" % (N_LADDER, first["batch"]))
    return line + "\n\n" + common.md_table(titles, table)


def ch7_table():
    """Step 6's default candidate beside chapter 7's kernel 6, both timed in one script run."""
    header, ch7_rows = common.read_csv(CH7)
    _, _, recs = sweep_rows()
    cells_ch7, cells_9, cells_ratio = ["chapter 7, kernel 6 (`mma.sync`)"], ["chapter 9, step 6 (default tiles)"], ["step 6 / kernel 6"]
    for d, c in COLUMNS:
        k7 = common.one(ch7_rows, CH7, chapter=7, dtype="bf16", seq=N_LADDER, dim=d, causal=c)["tflops"]
        mine = [r for r in recs if (r["D"], r["N"], r["causal"]) == (d, N_LADDER, c) and
                (r["stages"], r["consumers"], r["turns"], r["persistent"]) == DEFAULTS[d]]
        if len(mine) != 1:
            raise common.TableError("%s: %d rows of the default at D=%d causal=%d" % (SWEEP, len(mine), d, c))
        cells_ch7.append(common.fmt(k7))
        cells_9.append(common.fmt(mine[0]["tflops"]))
        cells_ratio.append(ratio(mine[0]["tflops"], k7))
    line = (common.provenance(header, CH7, DOC_DIR) + "; step 6 from [`%s`](%s), the same script on the same GPU; "
            "N = %d, B = 2, H = 2048 / D, bf16, TF/s" % (SWEEP, link(SWEEP), N_LADDER))
    return line + "\n\n" + common.md_table([""] + [col_title(d, c) for d, c in COLUMNS],
                                            [cells_ch7, cells_9, cells_ratio])


# ---- step 6's candidates --------------------------------------------------------------------------

TAG = re.compile(r"^6-tuned-c\d+-s(\d+)-(\d)wg-(turns|free)(-persistent)?$")


def config_of_name(name):
    m = TAG.match(name)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), m.group(3) == "turns", bool(m.group(4))


def sweep_rows():
    """(header, rel, records): one record per timed candidate, a dict with D, N, causal, stages,
    consumers, turns, persistent, tflops."""
    header, rows = common.read_csv(SWEEP)
    out = []
    for r in rows:
        cfg = r["chapter"] == 9 and r["dtype"] == "bf16" and config_of_name(r["variant"])
        if cfg:
            out.append(dict(D=r["dim"], N=r["seq"], causal=r["causal"], stages=cfg[0], consumers=cfg[1],
                            turns=cfg[2], persistent=cfg[3], tflops=r["tflops"]))
    return header, SWEEP, out


def schedule(rec):
    return "%d in turns" % rec["consumers"] if rec["turns"] else "%d free" % rec["consumers"]


def config_key(rec):
    return (rec["consumers"], not rec["turns"], rec["stages"], rec["persistent"])


def configs(recs):
    seen = {}
    for r in recs:
        seen[(r["stages"], r["consumers"], r["turns"], r["persistent"])] = r
    return sorted(seen.values(), key=config_key)


def lookup(recs, cfg, **want):
    found = [r for r in recs if all(r[k] == v for k, v in want.items()) and
             (r["stages"], r["consumers"], r["turns"], r["persistent"]) ==
             (cfg["stages"], cfg["consumers"], cfg["turns"], cfg["persistent"])]
    return common.fmt(found[-1]["tflops"]) if found else "–"


def candidates_table():
    header, rel, recs = sweep_rows()
    ns = sorted({r["N"] for r in recs})
    titles = ["D", "stages", "consumers", "grid"] + ["N=%d%s" % (n, c) for n in ns for c in ("", " causal")]
    table = []
    for d in (128, 64):
        mine = [r for r in recs if r["D"] == d]
        for cfg in configs(mine):
            table.append([d, cfg["stages"], schedule(cfg), "persistent" if cfg["persistent"] else "a block per item"] +
                         [lookup(mine, cfg, N=n, causal=c) for n in ns for c in (0, 1)])
    if not table:
        raise common.TableError("%s has no candidate" % rel)
    return (common.provenance(header, rel, DOC_DIR) + "; B = 16384 / N, H = 2048 / D, bf16, TF/s"
            + "\n\n" + common.md_table(titles, table))


# ---- against PyTorch ----------------------------------------------------------------------------

def pytorch_table():
    header, rows = common.read_csv(PYTORCH)
    header = dict(header, cuda_version=header.get("cuda", "unknown"))
    rows = [r for r in rows if r["course"] == "ch9 6-tuned" and r["dtype"] == "bf16"]
    shape = re.compile(r"D=(\d+) N=(\d+) (causal|non-causal)")
    by = {}
    for r in rows:
        d, n, c = shape.match(r["shape"]).groups()
        by.setdefault((int(d), int(n)), {})[(c == "causal", r["backend"])] = r
    table = []
    for (d, n) in sorted(by, key=lambda k: (-k[0], k[1])):
        cells = [d, n]
        for causal in (False, True):
            cu, fl = by[(d, n)].get((causal, "cudnn")), by[(d, n)].get((causal, "flash"))
            if not cu or not fl:
                raise common.TableError("%s: D=%d N=%d has no cudnn or flash row" % (PYTORCH, d, n))
            cells += [common.fmt(cu["course_TF_per_s"]), common.fmt(cu["torch_TF_per_s"]),
                      "%.2f" % cu["course_per_torch"], "%.2f" % fl["course_per_torch"]]
        table.append(cells)
    titles = ["D", "N", "step 6", "cuDNN", "÷ cuDNN", "÷ flash",
              "causal: step 6", "cuDNN", "÷ cuDNN", "÷ flash"]
    line = ("%s, CUDA %s, PyTorch %s, %s, `%s`; rows: [`%s`](%s); bf16, B·N = 32768, H = 2048 / D, TF/s"
            % (header.get("gpu"), header.get("cuda"), header.get("torch"), header.get("date", "")[:10],
               header.get("command"), PYTORCH, link(PYTORCH)))
    line += ("\n\nIn this run step 6 at D = 64 had three consumers running free (the `s3-3wg-free` candidate, "
             "then the default), which the candidates table above puts behind the three consumers in turns "
             "that are the default now; the D = 128 default is the same.")
    return line + "\n\n" + common.md_table(titles, table)


TABLES = {
    "ch9-ladder": ladder_table,
    "ch9-vs-ch7": ch7_table,
    "ch9-candidates": candidates_table,
    "ch9-pytorch": pytorch_table,
}


# ---- the top README's lines (tools/tables/top.py) -------------------------------------------------

def headline():
    _, ch7_rows = common.read_csv(CH7)
    _, _, recs = sweep_rows()
    ratios = []
    for d, c in COLUMNS:
        k7 = common.one(ch7_rows, CH7, chapter=7, dtype="bf16", seq=N_LADDER, dim=d, causal=c)["tflops"]
        mine = [r["tflops"] for r in recs if (r["D"], r["N"], r["causal"]) == (d, N_LADDER, c) and
                (r["stages"], r["consumers"], r["turns"], r["persistent"]) == DEFAULTS[d]]
        ratios.append(mine[0] / k7)
    return "step 6 at %s× chapter 7's fastest forward (one run, D = 64 and 128, N = %d)" % (common.span(ratios), N_LADDER)


def pytorch_rows():
    """Step 6 against cuDNN and flash at D = 128 (the D = 64 tiles changed after this run)."""
    header, rows = common.read_csv(PYTORCH)
    shape = re.compile(r"D=(\d+) N=(\d+)")
    out = []
    for backend, name in (("cudnn", "cuDNN"), ("flash", "flash (FlashAttention-2)")):
        found = [r for r in rows if r["course"] == "ch9 6-tuned" and r["backend"] == backend and
                 shape.match(r["shape"]).group(1) == "128"]
        if not found:
            raise common.TableError("%s: no step 6 rows against %s at D = 128" % (PYTORCH, backend))
        ns = sorted({int(shape.match(r["shape"]).group(2)) for r in found})
        out.append(["chapter 9, step 6 (`wgmma`, TMA, warp specialization)" if backend == "cudnn" else "chapter 9, step 6",
                    name, "%s at D=128" % common.span([r["course_per_torch"] for r in found]),
                    "N = %s, causal and not, %s" % (common.listing(ns), " and ".join(sorted({r["dtype"] for r in found}))),
                    "%s, %s, torch %s, [`pytorch-fwd.csv`](%s)" % (header.get("gpu"), header.get("date", "")[:10],
                                                                header.get("torch"), PYTORCH)])
    return out
