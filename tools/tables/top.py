"""The top README's measured tables: the chapters' headline numbers, the results section (every
chapter's `make bench` rows) and the comparison with PyTorch."""

import importlib
import os
import re
import sys

from tables import common

sys.path.insert(0, os.path.join(common.ROOT, "tools"))
import update_readme_table  # noqa: E402

# The runs the README shows, in order: a later file's chapters replace an earlier file's rows of
# those chapters (results_csv.read_merged). Change this list to show another run.
RESULTS_CSVS = [
    "results/nvidia-h200-2026-11-22.csv",
    "results/nvidia-h200-2026-11-22-ch3-ch5.csv",
    "results/nvidia-h200-2026-11-27b-ch7.csv",
    "results/ch09/ladder.csv",
    "results/nvidia-h200-2026-11-27b-ch8.csv",
]
PYTORCH_CH5 = "results/pytorch-nvidia-h200-2026-11-22-ch5-ch7.csv"
PYTORCH_CH7 = "results/pytorch-nvidia-h200-2026-11-27b-ch7.csv"
PYTORCH_CH6 = "results/pytorch-backward-nvidia-h200-2026-11-23.txt"


def merged_rows():
    return common.results_csv.read_merged([common.path(p) for p in RESULTS_CSVS])


def results_section():
    sources, rows = merged_rows()
    sources = [(h, os.path.relpath(p, common.ROOT).replace(os.sep, "/"), cs) for h, p, cs in sources]
    return update_readme_table.block(sources, rows, os.path.join(common.ROOT, "docs", "figures"))


# ---- headline numbers -------------------------------------------------------------------------

def rate(rows, chapter, variant, d, n, causal=0, pass_name="fwd", dtype=None):
    """TF/s of one `make bench` row (the fastest, when a kernel has rows of several dtypes)."""
    found = [r for r in rows if (r["chapter"], r["variant"], r["dim"], r["seq"], r["causal"],
                                 r["pass"]) == (chapter, variant, d, n, causal, pass_name)
             and (dtype is None or r["dtype"] == dtype)]
    if not found:
        raise common.TableError("no make bench row of chapter %d %s at D=%d N=%d" % (chapter, variant, d, n))
    return max(r["tflops"] for r in found)


def fastest(rows, chapter, d, n, causal=0, pass_name="fwd"):
    found = [r["tflops"] for r in rows if (r["chapter"], r["dim"], r["seq"], r["causal"], r["pass"])
             == (chapter, d, n, causal, pass_name)]
    if not found:
        raise common.TableError("no make bench row of chapter %d at D=%d N=%d" % (chapter, d, n))
    return max(found)


def speedup(rows, chapter, variant, base_chapter, d, n, what):
    x = rate(rows, chapter, variant, d, n) / fastest(rows, base_chapter, d, n)
    return "%.1f× %s (D = %d, N = %d)" % (x, what, d, n)


def chapter_module(n):
    """tools/tables/chNN.py when it exists (its headline() gives the chapter's status number)."""
    try:
        return importlib.import_module("tables.ch%02d" % n)
    except ModuleNotFoundError:
        return None


def headline(n, rows):
    if n == 3:
        x = rate(rows, 3, "2-cublas", 64, 4096) / rate(rows, 3, "1-handwritten", 64, 4096)
        return "cuBLAS version %.1f× the hand-written one (D = 64, N = 4096)" % x
    if n == 4:
        return speedup(rows, 4, "2-warp-rows", 3, 64, 4096, "chapter 3")
    if n == 5:
        return speedup(rows, 5, "2-tuned", 3, 128, 8192, "chapter 3")
    if n == 6:
        x = rate(rows, 6, "atomic", 128, 8192, pass_name="bwd") / rate(rows, 6, "naive-cublas", 128, 8192, pass_name="bwd")
        return "fused backward at %.2f× the cuBLAS backward that keeps P (D = 128, N = 8192)" % x
    if n == 7:
        r = common.compare_rows(PYTORCH_CH7, "ch7 6-tuned", "flash")
        return ("kernel 6 at %s× PyTorch's FlashAttention-2 (D = %s, N = %s)"
                % (common.span([x["course_per_torch"] for x in r]), common.listing(x["D"] for x in r),
                   common.listing(x["N"] for x in r)))
    module = chapter_module(n)
    if module is not None and hasattr(module, "headline"):
        return module.headline()
    return None


