/// @file hopper_forward.cuh
/// @brief Chapter 9: the FlashAttention forward on Hopper (sm_90a): wgmma, TMA, warp
/// specialization. This is the file to edit.
///
/// The steps (./chapter9 --kernel K; --ladder runs them all); `grep -n "step 2" kernel/` shows
/// what step 2 adds. hopper_config.h says what each step switches on:
///   1  wgmma        S = Q·Kᵀ by wgmma from shared memory (both operands through descriptors over
///                   128-byte-swizzled tiles), O += P̃·V by wgmma with P̃ in registers; every thread
///                   loads tiles with cp.async, as chapter 7 does
///   2  TMA          one thread loads Q and K_j, V_j with the TMA into a ring of three buffers; a
///                   "full" mbarrier per buffer completes when its bytes have arrived
///   3  specialized  a producer warpgroup (40 registers) runs the TMA loop; two consumer
///                   warpgroups (232 registers) compute and hand each buffer back on its "empty"
///                   mbarrier; no block-wide barrier inside the loop
///   4  pingpong     the consumers take turns at the tensor cores (a named barrier each): a turn
///                   issues S of tile k and P̃·V of tile k − 1 together, so one consumer's softmax
///                   runs while the other's products do (consume_in_turns)
///   5  overlap      inside a turn's warpgroup: wait for S alone (wgmma.wait_group 1), run the
///                   softmax while its own P̃·V of the tile before is still running, rescale O after
///   6  tuned        O_i staged in shared memory and stored by TMA (cp.async.bulk.tensor, bulk
///                   group); the ring's depth, two or three consumers, turns or step 3's free
///                   loop, a block per work item or a persistent grid, chosen per head dim
///                   (Step6Tiles)
///
/// Who owns what: consumer warpgroup c owns query rows 64c..64c+63 of the block's B_r (128, or 192
/// with three consumers); warp w of it rows 16w..16w+15, in the layout of chapter 7's mma.sync
/// accumulators (hopper.cuh), so chapter 7's masking (mask_scores), online softmax
/// (online_softmax, step 5's exp2 form), packing of P̃ (pack_p) and epilogue (store_rows) run
/// unchanged on the wgmma accumulators.
/// Grid: (T_r query blocks, H, B), causal blocks heaviest first; step 6's persistent candidates: a
/// block per SM, each looping over work items (hopper_config.h, work_item), the ring of K/V buffers
/// and its mbarriers running on from item to item, Q's tile handed back on a "q_empty" mbarrier.
/// Shared memory: Q (B_r × D) and `Stages` pairs (K_j, V_j), each a column of [rows][64] blocks,
/// 128-byte swizzled, 1024-byte aligned; then the mbarriers. Step 6 stages O_i in Q's place.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "../../../common/math.h"
#include "hopper.cuh"
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

/// Steps 2–6: the TMA loads of a `Rows` × D tile (D / 64 boxes of 64 columns) counted on `bar`.
template <int Rows, int D>
__device__ __forceinline__ void tma_tile(uint16_t* dst, const CUtensorMap* map, uint64_t* bar, int row0, int bh) {
    #pragma unroll
    for (int b = 0; b < D / tc::hopper::kAtomCols; ++b)
        tc::hopper::tma_load_3d(dst + b * Rows * tc::hopper::kAtomCols, map, bar, b * tc::hopper::kAtomCols, row0, bh);
}

/// Alg. 1 line 8, issued and committed as one wgmma group, not waited for: S = Q_i·K_jᵀ, D / 16
/// wgmmas (16 columns of d each), both operands in shared memory. A wgmma_fence comes before.
template <class T, class Cfg>
__device__ __forceinline__ void issue_s(float (&S)[1][Cfg::Bc / 8][4], uint32_t q_addr, uint32_t k_addr) {
    using namespace tc::hopper;
    #pragma unroll
    for (int kk = 0; kk < Cfg::D / 16; ++kk)
        wgmma_ss<T, 0, Cfg::Bc>(S[0], kmajor_desc(q_addr + kmajor_kstep_offset(kk, Cfg::Br)),
                                kmajor_desc(k_addr + kmajor_kstep_offset(kk, Cfg::Bc)), kk > 0);
    wgmma_commit();
}

