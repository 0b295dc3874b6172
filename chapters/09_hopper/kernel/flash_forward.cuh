/// @file flash_forward.cuh
/// @brief Chapter 9's kernel: the FlashAttention-2 forward (Alg. 1 of the FA2 paper) on Hopper's
/// wgmma, one template whose `Step` adds one mechanism at a time (`// step N:` arms, layout.h).
///
/// A block owns query tile Q_i (B_r = 128 rows); each consumer warpgroup owns 64 of its rows (the M
/// of one wgmma) and keeps m_i, l_i and O_i for them in registers, as chapter 7 does per warp.
/// Per key tile j: S = Q_i K_jᵀ by wgmma from shared memory, masked, online softmax (lines 9–10),
/// P̃ rounded to 16 bits straight from the S registers into wgmma's A operand, O_i += P̃ V_j with
/// V read transposed by wgmma (MN-major descriptor). At the end O_i / l_i and L_i (lines 12–13).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "../../../common/fast_math.cuh"
#include "../../../common/tensor_core/ptx.cuh"
#include "hopper.cuh"
#include "layout.h"

namespace ch9 {

template <class T>
struct Params {
    const T *Q, *K, *V;
    T* O;
    float* L;
    int N, H;
    float scale, scale_log2;  ///< softmax scale, and the same times log2(e) for exp2
    bool causal;
};

#if CH9_SM90A

/// Step 1: every thread of the block copies part of a tile (rows row0.. of one head, zeros past
/// N) into shared memory in the swizzled layout of layout.h, 16 bytes at a time.
template <class T, int D, int R>
__device__ void load_tile_swizzled(T* dst, const T* head, int row0, int N, int thread, int threads) {
    constexpr int pieces = D / 8;
    for (int idx = thread; idx < R * pieces; idx += threads) {
        const int r = idx / pieces, c = (idx % pieces) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row0 + r < N) v = *reinterpret_cast<const uint4*>(head + std::size_t(row0 + r) * D + c);
        *reinterpret_cast<uint4*>(dst + swizzle128(r, c, R)) = v;
    }
    fence_proxy_async();  // wgmma (the async proxy) reads what these ordinary stores wrote
}

/// What one consumer warpgroup keeps across key tiles: O_i (64 × D, fp32), m_i and l_i for its
/// thread's two rows (the wgmma accumulator layout gives a thread rows g and g + 8 of its warp).
template <int D>
struct RowState {
    float o[D / 2];
    float m[2], l[2];
};

/// Lines 8–11 of Alg. 1 for key tile j, by one consumer warpgroup `wg` of query tile i.
template <class T, int D, int Br, int Bc>
__device__ __forceinline__ void consume_tile(RowState<D>& st, const T* sQ, const T* sK, const T* sV, int wg,
                                             int i, int j, const Params<T>& p) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;

    // Line 8: S = Q_i K_jᵀ, D/16 wgmmas of 64 × B_c × 16.
    float s[Bc / 2];
    const std::uint32_t q = smem_u32(sQ), k = smem_u32(sK), v = smem_u32(sV);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<T, Bc>(s, k_major_descriptor(q, Br, 64 * wg, kk), k_major_descriptor(k, Bc, 0, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(s);

    // Mask keys past N and, with the causal mask, keys after the row (only on the tiles that need it).
    const int row[2] = {i * Br + 64 * wg + 16 * warp + g, i * Br + 64 * wg + 16 * warp + g + 8};
    if (needs_mask(i, j, Br, Bc, p.N, p.causal)) {
#pragma unroll
        for (int e = 0; e < Bc / 2; ++e) {
            const int col = j * Bc + 8 * (e / 4) + 2 * t + e % 2;
            if (col >= p.N || (p.causal && col > row[(e / 2) % 2])) s[e] = -INFINITY;
        }
    }

    // Line 9: m_i^(j) = max(m_i^(j-1), rowmax(S)), P̃ = exp(S − m), l_i rescaled and summed.
    float mx[2] = {st.m[0], st.m[1]};
#pragma unroll
    for (int e = 0; e < Bc / 2; ++e) mx[(e / 2) % 2] = fmaxf(mx[(e / 2) % 2], s[e]);
    float alpha[2], shift[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float m_use = mx[r] == -INFINITY ? 0.f : mx[r];  // a row with every key masked so far
        alpha[r] = fa::fast_exp2((st.m[r] - m_use) * p.scale_log2);
        shift[r] = m_use * p.scale_log2;
        st.m[r] = mx[r];
        st.l[r] *= alpha[r];
    }
#pragma unroll
    for (int e = 0; e < Bc / 2; ++e) {
        s[e] = fa::fast_exp2(fmaf(s[e], p.scale_log2, -shift[(e / 2) % 2]));
        st.l[(e / 2) % 2] += s[e];
    }
    // Line 10: O_i = diag(alpha) O_i + P̃ V_j, P̃ as wgmma's A fragments (16 keys per k-step).
#pragma unroll
    for (int e = 0; e < D / 2; ++e) st.o[e] *= alpha[(e / 2) % 2];
    std::uint32_t a[Bc / 16][4];
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) a[kk][r] = tc::pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
    fence_registers(st.o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) wgmma_rs<T, D>(st.o, a[kk], mn_major_descriptor(v, Bc, kk));
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(st.o);
}

