/// @file ring_kernels.cuh
/// @brief The small kernels and copies that the ring's forward (ring.cu) and backward
/// (backward.cu) share: conversions, row copies between chunk-shaped arrays, and fp32 sums of
/// partial results. Device code; included by the ring's .cu files only.
#pragma once

#include <cstddef>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../../common/check.h"

namespace ch12 {

// T <-> float on the device (fa::to_float and fa::from_float are host functions).
__device__ inline float element_to_float(__half x) { return __half2float(x); }
__device__ inline float element_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float element_to_float(float x) { return x; }
template <class T> __device__ T element_from_float(float x);
template <> __device__ inline __half element_from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 element_from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// Blocks of a grid-stride loop over n items, per_block items a block: at least 1, at most 65535.
inline unsigned grid_for(std::size_t n, std::size_t per_block) {
    const std::size_t g = (n + per_block - 1) / per_block;
    return unsigned(g < 65535 ? (g > 0 ? g : 1) : 65535);
}

/// Copies `rows` rows of every head from src (head stride src_n rows, starting at row src_row)
/// to dst (head stride dst_n rows, starting at dst_row): one 2-D copy, a head per line.
template <class E>
void copy_rows(E* dst, int dst_n, int dst_row, const E* src, int src_n, int src_row, int rows, std::size_t heads,
               int width) {
    const std::size_t w = std::size_t(width) * sizeof(E);
    CUDA_CHECK(cudaMemcpy2DAsync(dst + std::size_t(dst_row) * width, std::size_t(dst_n) * w,
                                 src + std::size_t(src_row) * width, std::size_t(src_n) * w, std::size_t(rows) * w,
                                 heads, cudaMemcpyDeviceToDevice, cudaStreamLegacy));
}

/// dst += src over `rows` rows of every head, in fp32 (the strides of copy_rows): a thread per value.
template <class E>
__global__ void add_rows_kernel(float* dst, int dst_n, int dst_row, const E* src, int src_n, int src_row, int rows,
                                std::size_t heads, int width) {
    const std::size_t per_head = std::size_t(rows) * std::size_t(width), n = heads * per_head;
    for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n; e += std::size_t(gridDim.x) * blockDim.x) {
        const std::size_t h = e / per_head, in_head = e % per_head;
        dst[(h * std::size_t(dst_n) + std::size_t(dst_row)) * std::size_t(width) + in_head] +=
            element_to_float(src[(h * std::size_t(src_n) + std::size_t(src_row)) * std::size_t(width) + in_head]);
    }
}

/// add_rows_kernel on the legacy default stream (where the ring computes).
template <class E>
void add_rows(float* dst, int dst_n, int dst_row, const E* src, int src_n, int src_row, int rows, std::size_t heads,
              int width) {
    add_rows_kernel<E><<<grid_for(heads * std::size_t(rows) * std::size_t(width), 256), 256>>>(
        dst, dst_n, dst_row, src, src_n, src_row, rows, heads, width);
    CUDA_CHECK_LAUNCH();
}

/// out = in rounded to T, n values.
template <class T>
__global__ void round_kernel(T* out, const float* in, std::size_t n) {
    for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n; e += std::size_t(gridDim.x) * blockDim.x)
        out[e] = element_from_float<T>(in[e]);
}

/// round_kernel on the legacy default stream.
template <class T>
void round_to_elements(T* out, const float* in, std::size_t n) {
    round_kernel<T><<<grid_for(n, 256), 256>>>(out, in, n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace ch12
