"""Chapter 7's measured tables (chapters/07_tensor_cores/README.md), each built from results/.

Sources: the `make bench` file of the chapter and its log (the ladder, the 2x rule, registers),
the PyTorch comparisons (tools/compare_pytorch.py), the `--ladder --bench` and `--sweep` logs at
head dims 32, 96 and 256, and ptxas's report of every kernel (results/ch07/ptxas-sm90.txt).
Kernel 6's default tiles are read from chapters/07_tensor_cores/kernel/candidates.h, so the tables
mark what the code uses now.
"""

import os
import re

from tables import common

DOC = "chapters/07_tensor_cores"

BENCH = "results/nvidia-h200-2026-11-27b-ch7.csv"
BENCH_LOG = "results/dev-2026-11-27b/call6/nvidia-h200-2026-11-27b-ch7-all.log"  # the same run's log
TORCH = "results/pytorch-nvidia-h200-2026-11-27b-ch7.csv"
DIMS_LADDERS = "results/dev-2026-11-26b/call3/ch7-ladders.txt"
DIMS_LADDERS_ENV = "results/dev-2026-11-26b/call3/env.txt"
DIMS_TORCH = "results/dev-2026-11-26b/call3/ch7-dims.csv"
DIMS_SWEEPS = "results/dev-2026-11-26/call4/ch7-sweeps.txt"
DIMS_SWEEPS_ENV = "results/dev-2026-11-26/call4/timeline.txt"
PTXAS = "results/ch07/ptxas-sm90.txt"
CANDIDATES_H = "chapters/07_tensor_cores/kernel/candidates.h"

LADDER_N = 8192  # the ladder's sequence length (B·N = 16384 tokens, H = 2048 / D)
STEPS = {
    1: ("wmma", "`nvcuda::wmma` fragments; S, P and P·V go through shared memory"),
    2: ("mma-sync", "`mma.sync.m16n8k16`; S, P, O stay in registers"),
    3: ("ldmatrix-swizzle", "`ldmatrix` from XOR-swizzled tiles"),
    4: ("cp-async", "`cp.async` K/V pipeline, two buffers"),
    5: ("exp2", "exp2 with the scale folded in; lazy rescale; tree reductions"),
    6: ("tuned", "tiles per head dim; causal blocks longest first"),
}


# ---- reading the sources ---------------------------------------------------------------------

def _read(rel):
    with open(common.path(rel)) as f:
        return f.read()


def _bench():
    header, rows = common.results_csv.read_rows(common.path(BENCH))
    return header, rows


def _torch(rel):
    header, rows = common.read_csv(rel)
    header.setdefault("cuda_version", header.get("cuda", "unknown"))
    return header, rows


def _torch_rate(rows, D, N, causal, dtype, backend, what):
    shape_start = "D=%d N=%d %s " % (D, N, "causal" if causal else "non-causal")
    found = [r for r in rows if str(r["shape"]).startswith(shape_start)
             and r["dtype"] == dtype and r["backend"] == backend]
    if len(found) != 1:
        raise common.TableError("%s: %d rows for %s %s %s" % (what, len(found), shape_start, dtype, backend))
    return found[0]


def _env_lines(rel):
    """(gpu, nvcc release, date) from the nvidia-smi / nvcc / date lines a device script saved."""
    text = _read(rel)
    gpu = re.search(r"^(NVIDIA [^,]+), ([\d.]+),", text, re.M)
    nvcc = re.search(r"release ([\d.]+), V([\d.]+)", text)
    date = re.search(r"^\w{3} (\w{3}) +(\d+) .*UTC (\d{4})$", text, re.M)
    if not (gpu and nvcc and date):
        raise common.TableError("%s: no GPU, nvcc or date line" % rel)
    months = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
    iso = "%s-%02d-%02d" % (date.group(3), months.index(date.group(1)) + 1, int(date.group(2)))
    return gpu.group(1), "%s (driver %s, nvcc %s)" % (nvcc.group(1), gpu.group(2), nvcc.group(2)), iso


def _log_provenance(rel, env_rel, commands):
    gpu, cuda, date = _env_lines(env_rel)
    header = {"gpu": gpu, "cuda_version": cuda, "date": date, "command": "; ".join(commands)}
    return common.provenance(header, rel, DOC)


SUMMARY_ROW = re.compile(
    r"^(\d-[\w-]+?)\s+(B_r x B_c = .*?)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)"
    r"(?:\s+[\d.]+%\s+[\d.]+%)?\s+(PASS|FAIL|skipped)$")