/// Alg. 1 line 10's product, issued and committed as one wgmma group, not waited for: O += P̃·V_j,
/// B_c / 16 wgmmas (16 keys each), P̃ from registers. A wgmma_fence comes before.
template <class T, class Cfg>
__device__ __forceinline__ void issue_pv(float (&O)[1][Cfg::D / 8][4], const uint32_t (&P)[1][Cfg::Bc / 16][4],
                                         uint32_t v_addr) {
    using namespace tc::hopper;
    #pragma unroll
    for (int kk = 0; kk < Cfg::Bc / 16; ++kk)  // 16 keys per wgmma
        wgmma_rs<T, 1, Cfg::D>(O[0], P[0][kk], mnmajor_desc(v_addr + mnmajor_kstep_offset(kk), Cfg::Bc), 1);
    wgmma_commit();
}

/// Alg. 1 lines 9–10 on a finished S_j: the mask on edge tiles, then chapter 7's online softmax
/// (S becomes P̃; m, l updated; `O` rescaled by e^{m_old − m} where a row max moved).
template <class Cfg>
__device__ __forceinline__ void softmax_tile(float (&S)[1][Cfg::Bc / 8][4], ch7::RowStats<Cfg>& st,
                                             float (&O)[1][Cfg::D / 8][4], int k0, int wq0,
                                             const ch7::FwdParams& p, int lane) {
    if (k0 + Cfg::Bc > p.N || (p.causal && k0 + Cfg::Bc - 1 > wq0))  // only edge tiles
        ch7::mask_scores<Cfg>(S, wq0, k0, p.N, p.causal, lane);
    ch7::online_softmax<Cfg>(S, st, O, p.scale, p.scale_log2);
}

/// Alg. 1 lines 8–10 for one K/V tile, by one consumer warpgroup (steps 1–3): S = Q_i·K_jᵀ, the
/// softmax, O += P̃·V_j, each product waited for at once. Returns after the last wgmma has finished
/// reading K_j and V_j.
template <class T, class Cfg>
__device__ __forceinline__ void consume_tile(float (&O)[1][Cfg::D / 8][4], ch7::RowStats<Cfg>& st,
                                             uint32_t q_addr, uint32_t k_addr, uint32_t v_addr, int k0,
                                             int wq0, const ch7::FwdParams& p, int lane) {
    using namespace tc::hopper;
    constexpr int D = Cfg::D, Bc = Cfg::Bc;
    float S[1][Bc / 8][4];
    wgmma_fence();
    issue_s<T, Cfg>(S, q_addr, k_addr);  // line 8
    wgmma_wait<0>();
    touch_accumulators<Bc / 8>(S[0]);
    softmax_tile<Cfg>(S, st, O, k0, wq0, p, lane);  // lines 9–10
    uint32_t P[1][Bc / 16][4];
    ch7::pack_p<T, Cfg>(P, S);
    wgmma_fence();  // O was rescaled and P̃ written by ordinary instructions
    issue_pv<T, Cfg>(O, P, v_addr);  // line 10
    wgmma_wait<0>();
    touch_accumulators<D / 8>(O[0]);
}

/// Steps 3–6: this warp is done with a buffer; the producer refills it once every consumer warp
/// has said so (its "empty" mbarrier counts 4 arrivals per consumer warpgroup).
__device__ __forceinline__ void release_stage(uint64_t* empty_bar, int lane) {
    __syncwarp();
    if (lane == 0) tc::hopper::mbar_arrive(empty_bar);
}

