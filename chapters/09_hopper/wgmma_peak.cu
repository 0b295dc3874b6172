// Chapter 9: the speed of light of this chapter's kernels, as chapter 7's mma_peak.cu is of its
// own. Every FLOP of steps 1–6 is a wgmma; this kernel issues nothing else (operands read from
// shared memory through the descriptors the kernels use, no TMA, no softmax), so its rate is the
// most the instruction gives on this GPU. The shape is m64n128k16, that of the S product at
// B_c = 128 (and of P̃·V at D = 128).
#include <cuda_runtime.h>

#include <cstdint>

#include "../../common/peak.cuh"
#include "kernel/hopper.cuh"
#include "chapter9.h"

namespace ch9 {
namespace {

constexpr int kPeakWarpgroups = 2;  // per block, as the consumers of steps 3–6
constexpr int kPeakThreads = 128 * kPeakWarpgroups;
constexpr int kPeakN = 128;       // wgmma m64nNk16
constexpr int kPeakKSteps = 4;    // 64 columns of A and B: one 128-byte swizzle block each
constexpr int kPeakChains = 2;    // independent accumulators per warpgroup
constexpr int kPeakIters = 1024;  // groups of kPeakChains · kPeakKSteps wgmmas per warpgroup

/// Each warpgroup runs kPeakChains accumulators of 64 × kPeakN through kPeakIters groups of
/// kPeakKSteps back-to-back wgmmas (the k-steps of a 64-deep product, as issue_s does), keeping
/// at most two groups in flight (wgmma.wait_group 1). A (64 × 64) and B (kPeakN × 64, K-major
/// like K_j) are written once to shared memory in the 128-byte swizzle; the sums are written out
/// so that no wgmma is dead code.
template <class T>
__global__ void __launch_bounds__(kPeakThreads, 1) wgmma_peak_kernel(float* out) {
#if FA_SM90A
    using namespace tc::hopper;
    // 1024-byte aligned: the swizzle's period, so the descriptors' base-offset field stays 0
    __shared__ __align__(1024) uint16_t A[64 * kAtomCols];
    __shared__ __align__(1024) uint16_t B[kPeakN * kAtomCols];
    // High byte 0x38 in each element: bf16 values near 2^-15, fp16 values in [0.5, 1): finite,
    // non-zero, and sums that stay far from overflow. Where each one lands does not matter.
    for (int i = int(threadIdx.x); i < (64 + kPeakN) * kAtomCols; i += kPeakThreads) {
        const uint16_t bits = uint16_t(0x3800u | ((uint32_t(i) * 37u) & 0xFFu));
        if (i < 64 * kAtomCols) A[i] = bits;
        else B[i - 64 * kAtomCols] = bits;
    }
    fence_proxy_async();  // ordinary stores, read by wgmma through the async proxy
    __syncthreads();

    const uint32_t a = smem_u32(A), b = smem_u32(B);
    float acc[kPeakChains][kPeakN / 8][4] = {};
    for (int it = 0; it < kPeakIters; ++it) {
        // Before the first group: the zeros were written by ordinary instructions. Before the
        // others ptxas wants one too: without it, it injects its own (info C7519).
        wgmma_fence();
        #pragma unroll
        for (int c = 0; c < kPeakChains; ++c)
            #pragma unroll
            for (int kk = 0; kk < kPeakKSteps; ++kk)
                wgmma_ss<T, 0, kPeakN>(acc[c], kmajor_desc(a + kmajor_kstep_offset(kk, 64)),
                                       kmajor_desc(b + kmajor_kstep_offset(kk, kPeakN)), 1);
        wgmma_commit();
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
    float sum = 0.0f;
    #pragma unroll
    for (int c = 0; c < kPeakChains; ++c) {
        touch_accumulators<kPeakN / 8>(acc[c]);
        #pragma unroll
        for (int i = 0; i < kPeakN / 8; ++i) sum += acc[c][i][0] + acc[c][i][1] + acc[c][i][2] + acc[c][i][3];
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
#else
    __trap();  // not sm_90a: callers check device_unsupported_reason first
#endif
}

}  // namespace

template <class T>
double wgmma_tflops(int repeat) {
    const double wgmmas_per_block = double(kPeakWarpgroups) * kPeakChains * kPeakKSteps * kPeakIters;
    return fa::peak_tflops(wgmma_peak_kernel<T>, kPeakThreads, wgmmas_per_block * 2.0 * 64 * kPeakN * 16,
                           "wgmma m64n128k16 peak", repeat);
}

template double wgmma_tflops<__half>(int);
template double wgmma_tflops<__nv_bfloat16>(int);

}  // namespace ch9
