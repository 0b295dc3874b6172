"""Chapter 11's measured tables (chapters/11_hopper_backward/README.md), from the files in results/.

  ch11-ladder      steps 1-5 at N = 8192 (bf16, D = 128 and 64, causal and not) beside chapter 8's
                   step 6, each step over the one before
  ch11-candidates  step 5's three candidates (where line 15 sits among the products)
  ch11-cudnn       step 5 beside PyTorch's flash (FlashAttention-2) and cuDNN backends, N = 8192,
                   bf16 and fp16, on one GPU
  ch11-step6       step 6 (dQ's adds in a fixed order) beside step 5, run alternately, from the logs

Sources: results/ch11/ladder.csv (`./chapter11 --ladder --sweep --csv`, bf16), results/ch11/shapes.csv
(`./chapter11 --csv` in fp16) and tools/pytorch_backward.py's logs from the same machine, each CSV
with '# key: value' header lines.
"""

import re

from . import common

DOC_DIR = "chapters/11_hopper_backward"
N_LADDER = 8192
LADDER = "results/ch11/ladder.csv"
SHAPES = "results/ch11/shapes.csv"
RUN = "results/ch11/h100-2026-11-27b"
PYTORCH = {dt: RUN + "/pytorch-%s.txt" % dt for dt in ("bf16", "fp16")}
# step 5's default candidate per head dim (kernel/bwd_hopper_config.h, Step5Tiles)
DEFAULTS = {128: 2, 64: 0}

STEPS = ["1-wgmma", "2-tma", "3-warp-specialized", "4-dq-tma-reduce", "5-overlap"]
WHAT = {
    "1-wgmma": "the five products on `wgmma` (Sᵀ, dPᵀ, dQ from shared memory; dV, dK with Pᵀ, dSᵀ "
               "from registers); `cp.async` loads",
    "2-tma": "Q_i, dO_i by TMA, L_i, D_i by bulk copy, into a two-stage mbarrier ring",
    "3-warp-specialized": "a producer warpgroup, `setmaxnreg` 24 / 240; the consumers meet at named barriers "
                          "and copy L_i, D_i",
    "4-dq-tma-reduce": "dQ_i staged in shared memory, added by TMA reduce-adds (a warp per consumer) instead "
                       "of atomics",
    "5-overlap": "exponentials under dPᵀ, dSᵀ under dV's product, two dSᵀ buffers (D = 128: line 15 between "
                 "dV's and dK's products)",
}
COLUMNS = [(128, 0), (128, 1), (64, 0), (64, 1)]


def col_title(d, causal):
    return "D=%d%s" % (d, " causal" if causal else "")


def ratio(a, b):
    return "%.2f" % (a / b) if a and b else ""


def step_row(rows, step, d, c, rel):
    variant = step if step != "5-overlap" else "5-overlap-c%d" % DEFAULTS[d]
    return common.one(rows, "%s: %s D=%d causal=%d" % (rel, variant, d, c), chapter=11, variant=variant, dim=d,
                      causal=c, seq=N_LADDER, dtype="bf16")


def ladder_table():
    header, rows = common.read_csv(LADDER)
    titles = ["step", "what it adds"]
    for d, c in COLUMNS:
        titles += [col_title(d, c) + " TF/s", "× before"]
    ch8 = ["chapter 8, step 6", "`mma.sync`, FlashAttention-2's warp layout (the starting point)"]
    before = {}
    for d, c in COLUMNS:
        r = common.one(rows, "%s: chapter 8 D=%d causal=%d" % (LADDER, d, c), chapter=8, dim=d, causal=c,
                       seq=N_LADDER, dtype="bf16")
        ch8 += [common.fmt(r["tflops"]), ""]
        before[(d, c)] = r["tflops"]
    table = [ch8]
    for step in STEPS:
        cells = [step, WHAT[step]]
        for d, c in COLUMNS:
            t = step_row(rows, step, d, c, LADDER)["tflops"]
            cells += [common.fmt(t), ratio(t, before[(d, c)])]
            before[(d, c)] = t
        table.append(cells)
    line = (common.provenance(header, LADDER, DOC_DIR) + "; N = %d, B = 2, H = 2048 / D, bf16, median of 10; "
            "backward FLOPs = 2.5 × the forward's (causal: half); every row checked against float64 (2× rule)"
            % N_LADDER)
    return line + "\n\n" + common.md_table(titles, table)


