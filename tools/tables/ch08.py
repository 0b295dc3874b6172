"""Chapter 8's measured tables (chapters/08_tensor_core_backward/README.md), from the files in results/.

Sources:
- the ladder: the `make bench` CSV of chapter 8 (D = 64 and 128, merged from two runs on one machine),
  and chapter 7's `make bench` CSV of the same day for the forward it is compared with;
- the tile candidates: the log of `./chapter8 --sweep` at five shapes (each block a `### command`
  line, then the program's summary table);
- against FlashAttention-2: the logs of `./chapter8 --kernel 6` beside tools/pytorch_backward.py,
  one log per dtype, written in one run;
- the training step: the logs of `./chapter8 --fp32 --train` and tools/pytorch_backward.py --train
  written in one run.
The logs print candidate names as the program did then, `5-tuned-c9` and `6-fa2-layout-c6`; the
program now names them t9 and f6 (step 5's t0, t1, ..., step 6's f0, f1, ...), and `CANDIDATE`
below reads both. GPU, driver, CUDA release and date of a log come from the env.txt beside it.
"""

import os
import re

from . import common

DOC_DIR = "chapters/08_tensor_core_backward"
LADDER_CSV = "results/nvidia-h200-2026-11-27b-ch8.csv"
FORWARD_CSV = "results/nvidia-h200-2026-11-27b-ch7.csv"
SWEEP_RUN = "results/dev-2026-11-27/call4"
SWEEP_LOG = SWEEP_RUN + "/ch8-sweeps.txt"
VS_FA2_LOGS = {dt: SWEEP_RUN + "/ch8-vs-pytorch-%s.txt" % dt for dt in ("bf16", "fp16")}
TRAIN_RUN = "results/dev-2026-11-27b/call7"
TRAIN_LOGS = {D: TRAIN_RUN + "/ch8-train-d%d.txt" % D for D in (64, 128)}
TRAIN_TORCH = TRAIN_RUN + "/pytorch-train.txt"

STEPS = [(1, "1-direct-port", "1 direct port"), (2, "2-ldmatrix-swizzle", "2 ldmatrix(.trans) + swizzle"),
         (3, "3-cp-async", "3 cp.async"), (4, "4-registers", "4 Pᵀ, dSᵀ in registers"),
         (5, "5-tuned", "5 tuned tiles (t9)"), (6, "6-fa2-layout", "6 FA2's warp layout (f5 / f6)")]
# The program's defaults (candidates.h): step 5's t9 at both head dims, step 6's f5 (D = 64), f6 (D = 128).
DEFAULTS = {(5, 64): "t9", (5, 128): "t9", (6, 64): "f5", (6, 128): "f6"}

# A candidate in a log: "5-tuned-c9 atomic" (as printed before the names had their step's letter)
# or "5-tuned-t9 atomic" (as printed now).
CANDIDATE = re.compile(r"^([56])-[a-z0-9-]+?-([ctf])(\d+) (atomic|split)\s+(.*\S)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)"
                       r"\s+([\d.]+)\s+([\d.]+)\s+(\w+)$")



def link(rel):
    return common.link(rel, DOC_DIR)


def env_of(folder):
    """(gpu, driver, 'CUDA release (nvcc version)', date) of a run's env.txt."""
    gpu, driver, cuda, nvcc, date = common.env_of(folder)
    if not driver or not nvcc:
        raise common.TableError("%s/env.txt: no driver or nvcc version" % folder)
    return gpu, driver, "%s (nvcc %s)" % (cuda, nvcc), date


def read(rel):
    with open(common.path(rel)) as f:
        return f.read()


def log_provenance(folder, commands, sources):
    gpu, driver, cuda, date = env_of(folder)
    return "%s, driver %s, CUDA %s, %s; %s; %s" % (gpu, driver, cuda, date, "; ".join("`%s`" % c for c in commands),
                                                   ", ".join(link(s) for s in sources))


def tf(x):
    return "%.1f" % x


def ratio(x):
    return "%.2f" % x


# ---- the ladder --------------------------------------------------------------------------------------

