"""Chapter 12's measured tables (chapters/12_context_parallel/README.md), from the files in results/ch12/.

  ch12-ladder     efficiency T_1 / (P T_P) of every step (step 5: forward + backward), per P and mask,
                  bf16; `tools/launch.sh P ./chapter12 --ladder [--causal] --csv results/ch12/ladder.csv`
  ch12-timeline   per rank, steps 4 and 5's compute, communication, the part of it hidden under compute,
                  and the compute's idle time; `... --step 5 --timeline --csv results/ch12/timeline.csv`
  ch12-bandwidth  one ring exchange timed alone, GB/s each way; `... --bandwidth --csv results/ch12/bandwidth.csv`
  ch12-max-seq    the largest N one GPU and P GPUs fit; `./chapter12 --max-seq ... --csv results/ch12/max-seq.csv`

A table is offered to the docs only once its results file exists: until the ring has been measured
the README has no table to show, and the first file that appears makes tools/doc_tables.py ask for
its marker in the README ("used by no doc") instead of passing silently.
"""

import os
import re

from . import common

DOC_DIR = "chapters/12_context_parallel"
LADDER = "results/ch12/ladder.csv"
TIMELINE = "results/ch12/timeline.csv"
BANDWIDTH = "results/ch12/bandwidth.csv"
MAX_SEQ = "results/ch12/max-seq.csv"
STEPS = ["1-all-gather", "2-ring", "3-overlap", "4-zigzag", "5-backward"]


def ring_rows(rows, what):
    """(step, P) -> row for the rows of real ranks (not '-virtual') whose variant is '<step>-P<P>'."""
    out = {}
    for r in rows:
        m = re.fullmatch(r"(\d-[\w-]+?)-P(\d+)", str(r["variant"]))
        if m and r["pass"] == what:
            out[(m.group(1), int(m.group(2)), r["causal"])] = r
    return out


def one_gpu(rows, r, what):
    """The single-GPU row (variant 'one-gpu-…') of the same shape as r; every run of the program
    writes one, so the last of them (runs at several P time the same single-GPU problem)."""
    want = {"pass": what, "seq": r["seq"], "dim": r["dim"], "causal": r["causal"], "dtype": r["dtype"],
            "batch": r["batch"], "heads": r["heads"]}
    found = common.select([x for x in rows if str(x["variant"]).startswith("one-gpu-")], **want)
    if not found:
        raise common.TableError("%s: no single-GPU row matches %s" % (LADDER, want))
    return found[-1]


def efficiency(rows, fwd, bwd, step, P, c):
    """T_1 / (P T_P) in %, of the forward (steps 1-4) or of forward + backward (step 5)."""
    if step != "5-backward":
        r = fwd[(step, P, c)]
        return 100 * one_gpu(rows, r, "fwd")["median_ms"] / (P * r["median_ms"])
    f, b = fwd[(step, P, c)], bwd[(step, P, c)]
    t1 = one_gpu(rows, f, "fwd")["median_ms"] + one_gpu(rows, b, "bwd")["median_ms"]
    return 100 * t1 / (P * (f["median_ms"] + b["median_ms"]))


def ladder_table():
    header, rows = common.read_csv(LADDER)
    fwd, bwd = ring_rows(rows, "fwd"), ring_rows(rows, "bwd")
    columns = sorted({(P, c) for (_, P, c) in fwd}, key=lambda k: (k[0], -k[1]))
    titles = ["step"] + ["P=%d %s" % (P, "causal" if c else "no mask") for P, c in columns]
    table = [[s] + ["%.1f%%" % efficiency(rows, fwd, bwd, s, P, c) if (s, P, c) in fwd else "" for P, c in columns]
             for s in STEPS]
    r = next(iter(fwd.values()))
    line = (common.provenance(header, LADDER, DOC_DIR) + "; B = %d, H = %d, N = %d, D = %d, %s; efficiency "
            "T_1 / (P T_P) with T_1 the same kernels on one GPU over the whole sequence (step 5: forward + "
            "backward); every row checked against float64 (2× rule)" % (r["batch"], r["heads"], r["seq"], r["dim"],
                                                                        r["dtype"]))
    return line + "\n\n" + common.md_table(titles, table)


