/// @file warp_mma.cuh
/// @brief Chapter 8: two warp-level helpers that the dK/dV kernels (backward.cuh, backward_fa2.cuh)
/// and line 15's product (dq_atomics.cuh) share: zero_acc, and mma_prefetched, a warp product in
/// FlashAttention-2's order of loads and mma instructions.
#pragma once

#include <cstdint>

#include "../../../common/tensor_core/ptx.cuh"

namespace ch8 {
inline namespace FA_TC_KERNELS {

#if FA_TC_SM80

/// Nothing between the k-steps of a product (mma_prefetched's default).
struct NoStep {
    __device__ __forceinline__ void operator()(int) const {}
};

/// acc (MT m-tiles × 2·NP n-tiles) += A · B over KSteps k-steps, in FlashAttention-2's order: the
/// fragments of k-step kk + 1 are read (ldmatrix) before the products of k-step kk, so that their
/// latency hides behind those products. load_a(a, mt, kk) and load_b(b, np, kk) read one A fragment
/// and one pair of B fragments; each accumulator still adds its k-steps in ascending order.
/// after_step(kk), if given, runs after k-step kk's products (step 6 puts line 15's atomics there).
template <class T, int MT, int NP, int KSteps, class LoadA, class LoadB, class AfterStep = NoStep>
__device__ __forceinline__ void mma_prefetched(float (&acc)[MT][2 * NP][4], LoadA load_a, LoadB load_b,
                                               AfterStep after_step = {}) {
    uint32_t a[2][MT][4], b[2][NP][2][2];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) load_a(a[0][mt], mt, 0);
    #pragma unroll
    for (int np = 0; np < NP; ++np) load_b(b[0][np], np, 0);
    #pragma unroll
    for (int kk = 0; kk < KSteps; ++kk) {
        const int cur = kk % 2, next = 1 - cur;
        if (kk + 1 < KSteps) {
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) load_a(a[next][mt], mt, kk + 1);
            #pragma unroll
            for (int np = 0; np < NP; ++np) load_b(b[next][np], np, kk + 1);
        }
        #pragma unroll
        for (int np = 0; np < NP; ++np)
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                tc::mma_m16n8k16<T>(acc[mt][2 * np], a[cur][mt], b[cur][np][0]);
                tc::mma_m16n8k16<T>(acc[mt][2 * np + 1], a[cur][mt], b[cur][np][1]);
            }
        after_step(kk);
    }
}

/// Zeroes an accumulator.
template <int MT, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[MT][NT][4]) {
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int n = 0; n < NT; ++n)
            #pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0.0f;
}

#endif  // FA_TC_SM80

}  // namespace FA_TC_KERNELS
}  // namespace ch8