/// Lines 12–13: O_i / l_i rounded to T, and L_i = m_i·scale + log(l_i), rows below N only.
template <class T, int D, int Br>
__device__ void store_rows(RowState<D>& st, int wg, int i, std::size_t bh, const Params<T>& p) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 1);
        st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 2);
        const int row = i * Br + 64 * wg + 16 * warp + g + 8 * r;
        if (row >= p.N) continue;
        const float inv = 1.f / st.l[r];
        T* out = p.O + (bh * p.N + row) * D;
#pragma unroll
        for (int nb = 0; nb < D / 8; ++nb)
            *reinterpret_cast<std::uint32_t*>(out + 8 * nb + 2 * t) =
                tc::pack2<T>(st.o[4 * nb + 2 * r] * inv, st.o[4 * nb + 2 * r + 1] * inv);
        if (t == 0) p.L[bh * p.N + row] = st.m[r] * p.scale + logf(st.l[r]);
    }
}

/// Issues the TMA copies of a tile (D/64 boxes of 64 columns × R rows) at row `row0` of head bh.
template <int D, int R, class T>
__device__ void tma_tile(T* dst, const CUtensorMap* map, int row0, int bh, std::uint64_t* bar) {
#pragma unroll
    for (int c = 0; c < D / 64; ++c) tma_load_3d(dst + c * R * 64, map, 64 * c, row0, bh, bar);
}

#endif  // CH9_SM90A

template <class T, int D, int Step>
__global__ void __launch_bounds__(step_config(Step).threads(), 1)
    flash_forward_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                         const __grid_constant__ CUtensorMap tmV, const Params<T> p) {
#if CH9_SM90A
    constexpr StepConfig C = step_config(Step);
    constexpr int Br = C.Br, Bc = C.Bc, S = C.stages;
    extern __shared__ unsigned char smem_raw[];
    // 128B-swizzled tiles must start on 1024 bytes (the swizzle repeats every 8 rows of 128 bytes).
    T* sQ = reinterpret_cast<T*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t(1023));
    T* sK = sQ + Br * D;
    T* sV = sK + S * Bc * D;
    std::uint64_t* full = reinterpret_cast<std::uint64_t*>(sV + S * Bc * D);
    std::uint64_t* empty = full + S;
    std::uint64_t* q_full = empty + S;

    const int i = gridDim.x - 1 - blockIdx.x;  // causal: the longest query tiles start first
    const int bh = blockIdx.z * p.H + blockIdx.y;
    const int n_tiles = key_tiles(i, Br, Bc, p.N, p.causal);
    const std::size_t head = std::size_t(bh) * p.N * D;
    const int wg = threadIdx.x / 128 - C.producer;  // consumer warpgroup index (−1: the producer)

    RowState<D> st;
