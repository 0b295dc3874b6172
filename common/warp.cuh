/// @file warp.cuh
/// @brief Reductions across a warp and across a block, the building blocks of every row softmax.
#pragma once

#include <cuda_runtime.h>

namespace fa {

/// Max over the 32 lanes of a warp; every lane gets the result (butterfly of xor shuffles).
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

/// Sum over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

/// Max over a group of `Width` consecutive lanes (Width a power of two ≤ 32); all lanes of the group
/// get the group's result.
template <int Width>
__device__ __forceinline__ float group_max(float v) {
    for (int offset = Width / 2; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

/// Sum over a group of `Width` consecutive lanes (Width a power of two ≤ 32).
template <int Width>
__device__ __forceinline__ float group_sum(float v) {
    for (int offset = Width / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

/// Max over the whole block (blockDim.x a multiple of 32, at most 1024). `scratch` is 32 floats of
/// shared memory; the function synchronizes the block and may be called again right after.
__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

/// Sum over the whole block; same contract as block_max.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

}  // namespace fa
