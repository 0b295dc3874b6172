#!/usr/bin/env python3
"""Figures of a benchmark run (`make plots`): PNG files under docs/figures/.

  tools/plot_results.py                     the newest results/*.csv
  tools/plot_results.py --csv results/nvidia-h100-80gb-hbm3-2026-11-22.csv --out docs/figures
  tools/plot_results.py --csv FULL --csv PARTIAL --pytorch results/pytorch-....csv
      several files merge as in the README's table (a later file's chapters replace the earlier
      files' rows); --pytorch adds PyTorch's flash and cuDNN backends (bf16), as measured by
      tools/compare_pytorch.py at its shapes, to the forward figure as reference points

Writes
  tflops_forward.png   TF/s against N, one line per chapter/variant/dtype; panels for D and causal
  tflops_backward.png  the same for the backward passes (when the file has any)
  memory.png           device memory of chapter 3 (Q, K, V, O, L and the N x N matrices S and P)
                       and chapter 5 (Q, K, V, O, L) against N, computed from the shapes, with the
                       GPU's memory from the file's header and the runs chapter 3 could not make

Needs matplotlib (python3 -m pip install -r tools/requirements.txt); without it, says so and
exits 0.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_csv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOAT_BYTES = 4
# The bench's grid (tools/bench.py): batch·N = TOKENS, heads·D = HEAD_WIDTH. The memory figure
# goes on past the longest N of the run with batch 1, to show where chapter 3 stops fitting.
TOKENS = 16384
HEAD_WIDTH = 2048
MARKERS = {3: "s", 4: "^", 5: "o", 6: "D", 7: "v"}
LINESTYLES = {"bf16": "--", "tf32": ":"}
# PyTorch backends drawn as references, and how (tools/compare_pytorch.py's backend names).
REFERENCES = {"flash": ("PyTorch flash (FlashAttention-2)", "black", "*"),
              "cudnn": ("PyTorch cuDNN", "dimgray", "P")}
REFERENCE_DTYPE = "bf16"


def chapter3_bytes(b, h, n, d):
    """Q, K, V, O and L, plus S and P (B·H·N² floats each), as chapter 3 allocates them."""
    return chapter5_bytes(b, h, n, d) + 2.0 * b * h * n * n * FLOAT_BYTES


def chapter5_bytes(b, h, n, d):
    """Q, K, V, O (B·H·N·D floats each) and L (B·H·N floats)."""
    return 4.0 * b * h * n * d * FLOAT_BYTES + 1.0 * b * h * n * FLOAT_BYTES


def title_of(headers, what):
    """'what: GPU (dates)' over the headers of the files a figure is drawn from."""
    gpus = sorted({h.get("gpu", "unknown GPU") for h in headers})
    dates = sorted({h.get("date", "")[:10] for h in headers} - {""})
    return "%s: %s%s" % (what, ", ".join(gpus), " (%s)" % ", ".join(dates) if dates else "")


def read_references(paths):
    """PyTorch's rates from compare_pytorch.py files: dicts with backend, dim, seq, causal,
    tflops and a label naming torch's version and the date, for the backends in REFERENCES."""
    import csv
    refs = []
    for path in paths:
        with open(path) as f:
            lines = f.read().splitlines()
        header = dict(kv for kv in map(results_csv.parse_header_line,
                                       (l for l in lines if l.startswith("#"))) if kv)
        for row in csv.DictReader(l for l in lines if not l.startswith("#")):
            if row["backend"] not in REFERENCES or row["dtype"] != REFERENCE_DTYPE:
                continue
            shape = dict(part.split("=") for part in row["shape"].split() if "=" in part)
            name = REFERENCES[row["backend"]][0]
            refs.append({"backend": row["backend"], "dim": int(shape["D"]), "seq": int(shape["N"]),
                         "causal": 0 if "non-causal" in row["shape"] else 1,
                         "tflops": float(row["torch_TF_per_s"]),
                         "label": "%s %s, torch %s (%s)" % (name, REFERENCE_DTYPE, header.get("torch", "?"),
                                                            header.get("date", "")[:10])})
    return refs


