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

/// Line 8: issues S = Q_i K_jᵀ (D/16 wgmmas of 64 × B_c × 16) as one committed group.
template <class T, int D, int Br, int Bc>
__device__ __forceinline__ void issue_s(float (&s)[Bc / 2], const T* sQ, const T* sK, int wg) {
    const std::uint32_t q = smem_u32(sQ), k = smem_u32(sK);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<T, Bc>(s, k_major_descriptor(q, Br, 64 * wg, kk), k_major_descriptor(k, Bc, 0, kk), kk > 0);
    wgmma_commit();
}

/// Line 10's product: issues O_i += P̃ V_j (B_c/16 wgmmas, P̃ from registers) as one group.
template <class T, int D, int Bc>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const std::uint32_t (&a)[Bc / 16][4], const T* sV) {
    const std::uint32_t v = smem_u32(sV);
    fence_registers(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) wgmma_rs<T, D>(o, a[kk], mn_major_descriptor(v, Bc, kk));
    wgmma_commit();
}

/// Line 9 on a finished S: masked, m_i updated, S overwritten by P̃ = exp(S − m_i), l_i rescaled
/// and summed; returns through alpha the factor O_i must be rescaled by (line 10).
template <class T, int D, int Br, int Bc>
__device__ __forceinline__ void softmax(RowState<D>& st, float (&s)[Bc / 2], float (&alpha)[2], int wg, int i, int j,
                                        const Params<T>& p) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    // Keys past N and, with the causal mask, keys after the row (only on the tiles that need it).
    const int row[2] = {i * Br + 64 * wg + 16 * warp + g, i * Br + 64 * wg + 16 * warp + g + 8};
    if (needs_mask(i, j, Br, Bc, p.N, p.causal)) {
#pragma unroll
        for (int e = 0; e < Bc / 2; ++e) {
            const int col = j * Bc + 8 * (e / 4) + 2 * t + e % 2;
            if (col >= p.N || (p.causal && col > row[(e / 2) % 2])) s[e] = -INFINITY;
        }
    }
    float mx[2] = {st.m[0], st.m[1]}, shift[2];
#pragma unroll
    for (int e = 0; e < Bc / 2; ++e) mx[(e / 2) % 2] = fmaxf(mx[(e / 2) % 2], s[e]);
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
}

/// O_i = diag(alpha) O_i (line 10), the accumulator layout's rows g and g + 8.
template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int e = 0; e < D / 2; ++e) o[e] *= alpha[(e / 2) % 2];
}

/// P̃ rounded to T as wgmma's A fragments: k-step kk (keys 16kk..16kk+15) is S's n-blocks 2kk and
/// 2kk + 1, the same registers chapter 7 reuses for mma.sync.
template <class T, int Bc>
__device__ __forceinline__ void pack_p(std::uint32_t (&a)[Bc / 16][4], const float (&s)[Bc / 2]) {
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) a[kk][r] = tc::pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

/// Lines 8–11 of Alg. 1 for key tile j, by consumer warpgroup `wg` of query tile i, one after the
/// other (steps 1–4). In step 4 the products wait for this warpgroup's turn.
template <class T, int D, int Br, int Bc, bool Pingpong = false>
__device__ __forceinline__ void consume_tile(RowState<D>& st, const T* sQ, const T* sK, const T* sV, int wg,
                                             int i, int j, int n_tiles, const Params<T>& p) {
    float s[Bc / 2], alpha[2];
    if constexpr (Pingpong) named_barrier_sync(turn_barrier(wg), 256);
    issue_s<T, D, Br, Bc>(s, sQ, sK, wg);
    if constexpr (Pingpong)  // step 4: the other consumer may issue its products now
        if (arrives_after(wg, j, n_tiles)) named_barrier_arrive(turn_barrier(1 - wg), 256);
    wgmma_wait<0>();
    fence_registers(s);
    softmax<T, D, Br, Bc>(st, s, alpha, wg, i, j, p);
    rescale<D>(st.o, alpha);
    std::uint32_t a[Bc / 16][4];
    pack_p<T, Bc>(a, s);
    issue_pv<T, D, Bc>(st.o, a, sV);
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

/// Step 6's lines 12–13: O_i / l_i rounded to T into this warpgroup's 64 rows of the Q tile (no
/// longer read: each warpgroup's products read its own rows only), swizzled as TMA expects; then
/// one thread stores the D/64 boxes of 64 rows, and TMA leaves out the rows past N. L as before.
template <class T, int D, int Br>
__device__ void store_rows_tma(RowState<D>& st, T* sQ, const CUtensorMap* map, int wg, int i, int bh,
                               const Params<T>& p) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 1);
        st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 2);
        const int local = 64 * wg + 16 * warp + g + 8 * r, row = i * Br + local;
        const float inv = 1.f / st.l[r];