def _program_runs(rel):
    """Each program run of a log: (command line, its text). A run starts at a '$ ./chapter7' or
    '### ./chapter7' line."""
    runs, command, lines = [], None, []
    for line in _read(rel).splitlines():
        m = re.match(r"^(?:\$|###) (\./chapter7 .*)$", line)
        if m:
            if command:
                runs.append((command, lines))
            command, lines = m.group(1), []
        elif command:
            lines.append(line)
    if command:
        runs.append((command, lines))
    if not runs:
        raise common.TableError("%s: no ./chapter7 run" % rel)
    return runs


def _option(command, name, default=None):
    m = re.search(r"--%s (\S+)" % name, command)
    return m.group(1) if m else default


def _summary(lines):
    """name -> dict(tiles, regs, spill, smem_kb, blocks, tflops, check) from a run's summary table."""
    out = {}
    for line in lines:
        m = SUMMARY_ROW.match(line)
        if m:
            out[m.group(1)] = {"tiles": m.group(2), "regs": int(m.group(3)), "spill": int(m.group(4)),
                               "smem_kb": float(m.group(5)), "blocks": int(m.group(6)),
                               "tflops": float(m.group(8)), "check": m.group(9)}
    return out


def _bench_log_summary(D, dtype="bf16", causal=False):
    for command, lines in _program_runs(BENCH_LOG):
        if (_option(command, "dim") == str(D) and _option(command, "dtype") == dtype
                and _option(command, "seq") == str(LADDER_N) and ("--causal" in command) == causal):
            return _summary(lines)
    raise common.TableError("%s: no run at D=%d N=%d %s" % (BENCH_LOG, D, LADDER_N, dtype))


def _ceiling_rates(lines):
    rates = {}
    for line in lines:
        m = re.match(r"^\s+(cuBLAS GEMM 8192\^3|mma\.sync m16n8k16 peak)\s.*\s([\d.]+) TF/s$", line)
        if m:
            rates[m.group(1)] = float(m.group(2))
    return rates


MMA_CONFIG = re.compile(r"MmaConfigILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELb([01])E")


def _ptxas():
    """{(dtype, step, D, warps, m_tiles, Bc, stages, q_in_regs): (registers, spill stores)} of the
    mma.sync kernels in ptxas's report."""
    mma, name, spill = {}, None, None
    for line in _read(PTXAS).splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            name, spill = m.group(1), None
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m:
            spill = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            dtype = "bf16" if "13__nv_bfloat16" in name else "fp16"
            c = MMA_CONFIG.search(name)
            if c and "flash_forward_kernel" in name:
                key = (dtype,) + tuple(int(x) for x in c.groups()[:6]) + (c.group(7) == "1",)
                mma[key] = (int(m.group(1)), spill)
            name = None
    if not mma:
        raise common.TableError("%s: no flash_forward_kernel in the ptxas report" % PTXAS)
    return mma


def _candidates():
    """{D: ([(warps, m_tiles, Bc, stages, q_in_regs), ...], default index)} from candidates.h."""
    text = _read(CANDIDATES_H)
    lists = {}
    for D, body in re.findall(r"using Candidates(\d+) = fa::ConfigList<(.*?)>;", text, re.S):
        cfgs = re.findall(r"MmaConfig<6, (\d+), (\d+), (\d+), (\d+), (\d+), (true|false)>", body)
        lists[int(D)] = [(int(w), int(m), int(bc), int(s), q == "true") for d, w, m, bc, s, q in cfgs
                         if int(d) == int(D)]
    defaults = {int(D): int(k) for D, k in
                re.findall(r"struct TunedTiles<(\d+)> : fa::Tuning<Candidates\d+, (\d+)>", text)}
    if not lists or set(lists) != set(defaults):
        raise common.TableError("%s: candidate lists and TunedTiles do not match" % CANDIDATES_H)
    return {D: (lists[D], defaults[D]) for D in lists}


def _ptxas_provenance():
    header = {}
    for line in _read(PTXAS).splitlines():
        if line.startswith("#") and not line.startswith("###"):
            kv = common.results_csv.parse_header_line(line)
            if kv:
                header.setdefault(*kv)
    link = os.path.relpath(common.path(PTXAS), common.path(DOC)).replace(os.sep, "/")
    return ("ptxas for sm_90 (CUDA %s), %s, `%s`; report: [`%s`](%s)"
            % (header.get("cuda_version", "unknown"), header.get("date", "unknown")[:10],
               header.get("command", "unknown"), PTXAS, link))


