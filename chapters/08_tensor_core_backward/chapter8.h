/// @file chapter8.h
/// @brief Chapter 8, FlashAttention-2 backward (Algorithm 2) on tensor cores, fp16/bf16 in and out,
/// fp32 accumulation: what the program, the tests and later chapters call.
///
/// Tensors in the layout of shape.h; Q, K, V, O, dO, dQ, dK, dV in T (__half or __nv_bfloat16),
/// L in fp32 (chapter 7's forward writes O and L). Head dims 64 and 128; any N ≥ 1; causal or
/// not; N_k ≠ N (the causal diagonal bottom-right) and H_kv < H K/V heads, whose dK, dV sum over
/// the query heads that read them (shape.h). The kernels need compute capability 8.0+
/// (ch7::device_unsupported_reason).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "../../common/attention.h"
#include "../../common/shape.h"
#include "../06_backward/flash2_backward.h"
#include "../07_tensor_cores/chapter7.h"
#include "kernel/bwd_config.h"

namespace ch8 {

/// The steps of the ladder (kernel/bwd_config.h says what each one changes).
enum Variant : int {
    kDirect = 1,     ///< mma.sync on fragments read pair by pair; Pᵀ, dSᵀ through shared memory
    kLdmatrix = 2,   ///< + ldmatrix (.trans) from XOR-swizzled tiles
    kCpAsync = 3,    ///< + cp.async double buffering of Q_i, dO_i, L_i, D_i
    kRegisters = 4,  ///< + Pᵀ, dSᵀ kept in registers as A operands
    kTuned = 5,      ///< + tiles per head dim (--sweep)
    kFa2Layout = 6,  ///< FA2's warp layout: 32-row warp tiles, Pᵀ and dSᵀ exchanged through shared memory
};
constexpr int kFirstVariant = kDirect;
constexpr int kLastVariant = kFa2Layout;

/// How dQ is accumulated (chapter 6's two ways).
enum DqStrategy : int {
    kAtomic = 1,  ///< the dK/dV kernel adds dS_ij K_j into an fp32 workspace with atomics
    kSplit = 2,   ///< a second kernel with Q_i outside and K_j inside (no atomics)
};
const char* strategy_name(int strategy);

/// "3-cp-async".
std::string variant_name(int variant);

/// The candidates of step 5 (or of step 6: variant kFa2Layout) for head dim D, as compiled for sm_90
/// and the emulator (dq_vec_run = dq_vec); tuned_candidate(D, variant) indexes the default.
std::vector<BwdTiles> tuning_candidates(int D, int variant = kTuned);
int tuned_candidate(int D, int variant = kTuned);
/// The name of candidate k of step 5 ("t0", "t1", ...: tuned) or step 6 ("f0", "f1", ...: FA2's
/// layout): the letter says the step, so two steps' candidates never share a name. "" for other
/// variants or k < 0.
std::string candidate_name(int variant, int k);
/// The step (kTuned or kFa2Layout) and index of a candidate name ("t9": 5, 9; "f6": 6, 6); false if
/// `name` is not of that form (whether the index exists for a head dim is unsupported_reason's job).
bool parse_candidate(const std::string& name, int* variant, int* k);
/// The tiles of `variant` (for kTuned and kFa2Layout: candidate `candidate`, −1 the default) as they run: with a
/// GPU, dq_vec_run is the dQ atomic width of the code the GPU runs (1 before sm_90); without one,
/// the emulator's (dq_vec).
BwdTiles tiles(int variant, int D, int candidate = -1);

/// Empty when (variant, candidate) can run shape s; otherwise why not, in one sentence.
std::string unsupported_reason(int variant, const fa::AttnShape& s, int candidate = -1);

/// Rows of each padded row vector (L·log2 e, D_i): N rounded up to a multiple of 128.
int padded_rows(int N);

/// The inputs and outputs of one backward (device arrays, or host arrays when emulated).
template <class T>
struct BwdTensors {
    const T *Q, *K, *V, *O, *dO;
    const float* L;
    T *dQ, *dK, *dV;
};

/// The backward's extra memory, all O(N): L·log2 e and D_i (padded_rows(N) floats per head each)
/// and, for kAtomic, the fp32 dQ workspace (B·H·N·D floats).
struct Workspace {
    float* L2;
    float* Di;
    float* dQacc;
};
/// Floats of the workspace (L2, Di, dQacc in that order, one allocation).
std::size_t workspace_floats(const fa::AttnShape& s, int strategy);
/// The three pointers into one allocation of workspace_floats(s, strategy) floats.
Workspace split_workspace(float* base, const fa::AttnShape& s, int strategy);

/// The whole backward on the default stream: preprocess, dK/dV kernel, and the dQ convert
/// (kAtomic) or dQ kernel (kSplit). Exits with a message if the shape is unsupported.
template <class T>
void backward(int variant, int strategy, const fa::AttnShape& s, const BwdTensors<T>& t, const Workspace& w,
              int candidate = -1);

/// The parts of backward(), for timing each on its own: 0 preprocess (and for kAtomic the
/// workspace zeroed), 1 dK/dV kernel, 2 the convert or dQ kernel.
template <class T>
void backward_part(int part, int variant, int strategy, const fa::AttnShape& s, const BwdTensors<T>& t,
                   const Workspace& w, int candidate = -1);

/// The same kernels run by the CPU emulator (common/tensor_core/emulator.h) on host arrays: small
/// shapes only (a few hundred rows), so that the tests check every variant without a GPU.
template <class T>
void backward_emulated(int variant, int strategy, const fa::AttnShape& s, const BwdTensors<T>& t,
                       const Workspace& w, int candidate = -1);

/// Registers, spills, shared memory and occupancy of the dK/dV kernel (atomic form) of a variant.
template <class T>
fa::KernelResources kernel_resources(int variant, int D, int candidate = -1);

// ---- the CPU mirror and the 2× rule (cpu_mirror.cpp) ---------------------------------------

/// The CPU mirror at the reference's sampled positions, with the kernels' rounding points and
/// the forward's O and L the kernels got (host copies, O as floats of T): D_i in fp32 from O, S and
/// dP in fp32, P and dS rounded to T before the products that take them, dQ, dK, dV accumulated in
/// fp32 and rounded to T at the end. Inputs (p, dO) already rounded to T. Outputs in the
/// reference's layout: dQ [all heads][rows][D], dK and dV [ref.heads][ref.key_rows][D]. Taking O
/// and L as given keeps the forward's own rounding out of the comparison: kernel and mirror differ
/// only in the backward's arithmetic.
template <class T>
void mirror_sampled(const fa::AttnProblem& p, const std::vector<float>& dO, const std::vector<float>& O,
                    const std::vector<float>& L, const ch6::SampledBackward& ref, std::vector<float>& dQ,
                    std::vector<float>& dK, std::vector<float>& dV);

/// The mirror's errors against float64 and the floors of the 2× rule, per output (dQ, dK, dV).
struct MirrorErrors {
    fa::Validation err[3];   ///< mirror vs float64
    double floor_abs[3];     ///< fp32 round-off of the kernels' other summation order (see cpu_mirror.cpp)
    double floor_rel[3];     ///< the same in the relative L2 metric
};
template <class T>
MirrorErrors mirror_errors(const fa::AttnProblem& p, const std::vector<float>& dO, const std::vector<float>& O,
                           const std::vector<float>& L, const ch6::SampledBackward& ref);

/// The 2× rule for dQ, dK, dV: each max abs and relative L2 error at most twice the mirror's plus
/// the floor; NaN/Inf never pass (ch7::rule_line for each).
ch7::RuleVerdict low_precision_rule(const ch6::BackwardCheck& kernel, const MirrorErrors& mirror);

/// A tolerance to report mismatches with (the rule's largest max-abs bound); the rule decides.
fa::Tolerance rule_tolerance(const MirrorErrors& mirror);

/// Prints the reference's sample and the mirror's errors (the baseline of the 2× rule).
void print_baseline(const ch6::SampledBackward& ref, const MirrorErrors& mirror);

/// A program's check of one backward's dQ, dK, dV (host copies, as floats): printed, with the 2×
/// rule's verdict, and the largest max-abs and relative L2 error of the three.
struct GradientVerdict {
    bool ok;
    double max_abs, rel_l2;
};
GradientVerdict check_gradients(const ch6::SampledBackward& ref, const MirrorErrors& mirror,
                                const std::vector<float>& dQ, const std::vector<float>& dK,
                                const std::vector<float>& dV);

}  // namespace ch8