#pragma unroll
        for (int nb = 0; nb < D / 8; ++nb)
            *reinterpret_cast<std::uint32_t*>(sQ + swizzle128(local, 8 * nb + 2 * t, Br)) =
                tc::pack2<T>(st.o[4 * nb + 2 * r] * inv, st.o[4 * nb + 2 * r + 1] * inv);
        if (t == 0 && row < p.N) p.L[std::size_t(bh) * p.N + row] = st.m[r] * p.scale + logf(st.l[r]);
    }
    fence_proxy_async();  // TMA (the async proxy) reads what these ordinary stores wrote
    named_barrier_sync(store_barrier(wg), 128);
    if (threadIdx.x % 128 == 0) {
#pragma unroll
        for (int c = 0; c < D / 64; ++c) tma_store_3d(map, 64 * c, i * Br + 64 * wg, bh, sQ + c * Br * 64 + 64 * wg * 64);
        tma_store_commit_and_wait_read();  // shared memory must outlive the copy's reads
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
                         const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmO,
                         const Params<T> p) {
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
            consume_tile<T, D, Br, Bc>(st, sQ, sK, sV, wg, i, j, n_tiles, p);
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
                consume_tile<T, D, Br, Bc>(st, sQ, sK + s * Bc * D, sV + s * Bc * D, wg, i, j, n_tiles, p);
                __syncthreads();  // every warpgroup is done with stage s
                if (threadIdx.x == 0 && j + S < n_tiles) issue_kv(j + S);
            }
        } else {
            // step 3 (and 4-6): warpgroup 0 produces (one thread issues every copy), the others consume;
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
            auto release = [&](int j) {  // every consumer warp is done with tile j's stage
                __syncwarp();
                if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty[stage_of(j, S)]);
            };
            auto k_of = [&](int j) { return sK + stage_of(j, S) * Bc * D; };
            auto v_of = [&](int j) { return sV + stage_of(j, S) * Bc * D; };
            mbarrier_wait(q_full, 0);
            if constexpr (Step >= kPingpong)
                if (arrives_before_first(wg)) named_barrier_arrive(turn_barrier(1 - wg), 256);
            if constexpr (Step < kOverlap) {
                for (int j = 0; j < n_tiles; ++j) {
                    mbarrier_wait(&full[stage_of(j, S)], parity_of(j, S));
                    consume_tile<T, D, Br, Bc, Step == kPingpong>(st, sQ, k_of(j), v_of(j), wg, i, j, n_tiles, p);
                    release(released_after(Step, j));
                }
            } else {
                // step 5 (and 6): per tile j, S_j and P̃_{j−1} V_{j−1} go to the tensor cores together (in
                // this warpgroup's turn); the softmax of S_j then runs while P̃_{j−1} V_{j−1} does.
                float s[Bc / 2], alpha[2];
                std::uint32_t a[Bc / 16][4];
                mbarrier_wait(&full[0], parity_of(0, S));
                named_barrier_sync(turn_barrier(wg), 256);
                issue_s<T, D, Br, Bc>(s, sQ, k_of(0), wg);
                if (arrives_after(wg, 0, n_tiles)) named_barrier_arrive(turn_barrier(1 - wg), 256);
                wgmma_wait<0>();
                fence_registers(s);
                softmax<T, D, Br, Bc>(st, s, alpha, wg, i, 0, p);
                pack_p<T, Bc>(a, s);
                for (int j = 1; j < n_tiles; ++j) {
                    mbarrier_wait(&full[stage_of(j, S)], parity_of(j, S));
                    named_barrier_sync(turn_barrier(wg), 256);
                    issue_s<T, D, Br, Bc>(s, sQ, k_of(j), wg);
                    issue_pv<T, D, Bc>(st.o, a, v_of(j - 1));
                    if (arrives_after(wg, j, n_tiles)) named_barrier_arrive(turn_barrier(1 - wg), 256);
                    wgmma_wait<1>();  // S_j is done; P̃_{j−1} V_{j−1} may still run
                    fence_registers(s);
                    softmax<T, D, Br, Bc>(st, s, alpha, wg, i, j, p);
                    wgmma_wait<0>();  // P̃_{j−1} V_{j−1} is done: O may be rescaled, a reused
                    fence_registers(st.o);
                    release(released_after(Step, j));
                    rescale<D>(st.o, alpha);
                    pack_p<T, Bc>(a, s);
                }
                issue_pv<T, D, Bc>(st.o, a, v_of(n_tiles - 1));
                wgmma_wait<0>();
                fence_registers(st.o);
                release(n_tiles - 1);
            }
        }
    }
    if constexpr (Step == kTmaStore) store_rows_tma<T, D, Br>(st, sQ, &tmO, wg, i, bh, p);  // step 6:
    else store_rows<T, D, Br>(st, wg, i, std::size_t(bh), p);
#else
    __trap();  // built without sm_90a; the host refuses other devices before launching
#endif
}

}  // namespace ch9