def _tiles_cells(D, cfg):
    warps, mt, bc, stages, q_regs = cfg
    br = 16 * mt * warps
    smem_kb = 2 * (br * D + stages * 2 * bc * D) / 1024.0
    return ["%d × %d" % (br, bc), "%d × %d" % (warps, mt), str(stages),
            "registers" if q_regs else "smem", "%g KB" % smem_kb]


# ---- the tables ------------------------------------------------------------------------------

def ladder_table():
    """Kernels 1–6 at N = 8192, bf16, D = 128 and 64, causal and not, with FlashAttention-2
    (PyTorch's flash backend) on the same shapes, and the registers and blocks per SM at D = 128."""
    header, rows = _bench()
    t_header, t_rows = _torch(TORCH)
    res128 = _bench_log_summary(128)

    def rate(k, D, causal):
        r = common.one(rows, BENCH, chapter=7, variant="%d-%s" % (k, STEPS[k][0]), dtype="bf16",
                       seq=LADDER_N, dim=D, causal=int(causal))
        if r["batch"] * r["seq"] != 16384 or r["heads"] * r["dim"] != 2048:
            raise common.TableError("%s: %s is not B·N = 16384, H = 2048 / D" % (BENCH, r))
        return r["tflops"]

    table = []
    for k in sorted(STEPS):
        cells = ["%d %s" % (k, STEPS[k][0]), STEPS[k][1]]
        for D in (128, 64):
            cells.append(common.fmt(rate(k, D, False)))
            cells.append("" if k == 1 else "%.2f×" % (rate(k, D, False) / rate(k - 1, D, False)))
            cells.append(common.fmt(rate(k, D, True)))
        r = res128["%d-%s" % (k, STEPS[k][0])]
        cells.append("%d, %d" % (r["regs"], r["blocks"]))
        table.append(cells)
    fa2, ratio = ["FlashAttention-2", "PyTorch's flash backend, same shapes"], ["kernel 6 / FA2", ""]
    for D in (128, 64):
        for causal in (False, True):
            t = _torch_rate(t_rows, D, LADDER_N, causal, "bf16", "flash", TORCH)
            fa2.append(common.fmt(t["torch_TF_per_s"]))
            ratio.append("%.2f" % (rate(6, D, causal) / t["torch_TF_per_s"]))
            if not causal:
                fa2.append("")
                ratio.append("")
    fa2.append("")
    ratio.append("")
    table += [fa2, ratio]
    columns = ["kernel", "what it adds", "D = 128 TF/s", "× step before", "causal",
               "D = 64 TF/s", "× step before", "causal", "registers, blocks/SM (D = 128)"]
    return ("bf16, N = %d, B·N = 16384 tokens, H = 2048 / D. Kernels: %s; registers: the same run's "
            "[log](%s). FlashAttention-2: %s\n\n%s\n"
            % (LADDER_N, common.provenance(header, BENCH, DOC),
               os.path.relpath(common.path(BENCH_LOG), common.path(DOC)),
               common.provenance(t_header, TORCH, DOC), common.md_table(columns, table)))


def rule_table():
    """The 2x rule over every checked run of the `make bench` log: kernel error, mirror error, floor."""
    header, _ = _bench()
    line = re.compile(r"2x rule (O|L)\s+max_abs ([\d.e+-]+) <= 2 x ([\d.e+-]+) \+ ([\d.e+-]+) = .*?: (PASS|FAIL)$")
    found = {"O": [], "L": []}
    for text in _read(BENCH_LOG).splitlines():
        m = line.search(text)
        if m:
            found[m.group(1)].append(tuple(float(x) for x in m.group(2, 3, 4)) + (m.group(5),))
    if not found["O"] or not found["L"]:
        raise common.TableError("%s: no 2x rule lines" % BENCH_LOG)
    table = []
    for q in ("O", "L"):
        f = found[q]
        lo, hi = min(x[2] for x in f), max(x[2] for x in f)
        table.append([q, str(len(f)), "%.1e" % max(x[0] for x in f), "%.1e" % max(x[1] for x in f),
                      "%.2f" % max(x[0] / x[1] for x in f),
                      "%.1e" % lo if lo == hi else "%.1e – %.1e" % (lo, hi),
                      "%d of %d" % (sum(x[3] == "PASS" for x in f), len(f))])
    columns = ["output", "checks", "kernel's largest error", "mirror's largest error",
               "worst kernel / mirror", "floor", "PASS"]
    link = os.path.relpath(common.path(BENCH_LOG), common.path(DOC))
    return ("Every checked run (N = 8192) of the `make bench` sweep, max-abs errors: %s; the 2x rule "
            "lines: [log](%s)\n\n%s\n" % (common.provenance(header, BENCH, DOC), link,
                                          common.md_table(columns, table)))