def label_axes(ax, seqs, values):
    """Plain numbers on log axes: N at the run's lengths; y ticks at 1-2-5 steps, with minor
    labels when the data span less than a decade."""
    from matplotlib import ticker
    ax.set_xticks(seqs)
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: "%d" % v))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    plain = ticker.FuncFormatter(lambda v, _: "%g" % v)
    ax.yaxis.set_major_formatter(plain)
    if values and max(values) < 10 * min(values):
        ax.yaxis.set_minor_formatter(plain)


def plot_rates(plt, rows, headers, pass_name, path, refs=()):
    """TF/s against N; rows D, columns causal off/on; one line per series, and the reference
    points (PyTorch) of the same D and mask. False if no rows."""
    rows = [r for r in rows if r["pass"] == pass_name and r["tflops"] > 0]
    if not rows:
        return False
    dims = sorted({r["dim"] for r in rows})
    causal = sorted({r["causal"] for r in rows})
    series = []
    for r in rows:
        key = results_csv.series_key(r)
        if key not in series:
            series.append(key)
    series.sort(key=lambda k: (k[0], k[2] != "fp32", k[2], k[1]))
    # One color per (chapter, variant); the dtype changes the line style.
    kernels = []
    for key in series:
        if key[:2] not in kernels:
            kernels.append(key[:2])
    cmap = plt.get_cmap("tab20" if len(kernels) > 10 else "tab10")
    colors = {k: cmap(kernels.index(k[:2]) % cmap.N) for k in series}
    fig, axes = plt.subplots(len(dims), len(causal), figsize=(6.2 * len(causal), 4.2 * len(dims)),
                             squeeze=False, sharex=True)
    for i, d in enumerate(dims):
        for j, c in enumerate(causal):
            ax = axes[i][j]
            for key in series:
                pts = sorted((r["seq"], r["tflops"]) for r in rows
                             if results_csv.series_key(r) == key and r["dim"] == d and r["causal"] == c)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS.get(key[0], "."),
                            markersize=4, color=colors[key],
                            linestyle=LINESTYLES.get(key[2], "-"), label=results_csv.series_label(key))
            for backend, (_, color, marker) in REFERENCES.items():
                mine = [x for x in refs if x["backend"] == backend and x["dim"] == d and x["causal"] == c]
                for label in sorted({x["label"] for x in mine}):
                    pts = sorted((x["seq"], x["tflops"]) for x in mine if x["label"] == label)
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker=marker,
                            markersize=9, linestyle=":", linewidth=1, label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            label_axes(ax, sorted({r["seq"] for r in rows}),
                       [r["tflops"] for r in rows if r["dim"] == d and r["causal"] == c])
            ax.set_title("D = %d, %s" % (d, "causal" if c else "non-causal"))
            ax.grid(True, which="both", alpha=0.3)
            ax.set_ylabel("TF/s (%s FLOPs)" % ("4·B·H·N²·D" if pass_name == "fwd" else "2.5 × forward"))
            if i == len(dims) - 1:
                ax.set_xlabel("sequence length N (batch·N = %d, heads = %d/D)" % (TOKENS, HEAD_WIDTH))
    handles, labels = [], []
    for ax in fig.axes:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(title_of(headers, "%s pass, median time" % ("forward" if pass_name == "fwd" else "backward")))
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True


