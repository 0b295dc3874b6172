// Chapter 9's two wgmma forms run alone, with the kernel's descriptors and layouts, so that a wrong
// descriptor shows up here, by operand, before it shows up as a wrong O (tests/chapter09_test.cpp).
#include <vector>

#include "../../common/check.h"
#include "../../common/device.h"
#include "building_blocks.h"
#include "kernel/flash_forward.cuh"

namespace ch9 {

namespace {

constexpr int kM = 64;         // one warpgroup's rows
constexpr int kSsN = 64, kSsK = 128;   // S-like: two 64-column chunks along k
constexpr int kRsK = 64, kRsN = 128;   // PV-like: two 64-column chunks along n (the leading offset)

/// The accumulator layout (per warp 16 rows; n-block nb, entry e): row 16·warp + g + 8·(e/2),
/// column 8·nb + 2t + e%2. Writes a 64 × N fp32 tile row-major.
template <int N>
__device__ void store_accumulators(const float (&d)[N / 2], float* out) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int e = 0; e < N / 2; ++e)
        out[(16 * warp + g + 8 * ((e / 2) % 2)) * N + 8 * (e / 4) + 2 * t + e % 2] = d[e];
}

/// C = A Bᵀ with A (64 × 128) and B (64 × 128) K-major in shared memory: k_major_descriptor.
template <class T>
__global__ void __launch_bounds__(128) wgmma_ss_kernel(const T* A, const T* B, float* C) {
#if CH9_SM90A
    __shared__ __align__(1024) T sA[kM * kSsK];
    __shared__ __align__(1024) T sB[kSsN * kSsK];
    load_tile_swizzled<T, kSsK, kM>(sA, A, 0, kM, threadIdx.x, 128);
    load_tile_swizzled<T, kSsK, kSsN>(sB, B, 0, kSsN, threadIdx.x, 128);
    __syncthreads();
    float d[kSsN / 2];
    issue_s<T, kSsK, kM, kSsN>(d, sA, sB, 0);
    wgmma_wait<0>();
    fence_registers(d);
    store_accumulators<kSsN>(d, C);
#else
    __trap();
#endif
}

/// C = P V with P (64 × 64) from registers (A fragments as pack_p builds them) and V (64 × 128)
/// MN-major in shared memory: mn_major_descriptor.
template <class T>
__global__ void __launch_bounds__(128) wgmma_rs_kernel(const float* P, const T* V, float* C) {
#if CH9_SM90A
    __shared__ __align__(1024) T sV[kRsK * kRsN];
    load_tile_swizzled<T, kRsN, kRsK>(sV, V, 0, kRsK, threadIdx.x, 128);
    __syncthreads();
    float s[kRsK / 2];  // P in the accumulator layout, as the softmax leaves it
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int e = 0; e < kRsK / 2; ++e) s[e] = P[(16 * warp + g + 8 * ((e / 2) % 2)) * kRsK + 8 * (e / 4) + 2 * t + e % 2];
    std::uint32_t a[kRsK / 16][4];
    pack_p<T, kRsK>(a, s);
    float o[kRsN / 2];
#pragma unroll
    for (int e = 0; e < kRsN / 2; ++e) o[e] = 0.f;
    issue_pv<T, kRsN, kRsK>(o, a, sV);
    wgmma_wait<0>();
    fence_registers(o);
    store_accumulators<kRsN>(o, C);
#else
    __trap();
#endif
}

}  // namespace

template <class T>
std::vector<float> wgmma_ss_block(const std::vector<T>& A, const std::vector<T>& B) {
    fa::DeviceBuffer<T> dA(A.size()), dB(B.size());
    fa::DeviceBuffer<float> dC(std::size_t(kM) * kSsN);
    dA.upload(A), dB.upload(B), dC.poison();
    wgmma_ss_kernel<T><<<1, 128>>>(dA.get(), dB.get(), dC.get());
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    return dC.download();
}

template <class T>
std::vector<float> wgmma_rs_block(const std::vector<float>& P, const std::vector<T>& V) {
    fa::DeviceBuffer<float> dP(P.size());
    fa::DeviceBuffer<T> dV(V.size());
    fa::DeviceBuffer<float> dC(std::size_t(kM) * kRsN);
    dP.upload(P), dV.upload(V), dC.poison();
    wgmma_rs_kernel<T><<<1, 128>>>(dP.get(), dV.get(), dC.get());
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    return dC.download();
}

template std::vector<float> wgmma_ss_block<__half>(const std::vector<__half>&, const std::vector<__half>&);
template std::vector<float> wgmma_ss_block<__nv_bfloat16>(const std::vector<__nv_bfloat16>&,
                                                          const std::vector<__nv_bfloat16>&);
template std::vector<float> wgmma_rs_block<__half>(const std::vector<float>&, const std::vector<__half>&);
template std::vector<float> wgmma_rs_block<__nv_bfloat16>(const std::vector<float>&,
                                                          const std::vector<__nv_bfloat16>&);

}  // namespace ch9