def candidates_table():
    """Kernel 6's tile candidates at every head dim, one column per candidate: the shape, shared
    memory and ptxas's registers now; at D = 32, 96, 256 also the sweep's TF/s."""
    mma = _ptxas()
    cands = _candidates()
    sweeps, commands = {}, []
    for command, lines in _program_runs(DIMS_SWEEPS):
        sweeps[int(_option(command, "dim"))] = _summary(lines)
        commands.append(command)
    width = max(len(cfgs) for cfgs, _ in cands.values())
    table = []
    for D in (64, 128, 32, 96, 256):
        cfgs, default = cands[D]
        shape, res, rate = [], [], []
        for i, cfg in enumerate(cfgs):
            key = ("bf16", 6, D) + cfg
            if key not in mma:
                raise common.TableError("%s: no kernel for D=%d candidate %d %s" % (PTXAS, D, i, cfg))
            regs, spill = mma[key]
            br_bc, wm, stages, q, smem = _tiles_cells(D, cfg)
            cell = "%s, %s, %s st., Q in %s" % (br_bc, wm, stages, "regs" if q == "registers" else q)
            shape.append("**%s**" % cell if i == default else cell)
            res.append("%d%s, %s" % (regs, " (%d B spilled)" % spill if spill else "", smem))
            if D in sweeps:
                r = sweeps[D].get("6-tuned-c%d" % i)
                if r is None:
                    raise common.TableError("%s: no candidate %d at D=%d" % (DIMS_SWEEPS, i, D))
                rate.append(common.fmt(r["tflops"], 4) + (" (%d B spilled)" % r["spill"] if r["spill"] else ""))
        pad = [""] * (width - len(cfgs))
        table.append([str(D), "tiles (default in bold)"] + shape + pad)
        table.append(["", "registers, shared memory"] + res + pad)
        if rate:
            table.append(["", "TF/s in the sweep"] + rate + pad)
    columns = ["D", ""] + ["c%d" % i for i in range(width)]
    return ("Tiles: B_r × B_c, warps × m-tiles, stages, where Q is kept. Registers: %s. Sweep: bf16, "
            "N = 8192, non-causal, on the code before step 4's zero fill, %s\n\n%s\n"
            % (_ptxas_provenance(), _log_provenance(DIMS_SWEEPS, DIMS_SWEEPS_ENV, commands),
               common.md_table(columns, table)))


def dims_table():
    """The ladder at D = 32, 96, 256 (bf16, N = 8192), with FlashAttention-2 on the same shapes."""
    runs = _program_runs(DIMS_LADDERS)
    by_dim = {int(_option(c, "dim")): _summary(lines) for c, lines in runs}
    dims = sorted(by_dim)
    t_header, t_rows = _torch(DIMS_TORCH)
    table = []
    for k in sorted(STEPS):
        name = "%d-%s" % (k, STEPS[k][0])
        table.append(["%d %s" % (k, STEPS[k][0])] + [common.fmt(by_dim[D][name]["tflops"]) for D in dims])
    fa2 = [_torch_rate(t_rows, D, LADDER_N, False, "bf16", "flash", DIMS_TORCH)["torch_TF_per_s"] for D in dims]
    table.append(["FlashAttention-2 (PyTorch flash)"] + [common.fmt(x) for x in fa2])
    table.append(["kernel 6 / FA2"] + ["%.2f" % (by_dim[D]["6-tuned"]["tflops"] / f) for D, f in zip(dims, fa2)])
    columns = ["kernel"] + ["D = %d TF/s" % D for D in dims]
    return ("bf16, N = 8192, non-causal, H = 2048 / D. Kernels: %s. FlashAttention-2: %s\n\n%s\n"
            % (_log_provenance(DIMS_LADDERS, DIMS_LADDERS_ENV, [c for c, _ in runs]),
               common.provenance(t_header, DIMS_TORCH, DOC), common.md_table(columns, table)))


