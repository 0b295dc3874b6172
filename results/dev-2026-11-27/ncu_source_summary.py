# Summary of an `ncu --page source --csv --print-source sass` export: stall samples and executed
# instructions per opcode and stall reason, and, given address bounds (hex, the low 16 bits), per
# address range, executed instructions counted per warp and tile (1 048 576 warp-tiles at
# D = 128, N = 8192, B = 1, H = 16).
#   python3 ncu_source_summary.py FILE.csv [LO HI ...]
import collections
import csv
import re
import sys

rows = list(csv.reader(open(sys.argv[1])))
hdr, data = rows[1], rows[2:]
ix = {h: i for i, h in enumerate(hdr)}


def g(r, k):
    try:
        return float(r[ix[k]])
    except (ValueError, KeyError):
        return 0.0


SAMPLES, EXEC = "Warp Stall Sampling (All Samples)", "Instructions Executed"
reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
tot = sum(g(r, SAMPLES) for r in data)
print("instructions", len(data), "samples", tot, "executed", sum(g(r, EXEC) for r in data))
totals = {h: sum(g(r, h) for r in data) for h in reasons}
print("stall totals:", sorted(((round(v / tot * 100, 1), k) for k, v in totals.items() if v), reverse=True))
per_op = collections.defaultdict(lambda: [0.0, 0.0])
for r in data:
    src = r[ix["Source"]].strip()
    op = re.sub(r"^@!?U?P\w+\s+", "", src).split()[0].split(".")[0] if src else "?"
    per_op[op][0] += g(r, SAMPLES)
    per_op[op][1] += g(r, EXEC)
print("per opcode (samples%, executed M):")
for op, (s, e) in sorted(per_op.items(), key=lambda x: -x[1][0])[:25]:
    print("  %-8s %5.1f%% %8.1fM" % (op, s / tot * 100, e / 1e6))
bounds = [int(x, 16) for x in sys.argv[2:]]
if bounds:
    print("address ranges (low 16 bits of the address; the loop wraps past 0xffff):")
for lo, hi in zip(bounds, bounds[1:]):
    sel = [r for r in data if lo <= (int(r[ix["Address"]], 16) & 0xFFFF) < hi]
    s, e = sum(g(r, SAMPLES) for r in sel), sum(g(r, EXEC) for r in sel)
    top = sorted(((sum(g(r, h) for r in sel), h[6:]) for h in reasons), reverse=True)[:4]
    print("%04x-%04x samples %5.1f%% exec/warp-iter %6.1f  %s" % (lo, hi, s / tot * 100, e / 1048576,
          " ".join("%s:%.1f%%" % (k, v / tot * 100) for v, k in top)))