/// Steps 4–6: Alg. 1 lines 6–11 for consumer warpgroup `wg`, in turns (hopper_config.h: turn_count,
/// turn_s_tile, turn_pv_tile, next_turn_barrier, hands_over, s_wait_depth). Turn k, between the two
/// named barriers, issues S_k and P̃_{k−1}·V_{k−1}; after it, this warpgroup runs the softmax of S_k
/// while the next consumer takes its turn (two consumers alternate; three go round).
///   step 4: wait for both products (wait_group 0), release tile k − 1's buffer, the softmax of
///           S_k with O's rescale, pack P̃_k;
///   step 5: wait for S_k only (wait_group 1: P̃_{k−1}·V_{k−1}, committed after it, runs on), the
///           softmax of S_k with O's rescale recorded, not done; then wait for P̃_{k−1}·V_{k−1},
///           release its buffer, rescale O, pack P̃_k (P̃_{k−1}'s registers are free only now).
/// The first turn (S_0 alone) and the last (P̃·V_{T_c−1} alone) are separate instances of the
/// turn: ptxas serializes every wgmma that sits under a run-time branch (warning C7520).
/// Step 6, persistent: called once per work item, whose tile j is tile t0 + j of the ring. Each
/// call balances the named barriers (the last consumer opens, and hands nothing over after its
/// last turn), so the next item's turns start as the first item's did.
template <class T, class Cfg>
__device__ __forceinline__ void consume_in_turns(float (&O)[1][Cfg::D / 8][4], ch7::RowStats<Cfg>& st,
                                                 const uint16_t* KVs, uint64_t* full, uint64_t* empty,
                                                 uint32_t q_addr, int Tc, int t0, int wg, int wq0,
                                                 const ch7::FwdParams& p, int lane) {
    using namespace tc::hopper;
    constexpr int D = Cfg::D, Bc = Cfg::Bc, kStages = Cfg::kStages, kWGs = Cfg::kConsumers;
    // Tile j of this block of Alg. 1 is tile t0 + j of the ring (t0 = 0 but in a persistent grid)
    auto stage = [&](int j) { return ring_stage(t0 + j, kStages); };
    auto k_addr = [&](int j) { return smem_u32(KVs + stage(j) * 2 * Bc * D); };
    float S[1][Bc / 8][4];
    uint32_t P[1][Bc / 16][4];
    auto turn = [&](int k, auto has_s, auto has_pv) {  // std::bool_constant: known at compile time
        constexpr bool kS = decltype(has_s)::value, kPv = decltype(has_pv)::value;
        const int j = turn_s_tile(k, Tc), jp = turn_pv_tile(k);
        if constexpr (kS) mbar_wait(&full[stage(j)], full_parity(t0 + j, kStages));  // line 7 landed
        named_barrier_sync(turn_barrier(wg), kTurnThreads);  // step 4: this consumer's turn
        wgmma_fence();  // O rescaled and P̃ written by ordinary instructions
        if constexpr (kS) issue_s<T, Cfg>(S, q_addr, k_addr(j));  // line 8 for tile k
        if constexpr (kPv) issue_pv<T, Cfg>(O, P, k_addr(jp) + uint32_t(2 * Bc * D));  // line 10 for tile k − 1
        if (hands_over(wg, k, Tc, kWGs)) named_barrier_arrive(next_turn_barrier(wg, kWGs), kTurnThreads);
        if constexpr (!kS) {  // the last turn: P̃·V of the last tile alone
            wgmma_wait<0>();
            touch_accumulators<D / 8>(O[0]);
            release_stage(&empty[stage(jp)], lane);
            return;
        }
        if constexpr (!Cfg::kOverlap) {
            wgmma_wait<0>();
            touch_accumulators<Bc / 8>(S[0]);
            touch_accumulators<D / 8>(O[0]);
            if constexpr (kPv) release_stage(&empty[stage(jp)], lane);
            softmax_tile<Cfg>(S, st, O, j * Bc, wq0, p, lane);  // lines 9–10
        } else {  // step 5: the softmax under this warpgroup's own P̃·V
            wgmma_wait<s_wait_depth(Cfg::kOverlap, kPv)>();
            touch_accumulators<Bc / 8>(S[0]);
            // Chapter 7's online_softmax rescales the O it is handed. O is still being written by
            // the product in flight, so it gets a stand-in of ones, which comes back holding each
            // row's factor e^{m_old − m} (or 1 where no row max of the warp moved).
            float factor[1][D / 8][4];
            #pragma unroll
            for (int d = 0; d < D / 8; ++d)
                #pragma unroll
                for (int e = 0; e < 4; ++e) factor[0][d][e] = 1.0f;
            softmax_tile<Cfg>(S, st, factor, j * Bc, wq0, p, lane);  // lines 9–10
            wgmma_wait<0>();
            touch_accumulators<D / 8>(O[0]);
            if constexpr (kPv) release_stage(&empty[stage(jp)], lane);
            if (__any_sync(0xffffffffu, factor[0][0][0] != 1.0f || factor[0][0][2] != 1.0f))
                #pragma unroll
                for (int d = 0; d < D / 8; ++d)
                    #pragma unroll
                    for (int e = 0; e < 4; ++e) O[0][d][e] *= factor[0][0][e];
        }
        ch7::pack_p<T, Cfg>(P, S);
    };
    if (opens_first_turn(wg, kWGs)) named_barrier_arrive(next_turn_barrier(wg, kWGs), kTurnThreads);
    turn(0, std::true_type{}, std::false_type{});  // S_0
    for (int k = 1; k < turn_count(Tc) - 1; ++k) turn(k, std::true_type{}, std::true_type{});  // S_k, P̃·V_{k−1}
    turn(turn_count(Tc) - 1, std::false_type{}, std::true_type{});  // P̃·V_{T_c−1}
}

