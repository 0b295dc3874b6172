/// @file chapter11.h
/// @brief Chapter 11, the FlashAttention-2 backward (Algorithm 2) on Hopper: wgmma, TMA, warp
/// specialization, dQ by TMA reduce-add, overlap. What the program and the tests call.
///
/// Same problem and tensors as chapter 8 (whose preprocess, dQ conversion, workspace, CPU mirror and
/// 2× rule it reuses): Q, K, V, O, dO, dQ, dK, dV 16-bit (T = __half or __nv_bfloat16), L fp32, the
/// layout of shape.h; D = 64 and 128; any N ≥ 1; causal or not. The kernels are built for sm_90a
/// only and need a GPU of compute capability 9.0 (as chapter 9's).
#pragma once

#include <string>

#include "../../common/attention.h"
#include "../../common/device.h"
#include "../../common/shape.h"
#include "../08_tensor_core_backward/chapter8.h"

namespace ch11 {

/// The steps of the ladder (kernel/bwd_hopper_config.h says what each one adds).
enum Variant : int {
    kWgmma = 1,        ///< wgmma from swizzled shared memory, Pᵀ and dSᵀ in registers; cp.async loads
    kTma = 2,          ///< + TMA loads of Q_i, dO_i, L_i, D_i into an mbarrier ring
    kSpecialized = 3,  ///< + a producer warpgroup, two consumer warpgroups, setmaxnreg
    kDqTma = 4,        ///< + dQ staged in shared memory and added by TMA reduce-adds of one warp
    kOverlap = 5,      ///< + the exponentials and dSᵀ under the products (wgmma.wait_group 1)
    kDeterministic = 6,  ///< + dQ's adds in a fixed order: the same dQ bit for bit in every run
};
constexpr int kFirstVariant = kWgmma;
constexpr int kLastVariant = kDeterministic;

/// Short name of a variant, e.g. "2-tma" (printouts and result files).
std::string variant_name(int variant);

/// The tiles of a variant at head dim D.
struct Tiles {
    int Br, Bc, stages, threads, smem_bytes;
    int line15;  ///< where line 15 sits among the products (kernel/bwd_hopper_config.h, Line15)
    /// "B_c x B_r = 128 x 64, 2 stages, 256 threads, 180.0 KB shared memory" (", line 15 under the
    /// next S^T" or ", line 15 before line 16" for step 5's other candidates)
    std::string str() const;
};
/// The tiles `variant` uses at head dim D; for step 5, candidate `candidate` of
/// tuning_candidates(D) (−1: the default).
Tiles tiles(int variant, int D, int candidate = -1);

/// Step 5's candidates at head dim D (kernel/bwd_hopper_config.h, Step5Tiles; empty for a D the
/// kernels are not compiled for); tuned_candidate(D) indexes the default.
std::vector<Tiles> tuning_candidates(int D);
int tuned_candidate(int D);

/// Empty when `variant` (and for step 5, `candidate`) can run shape `s`; otherwise why not.
std::string unsupported_reason(int variant, const fa::AttnShape& s, int candidate = -1);

/// Empty when device `d` can run the kernels (compute capability 9.0); otherwise why not.
std::string device_unsupported_reason(const fa::DeviceInfo& d);

/// Registers, spills, threads, shared memory and blocks per SM of a variant's dK/dV kernel.
template <class T>
fa::KernelResources kernel_resources(int variant, int D, int candidate = -1);

/// Step 6's turn counters of dQ's adds: one per (head, query tile, consumer warpgroup), O(N).
std::size_t dq_counter_ints(const fa::AttnShape& s);

/// The whole backward on the default stream: chapter 8's preprocess (D_i, L·log2 e, the dQ
/// workspace zeroed; step 6: the counters too), this chapter's dK/dV kernel (which adds dQ into the
/// workspace), chapter 8's conversion of the workspace to dQ. The workspace is chapter 8's for
/// --dq atomic (ch8::workspace_floats(s, ch8::kAtomic)); step 6 also takes dq_counter_ints(s) ints
/// (`dq_counters`, unused before step 6). Exits with a message if the shape is unsupported.
template <class T>
void backward(int variant, const fa::AttnShape& s, const ch8::BwdTensors<T>& t, const ch8::Workspace& w,
              int candidate = -1, int* dq_counters = nullptr);

/// The parts of backward(), for timing each on its own: 0 preprocess and zeroing, 1 dK/dV kernel,
/// 2 the dQ conversion.
template <class T>
void backward_part(int part, int variant, const fa::AttnShape& s, const ch8::BwdTensors<T>& t,
                   const ch8::Workspace& w, int candidate = -1, int* dq_counters = nullptr);

}  // namespace ch11
