#!/usr/bin/env python3
"""The course's forward kernels side by side with PyTorch's scaled_dot_product_attention
(`make compare`; optional: never a build or test dependency).

  tools/compare_pytorch.py             D in {64, 128}, N in {1024, 4096, 8192}, causal off and on
  tools/compare_pytorch.py --quick     D = 64, N = 1024 only, fewer repetitions
  tools/compare_pytorch.py --chapters "5 7" --seq 4096 --out results/pytorch-h100.csv

For each shape (the grid of tools/bench.py: batch·N = 16384, heads = 2048/D) the script draws Q, K,
V once (float32, normal with mean 0.5, seeded), and for each course program in COURSE below:
  1. runs it with --load-npy (those inputs), --save-npy (its O and L) and --csv (its timing row);
  2. runs torch.nn.functional.scaled_dot_product_attention on the same inputs, in the program's
     dtype, with each backend (math, efficient, flash, cudnn) that accepts the dtype and shape;
  3. checks the course's O against each backend's (relative L2 error within the dtype's
     tolerance) and the course's L against a float64 logsumexp of the scaled scores;
  4. times each backend like the course times its kernels (CUDA events, warm-up, L2 flushed before
     every repetition, median) and prints TF/s and the ratio course / PyTorch.
Needs torch with CUDA and numpy; without torch it says so and exits 0. Exit 1 if any output
disagrees.
"""

import argparse
import datetime
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the grid and how programs are called)
import results_csv  # noqa: E402

ROOT = bench.ROOT
SEED = 20260101


class Course:
    """A course program run: `args` pick the kernel (and dtype) it times."""

    def __init__(self, chapter, args, dtype, max_seq=None):
        self.chapter, self.args, self.dtype, self.max_seq = chapter, list(args), dtype, max_seq

    def name(self):
        return "chapter%d %s" % (self.chapter, " ".join(self.args))


# The fastest kernel of each forward chapter. Chapter 4 is slow at long N (one block per head).
COURSE = [
    Course(3, ["--kernel", "2"], "fp32"),
    Course(4, ["--kernel", "2"], "fp32", max_seq=4096),
    Course(5, ["--kernel", "2"], "fp32"),
    Course(7, ["--kernel", "6", "--dtype", "fp16"], "fp16"),
    Course(7, ["--kernel", "6", "--dtype", "bf16"], "bf16"),
    Course(9, ["--kernel", "6", "--dtype", "fp16"], "fp16"),  # Hopper (compute capability 9.0) only
    Course(9, ["--kernel", "6", "--dtype", "bf16"], "bf16"),
]

# Agreement of O (relative L2 error against each backend): fp32 kernels differ from PyTorch by
# float32 round-off (~1e-6); 16-bit ones by the rounding of P and O to 8 or 11 mantissa bits.
O_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}
# L is float32 in every chapter, computed from the (rounded) inputs: compared with a float64
# logsumexp of the same rounded inputs, only float32 accumulation error remains.
L_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-4, "bf16": 1e-4}


def backends(torch):
    from torch.nn.attention import SDPBackend
    names = (("math", "MATH"), ("efficient", "EFFICIENT_ATTENTION"), ("flash", "FLASH_ATTENTION"),
             ("cudnn", "CUDNN_ATTENTION"))
    return [(label, getattr(SDPBackend, attr)) for label, attr in names if hasattr(SDPBackend, attr)]


def torch_dtype(torch, name):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def flops(b, h, n, d, causal):
    f = 4.0 * b * h * n * n * d
    return f / 2 if causal else f


# ---- inputs and the course's outputs ---------------------------------------------------------

def write_inputs(np, folder, b, h, n, d, seed):
    """Writes q.npy, k.npy, v.npy, float32 (B, H, N, D), normal(0.5, 1) like the course's inputs
    (other numbers: NumPy's generator, not the course's); returns the three arrays."""
    rng = np.random.default_rng(seed)
    arrays = []
    for name in ("q", "k", "v"):
        x = rng.standard_normal((b, h, n, d), dtype=np.float32)
        x += np.float32(0.5)
        np.save(os.path.join(folder, name + ".npy"), x)
        arrays.append(x)
    return arrays


class CourseNotRun(RuntimeError):
    """The course program cannot run on this GPU (exit status 3: chapter 9 before compute
    capability 9.0, or too little free memory)."""