def bench_row(rows, variant, D, dtype="bf16", N=8192, causal=0, what="chapter 8"):
    return common.one(rows, "%s %s D=%d N=%d causal=%d %s" % (what, variant, D, N, causal, dtype),
                      variant=variant, dim=D, seq=N, causal=causal, dtype=dtype)


def ladder_table():
    header, rows = common.read_csv(LADDER_CSV)
    fheader, frows = common.read_csv(FORWARD_CSV)
    if "make bench BENCH_CHAPTERS=8" not in header.get("command", ""):
        raise common.TableError("%s: not a `make bench` file of chapter 8" % LADDER_CSV)
    out, checks = [], []
    prev = {}
    for step, label, title in STEPS:
        cells = [title]
        for D in (64, 128):
            for strategy in ("atomic", "split"):
                r = bench_row(rows, "%s-%s" % (label, strategy), D)
                checks.append(r["check"])
                before = prev.get((D, strategy))
                cells.append(tf(r["tflops"]) + (" (×%s)" % ratio(before / r["median_ms"]) if before else ""))
                prev[(D, strategy)] = r["median_ms"]
        out.append(cells)
    if set(checks) != {"PASS"}:
        raise common.TableError("%s: a ladder row is not checked PASS (%s)" % (LADDER_CSV, sorted(set(checks))))
    table = common.md_table(["step", "D = 64, --dq atomic", "D = 64, --dq split", "D = 128, --dq atomic",
                             "D = 128, --dq split"], out)
    fwd = {D: bench_row(frows, "6-tuned", D, what="chapter 7")["median_ms"] for D in (64, 128)}
    bwd = {D: bench_row(rows, "6-fa2-layout-atomic", D)["median_ms"] for D in (64, 128)}
    command = re.sub(r"\s*\([^)]*\)", "", header["command"])
    nvcc = re.search(r"nvcc ([\d.]+)", header["cuda_version"])
    cuda = header["cuda_version"].split()[0] + (" (nvcc %s)" % nvcc.group(1) if nvcc else "")
    prov = ("%s, driver %s, CUDA %s, %s; `%s`; bf16, B = 2, H = 2048/D, N = 8192, non-causal, TF/s (in brackets: "
            "the step before's time / this step's); every row checked against the float64 reference with the 2× "
            "rule: PASS; rows: %s" % (header["gpu"], header["driver"], cuda, header["date"][:10],
                                       command, link(LADDER_CSV)))
    note = ("Step 6's backward takes %.2f× (D = 64) and %.2f× (D = 128) the time of chapter 7's fastest forward "
            "on the same inputs (%.2f and %.2f ms against %.2f and %.2f ms, the `6-tuned` rows of %s): it does "
            "2.5× the forward's FLOPs." % (bwd[64] / fwd[64], bwd[128] / fwd[128], bwd[64], bwd[128], fwd[64],
                                           fwd[128], link(FORWARD_CSV)))
    return prov + "\n\n" + table + "\n\n" + note


# ---- the tile candidates -----------------------------------------------------------------------------

def sweep_blocks():
    """{(D, N, causal): {name: (tiles text, regs, spill, TF/s)}} from the sweep log; names as now (t9, f6)."""
    blocks, cur = {}, None
    for line in read(SWEEP_LOG).splitlines():
        if line.startswith("### "):
            m = re.search(r"--seq (\d+) .*--dim (\d+)", line)
            cur = blocks.setdefault((int(m.group(2)), int(m.group(1)), "--causal" in line), {})
            continue
        m = CANDIDATE.match(line)
        if m and cur is not None:
            step, _, k, strategy, tiles, regs, spill, _, _, _, tflops, _ = m.groups()
            if strategy == "atomic":
                cur[("t" if step == "5" else "f") + k] = (tiles, int(regs), int(spill), float(tflops))
    if not blocks:
        raise common.TableError("%s: no `### ./chapter8 --sweep` blocks" % SWEEP_LOG)
    return blocks


