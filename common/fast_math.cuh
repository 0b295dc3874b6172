/// @file fast_math.cuh
/// @brief Device math that trades the last bits of accuracy (or denormals) for fewer instructions.
#pragma once

#include <cuda_runtime.h>

namespace fa {

/// 2^x by the hardware approximation alone: one MUFU.EX2 (relative error about 2^-22, results
/// below 2^-126 flushed to 0, 2^-inf = 0). exp2f adds range handling for denormal results around it.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

}  // namespace fa
