/// @file hopper_forward.cuh
/// @brief Chapter 9: the FlashAttention forward on Hopper (sm_90a): wgmma, TMA, warp
/// specialization. This is the file to edit.
///
/// The steps (./chapter9 --kernel K; --ladder runs them all); `grep -n "step 2" kernel/` shows
/// what step 2 adds. hopper_config.h says what each step switches on:
///   1  wgmma        S = Q·Kᵀ by wgmma from shared memory (both operands through descriptors over
///                   128-byte-swizzled tiles), O += P̃·V by wgmma with P̃ in registers; every thread
///                   loads tiles with cp.async, as chapter 7 does
///   2  TMA          one thread loads Q and K_j, V_j with the TMA into a ring of buffers; a "full"
///                   mbarrier per buffer completes when its bytes have arrived
///   3  specialized  a producer warpgroup (40 registers) runs the TMA loop; two consumer
///                   warpgroups (232 registers) compute and hand each buffer back on its "empty"
///                   mbarrier; no block-wide barrier inside the loop
///
/// Who owns what: consumer warpgroup c owns query rows 64c..64c+63 of the block's B_r = 128; warp
/// w of it rows 16w..16w+15, in the layout of chapter 7's mma.sync accumulators (hopper.cuh), so
/// chapter 7's masking (mask_scores), online softmax (online_softmax, step 5's exp2 form),
/// packing of P̃ (pack_p) and epilogue (store_rows) run unchanged on the wgmma accumulators.
/// Grid: (T_r query blocks, H, B), causal blocks heaviest first.
/// Shared memory: Q (B_r × D) and `Stages` pairs (K_j, V_j), each a column of [rows][64] blocks,
/// 128-byte swizzled, 1024-byte aligned; then the mbarriers.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "../../../common/math.h"
#include "../../../common/tensor_core/hopper.cuh"
#include "../../../common/tensor_core/ptx.cuh"
#include "../../07_tensor_cores/kernel/flash_forward.cuh"
#include "../../07_tensor_cores/kernel/online_softmax.cuh"
#include "../../07_tensor_cores/kernel/warp_tile.cuh"
#include "hopper_config.h"

