/// @file wmma_forward.cuh
/// @brief Chapter 7, variant 1: the FlashAttention-2 forward with nvcuda::wmma fragments, the
/// baseline of the ladder.
///
/// WMMA hides which lane holds which element of a fragment, so everything row-wise (max, exp,
/// rescale) has to go through shared memory: S is stored as fp32, P is written back as 16-bit and
/// reloaded as a matrix_a fragment, and each tile's P·V is stored again to be added to O.
///
/// Block: 4 warps, B_r = 64 query rows (warp w owns rows 16w..16w+15), B_c = 64 keys (32 at
/// D = 256, where the fp32 scratch of 256 columns and 64-key K/V tiles would pass sm_80's 163 KB).
/// Softmax and O: lane = 2r + h handles row r of its warp, columns h·B_c/2.. of S and P and
/// columns h·D/2.. of O (its O lives in registers, 32 or 64 floats).
/// Shared memory: Q, K, V tiles (16-bit, row-major), and per warp a 16 × (max(B_c, D) + 4) fp32
/// scratch (S, then P·V) and a 16 × B_c 16-bit P.
#pragma once

#include <cstdint>

#include "flash_forward.cuh"
#include "../../../common/tensor_core/ptx.cuh"
#include "../../../common/tensor_core/tile_io.cuh"

#if !defined(FA_TC_EMULATE)  // the emulated build brings its own nvcuda::wmma (emulated_wmma.h)
#include <mma.h>
#endif

namespace ch7 {
inline namespace FA_TC_KERNELS {

/// Tile shape of variant 1 for head dim D.
template <int D>
struct WmmaTiles {
    static constexpr int kWarps = 4, kThreads = 128, Br = 64, Bc = D == 256 ? 32 : 64;
    static constexpr TileConfig kTiles{kWarps, 1, Bc, 1, false};  ///< the run-time view
    /// fp32 scratch row length (+4 floats: rows do not all start in the same bank).
    static constexpr int kScratchLd = (Bc > D ? Bc : D) + 4;
    /// Bytes of dynamic shared memory.
    static constexpr int kSmemBytes = 2 * (Br * D + 2 * Bc * D) + kWarps * 16 * (4 * kScratchLd + 2 * Bc);
};

template <class T, int D>
__global__ void __launch_bounds__(WmmaTiles<D>::kThreads) wmma_kernel(const FwdParams p) {
#if FA_TC_SM80
    namespace wmma = nvcuda::wmma;
    using Tiles = WmmaTiles<D>;
    constexpr int Br = Tiles::Br, Bc = Tiles::Bc, kThreads = Tiles::kThreads, LDS = Tiles::kScratchLd;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
    uint16_t* Ks = Qs + Br * D;
    uint16_t* Vs = Ks + Bc * D;
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    float* Sw = reinterpret_cast<float*>(Vs + Bc * D) + warp * 16 * LDS;           // this warp's scratch
    T* Pw = reinterpret_cast<T*>(reinterpret_cast<float*>(Vs + Bc * D) + Tiles::kWarps * 16 * LDS) +
            warp * 16 * Bc;                                                          // this warp's P
    const T* Qw = reinterpret_cast<const T*>(Qs) + warp * 16 * D;

    const int q0 = int(blockIdx.x) * Br;
    const std::size_t head = (std::size_t(blockIdx.z) * p.H + blockIdx.y) * std::size_t(p.N);
    const int r = lane / 2, h = lane % 2;  // softmax: row r of the warp, half h of the columns
    const int row = q0 + warp * 16 + r;
    const int key_end = p.causal ? tc::min_int(p.N, q0 + Br) : p.N;
    const int Tc = fa::ceil_div(key_end, Bc);

    tc::load_tile<Br, D, kThreads, false, tc::Copy::kSync>(Qs, p.Q + head * D, q0, p.N);  // Alg. 1 line 4
    float O[D / 2];                                                                // line 5
    #pragma unroll
    for (int c = 0; c < D / 2; ++c) O[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (int j = 0; j < Tc; ++j) {
        const int k0 = j * Bc;
        __syncthreads();
        tc::load_tile<Bc, D, kThreads, false, tc::Copy::kSync>(Ks, p.K + head * D, k0, p.N);  // line 7
        tc::load_tile<Bc, D, kThreads, false, tc::Copy::kSync>(Vs, p.V + head * D, k0, p.N);
        __syncthreads();

        // line 8: S = Q_i K_jᵀ, 16 × 16 per fragment, stored to the warp's scratch
        for (int n = 0; n < Bc / 16; ++n) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            #pragma unroll
            for (int k = 0; k < D / 16; ++k) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;  // Kᵀ = K row-major
                wmma::load_matrix_sync(a, Qw + 16 * k, D);
                wmma::load_matrix_sync(b, reinterpret_cast<const T*>(Ks) + 16 * n * D + 16 * k, D);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(Sw + 16 * n, acc, LDS, wmma::mem_row_major);
        }
        __syncwarp();

        // line 9: m, P̃ = exp(S·scale − m) written as T, l; line 10 (first half): O ·= e^{m_old − m}
        const float* s_row = Sw + r * LDS + h * (Bc / 2);
        auto visible = [&](int c) {
            const int key = k0 + h * (Bc / 2) + c;
            return key < p.N && !(p.causal && key > row);
        };
        float mx = -INFINITY;
        for (int c = 0; c < Bc / 2; ++c)
            if (visible(c)) mx = fmaxf(mx, tc::ld_shared(s_row + c) * p.scale);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_new = fmaxf(m, mx);  // finite: tile 0 holds key 0, seen by every row
        const float alpha = expf(m - m_new);
        float sum = 0.0f;
        T* p_row = Pw + r * Bc + h * (Bc / 2);
        for (int c = 0; c < Bc / 2; ++c) {
            const float pc = visible(c) ? expf(tc::ld_shared(s_row + c) * p.scale - m_new) : 0.0f;
            tc::st_shared(p_row + c, T(pc));
            sum += pc;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = alpha * l + sum;
        m = m_new;
        #pragma unroll
        for (int c = 0; c < D / 2; ++c) O[c] *= alpha;
        __syncwarp();

        // line 10 (second half): O += P̃ V_j, 16 × 16 per fragment, through the scratch
        for (int n = 0; n < D / 16; ++n) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            #pragma unroll
            for (int k = 0; k < Bc / 16; ++k) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
                wmma::load_matrix_sync(a, Pw + 16 * k, Bc);
                wmma::load_matrix_sync(b, reinterpret_cast<const T*>(Vs) + 16 * k * D + 16 * n, D);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(Sw + 16 * n, acc, LDS, wmma::mem_row_major);
        }
        __syncwarp();
        const float* pv_row = Sw + r * LDS + h * (D / 2);
        #pragma unroll
        for (int c = 0; c < D / 2; ++c) O[c] += tc::ld_shared(pv_row + c);
        __syncwarp();  // the scratch is overwritten by the next tile's S
    }

    // lines 12–15
    if (row < p.N) {
        const float inv_l = 1.0f / l;
        T* o_row = reinterpret_cast<T*>(p.O + (head + row) * D) + h * (D / 2);
        #pragma unroll
        for (int c = 0; c < D / 2; c += 2)
            *reinterpret_cast<uint32_t*>(o_row + c) = tc::pack2<T>(O[c] * inv_l, O[c + 1] * inv_l);
        if (h == 0) p.L[head + row] = m + logf(l);
    }
#else
    __trap();  // compute capability < 8.0: the host refuses to launch (device_unsupported_reason)
#endif
}

}  // namespace FA_TC_KERNELS
}  // namespace ch7