def short_tiles(text, step):
    """'B_c x B_r = 128 x 128 (passes of 32), 8 warps, 2 stages, K/V in smem; ...' in a few words."""
    m = re.match(r"B_c x B_r = (\d+) x (\d+) \(passes of (\d+)\), (\d+) warps", text)
    if not m:
        raise common.TableError("%s: tiles '%s' not understood" % (SWEEP_LOG, text))
    bc, br, sub, _ = m.groups()
    parts = ["%s × %s, passes of %s" % (bc, br, sub)] if step == 5 else []
    if step == 6:
        parts.append("passes of %s" % sub)
        parts.append("Sᵀ of the pass" if "S^T of the whole pass" in text else "Sᵀ 16 at a time")
        if "loads one k-step ahead" in text:
            parts.append("loads ahead")
    if "3 stages" in text:
        parts.append("3 stages")
    if step == 5 and "K/V in registers" in text:
        parts.append("K/V in registers")
    m = re.search(r"dQ atomics (float\d)", text)
    parts.append(m.group(1) if m else "scalar")
    if step == 5 and "2 m-tiles per warp" in text:
        parts.append("line 15 in 2 m-tiles")
    return ", ".join(parts)


def bold_best(values):
    best = max(v for v in values if v is not None)
    return ["" if v is None else ("**%s**" % tf(v) if v == best else tf(v)) for v in values]


def sweep_provenance():
    commands = ["./chapter8 --sweep --no-check --dq atomic --seq N --batch 16384/N --heads 2048/D --dim D "
                "[--causal] --repeat 10"]
    return (log_provenance(SWEEP_RUN, commands, [SWEEP_LOG]) +
            "; bf16, TF/s of the whole backward with --dq atomic, the fastest of each column in bold")


def step5_sweep_table():
    blocks = sweep_blocks()
    cols = [(64, 8192, False), (128, 8192, False), (128, 8192, True)]
    names = sorted({n for c in cols for n in blocks[c] if n.startswith("t")}, key=lambda n: int(n[1:]))
    grid = {c: [blocks[c].get(n, (None, 0, 0, None))[3] for n in names] for c in cols}
    shown = {c: bold_best(grid[c]) for c in cols}
    out = []
    for i, n in enumerate(names):
        t64 = blocks[cols[0]].get(n)
        t128 = blocks[cols[1]].get(n)
        out.append([n + (" (default)" if n == DEFAULTS[(5, 64)] else ""),
                    short_tiles(t64[0], 5) if t64 else "", shown[cols[0]][i],
                    short_tiles(t128[0], 5) if t128 else "", shown[cols[1]][i], shown[cols[2]][i]])
    table = common.md_table(["candidate", "D = 64: tiles", "D = 64", "D = 128: tiles", "D = 128",
                             "D = 128, causal"], out)
    return sweep_provenance() + ", N = 8192\n\n" + table


def step6_sweep_table():
    blocks = sweep_blocks()
    cols = [(64, 4096, False), (64, 8192, False), (128, 4096, False), (128, 8192, False), (128, 8192, True)]
    names = ["t9"] + sorted({n for c in cols for n in blocks[c] if n.startswith("f")}, key=lambda n: int(n[1:]))
    shown = {c: bold_best([blocks[c][n][3] for n in names]) for c in cols}
    out = []
    for i, n in enumerate(names):
        if n == "t9":
            label, what = "t9 (step 5's default)", "16 keys per warp"
        else:
            label = n + "".join(" (default at D = %d)" % D for D in (64, 128) if DEFAULTS[(6, D)] == n)
            what = short_tiles(blocks[cols[-1]][n][0], 6)
        out.append([label, what] + [shown[c][i] for c in cols])
    table = common.md_table(["candidate", "what it does", "D = 64, N = 4096", "D = 64, N = 8192",
                             "D = 128, N = 4096", "D = 128, N = 8192", "D = 128, N = 8192, causal"], out)
    return sweep_provenance() + "\n\n" + table


# ---- against FlashAttention-2 ------------------------------------------------------------------------