#pragma unroll
    for (int e = 0; e < D / 2; ++e) st.o[e] = 0.f;
    st.m[0] = st.m[1] = -INFINITY;
    st.l[0] = st.l[1] = 0.f;

    if constexpr (Step == kWgmma) {
        // step 1: all threads load Q_i, then per key tile K_j and V_j, between two barriers.
        load_tile_swizzled<T, D, Br>(sQ, p.Q + head, i * Br, p.N, threadIdx.x, blockDim.x);
        for (int j = 0; j < n_tiles; ++j) {
            __syncthreads();  // the previous tile's wgmmas have finished reading sK, sV
            load_tile_swizzled<T, D, Bc>(sK, p.K + head, j * Bc, p.N, threadIdx.x, blockDim.x);
            load_tile_swizzled<T, D, Bc>(sV, p.V + head, j * Bc, p.N, threadIdx.x, blockDim.x);
            __syncthreads();
            consume_tile<T, D, Br, Bc>(st, sQ, sK, sV, wg, i, j, p);
        }
    } else {
        constexpr std::uint32_t kv_bytes = 2 * tma_box(Bc, D).bytes(), q_bytes = tma_box(Br, D).bytes();
        if (threadIdx.x == 0) {
            for (int s = 0; s < S; ++s) {
                mbarrier_init(&full[s], 1);                // the producer's expect_tx arrival
                mbarrier_init(&empty[s], 4 * C.consumers);  // one arrival per consumer warp
            }
            mbarrier_init(q_full, 1);
            mbarrier_init_fence();
        }
        __syncthreads();
        auto issue_kv = [&](int j) {
            const int s = stage_of(j, S);
            mbarrier_arrive_expect_tx(&full[s], kv_bytes);
            tma_tile<D, Bc>(sK + s * Bc * D, &tmK, j * Bc, bh, &full[s]);
            tma_tile<D, Bc>(sV + s * Bc * D, &tmV, j * Bc, bh, &full[s]);
        };
        auto issue_q = [&] {
            mbarrier_arrive_expect_tx(q_full, q_bytes);
            tma_tile<D, Br>(sQ, &tmQ, i * Br, bh, q_full);
        };
        if constexpr (Step == kTma) {
            // step 2: thread 0 issues TMA copies S tiles ahead; all threads compute.
            if (threadIdx.x == 0) {
                issue_q();
                for (int j = 0; j < S && j < n_tiles; ++j) issue_kv(j);
            }
            mbarrier_wait(q_full, 0);
            for (int j = 0; j < n_tiles; ++j) {
                const int s = stage_of(j, S);
                mbarrier_wait(&full[s], parity_of(j, S));
                consume_tile<T, D, Br, Bc>(st, sQ, sK + s * Bc * D, sV + s * Bc * D, wg, i, j, p);
                __syncthreads();  // every warpgroup is done with stage s
                if (threadIdx.x == 0 && j + S < n_tiles) issue_kv(j + S);
            }
        } else {
            // step 3: warpgroup 0 produces (one thread issues every copy), the others consume;
            // setmaxnreg gives the producer's registers to the consumers.
            if (wg < 0) {
                setmaxnreg_dec<kProducerRegisters>();
                if (threadIdx.x == 0) {
                    issue_q();
                    for (int j = 0; j < n_tiles; ++j) {
                        // stage j mod S is free once the consumers released tile j − S
                        if (j >= S) mbarrier_wait(&empty[stage_of(j, S)], parity_of(j - S, S));
                        issue_kv(j);
                    }
                }
                return;
            }
            setmaxnreg_inc<kConsumerRegisters>();
            mbarrier_wait(q_full, 0);
            for (int j = 0; j < n_tiles; ++j) {
                const int s = stage_of(j, S);
                mbarrier_wait(&full[s], parity_of(j, S));
                consume_tile<T, D, Br, Bc>(st, sQ, sK + s * Bc * D, sV + s * Bc * D, wg, i, j, p);
                __syncwarp();
                if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[s]);
            }
        }
    }
    store_rows<T, D, Br>(st, wg, i, std::size_t(bh), p);
#else
    __trap();  // built without sm_90a; the host refuses other devices before launching
#endif
}

}  // namespace ch9