namespace ch9 {

#if FA_SM90A

/// Step 1: `Rows` rows of a head's [N][D] array from row `row0` on into the swizzled blocks at
/// `dst` (block b holds columns 64b..64b+63), 16 bytes per cp.async; rows ≥ N become zeros.
template <int Rows, int D, int Threads>
__device__ __forceinline__ void load_tile_sw128(uint16_t* dst, const uint16_t* src, int row0, int N) {
    constexpr int kChunks = Rows * D / 8;  // 16-byte chunks
    for (int i = int(threadIdx.x); i < kChunks; i += Threads) {
        const int r = i / (D / 8), col = 8 * (i % (D / 8));
        const int block = col / tc::hopper::kAtomCols;
        unsigned char* to = reinterpret_cast<unsigned char*>(dst) + block * Rows * 128 +
                            tc::hopper::sw128_offset(r, col % tc::hopper::kAtomCols);
        const bool valid = row0 + r < N;
        tc::cp_async_16_zfill(to, src + std::size_t(valid ? row0 + r : 0) * D + col, valid);
    }
}

/// Steps 2–3: the TMA loads of a `Rows` × D tile (D / 64 boxes of 64 columns) counted on `bar`.
template <int Rows, int D>
__device__ __forceinline__ void tma_tile(uint16_t* dst, const CUtensorMap* map, uint64_t* bar, int row0, int bh) {
    #pragma unroll
    for (int b = 0; b < D / tc::hopper::kAtomCols; ++b)
        tc::hopper::tma_load_3d(dst + b * Rows * tc::hopper::kAtomCols, map, bar, b * tc::hopper::kAtomCols, row0, bh);
}

/// Alg. 1 lines 8–10 for one K/V tile, by one consumer warpgroup: S = Q_i·K_jᵀ (wgmma, both in
/// shared memory), the mask on edge tiles, the online softmax, O += P̃·V_j (wgmma, P̃ in
/// registers). Returns after the last wgmma has finished reading K_j and V_j.
template <class T, class Cfg>
__device__ __forceinline__ void consume_tile(float (&O)[1][Cfg::D / 8][4], ch7::RowStats<Cfg>& st,
                                             uint32_t q_addr, uint32_t k_addr, uint32_t v_addr, int k0,
                                             int wq0, const ch7::FwdParams& p, int lane) {
    using namespace tc::hopper;
    constexpr int D = Cfg::D, Bc = Cfg::Bc;
    float S[1][Bc / 8][4];
    wgmma_fence();
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)  // line 8: S = Q_i K_jᵀ, 16 columns of d per wgmma
        wgmma_ss<T, 0, Bc>(S[0], kmajor_desc(q_addr + kmajor_kstep_offset(kk, Cfg::Br)),
                           kmajor_desc(k_addr + kmajor_kstep_offset(kk, Bc)), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    touch_accumulators<Bc / 8>(S[0]);
    if (k0 + Bc > p.N || (p.causal && k0 + Bc - 1 > wq0))  // only edge tiles
        ch7::mask_scores<Cfg>(S, wq0, k0, p.N, p.causal, lane);
    ch7::online_softmax<Cfg>(S, st, O, p.scale, p.scale_log2);  // lines 9–10
    uint32_t P[1][Bc / 16][4];
    ch7::pack_p<T, Cfg>(P, S);
    wgmma_fence();  // O was rescaled and P̃ written by ordinary instructions
    #pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk)  // line 10: O += P̃ V_j, 16 keys per wgmma
        wgmma_rs<T, 1, D>(O[0], P[0][kk], mnmajor_desc(v_addr + mnmajor_kstep_offset(kk), Bc), 1);
    wgmma_commit();
    wgmma_wait<0>();
    touch_accumulators<D / 8>(O[0]);
}

#endif  // FA_SM90A

/// Alg. 1 of FlashAttention-2 for one block of B_r query rows, in the step `Cfg` describes. The
/// tensor maps (steps 2–3) describe Q, K, V as [B·H][N][D] (hopper_layout.h, tma_box).
template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    hopper_forward_kernel(const ch7::FwdParams p, const __grid_constant__ CUtensorMap map_q,
                          const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v) {
#if FA_SM90A
    using namespace tc::hopper;
    constexpr int D = Cfg::D, Br = Cfg::Br, Bc = Cfg::Bc, kStages = Cfg::kStages;
    extern __shared__ unsigned char smem_raw[];
    uint16_t* Qs = reinterpret_cast<uint16_t*>((reinterpret_cast<std::uintptr_t>(smem_raw) + kAtomBytes - 1) &
                                               ~std::uintptr_t(kAtomBytes - 1));
    uint16_t* KVs = Qs + Br * D;  // stage s: K at KVs + s·2·B_c·D, V right after it
    uint64_t* full = reinterpret_cast<uint64_t*>(KVs + kStages * 2 * Bc * D);  // steps 2–3: K_j, V_j landed
    uint64_t* empty = full + kStages;                                           // step 3: consumers done
    uint64_t* q_full = empty + kStages;                                         // steps 2–3: Q_i landed

    const int q_block = p.causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);  // heaviest first
    const int q0 = q_block * Br;
    const int bh = int(blockIdx.z) * p.H + int(blockIdx.y);
    const std::size_t head = std::size_t(bh) * std::size_t(p.N);
    // Alg. 1 line 6, with the causal mask: no key after the block's last row is ever needed.
    const int key_end = p.causal ? tc::min_int(p.N, q0 + Br) : p.N;
    const int Tc = fa::ceil_div(key_end, Bc);
    auto K_stage = [&](int j) { return KVs + ring_stage(j, kStages) * 2 * Bc * D; };
    auto issue_kv = [&](int j) {  // steps 2–3, one thread: Alg. 1 line 7 by TMA
        uint64_t* bar = &full[ring_stage(j, kStages)];
        mbar_arrive_expect_tx(bar, Cfg::kStageBytes);
        tma_tile<Bc, D>(K_stage(j), &map_k, bar, j * Bc, bh);
        tma_tile<Bc, D>(K_stage(j) + Bc * D, &map_v, bar, j * Bc, bh);
    };

