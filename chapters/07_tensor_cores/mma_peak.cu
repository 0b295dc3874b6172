// Chapter 7: the speed of light of this chapter's kernels. Every FLOP of variants 2–6 is an
// mma.sync.m16n8k16; this kernel does nothing else (operands in registers, no shared memory, no
// softmax), so its rate is the most any of them can reach on this GPU. On Hopper it is well below
// the cuBLAS GEMM rate of --bench, which runs on wgmma (README, "How far mma.sync can go").
#include <cuda_runtime.h>

#include <cstdint>

#include "../../common/peak.cuh"
#include "chapter7.h"
#include "../../common/tensor_core/ptx.cuh"

namespace ch7 {
namespace {

constexpr int kPeakThreads = 128;
constexpr int kChains = 8;  // independent accumulators per warp: enough to cover the mma latency
constexpr int kIters = 4096;

/// Each warp runs kChains independent chains of kIters mma.sync on register operands. Operands
/// come from the thread index (not constants the compiler could fold); the sums are written out so
/// that no mma is dead code.
template <class T>
__global__ void __launch_bounds__(kPeakThreads) mma_peak_kernel(float* out) {
#if FA_TC_SM80
    const uint32_t x = threadIdx.x * 0x9E3779B9u;
    // High byte 0x38 in each 16-bit half: bf16 values near 2^-15, fp16 values in [0.5, 1): finite,
    // non-zero, and sums that stay far from overflow.
    const uint32_t bits = 0x38003800u | (x & 0x00FF00FFu);
    uint32_t a[4] = {bits, bits ^ 0x10001u, bits ^ 0x20002u, bits ^ 0x30003u};
    uint32_t b[2] = {bits ^ 0x40004u, bits ^ 0x50005u};
    float acc[kChains][4] = {};
    for (int it = 0; it < kIters; ++it)
        #pragma unroll
        for (int c = 0; c < kChains; ++c) tc::mma_m16n8k16<T>(acc[c], a, b);
    float sum = 0.0f;
    #pragma unroll
    for (int c = 0; c < kChains; ++c) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
#else
    __trap();  // compute capability < 8.0: callers check device_unsupported_reason first
#endif
}

}  // namespace

template <class T>
double mma_sync_tflops(int repeat) {
    const double flops_per_block = double(kPeakThreads / 32) * kChains * kIters * 2.0 * 16 * 8 * 16;
    return fa::peak_tflops(mma_peak_kernel<T>, kPeakThreads, flops_per_block, "mma.sync m16n8k16 peak", repeat);
}

template double mma_sync_tflops<__half>(int);
template double mma_sync_tflops<__nv_bfloat16>(int);

}  // namespace ch7