def timeline_table():
    header, rows = common.read_csv(TIMELINE)
    sums = {}  # (step, pass, P, rank) -> {kind: total ms}
    for r in rows:
        m = re.fullmatch(r"(\d-[\w-]+?)-rank(\d+)-step\d+-P(\d+)", str(r["variant"]))
        direction, _, kind = str(r["pass"]).partition("-")
        if m:
            key = (m.group(1), direction, int(m.group(3)), int(m.group(2)))
            sums.setdefault(key, {}).setdefault(kind, 0.0)
            sums[key][kind] += r["median_ms"]
    table = []
    for (step, direction, P, rank), s in sorted(sums.items()):
        comm = s.get("comm", 0.0)
        table.append([step, direction, P, rank, common.fmt(s.get("compute", 0.0)), common.fmt(comm),
                      "%.0f%%" % (100 * s.get("hidden", 0.0) / comm) if comm else "", common.fmt(s.get("idle", 0.0))])
    line = common.provenance(header, TIMELINE, DOC_DIR) + "; milliseconds summed over the ring's steps, from CUDA events"
    return line + "\n\n" + common.md_table(["step", "pass", "P", "rank", "compute ms", "communication ms", "hidden",
                                            "compute idle ms"], table)


def bandwidth_table():
    header, rows = common.read_csv(BANDWIDTH)
    table = [[str(r["variant"]).replace("sendrecv-", ""), common.fmt(r["median_ms"]), common.fmt(r["gbps"])]
             for r in rows if str(r["variant"]).startswith("sendrecv-")]
    line = common.provenance(header, BANDWIDTH, DOC_DIR) + "; one ring exchange, every rank sending and receiving"
    return line + "\n\n" + common.md_table(["size", "ms", "GB/s each way"], table)


def max_seq_table():
    header, rows = common.read_csv(MAX_SEQ)
    table, seen = [], set()
    for r in rows:  # every run writes the one-GPU row: shown once
        name = str(r["variant"]).replace("max-seq-", "")
        if str(r["variant"]).startswith("max-seq-") and name not in seen:
            seen.add(name)
            table.append([name, r["batch"], r["heads"], r["dim"], r["seq"]])
    line = common.provenance(header, MAX_SEQ, DOC_DIR) + "; estimated from the buffers the runs allocate"
    return line + "\n\n" + common.md_table(["run", "B", "H", "D", "largest N"], table)


def headline():
    """The top README's status number: zigzag's efficiency with the causal mask, forward and forward +
    backward, at each P measured (None until the ring has been measured)."""
    if not os.path.exists(os.path.join(common.ROOT, LADDER)):
        return None
    header, rows = common.read_csv(LADDER)
    fwd, bwd = ring_rows(rows, "fwd"), ring_rows(rows, "bwd")
    Ps = sorted({P for (step, P, c) in fwd if step == "4-zigzag" and c})
    gpu = header.get("gpu", "").split(" x ")[0].replace("NVIDIA ", "").split(" ")[0]
    parts = ["on %d %ss %.0f%% of ideal forward, %.0f%% forward + backward" % (
        P, gpu, efficiency(rows, fwd, bwd, "4-zigzag", P, 1), efficiency(rows, fwd, bwd, "5-backward", P, 1))
        for P in Ps]
    r = fwd[("4-zigzag", Ps[0], 1)]
    return "zigzag ring, causal, %s (N/P = %d, D = %d)" % ("; ".join(parts), r["seq"] // Ps[0], r["dim"])


SOURCES = {
    "ch12-ladder": (LADDER, ladder_table),
    "ch12-timeline": (TIMELINE, timeline_table),
    "ch12-bandwidth": (BANDWIDTH, bandwidth_table),
    "ch12-max-seq": (MAX_SEQ, max_seq_table),
}
TABLES = {name: fn for name, (rel, fn) in SOURCES.items() if os.path.exists(os.path.join(common.ROOT, rel))}