    if constexpr (Cfg::kTma) {  // step 2: the barriers, then Q and the first tiles in flight
        if (threadIdx.x == 0) {
            for (int s = 0; s < kStages; ++s) {
                mbar_init(&full[s], 1);
                mbar_init(&empty[s], 4 * Cfg::kConsumers);  // step 3: one arrival per consumer warp
            }
            mbar_init(q_full, 1);
            mbar_init_fence();
        }
        __syncthreads();
        if constexpr (Cfg::kProducer) {  // step 3: the producer warpgroup loads, and only that
            if (threadIdx.x < 128) {
                setmaxnreg_dec<Cfg::kProducerRegs>();
                if (threadIdx.x == 0) {
                    mbar_arrive_expect_tx(q_full, 2 * Br * D);
                    tma_tile<Br, D>(Qs, &map_q, q_full, q0, bh);
                    for (int j = 0; j < Tc; ++j) {
                        if (j >= kStages)  // the consumers are done with tile j − Stages
                            mbar_wait(&empty[ring_stage(j, kStages)], empty_parity(j, kStages));
                        issue_kv(j);
                    }
                }
                return;
            }
            setmaxnreg_inc<Cfg::kConsumerRegs>();
        } else if (threadIdx.x == 0) {  // step 2: thread 0 fills the ring before the loop
            mbar_arrive_expect_tx(q_full, 2 * Br * D);
            tma_tile<Br, D>(Qs, &map_q, q_full, q0, bh);
            for (int j = 0; j < tc::min_int(kStages, Tc); ++j) issue_kv(j);
        }
    }

    const int ct = int(threadIdx.x) - (Cfg::kProducer ? 128 : 0);  // thread index among the consumers
    const int wg = ct / 128, lane = ct % 32, warp_in_wg = (ct / 32) % 4;
    const int wq0 = q0 + 64 * wg + 16 * warp_in_wg;  // the warp's first query row
    // Alg. 1 line 5
    float O[1][D / 8][4];
    #pragma unroll
    for (int d = 0; d < D / 8; ++d)
        #pragma unroll
        for (int i = 0; i < 4; ++i) O[0][d][i] = 0.0f;
    ch7::RowStats<Cfg> st;
    ch7::init_rows<Cfg>(st);
    const uint32_t q_addr = smem_u32(Qs) + uint32_t(64 * wg * 128);  // the warpgroup's 64 rows
    if constexpr (Cfg::kTma) mbar_wait(q_full, 0);

    for (int j = 0; j < Tc; ++j) {
        if constexpr (Cfg::kTma) {  // step 2: wait for the bytes of tile j
            mbar_wait(&full[ring_stage(j, kStages)], full_parity(j, kStages));
        } else {  // step 1: every thread loads, then the async proxy is told
            __syncthreads();  // every warpgroup is done with the previous K_j, V_j
            if (j == 0) load_tile_sw128<Br, D, Cfg::kThreads>(Qs, p.Q + head * D, q0, p.N);  // line 4
            load_tile_sw128<Bc, D, Cfg::kThreads>(K_stage(j), p.K + head * D, j * Bc, p.N);  // line 7
            load_tile_sw128<Bc, D, Cfg::kThreads>(K_stage(j) + Bc * D, p.V + head * D, j * Bc, p.N);
            tc::cp_async_commit();
            tc::cp_async_wait<0>();
            fence_proxy_async();  // the generic-proxy writes become visible to wgmma's async proxy
            __syncthreads();
        }
        const uint32_t k_addr = smem_u32(K_stage(j));
        consume_tile<T, Cfg>(O, st, q_addr, k_addr, k_addr + uint32_t(2 * Bc * D), j * Bc, wq0, p, lane);
        if constexpr (Cfg::kProducer) {  // step 3: hand the buffer back to the producer
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[ring_stage(j, kStages)]);
        } else if constexpr (Cfg::kTma) {  // step 2: once both warpgroups are done, refill it
            __syncthreads();
            if (threadIdx.x == 0 && j + kStages < Tc) issue_kv(j + kStages);
        }
    }
    ch7::store_rows<T, Cfg>(O, st, p.O + head * D, p.L + head, wq0, p.N, p.scale, lane);  // lines 12–15
#else
    __trap();  // not sm_90a: the host refuses to launch (device_unsupported_reason)
#endif
}

}  // namespace ch9