def run_course(entry, dim, seq, causal, inputs, outputs, repeat, bin_dir, program_check):
    """Runs the course program; returns its CSV row (dict). Raises CourseNotRun when this GPU
    cannot run it, RuntimeError with its output when it fails."""
    csv_path = os.path.join(outputs, "row.csv")
    argv = [os.path.join(bin_dir, "chapter%d" % entry.chapter)] + entry.args
    argv += bench.shape_args(dim, seq, causal) + ["--repeat", str(repeat), "--load-npy", inputs,
                                                  "--save-npy", outputs, "--csv", csv_path]
    if not program_check:
        argv.append("--no-check")
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, errors="replace", cwd=ROOT)
    if done.returncode == bench.EXIT_NO_GPU:
        raise CourseNotRun(bench.error_line(done.stdout))
    if done.returncode != 0:
        raise RuntimeError("$ %s\n%s" % (shlex.join(argv), bench.indent(done.stdout)))
    _, rows = results_csv.read_results(csv_path)
    mine = [r for r in rows if r["chapter"] == entry.chapter and r["dtype"] == entry.dtype]
    if not mine:
        raise RuntimeError("$ %s\nwrote no %s row to %s" % (shlex.join(argv), entry.dtype, csv_path))
    return mine[0]


def load_outputs(np, folder):
    """The course's O (as float32, whatever its file type) and L."""
    o = np.load(os.path.join(folder, "o.npy")).astype(np.float32)
    l = np.load(os.path.join(folder, "l.npy")).astype(np.float32)
    return o, l


# ---- PyTorch ---------------------------------------------------------------------------------

def sdpa(torch, backend, q, k, v, causal, scale):
    """Runs one backend once; returns (output, None) or (None, why it refused)."""
    from torch.nn.attention import sdpa_kernel
    import torch.nn.functional as F
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            if out.is_cuda:
                torch.cuda.synchronize()
            return out, None
        except RuntimeError as e:
            # PyTorch warns why each fused kernel was not used, then raises a generic error.
            reasons = [line.strip() for w in caught for line in str(w.message).splitlines()
                       if line.strip() and not line.strip().endswith("because:")]
            return None, ("; ".join(reasons) or str(e).splitlines()[0])[:160]


def time_sdpa(torch, backend, q, k, v, causal, scale, repeat, warmup=3):
    """Median ms of one backend with CUDA events around each call, L2 flushed before each
    repetition (as common/gpu_timer.h times the course's kernels)."""
    from torch.nn.attention import sdpa_kernel
    import torch.nn.functional as F
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    flush = torch.empty(2 * max(int(getattr(props, "L2_cache_size", 0)), 8 << 20), dtype=torch.uint8,
                        device="cuda")
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    with sdpa_kernel(backend):
        for _ in range(warmup):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        torch.cuda.synchronize()
        for i in range(repeat):
            flush.fill_(i & 0xFF)
            start.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
    del flush
    return statistics.median(times)


def o_errors(torch, course_o, torch_o):
    """(relative L2 error, max abs error) of the course's O against a backend's, in float64."""
    ref = torch_o.double()
    diff = course_o.double() - ref
    return (diff.norm() / ref.norm()).item(), diff.abs().max().item()


def reference_lse(torch, q, k, causal, scale):
    """Float64 logsumexp of the scaled (masked) scores, (B, H, N), in chunks of heads."""
    b, h, n, _ = q.shape
    q2, k2 = q.double().reshape(b * h, n, -1), k.double().reshape(b * h, n, -1)
    out = torch.empty(b * h, n, dtype=torch.float64, device=q.device)
    chunk = max(1, (1 << 30) // (n * n * 8))
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1) if causal else None
    for s in range(0, b * h, chunk):
        scores = torch.matmul(q2[s:s + chunk], k2[s:s + chunk].transpose(1, 2)) * scale
        if mask is not None:
            scores.masked_fill_(mask, float("-inf"))
        out[s:s + chunk] = torch.logsumexp(scores, dim=-1)
    return out.reshape(b, h, n)


def l_error(torch, course_l, ref_l):
    """Max of |course − reference| / max(1, |reference|) over all rows."""
    diff = (course_l.double() - ref_l).abs() / ref_l.abs().clamp(min=1.0)
    return diff.max().item()


# ---- one shape ---------------------------------------------------------------------------------