def pytorch_table():
    """Kernel 6 against PyTorch's flash (FlashAttention-2) and cuDNN backends, D = 64 and 128,
    N = 2048 and 8192, as ratios of TF/s (the ladder table gives kernel 6's own TF/s)."""
    header, rows = _torch(TORCH)
    table = []
    for D in (64, 128):
        for causal in (False, True):
            cells = ["D = %d%s" % (D, ", causal" if causal else "")]
            for dtype, backend in (("fp16", "flash"), ("bf16", "flash"), ("bf16", "cudnn")):
                for N in (2048, 8192):
                    r = _torch_rate(rows, D, N, causal, dtype, backend, TORCH)
                    cells.append("%.2f" % r["course_per_torch"])
            table.append(cells)
    for r in rows:  # the caption's shapes: B·N = 16384, H = 2048 / D
        m = re.match(r"D=(\d+) N=(\d+) .*B=(\d+) H=(\d+)$", str(r["shape"]))
        if not m or int(m.group(3)) * int(m.group(2)) != 16384 or int(m.group(4)) * int(m.group(1)) != 2048:
            raise common.TableError("%s: shape %s is not B·N = 16384, H = 2048 / D" % (TORCH, r["shape"]))
    agree = sum(r["verdict"] == "agree" for r in rows)
    worst = max(float(r["O_rel_L2"]) for r in rows)
    columns = ["kernel 6 / PyTorch", "FA2 fp16, N = 2048", "N = 8192", "FA2 bf16, N = 2048", "N = 8192",
               "cuDNN bf16, N = 2048", "N = 8192"]
    return ("Kernel 6's TF/s over PyTorch's on the same inputs (flash = FlashAttention-2), %s (torch %s); "
            "B·N = 16384 tokens, H = 2048 / D. %d of %d outputs agree with PyTorch's, O within %.1e "
            "relative L2.\n\n%s\n"
            % (common.provenance(header, TORCH, DOC), header.get("torch", "?"), agree, len(rows), worst,
               common.md_table(columns, table)))


def ceiling_table():
    """What bounds kernel 6 at D = 128: mma.sync alone and the cuBLAS GEMM (three runs of
    --ladder --bench), FlashAttention-2 and cuDNN, and kernel 6 itself."""
    runs = _program_runs(DIMS_LADDERS)
    rates = [_ceiling_rates(lines) for _, lines in runs]
    mma = [r["mma.sync m16n8k16 peak"] for r in rates]
    gemm = [r["cuBLAS GEMM 8192^3"] for r in rates]
    header, rows = _bench()
    t_header, t_rows = _torch(TORCH)
    k6 = common.one(rows, BENCH, chapter=7, variant="6-tuned", dtype="bf16", seq=LADDER_N, dim=128,
                    causal=0)["tflops"]
    ceiling = sorted(mma)[len(mma) // 2]

    def row(what, tf, spread=""):
        return [what, common.fmt(tf) + spread, "%d%%" % round(100 * tf / ceiling)]

    table = [row("`mma.sync.m16n8k16` alone, bf16 (`mma_peak.cu`)", ceiling,
                 " (%s–%s in %d runs)" % (common.fmt(min(mma), 4), common.fmt(max(mma), 4), len(mma))),
             row("cuBLAS bf16 GEMM 8192³ (`wgmma`)", sorted(gemm)[len(gemm) // 2]),
             row("cuDNN attention, D = 128, N = 8192", _torch_rate(t_rows, 128, LADDER_N, False, "bf16",
                                                                   "cudnn", TORCH)["torch_TF_per_s"]),
             row("FlashAttention-2 (PyTorch flash), same shape", _torch_rate(t_rows, 128, LADDER_N, False,
                                                                          "bf16", "flash", TORCH)["torch_TF_per_s"]),
             row("kernel 6, same shape", k6)]
    return ("Ceilings: %s. Kernel 6: %s. PyTorch: %s\n\n%s\n"
            % (_log_provenance(DIMS_LADDERS, DIMS_LADDERS_ENV, [c for c, _ in runs]),
               common.provenance(header, BENCH, DOC), common.provenance(t_header, TORCH, DOC),
               common.md_table(["what", "TF/s", "% of mma.sync"], table)))


TABLES = {
    "ch7-ladder": ladder_table,
    "ch7-rule": rule_table,
    "ch7-candidates": candidates_table,
    "ch7-dims": dims_table,
    "ch7-pytorch": pytorch_table,
    "ch7-ceiling": ceiling_table,
}
