#!/usr/bin/env python3
"""The benchmark sweep behind `make bench` (docs/benchmarks.md explains it and its numbers).

Runs every GPU chapter's program over one grid of shapes and collects the rows the programs
append with --csv into results/<gpu>-<date>.csv, after '#' lines recording the machine and this
command. The grid keeps the GPU full at every sequence length: batch·N = 16384 tokens and
heads = 2048/D, for D in {64, 128} and N in {512, ..., 16384}, causal off and on.

  tools/bench.py                                  the full sweep
  tools/bench.py --chapters "5 7" --seq "1024 8192" --repeat 5     a quick one
  tools/bench.py --dry-run                        print the plan and every command; run nothing

What each chapter runs is the RUNS table below: edit it when a chapter's options change. A
configuration that fails, runs out of memory or times out is logged and the sweep goes on; a
missing GPU stops it before anything is written. Standard library only, Python 3.8+.
"""

import argparse
import datetime
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The grid: batch·N = TOKENS and heads·D = HEAD_WIDTH at every shape.
TOKENS = 16384
HEAD_WIDTH = 2048
DEFAULT_DIMS = (64, 128)
DEFAULT_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
# Rows at these sequence lengths are checked against the float64 reference; the others run with
# --no-check and say "skipped" in the check column. A check costs seconds of CPU time whatever N
# is (sampled rows of every head; batch·N is fixed), and chapter 7's ladder checks six kernels
# per run, so checking every run would take longer than the sweep itself.
DEFAULT_CHECK_SEQS = (8192,)
# Chapter 4 runs one block per (batch, head): at long N few blocks do all the work, slowly.
DEFAULT_CH4_MAX_SEQ = 4096
DEFAULT_TIMEOUT_S = 300


class Run:
    """One program run per shape: `args` after the program, `repeat` timed repetitions. A run may
    append several rows (one per kernel it times). `max_seq` limits the sequence lengths, `dims`
    lists the head dims the program takes (None: any), `needs_cc` the one compute capability its
    kernels run on (None: any)."""

    def __init__(self, chapter, label, args, repeat, max_seq=None, dims=None, needs_cc=None):
        self.chapter = chapter
        self.needs_cc = needs_cc
        self.label = label
        self.args = list(args)
        self.repeat = repeat
        self.max_seq = max_seq
        self.dims = dims

    @property
    def program(self):
        return "chapter%d" % self.chapter


# What the sweep runs, per chapter. `repeat` is small where one run is long (the readable
# one-thread-per-row kernels). Chapter 6 with no --dq runs both dQ strategies and the naive
# backward; chapter 7's --ladder runs kernels 1 to 6 on the same inputs, one row each; chapter 8's
# --ladder runs its kernels 1 to 6 with both dQ strategies; chapter 9's --ladder its steps 1 to 6
# (the chapter 7 kernel it times beside them writes no row), on Hopper only (sm_90a code);
# chapter 11 its step 5 (its --ladder would write chapter 8's step 6 again), on Hopper only.
RUNS = [
    Run(3, "kernel 1", ["--kernel", "1"], repeat=5),
    Run(3, "kernel 2", ["--kernel", "2"], repeat=10),
    Run(4, "kernel 1", ["--kernel", "1", "--no-compare"], repeat=3),  # N limited by --ch4-max-seq
    Run(4, "kernel 2", ["--kernel", "2", "--no-compare"], repeat=5),
    Run(5, "kernel 1", ["--kernel", "1", "--no-compare"], repeat=3),
    Run(5, "kernel 2", ["--kernel", "2", "--no-compare"], repeat=10),
    Run(6, "backward", [], repeat=5),
    Run(7, "fp16 ladder", ["--dtype", "fp16", "--ladder"], repeat=10, dims=(32, 64, 96, 128, 256)),
    Run(7, "bf16 ladder", ["--dtype", "bf16", "--ladder"], repeat=10, dims=(32, 64, 96, 128, 256)),
    Run(8, "bf16 backward ladder", ["--dtype", "bf16", "--ladder"], repeat=10, dims=(64, 128)),
    Run(8, "fp16 backward", ["--dtype", "fp16"], repeat=10, dims=(64, 128)),
    Run(9, "bf16 ladder", ["--dtype", "bf16", "--ladder"], repeat=10, dims=(64, 128), needs_cc="9.0"),
    Run(9, "fp16 step 6", ["--dtype", "fp16", "--kernel", "6"], repeat=10, dims=(64, 128), needs_cc="9.0"),
    Run(11, "bf16 backward step 5", ["--dtype", "bf16", "--kernel", "5"], repeat=10, dims=(64, 128), needs_cc="9.0"),
    Run(11, "fp16 backward step 5", ["--dtype", "fp16", "--kernel", "5"], repeat=10, dims=(64, 128), needs_cc="9.0"),
]
GPU_CHAPTERS = sorted({r.chapter for r in RUNS})