CHAPTERS = [
    # (number, folder, title, idea, what works)
    (1, "01_softmax", "Softmax on the CPU",
     "naive softmax overflows; the safe 3-pass softmax does not", "CPU only; tested in CI"),
    (2, "02_online_softmax", "Online softmax",
     "one running (max, sum) state; states merge; the first GPU kernels", "GPU tests and sanitizer pass"),
    (3, "03_naive_attention", "Naive attention",
     "Q·Kᵀ, softmax, P·V on the GPU, and the N×N matrices it must store", "GPU tests and sanitizer pass"),
    (4, "04_flash_attention_1", "FlashAttention-1",
     "outer loop over K/V blocks; O, l, m kept in global memory", "GPU tests and sanitizer pass"),
    (5, "05_flash_attention_2", "FlashAttention-2",
     "outer loop over Q blocks; state on chip; logsumexp output", "GPU tests and sanitizer pass"),
    (6, "06_backward", "The backward pass",
     "dQ, dK, dV recomputed from the logsumexp", "GPU tests and sanitizer pass"),
    (7, "07_tensor_cores", "Tensor cores",
     "fp16/bf16, mma.sync, ldmatrix, swizzling, cp.async; head dims 32 to 256", "GPU tests and sanitizer pass"),
    (8, "08_tensor_core_backward", "Backward on tensor cores",
     "FA2's Algorithm 2 in fp16/bf16: five products, transposed operands, atomic or split dQ, FA2's warp layout",
     "GPU tests and sanitizer pass"),
    (9, "09_hopper", "Hopper",
     "wgmma, TMA into an mbarrier ring, warp specialization, pingpong, softmax under P·V: the FlashAttention-3 forward",
     "GPU tests and sanitizer pass; compute capability 9.0 only"),
    (10, "10_decoding", "Decoding",
     "a KV cache: split-KV with chapter 2's merge, GQA packing, a paged cache, an fp8 (e4m3) cache",
     "GPU tests and sanitizer pass"),
    (11, "11_hopper_backward", "Backward on Hopper",
     "Algorithm 2 on wgmma, TMA and warp specialization; dQ added by TMA reduce-add",
     "GPU tests and sanitizer pass; compute capability 9.0 only"),
    (12, "12_context_parallel", "Attention across GPUs",
     "ring attention: the sequence sharded over GPUs, K/V passed round a ring (NCCL), partial results merged as in chapter 2",
     "GPU tests pass on virtual ranks and over NCCL on two H100s; sanitizer clean on virtual ranks"),
]


def chapters_table():
    _, rows = merged_rows()
    lines = []
    for n, folder, title, idea, works in CHAPTERS:
        number = headline(n, rows)
        status = works + ("; " + number if number else "")
        lines.append(["[%d. %s](chapters/%s/README.md)" % (n, title, folder), idea, "`./chapter%d`" % n, status])
    return common.md_table(["chapter", "idea", "program", "status"], lines)


# ---- PyTorch ----------------------------------------------------------------------------------

def source_link(rel):
    return "[`%s`](%s)" % (os.path.basename(rel), rel)


def compare_row(rel, course, label, backend, backend_label):
    """One row per head dim: 'course kernel | backend | ratio at D=64; at D=128 | shapes | file'."""
    found = common.compare_rows(rel, course, backend)
    header, _ = common.read_csv(rel)
    parts = ["%s at D=%d" % (common.span([r["course_per_torch"] for r in found if r["D"] == d]), d)
             for d in sorted({r["D"] for r in found})]
    shapes = "N = %s, causal and not, %s" % (common.listing(r["N"] for r in found),
                                             " and ".join(sorted({r["dtype"] for r in found})))
    return [label, backend_label, "; ".join(parts), shapes,
            "%s, %s, torch %s, %s" % (header.get("gpu"), header.get("date", "")[:10],
                                      header.get("torch"), source_link(rel))]


def chapter6_backward_row():
    """Chapter 6's atomic backward against PyTorch's fused fp32 backward, from the log of one run
    of tools/pytorch_backward.py followed by ./chapter6 at D = 128 then D = 64, N = 8192."""
    with open(common.path(PYTORCH_CH6)) as f:
        text = f.read()
    torch = {int(d): float(t) for d, t in re.findall(
        r"D=(\d+) N=8192 \S+ \S+ causal=0 efficient backward\s+\S+ ms\s+([\d.]+) TF/s", text)}
    ours = [float(t) for t in re.findall(
        r"dQ by fp32 atomics from the dK/dV kernel \(--dq atomic\)\n\s+time\s+median\s+\S+ ms\s+min\s+\S+ ms\s+([\d.]+) TF/s", text)]
    if len(ours) != 2 or set(torch) != {64, 128}:
        raise common.TableError("%s: expected chapter 6 at D = 128 then 64 and PyTorch at both" % PYTORCH_CH6)
    ratio = {128: ours[0] / torch[128], 64: ours[1] / torch[64]}
    version, gpu = re.search(r"^torch (\S+) (.+)$", text, re.M).groups()
    date = re.search(r"\d{4}-\d\d-\d\d", text).group(0)
    return ["chapter 6, atomic backward (fp32)", "efficient backward (CUTLASS, fp32)",
            "%.2f at D=64; %.2f at D=128" % (ratio[64], ratio[128]), "N = 8192, non-causal, fp32",
            "%s, %s, torch %s, %s" % (gpu, date, version, source_link(PYTORCH_CH6))]


def pytorch_table():
    rows = [
        compare_row(PYTORCH_CH5, "ch5 2-tuned", "chapter 5, kernel 2 (fp32, CUDA cores)", "efficient",
                    "efficient (CUTLASS, fp32)"),
        chapter6_backward_row(),
        compare_row(PYTORCH_CH7, "ch7 6-tuned", "chapter 7, kernel 6 (`mma.sync`)", "flash", "flash (FlashAttention-2)"),
        compare_row(PYTORCH_CH7, "ch7 6-tuned", "chapter 7, kernel 6", "cudnn", "cuDNN"),
    ]
    for n in (8, 9, 10, 11):
        module = chapter_module(n)
        if module is not None and hasattr(module, "pytorch_rows"):
            rows += module.pytorch_rows()
    return common.md_table(["course kernel", "PyTorch backend", "course / PyTorch", "shapes", "run"], rows)


TABLES = {"results": results_section, "chapters": chapters_table, "pytorch": pytorch_table}
