#!/usr/bin/env python3
"""The README's results section from benchmark CSVs: tools/tables/top.py puts it in README.md
(`make doc-tables`) from its list of files; this script prints it for any (`make results-table`).

  tools/update_readme_table.py                           the section for the newest results/*.csv
  tools/update_readme_table.py --csv FILE
  tools/update_readme_table.py --csv FULL --csv PARTIAL  PARTIAL's chapters replace FULL's rows

Per chapter, variant and dtype: TF/s at a few shapes (D = 64 and 128, N = 1024 and 8192,
non-causal and causal), the speedup over chapter 3's fastest variant at the same shape, and the
percentage of the fastest entry of that pass at that shape. The line above the tables names the
GPU, CUDA version, date and command from the CSV's header. Standard library only.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_csv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIMS = (64, 128)
SEQS = (1024, 8192)
FIGURES = (("tflops_forward.png", "TF/s of every forward kernel against N"),
           ("tflops_backward.png", "TF/s of the backward passes against N"),
           ("memory.png", "device memory of chapters 3 and 5 against N"))


def baseline_rows(rows, pass_name):
    """The rows a pass's speedups are measured against: chapter 3's fp32 rows of that pass (the
    fastest one at each shape is taken), or for a pass chapter 3 has no rows of, the rows whose
    variant names the naive baseline (chapter 6's naive backward, for example)."""
    mine = [r for r in rows if r["pass"] == pass_name and r["dtype"] == "fp32"]
    ch3 = [r for r in mine if r["chapter"] == 3]
    return ch3 or [r for r in mine if "naive" in r["variant"]]


def best(rows, d, n, c):
    rates = [r["tflops"] for r in rows if (r["dim"], r["seq"], r["causal"]) == (d, n, c)]
    return max(rates) if rates else None


def ratio(x):
    """Speedups and percentages: whole numbers from 10 on, two digits below."""
    return "%.0f" % x if x >= 10 else "%.2g" % x


def cell(row, base, top):
    """'12.3 (4.1×, 56%)': TF/s, speedup over the baseline, percentage of the fastest."""
    if row is None:
        return "—"
    speedup = ratio(row["tflops"] / base) + "×" if base else "—"
    text = "%.3g (%s, %s%%)" % (row["tflops"], speedup, ratio(100.0 * row["tflops"] / top))
    if row["check"] == "FAIL":
        text += " **check FAILED**"
    elif row["check"] != "PASS":
        text += "*"
    return text


def series_in_order(rows):
    keys = []
    for r in rows:
        k = results_csv.series_key(r)
        if k not in keys:
            keys.append(k)
    return sorted(keys, key=lambda k: (k[0], k[2] != "fp32", k[2], k[1]))


def table(rows, pass_name, causal):
    """One Markdown table: one pass, one causal setting."""
    rows = [r for r in rows if r["pass"] == pass_name]
    shapes = [(d, n) for d in DIMS for n in SEQS]
    shapes = [s for s in shapes if any((r["dim"], r["seq"]) == s for r in rows)]
    if not shapes:
        return []
    lines = ["| chapter | kernel | dtype | " + " | ".join("D=%d N=%d" % s for s in shapes) + " |",
             "| --- | --- | --- |" + " --- |" * len(shapes)]
    index = {}
    for r in rows:
        index[results_csv.series_key(r) + (r["dim"], r["seq"], r["causal"])] = r
    for key in series_in_order(rows):
        cells = [index.get(key + (d, n, causal)) for d, n in shapes]
        if not any(cells):
            continue
        base_rows = baseline_rows(rows, pass_name)
        lines.append("| %d | %s | %s | %s |" % (key[0], key[1], key[2], " | ".join(
            cell(c, best(base_rows, d, n, causal), best(rows, d, n, causal))
            for c, (d, n) in zip(cells, shapes))))
    return lines


def provenance(header, csv_rel):
    return ("**%s** (driver %s; CUDA %s), %s, with `%s`; all rows: [`%s`](%s)"
            % (header.get("gpu", "unknown GPU"), header.get("driver", "unknown"),
               header.get("cuda_version", "unknown"), header.get("date", "unknown date")[:10],
               header.get("command", "unknown command"), csv_rel, csv_rel))


def block(sources, rows, figures_dir):
    """sources: (header, csv_rel, chapters taken from it) per file, in order."""
    if len(sources) == 1:
        first = ["Measured on %s." % provenance(sources[0][0], sources[0][1])]
    else:
        gpus = {h.get("gpu") for h, _, _ in sources}
        note = ("speedups across runs compare different processes on the same GPU model" if len(gpus) == 1 else
                "the GPUs differ, so compare a chapter's rows with each other, and across chapters only "
                "those measured on the same GPU")
        first = ["Measured in %d runs; each chapter's rows come from one of them (%s):" % (len(sources), note), ""]
        first += ["* chapters %s: %s" % (", ".join(map(str, chapters)), provenance(h, rel))
                  for h, rel, chapters in sources]
    lines = first + [
        "",
        "Each cell: TF/s (speedup over chapter 3's fastest fp32 kernel at the same shape — for the "
        "backward pass, over the naive backward —, percentage of the fastest kernel of that pass at "
        "that shape). Batch·N = 16384 tokens and heads = 2048/D at every shape; FLOPs counted as "
        "FlashAttention does (forward 4·B·H·N²·D, half when causal; backward 2.5× forward); median "
        "of repeated runs with L2 flushed. `*`: not checked against the float64 reference in this "
        "run; `—`: no row (did not fit in device memory, not run, or failed; see the log).",
    ]
    for pass_name in ("fwd", "bwd"):
        for causal in (0, 1):
            t = table(rows, pass_name, causal)
            if t:
                lines += ["", "**%s, %s**" % ("Forward" if pass_name == "fwd" else "Backward",
                                               "causal" if causal else "non-causal"), ""] + t
    pictures = [(name, alt) for name, alt in FIGURES if os.path.exists(os.path.join(figures_dir, name))]
    for name, alt in pictures:
        lines += ["", "![%s](docs/figures/%s)" % (alt, name)]
    lines += ["", "How these are made, and what they mean: [docs/benchmarks.md](docs/benchmarks.md)."]
    return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description="README results table from a benchmark CSV.")
    p.add_argument("--csv", action="append", default=[],
                   help="results file (default: the newest results/*.csv); given again, the later "
                        "file's chapters replace the earlier files' rows of those chapters")
    opts = p.parse_args(argv)
    paths = opts.csv or [results_csv.newest_csv(os.path.join(ROOT, "results"))]
    if not paths[0]:
        print("update_readme_table: no results/*.csv yet; run 'make bench' first, or pass CSV=file",
              file=sys.stderr)
        return 1
    try:
        sources, rows = results_csv.read_merged(paths)
    except results_csv.ResultsError as e:
        print("update_readme_table: %s" % e, file=sys.stderr)
        return 1
    sources = [(h, os.path.relpath(os.path.abspath(path), ROOT).replace(os.sep, "/"), cs)
               for h, path, cs in sources]
    print(block(sources, rows, os.path.join(ROOT, "docs", "figures")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
