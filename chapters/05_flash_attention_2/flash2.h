/// @file flash2.h
/// @brief Chapter 5, FlashAttention-2 forward: what the program, the tests and later chapters call.
#pragma once

#include <cstddef>
#include <string>

#include "../../common/shape.h"

namespace ch5 {

/// The kernel variants of this chapter (kernels.cu describes each one).
enum Variant : int {
    kReadable = 1,  ///< one thread per query row, the algorithm as written
    kTuned = 2,     ///< 256 threads per query tile, register tiles, K/V loads overlapped with compute
};

/// Empty when `variant` can run head dimension D; otherwise why not (one sentence).
std::string unsupported_reason(int variant, int D);

/// The tile sizes a kernel uses: B_r query rows by B_c keys.
struct Tiles {
    int Br, Bc;
};

/// The tiles `variant` uses for head dimension D on a device allowing `smem_optin_bytes` of shared
/// memory per block (variant 2 takes the largest tile that fits).
Tiles tiles(int variant, int D, std::size_t smem_optin_bytes);

/// O = softmax(Q Kᵀ·scale) V and L = rowwise logsumexp for device arrays in the layout of shape.h,
/// on the default stream. Exits with a message if the shape is unsupported.
void forward(int variant, const fa::AttnShape& s, const float* Q, const float* K, const float* V,
             float* O, float* L);

/// The optimization ladder from a plain register-tiled kernel (step 1) to variant 2 (the last step).
int ladder_steps();
/// What step `step` (1-based) adds.
const char* ladder_step_name(int step);
/// Runs ladder step `step` (1-based); same contract as forward(). The ladder kernels need D ≤ 128.
void forward_ladder_step(int step, const fa::AttnShape& s, const float* Q, const float* K,
                         const float* V, float* O, float* L);

/// CPU mirror of the tiled algorithm (Algorithm 1 of FlashAttention-2) with tiles B_r × B_c, in
/// float32 like the kernels, on host arrays.
void forward_cpu_mirror(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                        float* O, float* L, Tiles t);

}  // namespace ch5