def candidates_table():
    header, rows = common.read_csv(LADDER)
    out = []
    for k, what in ((0, "line 15 after lines 12 and 16, waited for in its own tile"),
                    (1, "line 15 after lines 12 and 16, finishing under Sᵀ of the next tile"),
                    (2, "line 15 between lines 12 and 16 (FlashAttention-3's order): dQ_i handed over while "
                        "line 16 runs")):
        cells = ["c%d" % k, what]
        for d, c in COLUMNS:
            r = common.one(rows, "%s: 5-overlap-c%d D=%d causal=%d" % (LADDER, k, d, c), chapter=11,
                           variant="5-overlap-c%d" % k, dim=d, causal=c, seq=N_LADDER, dtype="bf16")
            t = common.fmt(r["tflops"])
            cells.append("**%s**" % t if DEFAULTS[d] == k else t)
        out.append(cells)
    line = (common.provenance(header, LADDER, DOC_DIR) + "; N = %d, bf16, TF/s; the default of each head dim in "
            "bold" % N_LADDER)
    return line + "\n\n" + common.md_table(["candidate", "what"] + [col_title(d, c) for d, c in COLUMNS], out)


LINE = re.compile(r"D=(\d+) N=(\d+) B=\d+ H=\d+ causal=(\d) (\w+) (flash|cudnn)\s+backward\s+([\d.]+) ms\s+([\d.]+) TF/s")


def pytorch(dtype):
    """{(D, N, causal): {'flash': ms, 'cudnn': ms}} from tools/pytorch_backward.py's log."""
    out = {}
    with open(common.path(PYTORCH[dtype])) as f:
        for line in f:
            m = LINE.match(line)
            if m:
                if m.group(4) != dtype:
                    raise common.TableError("%s: a %s line" % (PYTORCH[dtype], m.group(4)))
                out.setdefault((int(m.group(1)), int(m.group(2)), int(m.group(3))), {})[m.group(5)] = float(m.group(6))
    return out


def torch_version(dtype):
    with open(common.path(PYTORCH[dtype])) as f:
        m = re.match(r"torch (\S+) ", f.readline())
    if not m:
        raise common.TableError("%s: no 'torch VERSION' first line" % PYTORCH[dtype])
    return m.group(1)


def cudnn_table():
    _, ladder = common.read_csv(LADDER)
    header, shapes = common.read_csv(SHAPES)
    torch = {dt: pytorch(dt) for dt in ("bf16", "fp16")}
    out = []
    for dtype, Ns in (("bf16", (N_LADDER,)), ("fp16", (N_LADDER,))):
        for d in (128, 64):
            for c in (0, 1):
                for n in Ns:
                    rows = ladder if (dtype, n) == ("bf16", N_LADDER) else shapes
                    rel = LADDER if rows is ladder else SHAPES
                    r = common.one(rows, "%s: step 5 %s D=%d N=%d causal=%d" % (rel, dtype, d, n, c), chapter=11,
                                   variant="5-overlap-c%d" % DEFAULTS[d], dim=d, causal=c, seq=n, dtype=dtype)
                    t = torch[dtype].get((d, n, c), {})
                    if "flash" not in t or "cudnn" not in t:
                        raise common.TableError("%s: no flash or cudnn line for D=%d N=%d causal=%d"
                                                % (PYTORCH[dtype], d, n, c))
                    out.append([dtype, d, n, "yes" if c else "no", "%.3f" % r["median_ms"], "%.3f" % t["cudnn"],
                                "%.3f" % t["flash"], ratio(t["cudnn"], r["median_ms"]), ratio(t["flash"], r["median_ms"])])
    line = (common.provenance(header, SHAPES, DOC_DIR) + " (fp16) and %s (N = %d, bf16); PyTorch %s, %s, "
            "`python3 tools/pytorch_backward.py --dtype bf16|fp16 --dims 128 64 --seqs 8192 --causal 0 1 "
            "--train`, the same machine; B = 2, H = 2048 / D; ratios of times (above 1: chapter 11 "
            "is faster)" % (common.link(LADDER, DOC_DIR), N_LADDER, torch_version("bf16"),
                            ", ".join(common.link(PYTORCH[dt], DOC_DIR) for dt in ("bf16", "fp16"))))
    return line + "\n\n" + common.md_table(["dtype", "D", "N", "causal", "step 5 ms", "cuDNN ms", "FA2 ms",
                                            "step 5 / cuDNN", "step 5 / FA2"], out)