/// Step 6, persistent: `x`, unchanged, but opaque to the compiler, so no value computed from it is
/// hoisted out of the loop over the block's work items.
__device__ __forceinline__ int opaque(int x) {
    asm volatile("" : "+r"(x));
    return x;
}

/// Step 6: Alg. 1 lines 12–15 through shared memory. Each thread writes its entries of O_i / l_i,
/// rounded to T, into its warpgroup's rows of the Q tile in the 128-byte swizzle the tensor map of
/// O expects, and L_i = m·scale + log l_i (natural log) for its rows below N to global memory;
/// then the warpgroup meets at its own named barrier and one thread has the TMA store the D / 64
/// boxes of 64 × 64. Rows past N lie outside the tensor map and are not written. A persistent
/// block's next item reloads the Q tile: that thread then arrives on q_empty (one arrival per
/// consumer warpgroup) once the store has finished.
template <class T, class Cfg>
__device__ __forceinline__ void store_o_tma(const float (&O)[1][Cfg::D / 8][4], const ch7::RowStats<Cfg>& st,
                                            uint16_t* Qs, const CUtensorMap* map_o, uint64_t* q_empty, float* Lh,
                                            int q0, int bh, int wg, int warp_in_wg, int lane,
                                            const ch7::FwdParams& p) {
    using namespace tc::hopper;
    constexpr int D = Cfg::D, Br = Cfg::Br;
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float l = fa::group_sum<4>(st.l[0][h]);  // step 5 of chapter 7: l kept per lane
        const float inv_l = 1.0f / l;
        const int r = 16 * warp_in_wg + tc::frag_c_row(lane, 2 * h);  // row within the warpgroup's 64
        #pragma unroll
        for (int d = 0; d < D / 8; ++d) {
            const int col = 8 * d + tc::frag_c_col(lane, 2 * h);
            unsigned char* block = reinterpret_cast<unsigned char*>(Qs + o_stage_offset(wg, col / kAtomCols, Br));
            *reinterpret_cast<uint32_t*>(block + sw128_offset(r, col % kAtomCols)) =
                tc::pack2<T>(O[0][d][2 * h] * inv_l, O[0][d][2 * h + 1] * inv_l);
        }
        const int row = q0 + 64 * wg + r;
        if (row < p.N && tc::lane_in_group(lane) == 0) Lh[row] = st.m[0][h] * p.scale + logf(l);
    }
    fence_proxy_async();  // the ordinary stores become visible to the TMA (the async proxy)
    named_barrier_sync(store_barrier(wg), 128);
    if (warp_in_wg == 0 && lane == 0) {
        #pragma unroll
        for (int b = 0; b < D / kAtomCols; ++b)
            tma_store_3d(map_o, Qs + o_stage_offset(wg, b, Br), b * kAtomCols, q0 + kOBoxRows * wg, bh);
        tma_store_commit();
        tma_store_wait();  // the block's shared memory must outlive the copy
        // step 6, persistent: the warpgroup is done with its rows of the Q tile. Every thread of it
        // passed the barrier above after its last S had completed (wgmma_wait 0) and its entries of
        // O were written; the wait covers the TMA's reads. So the producer may load the next Q.
        if constexpr (Cfg::kPersistent) mbar_arrive(q_empty);
    }
}

#endif  // FA_SM90A