class Line:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def compare_shape(torch, np, opts, entries, dim, seq, causal, work):
    b, h = bench.shape_of(dim, seq)
    scale = 1.0 / math.sqrt(dim)
    inputs = os.path.join(work, "inputs")
    os.makedirs(inputs, exist_ok=True)
    q32, k32, v32 = (torch.from_numpy(x).cuda()
                     for x in write_inputs(np, inputs, b, h, seq, dim, opts.seed))
    shape = bench.shape_text(dim, seq, causal) + " B=%d H=%d" % (b, h)
    lines = []

    def add(**kw):
        lines.append(Line(**kw))
        print_line(lines[-1])

    for entry in entries:
        if entry.max_seq and seq > entry.max_seq:
            continue
        outputs = os.path.join(work, "out")
        shutil.rmtree(outputs, ignore_errors=True)
        os.makedirs(outputs)
        try:
            row = run_course(entry, dim, seq, causal, inputs, outputs, opts.repeat, opts.bin_dir,
                             opts.program_check)
        except CourseNotRun as e:
            print("  %s: not run on this GPU: %s" % (entry.name(), e))
            add(shape=shape, dtype=entry.dtype, course=entry.name(), course_tflops=None, backend="-",
                torch_tflops=None, o_err=None, o_max=None, l_err=None, verdict="not run: this GPU")
            continue
        except RuntimeError as e:
            print("  %s: the course program failed:\n%s" % (entry.name(), bench.indent(str(e))))
            add(shape=shape, dtype=entry.dtype, course=entry.name(), course_tflops=None, backend="-",
                torch_tflops=None, o_err=None, o_max=None, l_err=None, verdict="course failed")
            continue
        o_np, l_np = load_outputs(np, outputs)
        dt = torch_dtype(torch, entry.dtype)
        q, k, v = q32.to(dt), k32.to(dt), v32.to(dt)
        course_o, course_l = torch.from_numpy(o_np).cuda(), torch.from_numpy(l_np).cuda()
        l_err = l_error(torch, course_l, reference_lse(torch, q, k, causal, scale))
        l_ok = l_err <= L_TOLERANCE[entry.dtype]
        course_label = "ch%d %s" % (row["chapter"], row["variant"])
        for label, backend in backends(torch):
            out, why = sdpa(torch, backend, q, k, v, causal, scale)
            if out is None:
                add(shape=shape, dtype=entry.dtype, course=course_label, course_tflops=row["tflops"],
                    backend=label, torch_tflops=None, o_err=None, o_max=None, l_err=l_err,
                    verdict="refused: " + why)
                continue
            o_err, o_max = o_errors(torch, course_o, out)
            del out
            ms = time_sdpa(torch, backend, q, k, v, causal, scale, opts.repeat)
            ok = o_err <= O_TOLERANCE[entry.dtype] and l_ok and math.isfinite(o_err)
            add(shape=shape, dtype=entry.dtype, course=course_label, course_tflops=row["tflops"],
                backend=label, torch_tflops=flops(b, h, seq, dim, causal) / (ms * 1e-3) / 1e12,
                o_err=o_err, o_max=o_max, l_err=l_err, verdict="agree" if ok else "DISAGREE")
        del q, k, v, course_o, course_l
        torch.cuda.empty_cache()
    return lines


# ---- output -------------------------------------------------------------------------------------

COLUMNS = ("shape", "dtype", "course", "course TF/s", "backend", "torch TF/s", "course/torch",
           "O rel L2", "L rel", "verdict")


def fields(line):
    def f(x, fmt):
        return "-" if x is None else fmt % x
    ratio = (line.course_tflops / line.torch_tflops
             if line.course_tflops is not None and line.torch_tflops else None)
    return (line.shape, line.dtype, line.course, f(line.course_tflops, "%.3g"), line.backend,
            f(line.torch_tflops, "%.3g"), f(ratio, "%.2f"), f(line.o_err, "%.1e"),
            f(line.l_err, "%.1e"), line.verdict)


WIDTHS = (34, 5, 20, 11, 9, 10, 12, 8, 8, 0)


def print_line(line):
    print("  " + " ".join(str(v).ljust(w) for v, w in zip(fields(line), WIDTHS)).rstrip(), flush=True)


def write_csv(path, lines, header):
    import csv
    with open(path, "w", newline="") as f:
        for key in ("gpu", "driver", "cuda", "torch", "date", "command"):
            f.write("# %s: %s\n" % (key, header.get(key, "unknown")))
        w = csv.writer(f)
        w.writerow([c.replace(" ", "_").replace("/", "_per_") for c in COLUMNS])
        for line in lines:
            w.writerow(fields(line))