def vs_fa2_rows(dtype):
    """{(D, N, causal): {'ch8': (ms, TF/s, candidate), 'flash': (ms, TF/s), 'cudnn': (ms, TF/s)}}."""
    rel = VS_FA2_LOGS[dtype]
    out, cur = {}, None
    for line in read(rel).splitlines():
        m = re.match(r"### \./chapter8 --dtype (\w+) .*--seq (\d+) .*--dim (\d+)( --causal)?", line)
        if m:
            if m.group(1) != dtype:
                raise common.TableError("%s: a %s run in the %s log" % (rel, m.group(1), dtype))
            cur = out.setdefault((int(m.group(3)), int(m.group(2)), bool(m.group(4))), {})
            continue
        m = re.match(r"kernel 6-fa2-layout atomic: .*passes of (\d+)\).*?(S\^T [^,]+), .*dQ atomics (float\d)", line)
        if m and cur is not None:
            cur["tiles"] = m.groups()
            continue
        m = re.match(r"\s+time\s+median\s+([\d.]+) ms .*?([\d.]+) TF/s", line)
        if m and cur is not None:
            cur["ch8"] = (float(m.group(1)), float(m.group(2)))
            cur = None
            continue
        m = re.match(r"D=(\d+) N=(\d+) B=\d+ H=\d+ causal=(\d) (\w+) (flash|cudnn)\s+backward\s+([\d.]+) ms\s+([\d.]+) TF/s",
                     line)
        if m:
            key = (int(m.group(1)), int(m.group(2)), m.group(3) == "1")
            out.setdefault(key, {})[m.group(5)] = (float(m.group(6)), float(m.group(7)))
    return out


def vs_fa2_table():
    data = {dt: vs_fa2_rows(dt) for dt in ("bf16", "fp16")}
    keys = sorted(data["bf16"])
    out, ratios, cudnn = [], [], []
    for key in keys:
        D, N, causal = key
        cells = [D, N, "yes" if causal else "no"]
        for dt in ("bf16", "fp16"):
            r = data[dt].get(key, {})
            if not all(k in r for k in ("ch8", "flash", "cudnn")):
                raise common.TableError("%s: D=%d N=%d causal=%s lacks a run" % (VS_FA2_LOGS[dt], D, N, causal))
            x = r["flash"][0] / r["ch8"][0]
            ratios.append(x)
            cudnn.append(r["cudnn"][0] / r["ch8"][0])
            cells += [tf(r["ch8"][1]), tf(r["flash"][1]), ratio(x)]
        cells.append(ratio(data["bf16"][key]["cudnn"][0] / data["bf16"][key]["ch8"][0]))
        out.append(cells)
    table = common.md_table(["D", "N", "causal", "bf16: chapter 8", "FA2", "chapter 8 / FA2", "fp16: chapter 8",
                             "FA2", "chapter 8 / FA2", "bf16: chapter 8 / cuDNN"], out)
    prov = log_provenance(SWEEP_RUN, [
        "./chapter8 --dtype bf16|fp16 --kernel 6 --no-check --dq atomic --seq N --batch 16384/N --heads 2048/D "
        "--dim D [--causal] --repeat 10",
        "python3 tools/pytorch_backward.py --dtype bf16|fp16 --dims 64 128 --seqs 2048 4096 8192 --causal 0 1 --train"],
        [VS_FA2_LOGS["bf16"], VS_FA2_LOGS["fp16"]])
    summary = ("Chapter 8 / FA2 is the time ratio (both sides count the same FLOPs): at least 1.0 at %d of the %d "
               "shapes and at least 1.1 at %d, from %.2f to %.2f; PyTorch's cuDNN backend is ahead at every shape "
               "(chapter 8 reaches %.2f to %.2f of it)."
               % (sum(x >= 1.0 for x in ratios), len(ratios), sum(x >= 1.1 for x in ratios), min(ratios),
                  max(ratios), min(cudnn), max(cudnn)))
    return (prov + "; TF/s of the whole backward, chapter 8 with its default step 6 candidate (f5 at D = 64, f6 at "
            "D = 128)\n\n" + table + "\n\n" + summary)


# ---- the training step -------------------------------------------------------------------------------

