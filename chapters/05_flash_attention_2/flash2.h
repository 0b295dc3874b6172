/// @file flash2.h
/// @brief Chapter 5, FlashAttention-2 forward: what the program, the tests and later chapters call.
#pragma once

#include <string>

#include "../../common/shape.h"

namespace ch5 {

/// The kernel variants of this chapter (kernels.cu lists what each one does).
enum Variant : int {
    kReadable = 1,  ///< one thread per query row, the algorithm as written
    kTuned = 2,     ///< a warp per query tile, register tiles, double-buffered K/V
};

/// Empty when `variant` can run head dimension D; otherwise why not (one sentence).
std::string unsupported_reason(int variant, int D);

/// O = softmax(Q Kᵀ·scale) V and L = rowwise logsumexp for device arrays in the layout of shape.h,
/// on the default stream. The shape must be supported (see unsupported_reason).
void forward(int variant, const fa::AttnShape& s, const float* Q, const float* K, const float* V,
             float* O, float* L);

/// The tile sizes (B_r, B_c) `variant` uses for head dimension D.
struct Tiles {
    int Br, Bc;
};
Tiles tiles(int variant, int D);

/// CPU mirror of the tiled algorithm (Algorithm 1 of FlashAttention-2) with tiles B_r × B_c, in
/// float32 like the kernels, on host arrays.
void forward_cpu_mirror(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                        float* O, float* L, Tiles t);

}  // namespace ch5