def summary(lines):
    """Per course kernel and backend: the ratios course / PyTorch over the shapes."""
    print("\nratio course / PyTorch (TF/s; above 1: the course is faster), by course kernel and backend:")
    groups = {}
    for l in lines:
        if l.course_tflops and l.torch_tflops:
            groups.setdefault((l.course, l.dtype, l.backend), []).append(l.course_tflops / l.torch_tflops)
    for (course, dtype, backend), ratios in sorted(groups.items()):
        print("  %-22s %-5s vs %-10s min %.2f  median %.2f  max %.2f  (%d shapes)"
              % (course, dtype, backend, min(ratios), statistics.median(ratios), max(ratios), len(ratios)))


def parse_args(argv):
    p = argparse.ArgumentParser(description="The course's forward kernels against PyTorch SDPA.")
    p.add_argument("--quick", action="store_true", help="D = 64, N = 1024, 5 repetitions")
    p.add_argument("--chapters", default="3 4 5 7", help="course chapters (default: %(default)s)")
    p.add_argument("--dims", default="64 128")
    p.add_argument("--seq", default="1024 4096 8192")
    p.add_argument("--causal", default="0 1")
    p.add_argument("--repeat", type=int, default=20, help="timed repetitions (default: %(default)s)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--bin-dir", default=".",
                   help="folder of the chapterN programs, relative to the repository root")
    p.add_argument("--program-check", action="store_true",
                   help="also run each program's own float64 check (slower)")
    p.add_argument("--out", default="", help="also write the table as CSV to this file")
    opts = p.parse_args(argv)
    if opts.quick:
        opts.dims, opts.seq, opts.repeat = "64", "1024", 5
    opts.chapters = bench.int_list(opts.chapters, "--chapters")
    opts.dims = bench.int_list(opts.dims, "--dims")
    opts.seqs = bench.int_list(opts.seq, "--seq")
    opts.causal = sorted({c == "1" for c in opts.causal.replace(",", " ").split()})
    if opts.repeat < 1:
        raise SystemExit("compare_pytorch: --repeat must be at least 1")
    return opts


def main(argv):
    opts = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("compare_pytorch: torch is not installed, so there is nothing to compare with "
              "(python3 -m pip install torch numpy); skipped")
        return 0
    try:
        import numpy as np
    except ImportError:
        print("compare_pytorch: numpy is not installed (python3 -m pip install numpy); skipped")
        return 0
    try:
        from torch.nn.attention import sdpa_kernel  # noqa: F401
    except ImportError:
        print("compare_pytorch: torch %s has no torch.nn.attention.sdpa_kernel (needs 2.3 or newer); "
              "skipped" % torch.__version__)
        return 0
    if not torch.cuda.is_available():
        print("compare_pytorch: torch %s sees no CUDA device; skipped" % torch.__version__)
        return 0
    entries = [e for e in COURSE if e.chapter in opts.chapters]
    missing = sorted({"chapter%d" % e.chapter for e in entries
                      if not bench.runnable(opts.bin_dir, "chapter%d" % e.chapter)})
    if missing:
        print("compare_pytorch: %s not built: run 'make %s'" % (", ".join(missing), " ".join(missing)),
              file=sys.stderr)
        return 1
    gpu = torch.cuda.get_device_name(torch.cuda.current_device())
    header = {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
              "driver": bench.gpu_description().get("driver_version", "unknown"),
              "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "command": shlex.join(["python3", os.path.relpath(__file__, ROOT)] + list(argv))}
    print("compare_pytorch: %s, torch %s (CUDA %s); %d repetitions, L2 flushed, median; fp32 "
          "matmul precision '%s' (TF32 %s)" % (gpu, torch.__version__, torch.version.cuda, opts.repeat,
                                               torch.get_float32_matmul_precision(),
                                               "on" if torch.backends.cuda.matmul.allow_tf32 else "off"))
    print("compare_pytorch: tolerance of O (relative L2): %s; of L: %s"
          % (", ".join("%s %.0e" % kv for kv in O_TOLERANCE.items()),
             ", ".join("%s %.0e" % kv for kv in L_TOLERANCE.items())))
    print("  " + " ".join(c.ljust(w) for c, w in zip(COLUMNS, WIDTHS)).rstrip())
    work = tempfile.mkdtemp(prefix="fa-compare-")
    lines = []
    try:
        for dim in opts.dims:
            for seq in opts.seqs:
                for causal in opts.causal:
                    lines += compare_shape(torch, np, opts, entries, dim, seq, causal, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary(lines)
    if opts.out:
        write_csv(opts.out, lines, header)
        print("compare_pytorch: wrote %s" % opts.out)
    bad = [l for l in lines if l.verdict in ("DISAGREE", "course failed")]
    print("compare_pytorch: %d comparisons, %d disagree or failed" % (len(lines), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