# The program that writes each shape's inputs once (--save-npy); every run then loads them
# (--load-npy), so the CPU does not draw the same 100 million random numbers once per run.
INPUT_WRITER = 5

# The programs' exit statuses (common/exit_codes.h, the README's table).
EXIT_FAILED, EXIT_BAD_INPUT, EXIT_NO_GPU = 1, 2, 3

NO_DEVICE = re.compile(r"no CUDA device", re.IGNORECASE)
OUT_OF_MEMORY = re.compile(r"of device memory|out of memory", re.IGNORECASE)


def runnable(bin_dir, program):
    """The program exists and is executable (bin_dir relative to the repository root)."""
    return os.access(os.path.join(ROOT, bin_dir, program), os.X_OK)


def shape_of(dim, seq):
    """(batch, heads) of the grid at head dim `dim` and sequence length `seq`."""
    return max(1, TOKENS // seq), max(1, HEAD_WIDTH // dim)


def shape_args(dim, seq, causal):
    batch, heads = shape_of(dim, seq)
    args = ["--batch", str(batch), "--heads", str(heads), "--seq", str(seq), "--dim", str(dim)]
    return args + (["--causal"] if causal else [])


def shape_text(dim, seq, causal):
    return "D=%d N=%d %s" % (dim, seq, "causal" if causal else "non-causal")


def int_list(text, what):
    try:
        values = [int(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise SystemExit("bench: %s must be whole numbers, got %r" % (what, text))
    if not values or min(values) < 1:
        raise SystemExit("bench: %s must be positive whole numbers, got %r" % (what, text))
    return values


def duration(seconds):
    seconds = int(round(seconds))
    return "%dm%02ds" % (seconds // 60, seconds % 60) if seconds >= 60 else "%ds" % seconds


# ---- the machine ---------------------------------------------------------------------------

def command_output(argv):
    """stdout of argv, or None when it cannot run or fails."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              universal_newlines=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


GPU_FIELDS = ("name", "memory.total", "compute_cap", "driver_version", "clocks.sm", "clocks.max.sm",
              "clocks.mem", "clocks.max.mem", "power.limit", "pstate")


def gpu_description():
    """What nvidia-smi says about GPU 0 (empty dict without nvidia-smi)."""
    out = command_output(["nvidia-smi", "--query-gpu=" + ",".join(GPU_FIELDS),
                          "--format=csv,noheader,nounits", "--id=0"])
    if not out or not out.strip():
        return {}
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")]
    info = dict(zip(GPU_FIELDS, values))
    banner = command_output(["nvidia-smi"]) or ""
    m = re.search(r"CUDA Version:\s*([0-9.]+)", banner)
    if m:
        info["cuda_version"] = m.group(1)
    return info


def nvcc_release():
    out = command_output([os.environ.get("NVCC", "nvcc"), "--version"]) or ""
    m = re.search(r"release ([0-9.]+), V([0-9.]+)", out)
    return m.group(2) if m else "unknown"


def git_revision():
    rev = command_output(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"])
    if rev is None:
        return "unknown"
    dirty = command_output(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    return rev.strip() + (" (with uncommitted changes)" if dirty else "")


def cpu_description():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d cores" % (model, os.cpu_count() or 0)


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "gpu"


def default_output(gpu_name, today):
    """results/<gpu>-<date>.csv; -2, -3, ... when that file exists already."""
    base = os.path.join(ROOT, "results", "%s-%s" % (slug(gpu_name), today))
    path, n = base + ".csv", 2
    while os.path.exists(path):
        path, n = "%s-%d.csv" % (base, n), n + 1
    return path


# ---- the plan ----------------------------------------------------------------------------

class Job:
    def __init__(self, run, dim, seq, causal, checked, repeat):
        self.run, self.dim, self.seq, self.causal = run, dim, seq, causal
        self.checked, self.repeat = checked, repeat

    def title(self):
        return "chapter%d %s %s" % (self.run.chapter, self.run.label,
                                    shape_text(self.dim, self.seq, self.causal))

    def argv(self, bin_dir, csv_path, inputs_dir):
        argv = [os.path.join(bin_dir, self.run.program)] + self.run.args
        argv += shape_args(self.dim, self.seq, self.causal) + ["--repeat", str(self.repeat)]
        if not self.checked:
            argv.append("--no-check")
        if inputs_dir:
            argv += ["--load-npy", inputs_dir]
        return argv + ["--csv", csv_path]


def seq_limit(opts, run):
    """The longest N a run goes to (None: no limit); chapter 4's comes from --ch4-max-seq."""
    return (opts.ch4_max_seq or None) if run.chapter == 4 else run.max_seq


def make_plan(opts):
    """The jobs in sweep order (shape by shape, so each shape's inputs are written once), and
    the notes on what was left out."""
    jobs, notes = [], []
    runs = [r for r in RUNS if r.chapter in opts.chapters]
    for chapter in sorted({r.chapter for r in runs}):
        run = next(r for r in runs if r.chapter == chapter)
        limit = seq_limit(opts, run)
        cut = [n for n in opts.seqs if limit and n > limit]
        if cut:
            notes.append("chapter %d is limited to N <= %d (left out: N = %s): its kernels run one "
                         "block per (batch, head) and are slow at long N (--ch4-max-seq, "
                         "BENCH_CH4_MAX_N)" % (chapter, limit, " ".join(map(str, cut))))
        dims = [d for d in opts.dims if run.dims and d not in run.dims]
        if dims:
            notes.append("chapter %d runs D in {%s} only (left out: D = %s)"
                         % (chapter, ", ".join(map(str, run.dims)), " ".join(map(str, dims))))
    for dim in opts.dims:
        for seq in opts.seqs:
            for causal in opts.causal:
                for r in runs:
                    limit = seq_limit(opts, r)
                    if limit and seq > limit or r.dims and dim not in r.dims:
                        continue
                    jobs.append(Job(r, dim, seq, causal, is_checked(opts, limit, seq),
                                    opts.repeat or r.repeat))
    return jobs, notes


def is_checked(opts, limit, seq):
    """Whether a run at N = seq is checked: N is one of the checked lengths, or the run reaches
    none of them (chapter 4, or a narrowed sweep) and seq is its longest N."""
    if opts.check_seqs is None:
        return True
    if not opts.check_seqs:
        return False
    mine = [n for n in opts.seqs if not limit or n <= limit]
    if any(n in mine for n in opts.check_seqs):
        return seq in opts.check_seqs
    return seq == max(mine)


def check_rule(opts):
    if opts.check_seqs is None:
        return "every row is checked against the float64 reference (sampled rows)"
    if not opts.check_seqs:
        return "no row is checked (--no-check everywhere; check = skipped)"
    return ("rows at N in {%s} (for a chapter that runs none of these, at its longest N) are "
            "checked against the float64 reference (sampled rows); the others run with --no-check "
            "(check = skipped)" % ", ".join(map(str, opts.check_seqs)))


# ---- running -------------------------------------------------------------------------------

class Sweep:
    def __init__(self, opts, jobs, csv_path, log):
        self.opts, self.jobs, self.csv_path, self.log = opts, jobs, csv_path, log
        self.outcomes = []  # (job, status word, text, seconds)
        self.seconds = 0.0
        self.start = time.time()

    def say(self, text):
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def execute(self, argv, timeout):
        """(exit status or None on timeout, combined output); the output also goes to the log."""
        self.log.write("$ %s\n" % shlex.join(argv))
        self.log.flush()
        began = time.time()
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  universal_newlines=True, errors="replace", timeout=timeout,
                                  cwd=ROOT)
            status, output = done.returncode, done.stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            status, output = None, out if isinstance(out, str) else out.decode("utf-8", "replace")
        self.log.write(output + ("" if output.endswith("\n") else "\n"))
        self.seconds = time.time() - began
        self.log.write("[exit %s after %.1f s]\n\n" % ("timeout" if status is None else status, self.seconds))
        self.log.flush()
        return status, output

    def write_inputs(self, dim, seq, folder):
        """Writes one shape's q, k, v with the input writer; False when that failed."""
        argv = [os.path.join(self.opts.bin_dir, "chapter%d" % INPUT_WRITER), "--no-check",
                "--no-bench", "--save-npy", folder] + shape_args(dim, seq, False)
        status, output = self.execute(argv, self.opts.timeout)
        if NO_DEVICE.search(output):
            raise NoDevice(output)
        if status != 0:
            self.say("      inputs for D=%d N=%d could not be written (%s); each run makes its own"
                     % (dim, seq, error_line(output) or "exit %s" % status))
            return False
        return True

    def run_job(self, index, job, inputs_dir):
        elapsed = time.time() - self.start
        left = ""
        if index > 1:
            left = ", ~%s left" % duration(elapsed / (index - 1) * (len(self.jobs) - index + 1))
        self.say("[%d/%d] %s  (%s%s)" % (index, len(self.jobs), job.title(), duration(elapsed), left))
        before = count_rows(self.csv_path)
        argv = job.argv(self.opts.bin_dir, self.csv_path, inputs_dir)
        status, output = self.execute(argv, self.opts.timeout)
        if NO_DEVICE.search(output):
            raise NoDevice(output)
        rows = read_new_rows(self.csv_path, before)
        status_word, text = judge(status, output, rows, self.opts.timeout)
        self.outcomes.append((job, status_word, text, self.seconds))
        self.say("      %s (%.1f s): %s" % (status_word, self.seconds, text))

    def summary(self, interrupted):
        counts, seconds = {}, {}
        for job, word, _, sec in self.outcomes:
            counts[word] = counts.get(word, 0) + 1
            seconds[job.run.chapter] = seconds.get(job.run.chapter, 0.0) + sec
        self.say("")
        self.say("bench: %d of %d runs done in %s%s: %s" % (
            len(self.outcomes), len(self.jobs), duration(time.time() - self.start),
            " (interrupted)" if interrupted else "",
            ", ".join("%d %s" % (n, w) for w, n in sorted(counts.items())) or "none"))
        self.say("bench: time per chapter: %s" % ", ".join(
            "chapter %d %s" % (c, duration(t)) for c, t in sorted(seconds.items())))
        for job, word, text, _ in self.outcomes:
            if word != "ok":
                self.say("  %-9s %s: %s" % (word, job.title(), text))


class NoDevice(Exception):
    pass


def last_line(output):
    lines = [l.strip() for l in output.splitlines() if l.strip()]
    return lines[-1] if lines else ""


def error_line(output):
    """The line a program stopped with: its first "error:" line (a usage text may follow it), else
    its last line."""
    errors = [l.strip() for l in output.splitlines() if "error:" in l]
    return errors[0] if errors else last_line(output)


def memory_message(output):
    """The lines of a program's output that say what it needs and what is free."""
    lines = [l.strip() for l in output.splitlines() if OUT_OF_MEMORY.search(l) or " free" in l]
    return " ".join(lines[:2]) if lines else last_line(output)


def count_rows(csv_path):
    try:
        with open(csv_path) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def read_new_rows(csv_path, before):
    try:
        with open(csv_path) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return [l.split(",") for l in lines[before:] if l and not l.startswith("#")]


def judge(status, output, rows, timeout):
    """(status word, one line) for a finished run. Status words: ok, failed (a check failed),
    refused (a shape the program does not support, exit status 2, or one this GPU cannot run: its
    memory, exit status 3), error, timeout."""
    done = ", ".join("%s %s %s TF/s (check %s)" % (r[1], r[2], fmt_rate(r[11]), r[15])
                     for r in rows if len(r) == 16)
    if status is None:
        return "timeout", "timed out after %d s%s" % (timeout, "; rows kept: " + done if done else "")
    if rows and (status != 0 or any(len(r) == 16 and r[15] == "FAIL" for r in rows)):
        return "failed", "exit %d: %s" % (status, done)
    if rows:
        return "ok", done
    if status == 0:
        return "error", "exit 0 but no row was written (did the program time its kernel?)"
    if OUT_OF_MEMORY.search(output):
        return "refused", "does not fit: %s" % memory_message(output)
    if status == EXIT_BAD_INPUT:
        return "refused", "not supported: %s" % error_line(output)
    if status == EXIT_NO_GPU:
        return "refused", "this GPU cannot run it: %s" % error_line(output)
    return "error", "exit %d: %s" % (status, error_line(output))


def fmt_rate(text):
    try:
        return "%.3g" % float(text)
    except ValueError:
        return text


def preflight(opts, program):
    """Runs a tiny problem once: stops with a message when there is no GPU; returns the program's
    output (its device description) and the CSV column line it writes."""
    folder = tempfile.mkdtemp(prefix="fa-bench-")
    try:
        csv_path = os.path.join(folder, "columns.csv")
        argv = [os.path.join(opts.bin_dir, program), "--batch", "1", "--heads", "1", "--seq", "64",
                "--dim", "64", "--repeat", "1", "--no-check", "--csv", csv_path]
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  universal_newlines=True, errors="replace", timeout=120, cwd=ROOT)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SystemExit("bench: cannot run %s: %s" % (shlex.join(argv), e))
        if NO_DEVICE.search(done.stdout):
            raise NoDevice(done.stdout)
        if done.returncode != 0 or not os.path.exists(csv_path):
            raise SystemExit("bench: the first check run failed, stopping before the sweep:\n  $ %s\n%s"
                             % (shlex.join(argv), indent(done.stdout)))
        with open(csv_path) as f:
            columns = f.readline().strip()
        return done.stdout, columns
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def indent(text):
    return "\n".join("    " + l for l in text.rstrip().splitlines())


def fill_from_program(gpu, program_output):
    """GPU name and memory from a program's device description where nvidia-smi gave none."""
    m = re.search(r"^device \d+: (.+?) \(compute capability ([0-9.]+)\)", program_output, re.M)
    if m:
        gpu.setdefault("name", m.group(1))
        gpu.setdefault("compute_cap", m.group(2))
    m = re.search(r"memory ([0-9.]+) GB total", program_output)
    if m:
        gpu.setdefault("memory.total", "%.0f" % (float(m.group(1)) * 1e9 / (1 << 20)))
    return gpu


def header_lines(opts, gpu, device_line, jobs, notes):
    runtime = re.search(r"CUDA runtime ([0-9.]+)", device_line)
    clocks = "%s MHz (max %s MHz)" % (gpu.get("clocks.sm", "?"), gpu.get("clocks.max.sm", "?"))
    lines = [
        "FlashAttention course benchmark: rows appended by the chapter programs (--csv); "
        "columns in results/README.md",
        "gpu: %s" % gpu.get("name", "unknown"),
        "gpu_memory_mib: %s" % gpu.get("memory.total", "unknown"),
        "compute_capability: %s" % gpu.get("compute_cap", "unknown"),
        "driver: %s" % gpu.get("driver_version", "unknown"),
        "cuda_version: %s (driver), runtime %s, nvcc %s" % (
            gpu.get("cuda_version", "unknown"), runtime.group(1) if runtime else "unknown",
            nvcc_release()),
        "sm_clock: %s at the start" % clocks,
        "mem_clock: %s MHz (max %s MHz)" % (gpu.get("clocks.mem", "?"), gpu.get("clocks.max.mem", "?")),
        "power_limit_w: %s" % gpu.get("power.limit", "unknown"),
        "date: %s" % datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command: %s" % opts.command,
        "git: %s" % git_revision(),
        "host: %s" % cpu_description(),
        "grid: batch*N = %d tokens, heads = %d/D; D = %s; N = %s; causal = %s" % (
            TOKENS, HEAD_WIDTH, " ".join(map(str, opts.dims)), " ".join(map(str, opts.seqs)),
            " ".join("on" if c else "off" for c in opts.causal)),
        "chapters: %s" % " ".join(map(str, opts.chapters)),
        "check: %s" % check_rule(opts),
        "runs: %d planned" % len(jobs),
    ]
    lines += ["limit: %s" % n for n in notes]
    return ["# " + l for l in lines]


def print_plan(opts, jobs, notes):
    per_chapter = {}
    for j in jobs:
        per_chapter[j.run.chapter] = per_chapter.get(j.run.chapter, 0) + 1
    print("bench: runs per chapter: %s; %d of them checked" % (
        ", ".join("chapter %d: %d" % kv for kv in sorted(per_chapter.items())),
        sum(1 for j in jobs if j.checked)))
    print("bench: %d runs; chapters %s; D = %s; N = %s; causal %s" % (
        len(jobs), " ".join(map(str, opts.chapters)), " ".join(map(str, opts.dims)),
        " ".join(map(str, opts.seqs)), " and ".join("on" if c else "off" for c in opts.causal)))
    print("bench: batch*N = %d tokens and heads = %d/D at every shape" % (TOKENS, HEAD_WIDTH))
    print("bench: %s" % check_rule(opts))
    for n in notes:
        print("bench: %s" % n)


def dry_run(opts, jobs, notes):
    print_plan(opts, jobs, notes)
    csv_path = opts.out or os.path.join("results", "<gpu>-<date>.csv")
    inputs = None if opts.no_shared_inputs else "<inputs>"
    shape = None
    for i, job in enumerate(jobs, start=1):
        if inputs and (job.dim, job.seq) != shape:
            shape = (job.dim, job.seq)
            print("[inputs] D=%d N=%d: %s" % (job.dim, job.seq, shlex.join(
                ["./chapter%d" % INPUT_WRITER, "--no-check", "--no-bench", "--save-npy", inputs]
                + shape_args(job.dim, job.seq, False))))
        print("[%d/%d] %s" % (i, len(jobs), job.title()))
        print("      $ %s" % shlex.join(job.argv(opts.bin_dir, csv_path, inputs)))
    missing = sorted({j.run.program for j in jobs} | ({"chapter%d" % INPUT_WRITER} if inputs else set()))
    missing = [p for p in missing if not runnable(opts.bin_dir, p)]
    if missing:
        print("bench: not built yet: %s (make bench builds them)" % " ".join(missing))
    print("bench: dry run, nothing was run or written")


def runnable_here(jobs, notes, cc):
    """The jobs this GPU (compute capability `cc`) can run; a note names the chapters left out."""
    left_out = sorted({j.run.chapter for j in jobs if j.run.needs_cc and j.run.needs_cc != cc})
    if not left_out:
        return jobs
    notes.append("chapter %s left out: its kernels run on compute capability %s only, this GPU has %s"
                 % (" ".join(map(str, left_out)),
                    " / ".join(sorted({j.run.needs_cc for j in jobs if j.run.chapter in left_out})), cc))
    kept = [j for j in jobs if j.run.chapter not in left_out]
    if not kept:
        raise SystemExit("bench: nothing this GPU can run: " + notes[-1])
    return kept


def sweep(opts, jobs, notes):
    programs = sorted({j.run.program for j in jobs} | ({"chapter%d" % INPUT_WRITER}
                                                       if not opts.no_shared_inputs else set()))
    missing = [p for p in programs if not runnable(opts.bin_dir, p)]
    if missing:
        raise SystemExit("bench: %s not built: run 'make %s' (make bench builds them)"
                         % (", ".join(missing), " ".join(missing)))
    print_plan(opts, jobs, notes)
    try:
        program_output, columns = preflight(opts, jobs[0].run.program)
    except NoDevice as e:
        raise SystemExit("bench: stopping, no CUDA device: the programs need an NVIDIA GPU; nothing "
                         "was written.\n%s" % indent(e.args[0]))
    device_line = next((l.strip() for l in program_output.splitlines() if l.startswith("device ")), "")
    print("bench: %s" % device_line)
    gpu = fill_from_program(gpu_description(), program_output)
    jobs = runnable_here(jobs, notes, gpu.get("compute_cap", "unknown"))
    today = datetime.date.today().isoformat()
    csv_path = opts.out or default_output(gpu.get("name", "unknown-gpu"), today)
    os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
    if os.path.exists(csv_path):
        raise SystemExit("bench: %s exists; choose another --out (rows are never appended to an "
                         "old sweep)" % csv_path)
    log_path = os.path.splitext(csv_path)[0] + ".log"
    with open(csv_path, "w") as f:
        f.write("\n".join(header_lines(opts, gpu, device_line, jobs, notes)) + "\n" + columns + "\n")
    header_rows = count_rows(csv_path)
    print("bench: writing %s (log of every run: %s)" % (rel(csv_path), rel(log_path)))

    inputs_root = None if opts.no_shared_inputs else tempfile.mkdtemp(prefix="fa-bench-inputs-")
    interrupted = False
    with open(log_path, "w") as log:
        s = Sweep(opts, jobs, csv_path, log)
        try:
            shape, inputs_dir = None, None
            for i, job in enumerate(jobs, start=1):
                if inputs_root and (job.dim, job.seq) != shape:
                    shape = (job.dim, job.seq)
                    shutil.rmtree(inputs_root, ignore_errors=True)
                    os.makedirs(inputs_root)
                    s.say("[inputs] D=%d N=%d: batch %d, heads %d"
                          % ((job.dim, job.seq) + shape_of(job.dim, job.seq)))
                    inputs_dir = inputs_root if s.write_inputs(job.dim, job.seq, inputs_root) else None
                s.run_job(i, job, inputs_dir)
        except KeyboardInterrupt:
            interrupted = True
        except NoDevice as e:
            s.say("bench: stopping, the GPU went away:\n%s" % indent(e.args[0]))
            interrupted = True
        finally:
            if inputs_root:
                shutil.rmtree(inputs_root, ignore_errors=True)
        s.summary(interrupted)
        gpu_end = gpu_description()
        if gpu_end:
            s.say("bench: SM clock at the end %s MHz (max %s MHz)"
                  % (gpu_end.get("clocks.sm", "?"), gpu_end.get("clocks.max.sm", "?")))
    rows = count_rows(csv_path) - header_rows
    if rows == 0:
        os.remove(csv_path)
        raise SystemExit("bench: no run wrote a row; removed %s (see %s)" % (rel(csv_path), rel(log_path)))
    print("bench: %d rows in %s" % (rows, rel(csv_path)))
    print("bench: next: make plots CSV=%s; make results-table CSV=%s (to show it in the README: "
          "add it to RESULTS_CSVS in tools/tables/top.py, then make doc-tables)" % (rel(csv_path), rel(csv_path)))
    bad = [o for o in s.outcomes if o[1] not in ("ok", "refused")]
    if bad:
        print("bench: %d runs failed, errored or timed out (listed above; details in %s)"
              % (len(bad), rel(log_path)))
    return 1 if bad or interrupted else 0


def merge(out, inputs):
    """Joins results files of one GPU (a sweep run in parts, e.g. one per head dim) into one: the
    '#' lines key by key (values that differ are joined with ' | '), then every row. Refuses
    files of another GPU, other columns, or a row that two files both hold."""
    if os.path.exists(out):
        raise SystemExit("bench: %s exists; merge writes a new file" % out)
    notes, keys, values, columns, rows, seen = [], [], {}, None, [], set()
    for path in inputs:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise SystemExit("bench: cannot read %s: %s" % (path, e.strerror))
        body = [l for l in lines if l.strip() and not l.startswith("#")]
        if not body:
            raise SystemExit("bench: %s has no column line" % path)
        if columns is not None and body[0] != columns:
            raise SystemExit("bench: %s has other columns than %s" % (path, inputs[0]))
        columns = body[0]
        for line in (l for l in lines if l.startswith("#")):
            key, sep, value = line[1:].strip().partition(": ")
            if not sep or " " in key:
                if line not in notes:
                    notes.append(line)
                continue
            if key not in values:
                keys.append(key)
                values[key] = []
            if value not in values[key]:
                values[key].append(value)
        for row in body[1:]:
            shape = tuple(row.split(",")[:9])
            if shape in seen:
                raise SystemExit("bench: %s repeats a row of an earlier file: %s" % (path, ",".join(shape)))
            seen.add(shape)
            rows.append(row)
    if len(values.get("gpu", [])) > 1:
        raise SystemExit("bench: the files come from different GPUs: %s" % "; ".join(values["gpu"]))
    header = notes + ["# %s: %s" % (k, " | ".join(values[k])) for k in keys]
    header.append("# merged: %d files (%s)" % (len(inputs), ", ".join(os.path.basename(p) for p in inputs)))
    with open(out, "w") as f:
        f.write("\n".join(header + [columns] + rows) + "\n")
    print("bench: wrote %s: %d rows from %d files" % (out, len(rows), len(inputs)))
    return 0


def rel(path):
    r = os.path.relpath(path, ROOT)
    return path if r.startswith("..") else r


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Runs the GPU chapters' benchmarks over one grid of shapes into a results CSV.",
        epilog="Make variables: BENCH_CHAPTERS, BENCH_D, BENCH_N, BENCH_CAUSAL, BENCH_REPEAT, "
               "BENCH_CHECK_N, BENCH_CH4_MAX_N, BENCH_TIMEOUT, BENCH_OUT, BENCH_DRY_RUN=1.")
    p.add_argument("--chapters", default=" ".join(map(str, GPU_CHAPTERS)),
                   help="chapters to run (default: %(default)s)")
    p.add_argument("--dims", default=" ".join(map(str, DEFAULT_DIMS)), help="head dims D")
    p.add_argument("--seq", default=" ".join(map(str, DEFAULT_SEQS)), help="sequence lengths N")
    p.add_argument("--causal", default="0 1", help="'0', '1' or '0 1' (default: both)")
    p.add_argument("--repeat", type=int, default=0,
                   help="timed repetitions of every run (default: per chapter, see RUNS)")
    p.add_argument("--check-seq", default=" ".join(map(str, DEFAULT_CHECK_SEQS)),
                   help="N at which rows are checked against the fp64 reference; 'all' or 'none' "
                        "(default: %(default)s)")
    p.add_argument("--ch4-max-seq", type=int, default=DEFAULT_CH4_MAX_SEQ,
                   help="longest N for chapter 4; 0: no limit (default: %(default)s)")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                   help="seconds one run may take before it is stopped (default: %(default)s)")
    p.add_argument("--out", default="", help="results file (default: results/<gpu>-<date>.csv)")
    p.add_argument("--bin-dir", default=".",
                   help="folder of the chapterN programs, relative to the repository root "
                        "(default: %(default)s)")
    p.add_argument("--no-shared-inputs", action="store_true",
                   help="let every run draw its own inputs instead of loading each shape's once")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the commands only")
    p.add_argument("--command", default="",
                   help="the command that started this one (make bench ...), recorded in the header "
                        "before this script's own command line")
    opts = p.parse_args(argv)
    opts.chapters = int_list(opts.chapters, "--chapters")
    unknown = [c for c in opts.chapters if c not in GPU_CHAPTERS]
    if unknown:
        raise SystemExit("bench: no benchmark for chapter %s (GPU chapters: %s)"
                         % (" ".join(map(str, unknown)), " ".join(map(str, GPU_CHAPTERS))))
    opts.dims = int_list(opts.dims, "--dims")
    opts.seqs = int_list(opts.seq, "--seq")
    causal = opts.causal.replace(",", " ").split()
    if not causal or any(c not in ("0", "1") for c in causal):
        raise SystemExit("bench: --causal takes '0', '1' or '0 1', got %r" % opts.causal)
    opts.causal = sorted({c == "1" for c in causal})
    check = opts.check_seq.strip().lower()
    opts.check_seqs = None if check == "all" else [] if check == "none" else int_list(check, "--check-seq")
    if opts.repeat < 0 or opts.timeout < 1:
        raise SystemExit("bench: --repeat must be >= 1 (0: per chapter) and --timeout >= 1")
    own = [a for i, a in enumerate(argv) if a != "--command" and (i == 0 or argv[i - 1] != "--command")
           and not a.startswith("--command=")]
    script = shlex.join(["python3", os.path.relpath(os.path.abspath(__file__), ROOT)] + own)
    opts.command = "%s (runs: %s)" % (opts.command, script) if opts.command else script
    return opts


def main(argv):
    if argv and argv[0] == "--merge":
        if len(argv) < 4:
            raise SystemExit("usage: tools/bench.py --merge OUT.csv IN1.csv IN2.csv ...")
        return merge(argv[1], argv[2:])
    opts = parse_args(argv)
    jobs, notes = make_plan(opts)
    if not jobs:
        raise SystemExit("bench: nothing to run for this selection")
    if opts.dry_run:
        dry_run(opts, jobs, notes)
        return 0
    return sweep(opts, jobs, notes)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the output went to a pager or `head` that closed early
        sys.exit(0)
