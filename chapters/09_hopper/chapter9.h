/// @file chapter9.h
/// @brief Chapter 9, the FlashAttention forward on Hopper (wgmma, TMA, warp specialization,
/// pingpong, intra-warpgroup overlap, TMA store): what the program and the tests call.
///
/// Same problem as chapter 7 (whose validation, CPU mirror and 2× rule it reuses): Q, K, V, O
/// 16-bit (T = __half or __nv_bfloat16), L fp32, layout of shape.h; D = 64 and 128; any N ≥ 1;
/// causal or not. The kernels are built for sm_90a only and need a GPU of compute capability 9.0.
#pragma once

#include <string>
#include <vector>

#include "../../common/attention.h"
#include "../../common/device.h"
#include "../../common/shape.h"
#include "../07_tensor_cores/chapter7.h"

namespace ch9 {

/// The steps of the ladder (kernel/hopper_config.h says what each one adds).
enum Variant : int {
    kWgmma = 1,        ///< wgmma from swizzled shared memory, P̃ in registers; cp.async loads
    kTma = 2,          ///< + TMA loads into an mbarrier ring (three stages)
    kSpecialized = 3,  ///< + producer warpgroup, consumer warpgroups, setmaxnreg
    kPingpong = 4,     ///< + the consumers take turns at the tensor cores (named barriers)
    kOverlap = 5,      ///< + the softmax under the warpgroup's own P̃·V (wgmma.wait_group 1)
    kTuned = 6,        ///< + O by TMA store; stages, consumers and schedule tuned per head dim
};
constexpr int kFirstVariant = kWgmma;
constexpr int kLastVariant = kTuned;

/// Short name of a variant, e.g. "2-tma" (printouts and result files).
std::string variant_name(int variant);

/// The tiles of a variant at head dim D.
struct Tiles {
    int Br, Bc, stages;
    int consumers;  ///< consumer warpgroups (of 64 query rows each)
    bool turns;       ///< whether they take turns at the tensor cores (steps 4–6) or run free
    bool persistent;  ///< step 6: a block per SM looping over the work items, or a block per item
    int threads, smem_bytes;
    /// "B_r x B_c = 128 x 128, 3 stages, 2 consumers in turns, 384 threads" (", persistent" before
    /// the threads when it is)
    std::string str() const;
    /// The same in a few characters, for the name of a step 6 candidate in printouts and result
    /// files: "s3-2wg-turns", "s3-3wg-free", "s3-2wg-turns-persistent" (stages, consumer warpgroups,
    /// schedule)
    std::string tag() const;
};
/// The tiles `variant` uses at head dim D; for step 6, candidate `candidate` of
/// tuning_candidates(D) (−1: the default).
Tiles tiles(int variant, int D, int candidate = -1);

/// Step 6's tile candidates at head dim D (kernel/hopper_config.h, Step6Tiles; empty for a D the
/// kernels are not compiled for); tuned_candidate(D) indexes the default.
std::vector<Tiles> tuning_candidates(int D);
/// Index in tuning_candidates(D) of the candidate step 6 uses by default.
int tuned_candidate(int D);

/// Empty when `variant` (and for step 6, `candidate`) can run shape `s`; otherwise why not.
std::string unsupported_reason(int variant, const fa::AttnShape& s, int candidate = -1);

/// Empty when device `d` can run the kernels (compute capability 9.0: sm_90a code runs on nothing
/// else); otherwise one sentence saying why not.
std::string device_unsupported_reason(const fa::DeviceInfo& d);
/// The same for any sm_90a kernels; `whose` names them in the sentence ("chapter 11's").
std::string sm90a_unsupported_reason(const fa::DeviceInfo& d, const char* whose);

/// Registers, spills, threads, shared memory and blocks per SM of a variant (as chapter 7's).
template <class T>
fa::KernelResources kernel_resources(int variant, int D, int candidate = -1);

/// The rate of wgmma.mma_async m64n128k16 alone on this GPU (TF/s, median of `repeat` runs): both
/// operands in shared memory through descriptors, fp32 accumulators, two warpgroups per block, one
/// full wave of blocks (wgmma_peak.cu). Every FLOP of steps 1–6 is a wgmma, so this is the most
/// they can reach. Needs compute capability 9.0 (device_unsupported_reason).
template <class T>
double wgmma_tflops(int repeat);

/// O = softmax(Q Kᵀ·scale) V and L = rowwise logsumexp (natural log) on the default stream, for
/// device arrays (16-byte aligned, as cudaMalloc gives); shape, candidate and device must be
/// supported.
template <class T>
void forward(int variant, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L,
             int candidate = -1);

}  // namespace ch9
