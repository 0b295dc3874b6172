/// @file decoding.h
/// @brief Chapter 10, attention for decoding: q_len new tokens per sequence against a KV cache,
/// split-KV (flash-decoding) with chapter 2's merge, GQA/MQA packing, a paged cache. What the
/// program, the tests and the benchmark call.
///
/// Layouts (row-major): Q and O (B, H_q, q_len, D), L (B, H_q, q_len); a contiguous cache K, V
/// (B, H_kv, N_max, D); a paged cache: a pool (pages, H_kv, P, D) and a block table (B, max_pages)
/// of pool page numbers (kernel/split_plan.h). 16-bit elements (T = __half or __nv_bfloat16), L
/// and the split partials fp32. H_q = g·H_kv; D = 64 or 128; q_len 1..16; sequence b's cache holds
/// lens[b] tokens, its q_len new ones last; new token i sees keys 0 .. lens[b] − q_len + i.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "../../common/dtype.h"

namespace ch10 {

/// The variants, steps of the ladder (kernel/decode_attention.cuh says what each one changes).
enum Variant : int {
    kFa2Grid = 1,  ///< chapter 7's kernel on chapter 7's grid: a block per (sequence, query head)
    kSplitKv = 2,  ///< + the cache split across blocks, partials merged by a combine kernel
    kGqa = 3,      ///< + the g query heads of a KV head in one block: K and V read once per 16 rows
    kPaged = 4,    ///< + K and V through a block table (paged cache)
    kTuned = 5,    ///< + warps and pipeline depth from the sweep (contiguous or paged cache)
    kFp8 = 6,      ///< 5 on an e4m3 cache, a scale per (sequence, KV head) for K and for V
};
constexpr int kFirstVariant = kFa2Grid;
constexpr int kLastVariant = kFp8;

/// Short name, e.g. "3-gqa".
std::string variant_name(int variant);

/// Sizes of one decoding step.
struct DecodeShape {
    int B = 1;                ///< sequences
    int H_q = 32;             ///< query heads
    int H_kv = 8;             ///< KV heads (H_q = g·H_kv; H_kv = 1 is MQA)
    int q_len = 1;            ///< new tokens per sequence (1..16)
    int D = 128;              ///< head dimension (64 or 128)
    int N_max = 1;            ///< cache capacity per sequence (tokens)
    int page_size = 0;        ///< tokens per page of a paged cache (a power of two, 16..256); 0: contiguous
    float scale = 0.0f;       ///< softmax scale (1/√D)
    std::vector<int> lens;    ///< B cache lengths, the new tokens included (q_len ≤ len ≤ N_max)