/// Alg. 1 of FlashAttention-2 for one block of B_r query rows, in the step `Cfg` describes (step 6,
/// persistent: for each of the block's work items in turn). The tensor maps (steps 2–6) describe
/// Q, K, V, O as [B·H][N][D] (hopper_layout.h, tma_box); map_o (boxes of 64 rows) is read by step 6
/// only, BH = B·H by a persistent grid only.
template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    hopper_forward_kernel(const ch7::FwdParams p, const int BH, const __grid_constant__ CUtensorMap map_q,
                          const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                          const __grid_constant__ CUtensorMap map_o) {
#if FA_SM90A
    using namespace tc::hopper;
    constexpr int D = Cfg::D, Br = Cfg::Br, Bc = Cfg::Bc, kStages = Cfg::kStages;
    extern __shared__ unsigned char smem_raw[];
    uint16_t* Qs = reinterpret_cast<uint16_t*>(align_shared<kAtomBytes>(smem_raw));
    uint16_t* KVs = Qs + Br * D;  // stage s: K at KVs + s·2·B_c·D, V right after it
    uint64_t* full = reinterpret_cast<uint64_t*>(KVs + kStages * 2 * Bc * D);  // steps 2–6: K_j, V_j landed
    uint64_t* empty = full + kStages;                                           // steps 3–6: consumers done
    uint64_t* q_full = empty + kStages;                                         // steps 2–6: Q_i landed
    uint64_t* q_empty = q_full + 1;  // step 6, persistent: consumers done with Q_i and with O_i staged there

    // The block's work items: the one of its grid coordinates, causal blocks heaviest first; step 6,
    // persistent: items w = blockIdx.x, blockIdx.x + gridDim.x, ... of work_item's order.
    const int w_first = Cfg::kPersistent ? int(blockIdx.x) : 0;
    const int w_step = Cfg::kPersistent ? int(gridDim.x) : 1;
    const int w_end = Cfg::kPersistent ? fa::ceil_div(p.N, Br) * BH : 1;
    struct Block {
        int q0, bh, Tc;
    };
    auto block_of = [&](int w) {
        WorkItem it{};
        if constexpr (Cfg::kPersistent)  // step 6: the item's place in the persistent order
            it = work_item(w, fa::ceil_div(p.N, Br), BH, p.causal);
        else
            it = {p.causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x),
                  int(blockIdx.z) * p.H + int(blockIdx.y)};
        const int q0 = it.q_block * Br;
        // Alg. 1 line 6, with the causal mask: no key after the block's last row is ever needed.
        const int key_end = p.causal ? tc::min_int(p.N, q0 + Br) : p.N;
        return Block{q0, it.bh, fa::ceil_div(key_end, Bc)};
    };
    // Tile t of the ring (t counts on over a persistent block's items) lives in buffer t mod Stages.
    auto K_stage = [&](int t) { return KVs + ring_stage(t, kStages) * 2 * Bc * D; };
    auto issue_kv = [&](int t, int j, int bh) {  // steps 2–6, one thread: Alg. 1 line 7 by TMA, K_j, V_j as tile t
        uint64_t* bar = &full[ring_stage(t, kStages)];
        mbar_arrive_expect_tx(bar, Cfg::kStageBytes);
        tma_tile<Bc, D>(K_stage(t), &map_k, bar, j * Bc, bh);
        tma_tile<Bc, D>(K_stage(t) + Bc * D, &map_v, bar, j * Bc, bh);
    };
    auto issue_q = [&](const Block& b) {  // steps 2–6, one thread: Alg. 1 line 4 by TMA
        mbar_arrive_expect_tx(q_full, 2 * Br * D);
        tma_tile<Br, D>(Qs, &map_q, q_full, b.q0, b.bh);
    };

    if constexpr (Cfg::kTma) {  // step 2: the barriers
        if (threadIdx.x == 0) {
            for (int s = 0; s < kStages; ++s) {
                mbar_init(&full[s], 1);
                mbar_init(&empty[s], 4 * Cfg::kConsumers);  // step 3: one arrival per consumer warp
            }
            mbar_init(q_full, 1);
            if constexpr (Cfg::kPersistent)  // step 6: one arrival per consumer warpgroup (store_o_tma)
                mbar_init(q_empty, Cfg::kConsumers);
            mbar_init_fence();
        }
        __syncthreads();
        if constexpr (Cfg::kProducer) {  // step 3: the producer warpgroup loads, and only that
            if (threadIdx.x < 128) {
                setmaxnreg_dec<Cfg::kProducerRegs>();
                if (threadIdx.x == 0) {
                    int t = 0;  // tiles loaded into the ring so far
                    for (int n = 0, w = w_first; w < w_end; ++n, w += w_step) {
                        const Block b = block_of(w);
                        auto load_kv = [&](int j) {
                            if (t + j >= kStages)  // the consumers are done with tile t + j − Stages
                                mbar_wait(&empty[ring_stage(t + j, kStages)], empty_parity(t + j, kStages));
                            issue_kv(t + j, j, b.bh);
                        };
                        int ahead = 0;  // K/V tiles issued before Q
                        if constexpr (Cfg::kPersistent) {  // step 6: item n ≥ 1 of a persistent block
                            if (n > 0) {
                                // Its first tiles go out while the consumers still compute the last
                                // item (their buffers free up as its last tiles are released, Q or
                                // not); its Q only once every consumer is done reading Q_i and the
                                // TMA has stored O_i from the same place (q_empty).
                                ahead = tc::min_int(kStages, b.Tc);
                                for (int j = 0; j < ahead; ++j) load_kv(j);
                                mbar_wait(q_empty, q_parity(n - 1));
                            }
                        }
                        issue_q(b);
                        for (int j = ahead; j < b.Tc; ++j) load_kv(j);
                        t += b.Tc;
                    }
                }
                return;
            }
            setmaxnreg_inc<Cfg::kConsumerRegs>();
        }
    }

    const int ct = int(threadIdx.x) - (Cfg::kProducer ? 128 : 0);  // thread index among the consumers
    const int wg = ct / 128, lane = ct % 32, warp_in_wg = (ct / 32) % 4;
    const uint32_t q_addr = smem_u32(Qs) + uint32_t(64 * wg * 128);  // the warpgroup's 64 rows
    int t0 = 0;  // ring tiles of the block's items before this one (0 but in a persistent grid)
    for (int n = 0, w = w_first; w < w_end; ++n, w += w_step) {
        const Block b = block_of(w);
        const int q0 = b.q0, bh = b.bh, Tc = b.Tc;
        const std::size_t head = std::size_t(bh) * std::size_t(p.N);
        if constexpr (Cfg::kTma && !Cfg::kProducer) {  // step 2: thread 0 fills the ring before the loop
            if (threadIdx.x == 0) {
                issue_q(b);
                for (int j = 0; j < tc::min_int(kStages, Tc); ++j) issue_kv(j, j, bh);
            }
        }
        const int wq0 = q0 + 64 * wg + 16 * warp_in_wg;  // the warp's first query row
        // Alg. 1 line 5
        float O[1][D / 8][4];
        #pragma unroll
        for (int d = 0; d < D / 8; ++d)
            #pragma unroll
            for (int i = 0; i < 4; ++i) O[0][d][i] = 0.0f;
        ch7::RowStats<Cfg> st;
        ch7::init_rows<Cfg>(st);
        if constexpr (Cfg::kTma) mbar_wait(q_full, q_parity(n));

        if constexpr (Cfg::kPingpong)  // step 4: the consumers take turns at the tensor cores
            consume_in_turns<T, Cfg>(O, st, KVs, full, empty, q_addr, Tc, t0, wg, wq0, p, lane);
        else for (int j = 0; j < Tc; ++j) {
            if constexpr (Cfg::kTma) {  // step 2: wait for the bytes of tile j
                mbar_wait(&full[ring_stage(t0 + j, kStages)], full_parity(t0 + j, kStages));
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
            const uint32_t k_addr = smem_u32(K_stage(t0 + j));
            consume_tile<T, Cfg>(O, st, q_addr, k_addr, k_addr + uint32_t(2 * Bc * D), j * Bc, wq0, p, lane);
            if constexpr (Cfg::kProducer) {  // step 3: hand the buffer back to the producer
                release_stage(&empty[ring_stage(t0 + j, kStages)], lane);
            } else if constexpr (Cfg::kTma) {  // step 2: once both warpgroups are done, refill it
                __syncthreads();
                if (threadIdx.x == 0 && j + kStages < Tc) issue_kv(j + kStages, j + kStages, bh);
            }
        }
        if constexpr (Cfg::kTmaStore) {  // step 6: lines 12–15 through shared memory and the TMA
            // step 6, persistent: the epilogue's shared-memory addresses (one per entry of O a
            // thread writes) depend on the lane alone. Seen through `opaque`, they are computed
            // here for each item, not once before the item loop and held across it (they would
            // not fit beside O, S and P̃, and ptxas would spill them).
            const int o_lane = Cfg::kPersistent ? opaque(lane) : lane;
            store_o_tma<T, Cfg>(O, st, Qs, &map_o, q_empty, p.L + head, q0, bh, wg, warp_in_wg, o_lane, p);
        }
        else
            ch7::store_rows<T, Cfg>(O, st, p.O + head * D, p.L + head, wq0, p.N, p.scale, lane);  // lines 12–15
        t0 += Tc;
    }
#else
    __trap();  // not sm_90a: the host refuses to launch (device_unsupported_reason)
#endif
}

}  // namespace ch9