def step5_ratios():
    """(ratios to cuDNN, ratios to FA2, dtypes, Ns) over cudnn_table's shapes."""
    _, ladder = common.read_csv(LADDER)
    _, shapes = common.read_csv(SHAPES)
    torch = {dt: pytorch(dt) for dt in ("bf16", "fp16")}
    cud, fa2, dtypes, ns = [], [], set(), set()
    for r in ladder + shapes:
        if r["chapter"] != 11 or r["variant"] != "5-overlap-c%d" % DEFAULTS.get(r["dim"], -1):
            continue
        t = torch[r["dtype"]].get((r["dim"], r["seq"], r["causal"]))
        if t:
            cud.append(t["cudnn"] / r["median_ms"])
            fa2.append(t["flash"] / r["median_ms"])
            dtypes.add(r["dtype"])
            ns.add(r["seq"])
    if not cud:
        raise common.TableError("%s, %s: no step 5 rows with PyTorch beside them" % (LADDER, SHAPES))
    return cud, fa2, sorted(dtypes), sorted(ns)


def headline():
    cud, fa2, _, ns = step5_ratios()
    return ("step 5 at %s× PyTorch's FlashAttention-2 backward and %s× cuDNN's (D = 64 and 128, N = %s)"
            % (common.span(fa2), common.span(cud), common.listing(ns)))


def pytorch_rows():
    header, _ = common.read_csv(SHAPES)
    cud, fa2, dtypes, ns = step5_ratios()
    run = "%s, %s, torch %s, [`%s`](%s)" % (header.get("gpu"), header.get("date", "")[:10], torch_version("bf16"),
                                            "pytorch-bf16.txt", PYTORCH["bf16"])
    shapes = "N = %s, causal and not, %s" % (common.listing(ns), " and ".join(dtypes))
    return [["chapter 11, step 5 (backward: `wgmma`, TMA, TMA reduce)", "cuDNN", "%s at D=64 and 128" % common.span(cud),
             shapes, run],
            ["chapter 11, step 5", "flash (FlashAttention-2)", "%s at D=64 and 128" % common.span(fa2), shapes, run]]


STEP6_RUN = "results/ch11/h100-2026-11-28-step6"
STEP6_COMMAND = ("./chapter11 --kernel K --seq 8192 --batch 2 --heads 16 --dim 128 [--causal] --no-check --repeat 10 "
                 "(K = 5, 6, 5, 6)")
TIME = re.compile(r"^  time\s+median\s+([\d.]+) ms.*?([\d.]+) TF/s")


def run_medians(rel):
    """The `time` lines' (ms, TF/s) of every run a log holds (one per program run)."""
    with open(common.path(rel)) as f:
        out = [(float(m.group(1)), float(m.group(2))) for m in map(TIME.match, f) if m]
    if not out:
        raise common.TableError("%s: no time line" % rel)
    return out


def step6_table():
    gpu, driver, cuda, _, date = common.env_of(STEP6_RUN)
    body = []
    for causal in ("", "--causal"):
        runs = {k: run_medians("%s/time-k%d%s.txt" % (STEP6_RUN, k, causal)) for k in (5, 6)}
        t5 = sum(t for _, t in runs[5]) / len(runs[5])
        t6 = sum(t for _, t in runs[6]) / len(runs[6])
        body.append(["yes" if causal else "no", " / ".join("%.0f" % t for _, t in runs[5]),
                     " / ".join("%.0f" % t for _, t in runs[6]), "%.1f%%" % (100 * (t5 - t6) / t5)])
    line = ("%s (driver %s, CUDA %s), %s, `%s`; logs: %s. bf16, D = 128, N = 8192, B = 2, H = 16; TF/s of each "
            "program run (the median of 10), the cost from their means"
            % (gpu, driver, cuda, date, STEP6_COMMAND,
               ", ".join(common.link("%s/time-k%d%s.txt" % (STEP6_RUN, k, c), DOC_DIR)
                         for c in ("", "--causal") for k in (5, 6))))
    return line + "\n\n" + common.md_table(["causal", "step 5 TF/s", "step 6 TF/s", "cost of the order"], body)


TABLES = {
    "ch11-step6": step6_table,
    "ch11-ladder": ladder_table,
    "ch11-candidates": candidates_table,
    "ch11-cudnn": cudnn_table,
}
