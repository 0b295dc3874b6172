"""Reading the results files that `make bench` writes (results/README.md describes them).

A results file starts with `# key: value` comment lines (the machine and the command), then the
column line the programs write (common/results.h), then one row per timed kernel. This module
reads one into a header dict and a list of typed rows; tools/plot_results.py,
tools/update_readme_table.py and tools/compare_pytorch.py share it. Standard library only.
"""

import csv
import glob
import os

# The columns of common/results.h, in order. A file with other columns is refused with a message.
COLUMNS = ("chapter,variant,dtype,pass,batch,heads,seq,dim,causal,median_ms,min_ms,tflops,gbps,"
           "max_abs_err,rel_l2_err,check").split(",")
INT_COLUMNS = ("chapter", "batch", "heads", "seq", "dim", "causal")
FLOAT_COLUMNS = ("median_ms", "min_ms", "tflops", "gbps", "max_abs_err", "rel_l2_err")


class ResultsError(Exception):
    """A results file that cannot be read; the message says which file and why."""


def parse_header_line(line):
    """('key', 'value') for a '# key: value' line, or None for any other comment."""
    text = line[1:].strip()
    key, sep, value = text.partition(":")
    if not sep or not key or " " in key.strip():
        return None
    return key.strip(), value.strip()


def read_results(path):
    """(header, rows): header maps the '# key: value' lines; rows are dicts with typed values."""
    try:
        with open(path, newline="") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ResultsError("cannot read %s: %s" % (path, e.strerror or e))
    header = {}
    body = []
    for line in lines:
        if line.startswith("#"):
            kv = parse_header_line(line)
            if kv is not None:
                header.setdefault(kv[0], kv[1])
        elif line.strip():
            body.append(line)
    if not body:
        raise ResultsError("%s has no column line and no rows" % path)
    reader = csv.reader(body)
    columns = next(reader)
    if columns != COLUMNS:
        raise ResultsError("%s: columns are %s, expected %s (common/results.h)"
                           % (path, ",".join(columns), ",".join(COLUMNS)))
    rows = []
    for number, fields in enumerate(reader, start=2):
        if len(fields) != len(COLUMNS):
            raise ResultsError("%s: row %d has %d fields, expected %d"
                               % (path, number, len(fields), len(COLUMNS)))
        row = dict(zip(COLUMNS, fields))
        try:
            for c in INT_COLUMNS:
                row[c] = int(row[c])
            for c in FLOAT_COLUMNS:
                row[c] = float(row[c])
        except ValueError as e:
            raise ResultsError("%s: row %d: %s" % (path, number, e))
        rows.append(row)
    return header, rows


def read_rows(path):
    """read_results, and a ResultsError when the file has no rows."""
    header, rows = read_results(path)
    if not rows:
        raise ResultsError("%s has no rows" % path)
    return header, rows


def read_merged(paths):
    """(sources, rows) of several results files, where a later file's chapters replace the
    earlier files' rows of those chapters (a partial run on top of a full one). sources lists
    (header, path, chapters) for each file that still gives rows, in order."""
    rows, sources = [], []
    for path in paths:
        header, mine = read_rows(path)
        chapters = sorted({r["chapter"] for r in mine})
        rows = [r for r in rows if r["chapter"] not in chapters] + mine
        sources = [(h, p, [c for c in cs if c not in chapters]) for h, p, cs in sources]
        sources = [s for s in sources if s[2]] + [(header, path, chapters)]
    return sources, rows


def newest_csv(folder):
    """The benchmark file in folder (*.csv with the benchmark's columns; PyTorch comparisons and
    other files are skipped) whose header date is the latest (file time when it has none), or None."""
    found = []
    for path in glob.glob(os.path.join(folder, "*.csv")):
        try:
            header, _ = read_results(path)
        except ResultsError:
            continue
        found.append((header.get("date", ""), os.path.getmtime(path), path))
    return max(found)[2] if found else None


def series_key(row):
    """What one line of a plot or one row of the table stands for."""
    return (row["chapter"], row["variant"], row["dtype"], row["pass"])


def series_label(key):
    """'ch5 2-tuned' or 'ch7 6-tuned fp16': chapter, variant, and the dtype when not fp32."""
    chapter, variant, dtype, _ = key
    label = "ch%d %s" % (chapter, variant)
    return label if dtype == "fp32" else "%s %s" % (label, dtype)


def header_chapters(header, rows):
    """The chapters the sweep ran ('chapters' in the header), else those that have rows."""
    try:
        return {int(c) for c in header["chapters"].split()}
    except (KeyError, ValueError):
        return {r["chapter"] for r in rows}


def gib(nbytes):
    return nbytes / float(1 << 30)


def header_memory_bytes(header):
    """The GPU's memory from the header ('gpu_memory_mib'), in bytes, or None."""
    text = header.get("gpu_memory_mib", "").split(" ")[0]
    try:
        return float(text) * (1 << 20)
    except ValueError:
        return None
