/// @file float4.cuh
/// @brief float4 helpers of the CUDA-core kernels (chapters 4 and 5) that read a 16-byte chunk one
/// component at a time.
#pragma once

#include <cuda_runtime.h>

namespace fa {

/// Component k (0..3) of a float4. In a loop over k that is unrolled, k is a constant and this
/// is a register; a float array indexed by k could land in local memory instead.
__device__ __forceinline__ float component(const float4& v, int k) {
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

}  // namespace fa
