// Chapter 9: the speed of light of this chapter's kernels. Every FLOP of steps 1–5 is a wgmma of
// 64 × 128 × 16 (S) or 64 × D × 16 (O); this kernel issues the S shape and nothing else (operands
// in shared memory, no softmax, no copies), so its rate is the most the steps can reach.
#include <cuda_runtime.h>

#include <cstdint>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/gpu_timer.h"
#include "chapter9.h"
#include "kernel/flash_forward.cuh"

namespace ch9 {
namespace {

constexpr int kPeakWarpgroups = 2;
constexpr int kPeakIters = 2048;

/// Each warpgroup repeats S = Q Kᵀ of 64 × 128 × 128 (8 wgmmas, one group) on a 64-row slice of a
/// 128 × 128 tile, keeping one group in flight while it issues the next. The tiles hold small
/// values made from the thread index; the sums are written out so that no wgmma is dead code.
template <class T>
__global__ void __launch_bounds__(128 * kPeakWarpgroups, 1) wgmma_peak_kernel(float* out) {
#if CH9_SM90A
    extern __shared__ unsigned char smem_raw[];
    T* sQ = reinterpret_cast<T*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t(1023));
    T* sK = sQ + 128 * 128;
    for (int e = threadIdx.x; e < 2 * 128 * 128; e += blockDim.x) sQ[e] = T(float((e * 37) % 17) * (1.0f / 64));
    fence_proxy_async();
    __syncthreads();
    const int wg = threadIdx.x / 128;
    float s[64];
#pragma unroll
    for (int e = 0; e < 64; ++e) s[e] = 0.f;
    for (int it = 0; it < kPeakIters; ++it) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 8; ++kk)
            wgmma_ss<T, 128>(s, k_major_descriptor(smem_u32(sQ), 128, 64 * wg, kk),
                             k_major_descriptor(smem_u32(sK), 128, 0, kk), 1);
        wgmma_commit();
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
    fence_registers(s);
    float sum = 0.f;
#pragma unroll
    for (int e = 0; e < 64; ++e) sum += s[e];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
#else
    __trap();
#endif
}

}  // namespace

template <class T>
double wgmma_tflops(int repeat) {
    const fa::DeviceInfo dev = fa::device_info();
    const int threads = 128 * kPeakWarpgroups, smem = 2 * 128 * 128 * int(sizeof(T)) + 1024;
    fa::allow_dynamic_smem_once(wgmma_peak_kernel<T>, std::size_t(smem), "chapter 9 wgmma peak");
    const int blocks = dev.sm_count;  // one block per SM, like the attention kernels at D = 128
    fa::DeviceBuffer<float> out(std::size_t(blocks) * threads);
    fa::GpuTimer timer(false);  // nothing to flush: no memory traffic
    const fa::TimingStats t = timer.time(
        [&] {
            wgmma_peak_kernel<T><<<blocks, threads, smem>>>(out.get());
            CUDA_CHECK_LAUNCH();
        },
        repeat);
    const double flops = double(blocks) * kPeakWarpgroups * kPeakIters * 8 * (2.0 * 64 * 128 * 16);
    fa::print_timing("wgmma m64n128k16 peak", t, flops, 0);
    return flops / (t.median_ms * 1e-3) / 1e12;
}

template double wgmma_tflops<__half>(int);
template double wgmma_tflops<__nv_bfloat16>(int);

}  // namespace ch9