def train_table():
    torch = {}
    for line in read(TRAIN_TORCH).splitlines():
        m = re.match(r"D=(\d+) N=8192 .* flash\s+backward\s+([\d.]+) ms.*fwd\+bwd\s+([\d.]+) ms\s+([\d.]+) TF/s", line)
        if m:
            torch[int(m.group(1))] = (float(m.group(2)), float(m.group(3)), float(m.group(4)))
    out = []
    for D in (64, 128):
        text = read(TRAIN_LOGS[D])
        def grab(pattern):
            m = re.search(pattern, text)
            if not m:
                raise common.TableError("%s: no match for %s" % (TRAIN_LOGS[D], pattern))
            return m.groups()
        fwd = float(grab(r"forward time\s+median\s+([\d.]+) ms")[0])
        bwd, bwd_tf = map(float, grab(r"\n  time\s+median\s+([\d.]+) ms .*?([\d.]+) TF/s"))
        step, step_tf = map(float, grab(r"training step \(fwd \+ bwd\)\s+median\s+([\d.]+) ms .*?([\d.]+) TF/s"))
        ch6 = float(grab(r"([\d.]+) x chapter 6's speed")[0])
        if "PASS" not in grab(r"\n(PASS|FAIL)\n")[0]:
            raise common.TableError("%s: the run did not pass its check" % TRAIN_LOGS[D])
        if D not in torch:
            raise common.TableError("%s: no flash row at D = %d" % (TRAIN_TORCH, D))
        t_bwd, t_step, t_step_tf = torch[D]
        out.append([D, "%.2f ms (%s TF/s)" % (bwd, tf(bwd_tf)), ratio(bwd / fwd), ratio(t_bwd / bwd),
                    "%.2f ms (%s TF/s)" % (step, tf(step_tf)), "%.2f ms (%s TF/s)" % (t_step, tf(t_step_tf)),
                    ratio(t_step / step), "%.2f×" % ch6])
    table = common.md_table(["D", "chapter 8 backward", "backward / chapter 7 forward", "FA2 backward / chapter 8",
                             "training step: chapter 7 + 8", "PyTorch flash fwd + bwd", "PyTorch / chapters 7 + 8",
                             "× chapter 6's fp32 backward"], out)
    prov = log_provenance(TRAIN_RUN, [
        "./chapter8 --seq 8192 --batch 2 --heads 2048/D --dim D --dq atomic --fp32 --train --repeat 10",
        "python3 tools/pytorch_backward.py --dtype bf16 --dims 128 64 --seqs 8192 --causal 0 --train"],
        [TRAIN_LOGS[64], TRAIN_LOGS[128], TRAIN_TORCH])
    return prov + "; bf16, B = 2, N = 8192, checked with the 2× rule: PASS\n\n" + table


TABLES = {
    "ch8-ladder": ladder_table,
    "ch8-step5-sweep": step5_sweep_table,
    "ch8-step6-sweep": step6_sweep_table,
    "ch8-vs-fa2": vs_fa2_table,
    "ch8-train": train_table,
}


# ---- the top README's lines (tools/tables/top.py) -------------------------------------------------

def fa2_ratios(backend):
    """{D: [step 6 / backend TF/s over every N, mask and dtype of the comparison run]}."""
    out = {}
    for dt in ("bf16", "fp16"):
        for (D, _, _), cells in vs_fa2_rows(dt).items():
            if "ch8" in cells and backend in cells:
                out.setdefault(D, []).append(cells["ch8"][1] / cells[backend][1])
    if not out:
        raise common.TableError("no step 6 / %s pairs in %s" % (backend, list(VS_FA2_LOGS.values())))
    return out


def headline():
    r = fa2_ratios("flash")
    return ("step 6 at %s× PyTorch's FlashAttention-2 backward (D = %s, N = 2048–8192)"
            % (common.span(sum(r.values(), [])), common.listing(r)))


def pytorch_rows():
    gpu, _, _, date = env_of(SWEEP_RUN)
    run = "%s, %s, [`ch8-vs-pytorch-*.txt`](%s)" % (gpu, date, VS_FA2_LOGS["bf16"])
    rows = []
    for backend, name in (("flash", "flash (FlashAttention-2) backward"), ("cudnn", "cuDNN backward")):
        r = fa2_ratios(backend)
        rows.append(["chapter 8, step 6 (`mma.sync`, FA2's warp layout)" if backend == "flash" else "chapter 8, step 6",
                     name, "; ".join("%s at D=%d" % (common.span(r[d]), d) for d in sorted(r)),
                     "N = 2048, 4096 and 8192, causal and not, bf16 and fp16", run])
    return rows
