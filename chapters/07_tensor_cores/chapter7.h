/// @file chapter7.h
/// @brief Chapter 7, FlashAttention-2 forward on tensor cores (fp16/bf16 in, fp32 math): what the
/// program, the tests and later chapters call.
///
/// Q, K, V, O are 16-bit (T = __half or __nv_bfloat16), L is fp32, all in the layout of shape.h.
/// Head dims 32, 64, 96, 128 and 256 (head_dims()); any N ≥ 1; causal or not; kernels 2–6 also
/// N_k ≠ N (the causal diagonal bottom-right) and H_kv < H K/V heads (shape.h). The kernels need
/// compute capability 8.0+.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "../../common/attention.h"
#include "../../common/device.h"
#include "../../common/dtype.h"
#include "../../common/gpu_timer.h"
#include "../../common/low_precision_rule.h"
#include "../../common/shape.h"
#include "kernel/tile_config.h"

namespace ch7 {

/// The kernel variants: the steps of the ladder (kernel/flash_forward.cuh says what each one changes).
enum Variant : int {
    kWmma = 1,        ///< nvcuda::wmma fragments, S and P through shared memory
    kMmaSync = 2,     ///< mma.sync m16n8k16: S, P and O in registers, quad-shuffle row statistics
    kLdmatrix = 3,    ///< + ldmatrix (.trans for V) from XOR-swizzled shared memory
    kCpAsync = 4,     ///< + cp.async double-buffered K/V pipeline
    kExp2 = 5,        ///< + exp2 with the scale folded in, fewer rescales
    kTuned = 6,       ///< + tiles and warps per head dim, causal blocks heaviest first
};
constexpr int kFirstVariant = kWmma;
constexpr int kLastVariant = kTuned;

/// Short name of a variant, e.g. "3-ldmatrix-swizzle" (for printouts and result files).
std::string variant_name(int variant);

/// The head dims every variant is compiled for (32, 64, 96, 128, 256); others are rejected.
std::vector<int> head_dims();

/// Variant 6's search space for head dim D (empty for a D not in head_dims()); tuned_candidate(D)
/// indexes the default.
std::vector<TileConfig> tuning_candidates(int D);
/// Index in tuning_candidates(D) of the configuration variant 6 uses by default.
int tuned_candidate(int D);

/// The tiles `variant` uses for head dim D; for variant 6, candidate `candidate` of
/// tuning_candidates(D) (−1: the default).
TileConfig tiles(int variant, int D, int candidate = -1);

/// Dynamic shared memory (bytes) of the kernel (variant, D, candidate). A GPU whose opt-in limit
/// (fa::smem_per_block_optin) is smaller cannot run it: 99 KB on sm_86 and sm_89, less than some
/// D = 256 kernels need; the launch then stops with fa::allow_dynamic_smem_once's message.
int smem_bytes(int variant, int D, int candidate = -1);

/// Empty when `variant` (and for variant 6, `candidate`) can run shape `s`; otherwise why not.
std::string unsupported_reason(int variant, const fa::AttnShape& s, int candidate = -1);

/// Empty when device `d` can run the kernels (compute capability ≥ 8.0); otherwise why not.
std::string device_unsupported_reason(const fa::DeviceInfo& d);

/// What the compiler and the occupancy calculator say about the kernel of (variant, D, candidate).
template <class T>
fa::KernelResources kernel_resources(int variant, int D, int candidate = -1);

/// The rate of mma.sync.m16n8k16 alone on this GPU (TF/s, median of `repeat` runs): register
/// operands, independent accumulators, one full wave of blocks (mma_peak.cu). Every FLOP of
/// variants 2–6 is such an mma, so this is the most they can reach. Needs compute capability 8.0+.
template <class T>
double mma_sync_tflops(int repeat);

/// The dense-GEMM rate this GPU reaches (TF/s): cuBLAS cublasGemmEx, n = 8192, T in and out, fp32
/// accumulation, timed by `timer` (median of `repeat`, L2 flushed). The "% of GEMM" column is of this.
template <class T>
double gemm_tflops(fa::GpuTimer& timer, int repeat);

/// O = softmax(Q Kᵀ·scale) V and L = rowwise logsumexp (natural log) on the default stream, for
/// device arrays; the shape must be supported (unsupported_reason) and the device too.
template <class T>
void forward(int variant, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L,
             int candidate = -1);

/// The same kernels, run on the CPU by the emulator (emulator.h) on host arrays: the kernels' own
/// source executed lane by lane, thousands of times slower than a GPU (use shapes of a few hundred
/// rows), so that the tests check every variant without a GPU. Variant 1 uses an emulated wmma.
template <class T>
void forward_emulated(int variant, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O,
                      float* L, int candidate = -1);

/// CPU mirror of the kernels' arithmetic (Alg. 1 of FlashAttention-2) for query rows
/// [row_begin, row_end) of head bh: inputs as given (round them to T first), S and the softmax in
/// fp32, P̃ rounded to T before P̃·V, O accumulated in fp32 and rounded to T at the end, L in fp32.
/// With T = float nothing is rounded (the tiled algorithm alone). O and L point at the head's rows.
template <class T>
void mirror_rows(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                 std::size_t bh, int row_begin, int row_end, int Bc, float* O, float* L);

/// The low-precision baseline of one problem: the CPU mirror's error against the float64
/// reference on the rows fa::check_forward samples, and the absolute floors of the 2× rule.
///
/// The floors are fa::rule_floors (common/low_precision_rule.h says why the rule has them).
struct MirrorErrors {
    fa::ForwardCheck check;  ///< mirror vs float64 (O and L)
    double floor_O;          ///< 2⁻²⁰ · max|V|
    double floor_L;          ///< D · 2⁻²² · max(1, max|L|)
    double floor_rel;        ///< 2⁻²⁰: floor of O's relative L2 error
    double floor_rel_L;      ///< D · 2⁻²²: floor of L's relative L2 error
};

/// Runs the mirror with key tiles of B_c on the sampled rows of `p` (inputs already rounded to T).
template <class T>
MirrorErrors mirror_errors(const fa::AttnProblem& p, int Bc);

/// The errors and floors of a mirror's O and L (filled on the rows fa::check_forward samples): what
/// mirror_errors returns, for mirrors that compute those rows another way (chapter 12's ring).
MirrorErrors errors_of_mirror(const fa::AttnProblem& p, const std::vector<float>& O, const std::vector<float>& L);

/// Unit roundoff of T: 2⁻¹¹ (fp16), 2⁻⁸ (bf16), 2⁻²⁴ (float).
template <class T>
constexpr double unit_roundoff();
template <> constexpr double unit_roundoff<float>() { return 1.0 / 16777216.0; }
template <> constexpr double unit_roundoff<__half>() { return 1.0 / 2048.0; }
template <> constexpr double unit_roundoff<__nv_bfloat16>() { return 1.0 / 256.0; }

/// Verdict of the 2× rule: for O and L, the kernel's max abs error and relative L2 error against
/// float64 are at most twice the mirror's plus the floor; NaN/Inf never pass.
struct RuleVerdict {
    bool ok;
    std::string text;  ///< two lines, O and L, with the numbers compared
};
RuleVerdict low_precision_rule(const fa::ForwardCheck& kernel, const MirrorErrors& mirror);

/// Element-wise tolerance for fa::check_forward (which applies one tolerance to O and L): the
/// larger of the rule's two max-abs bounds. The rule itself (low_precision_rule) is the verdict.
fa::Tolerance rule_tolerance(const MirrorErrors& mirror);

}  // namespace ch7