def memory_points(rows, d, seqs):
    """(N, batch, heads, measured) for the memory figure at head dim d: the run's shapes, then
    doubling N with batch 1 up to 8× the longest N of the run."""
    shapes = {}
    for r in rows:
        if r["dim"] == d:
            shapes[r["seq"]] = (r["batch"], r["heads"])
    points = []
    for n in seqs:
        b, h = shapes.get(n, (max(1, TOKENS // n), max(1, HEAD_WIDTH // d)))
        points.append((n, b, h, True))
    n = max(seqs)
    h = points[-1][2]
    while n < 8 * max(seqs):
        n *= 2
        points.append((n, 1, h, False))
    return points


def plot_memory(plt, rows, headers, path):
    dims = sorted({r["dim"] for r in rows})
    seqs = sorted({r["seq"] for r in rows})
    gpu_bytes = results_csv.header_memory_bytes(headers[0])
    ran3 = {(r["dim"], r["seq"]) for r in rows if r["chapter"] == 3 and r["pass"] == "fwd"}
    chapters = set().union(*(results_csv.header_chapters(h, rows) for h in headers))
    fig, axes = plt.subplots(1, len(dims), figsize=(6.2 * len(dims), 4.4), squeeze=False)
    for ax, d in zip(axes[0], dims):
        pts = memory_points(rows, d, seqs)
        for chapter, fn, color in ((3, chapter3_bytes, "tab:red"), (5, chapter5_bytes, "tab:blue")):
            inside = [(n, results_csv.gib(fn(b, h, n, d))) for n, b, h, m in pts if m]
            beyond = [(n, results_csv.gib(fn(b, h, n, d))) for n, b, h, m in pts if not m]
            what = "S, P, Q, K, V, O, L" if chapter == 3 else "Q, K, V, O, L"
            ax.plot(*zip(*inside), color=color, marker="o", markersize=3,
                    label="chapter %d (%s)" % (chapter, what))
            ax.plot(*zip(*([inside[-1]] + beyond)), color=color, linestyle="--", alpha=0.7,
                    label="chapter %d, batch 1 beyond the run" % chapter)
        if gpu_bytes:
            ax.axhline(results_csv.gib(gpu_bytes), color="black", linewidth=1,
                       label="GPU memory (%.0f GiB)" % results_csv.gib(gpu_bytes))
        if 3 in chapters:
            missed = [(n, results_csv.gib(chapter3_bytes(b, h, n, d))) for n, b, h, m in pts
                      if m and (d, n) not in ran3]
            if missed:
                ax.plot(*zip(*missed), linestyle="none", marker="x", markersize=10, color="black",
                        markeredgewidth=2, label="chapter 3 made no row (did not fit or failed)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        label_axes(ax, [n for n, _, _, _ in pts], [])
        ax.tick_params(axis="x", labelrotation=45)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title("D = %d, heads = %d" % (d, pts[0][2]))
        ax.set_xlabel("sequence length N (batch·N = %d up to N = %d, then batch 1)" % (TOKENS, max(seqs)))
        ax.set_ylabel("device memory, GiB (computed from the shape)")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title_of(headers, "device memory of the arrays"))
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv):
    p = argparse.ArgumentParser(description="PNG figures of a benchmark CSV (docs/benchmarks.md).")
    p.add_argument("--csv", action="append", default=[],
                   help="results file (default: the newest results/*.csv); given again, the later "
                        "file's chapters replace the earlier files' rows of those chapters")
    p.add_argument("--pytorch", action="append", default=[],
                   help="a tools/compare_pytorch.py results file: its flash and cuDNN rates join "
                        "the forward figure")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "figures"), help="output folder")
    opts = p.parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("make plots: matplotlib is not installed, so no figures were written "
              "(install it with: python3 -m pip install -r tools/requirements.txt)")
        return 0
    paths = opts.csv or [results_csv.newest_csv(os.path.join(ROOT, "results"))]
    if not paths[0]:
        print("make plots: no results/*.csv yet; run 'make bench' first, or pass CSV=file", file=sys.stderr)
        return 1
    try:
        sources, rows = results_csv.read_merged(paths)
        refs = read_references(opts.pytorch)
    except (results_csv.ResultsError, OSError, KeyError, ValueError) as e:
        print("make plots: %s" % e, file=sys.stderr)
        return 1
    headers = [h for h, _, _ in sources]
    os.makedirs(opts.out, exist_ok=True)
    written = []
    for pass_name, name in (("fwd", "tflops_forward.png"), ("bwd", "tflops_backward.png")):
        target = os.path.join(opts.out, name)
        if plot_rates(plt, rows, headers, pass_name, target, refs if pass_name == "fwd" else ()):
            written.append(target)
    target = os.path.join(opts.out, "memory.png")
    plot_memory(plt, rows, headers, target)
    written.append(target)
    print("make plots: from %s (%d rows%s) wrote %s"
          % (" + ".join(paths), len(rows), ", PyTorch: " + " + ".join(opts.pytorch) if opts.pytorch else "",
             ", ".join(written)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