    int g() const { return H_q / H_kv; }
    bool paged() const { return page_size > 0; }
    int page_shift() const;                                   ///< log2(page_size)
    int max_pages() const;                                    ///< table row length: ⌈N_max / P⌉
    int pool_pages() const { return B * max_pages(); }        ///< pages of the pool the program makes
    std::size_t q_elems() const { return std::size_t(B) * H_q * q_len * D; }
    std::size_t rows() const { return std::size_t(B) * H_q * q_len; }  ///< rows of O (entries of L)
    std::size_t cache_elems() const;                          ///< elements of K (or of the pool)
    std::size_t new_kv_elems() const { return std::size_t(B) * H_kv * q_len * D; }
    int max_len() const;
    /// Bytes of K and V a decoding step must read: Σ_b lens[b]·H_kv·D elements each (the figure of merit).
    double kv_bytes(std::size_t elem_bytes) const;
    /// "B=1 H_q=32 H_kv=8 q_len=1 D=128 lens=32768 contiguous".
    std::string str() const;
};

/// A shape with scale 1/√D and the given lengths (one per sequence).
DecodeShape make_decode_shape(int B, int H_q, int H_kv, int q_len, int D, int N_max, std::vector<int> lens,
                              int page_size = 0);

/// Empty when shape s is valid; otherwise one sentence saying what is wrong (H_q not a multiple of
/// H_kv, a length outside q_len..N_max, an unsupported D, q_len or page size, a cache too large).
std::string invalid_reason(const DecodeShape& s);
/// Empty when every entry of the block table (B × max_pages) the sequences use names a page of a
/// pool of `pool_pages` pages; otherwise which entry points outside the pool.
std::string invalid_table_reason(const DecodeShape& s, const std::vector<int>& table, int pool_pages);

/// How the cache is cut: splits of `chunk` keys (a multiple of the kernel's B_c); the grid has
/// `splits` blocks per query-head group, at least the most any sequence needs (splits_of).
struct SplitPlan {
    int chunk = 1;
    int splits = 1;
};

/// The split heuristic (README, "How many splits"): give every SM one block's equal share of the
/// keys. With W = Σ_b groups·lens[b] key rows to read and `slots` SMs, chunk = W / slots rounded
/// up to B_c, at least kMinChunkTiles·B_c (a split must outweigh its pipeline fill and merge), and
/// one split when that covers the longest sequence; if the rounding to whole tiles leaves more
/// blocks than `slots`, the smallest chunk of whole tiles that fits them. `groups` = blocks per sequence and split
/// (query-head groups × row blocks). More blocks per SM than one measured slower (README's sweep),
/// and so did a floor of 1024 keys for kernels 3, 4 and paged caches at N = 4096 and 8192.
SplitPlan plan_splits(const DecodeShape& s, int groups, int Bc, int slots);
/// The blocks per SM the heuristic plans for: one, but two for kernel 6, whose barrier-bound
/// conversion of each tile a second block hides (README, step 6: measured at 16 to 256 splits).
constexpr int blocks_per_sm(int variant) { return variant == kFp8 ? 2 : 1; }
constexpr int kMinChunkTiles = 4;
/// A plan with `chunk` keys per split (rounded up to B_c); grid width = the most splits needed.
SplitPlan plan_with_chunk(const DecodeShape& s, int chunk, int Bc);
/// About n splits for the longest sequence: chunk = ⌈(max len − q_len + 1) / n⌉ rounded up to B_c.
SplitPlan plan_with_splits(const DecodeShape& s, int n, int Bc);

/// Blocks per sequence and split of `variant` (query-head groups × 16-row blocks).
int groups_per_split(int variant, const DecodeShape& s);
/// Query heads one block holds: g from variant 3 on, else 1.
int heads_per_block(int variant, const DecodeShape& s);

/// Variant 5's tile candidates (--sweep): "4 warps, 3 stages" ...; tuned_candidate() is the default.
std::vector<std::string> tuning_candidates();
int tuned_candidate();
/// Keys per K/V tile (B_c) of a variant (candidate −1: the default).
int block_keys(int variant, int candidate = -1);

/// Empty when `variant` can run shape s (variant 4 needs a paged cache, 1–3 a contiguous one).
std::string unsupported_reason(int variant, const DecodeShape& s, int candidate = -1);

/// One run of the program: `variant` on the cache stored with `page_size` tokens a page (0:
/// contiguous), tile candidate `candidate` (−1: the default); with `splits` > 0 about that many
/// splits (plan_with_splits), else the variant's own plan.
struct ProgramRun {
    int variant, page_size, candidate, splits;
};
/// --sweep: variant 5's candidates on the contiguous cache, each with the heuristic's plan, then
/// at 1, 2, 4, … 256 splits, as long as each count gives a plan of its own.
std::vector<ProgramRun> sweep_runs(const DecodeShape& s);
/// --ladder: variants 1, 2, 3, 5 (with `candidate`) and 6 on the contiguous cache, 4 on pages of
/// `page_size` tokens, then 5 on pages of each of `page_sizes` (0: none).
std::vector<ProgramRun> ladder_runs(int page_size, const std::vector<int>& page_sizes, int candidate);
/// Empty when every run can go ahead on shape s; else why the first that cannot does not
/// (unsupported_reason with the run's page size). Known before any device is looked at.
std::string runs_error(const DecodeShape& s, const std::vector<ProgramRun>& runs);

/// The arrays of one decoding step (device arrays for decode, host arrays for decode_emulated).
template <class T>
struct DecodeArrays {
    const T* Q;
    const T* K;            ///< contiguous cache or page pool (variants 1–5)
    const T* V;
    const std::uint8_t* K8;  ///< variant 6: the cache in e4m3, same layout
    const std::uint8_t* V8;
    const float* K_scale;    ///< variant 6: (B, H_kv) scales of K and of V
    const float* V_scale;
    const int* table;      ///< block table (paged), else unused
    const int* lens;       ///< B lengths
    T* O;
    float* L;
    float* O_part;         ///< rows · plan.splits · D floats (when plan.splits > 1)
    float* L_part;         ///< rows · plan.splits floats
    int* counters;         ///< kernel 5: rows() ints, zero before the first launch (each launch leaves them zero)
};

/// Floats of O_part (and of L_part) a plan needs.
std::size_t partial_floats(const DecodeShape& s, const SplitPlan& plan);
std::size_t partial_rows(const DecodeShape& s, const SplitPlan& plan);

/// The plan a variant uses on this GPU: one split for variant 1; plan_splits with the number of
/// its blocks the GPU holds at once (occupancy calculator) otherwise.
SplitPlan default_plan(int variant, const DecodeShape& s, int candidate = -1);

/// Runs one decoding step: O, L for the new tokens (and the partials, then the combine, when
/// plan.splits > 1: a second kernel for variants 2–4, the last block of each group for 5). Shape, plan and variant must be valid (invalid_reason, unsupported_reason);
/// otherwise it prints why and exits 2. The kernels go on `stream` (0: the legacy default stream),
/// so that a whole step can be captured in a CUDA graph (model_step.h).
template <class T>
void decode(int variant, const DecodeShape& s, const DecodeArrays<T>& a, const SplitPlan& plan, int candidate = -1,
            cudaStream_t stream = 0);

/// The same kernels on the CPU emulator (common/tensor_core/emulator.h), host arrays.
template <class T>
void decode_emulated(int variant, const DecodeShape& s, const DecodeArrays<T>& a, const SplitPlan& plan,
                     int candidate = -1);

/// Appends the new tokens' K_new, V_new (B, H_kv, q_len, D) to the cache (contiguous, or paged
/// through `table` when s.paged()) at positions lens[b] − q_len .. lens[b] − 1. Device arrays, on `stream`.
template <class T>
void append_kv(const DecodeShape& s, const T* K_new, const T* V_new, T* K, T* V, const int* table, const int* lens,
               cudaStream_t stream = 0);
/// The same on the emulator, host arrays.
template <class T>
void append_kv_emulated(const DecodeShape& s, const T* K_new, const T* V_new, T* K, T* V, const int* table,
                        const int* lens);

/// Step 6: appends the new tokens (16-bit, as above) to an e4m3 cache, each element quantized with
/// its (sequence, KV head)'s scale K_scale or V_scale (B, H_kv): e4m3(x / s), saturated at ±448. On `stream`.
template <class T>
void append_fp8(const DecodeShape& s, const T* K_new, const T* V_new, std::uint8_t* K8, std::uint8_t* V8,
                const float* K_scale, const float* V_scale, const int* table, const int* lens, cudaStream_t stream = 0);
/// The same on the emulator, host arrays.
template <class T>
void append_fp8_emulated(const DecodeShape& s, const T* K_new, const T* V_new, std::uint8_t* K8, std::uint8_t* V8,
                         const float* K_scale, const float* V_scale, const int* table, const int* lens);

/// Empty when the device runs the kernels (compute capability 8.0+), else why not.
std::string device_unsupported_reason();

// ---- CPU (cpu_mirror.cpp) ------------------------------------------------------------------------

/// float64 reference for the listed rows of O (row = (b·H_q + h)·q_len + i): O (rows.size() × D)
/// and L. K, V are the logical cache (B, H_kv, N_max, D) as floats (what the kernels read).
void decode_reference_rows(const DecodeShape& s, const float* Q, const float* K, const float* V,
                           const std::vector<std::size_t>& rows, double* O, double* L);

/// The CPU mirror of the split/merge and of the paged addressing: for every row, each split's
/// online softmax over tiles of B_c keys (partial O_s normalized, L_s), then chapter 2's merge of
/// the splits exactly as combine_kernel does it. K, V are the cache as stored: contiguous, or the
/// page pool read through `table` when s.paged(). With T = float nothing is rounded; with 16 bits
/// P̃ is rounded to TP (the products' type) before P̃·V and O to T at the end, as in the kernels;
/// with TP ≠ T (kernel 6 on bf16: products in fp16) Q is rounded to TP too.
/// Only the listed rows are computed: O is rows.size() × D, L rows.size() (all_rows(s): every row).
template <class T, class TP = T>
void mirror_decode(const DecodeShape& s, const SplitPlan& plan, int Bc, const float* Q, const float* K,
                   const float* V, const int* table, const std::vector<std::size_t>& rows, float* O, float* L);
/// 0, 1, …, rows − 1.
std::vector<std::size_t> all_rows(const DecodeShape& s);

/// The 2× rule on n rows: the kernel's max abs error and relative L2 error against float64, for O
/// and for L, are at most twice the mirror's (same math, same 16-bit roundings) plus a floor of
/// fp32 round-off (O: 2⁻²⁰·max|V|; L: D·2⁻²²·max(1, |L|); chapter 7 explains the floors).
/// NaN or Inf never pass.
struct RuleCheck {
    bool ok = false;
    std::string text;  ///< two lines, O and L, with the numbers compared
    double err_O = 0, err_L = 0, mirror_O = 0, mirror_L = 0;
};
RuleCheck low_precision_rule(const DecodeShape& s, std::size_t n, const float* O, const float* L,
                             const double* O_ref, const double* L_ref, const float* O_mirror,
                             const float* L_mirror, double max_abs_V);

/// A paged copy of a logical cache (B, H_kv, N_max, D): pool pages shuffled by `seed` (a random
/// permutation of all B·max_pages pages), the block table that finds them, and pool rows no
/// sequence owns filled with `fill` (NaN: a read of them shows).
struct PagedCopy {
    std::vector<float> K, V;  ///< the pool (pool_pages, H_kv, P, D)
    std::vector<int> table;   ///< (B, max_pages)
};
PagedCopy make_paged_copy(const DecodeShape& s, const std::vector<float>& K, const std::vector<float>& V,
                          std::uint64_t seed, float fill);

}  // namespace ch10
