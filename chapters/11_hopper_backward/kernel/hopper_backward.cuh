/// @file hopper_backward.cuh
/// @brief Chapter 11: the FlashAttention-2 backward (Algorithm 2) on Hopper (sm_90a): wgmma, TMA,
/// warp specialization, dQ by bulk reduce-add. This is the file to edit.
///
/// The dK/dV kernel (one block per K_j, V_j, looping over Q_i, dO_i) is this chapter's; the
/// preprocess (line 4, D_i = rowsum(dO_i ∘ O_i), and L_i · log2 e) and the conversion of the fp32
/// dQ workspace are chapter 8's kernels (launch.cu). The steps (./chapter11 --kernel K; --ladder
/// runs them all); `grep -n "step 3" kernel/` shows what step 3 adds; bwd_hopper_config.h says
/// what each step switches on.
///
/// Who owns what: consumer warpgroup c owns key rows 64c..64c+63 of the block's B_c = 128: its
/// rows of Sᵀ, dPᵀ (64 × B_r), and of dK_j, dV_j (64 × D) in registers. Warp w of it holds rows
/// 16w..16w+15 in the layout of the mma.sync C fragment (hopper.cuh), so chapter 8's masking and
/// Pᵀ/dSᵀ arithmetic (mask_transposed, p_and_ds) and chapter 7's packing (pack_p) run unchanged.
/// The products, per query tile (lines 10–16 of Algorithm 2; FlashAttention-3's "transposed"
/// scores, as chapter 8 computes them):
///   Sᵀ  = K_j Q_iᵀ      A = the consumer's K rows, B = Q_i          (both K-major, shared memory)
///   dPᵀ = V_j dO_iᵀ     A = the consumer's V rows, B = dO_i         (both K-major, shared memory)
///   dV_j += Pᵀ dO_i     A = Pᵀ from registers,     B = dO_i         (MN-major: the reduction runs down its rows)
///   dK_j += dSᵀ Q_i     A = dSᵀ from registers,    B = Q_i          (MN-major)
///   dQ_i += dS K_j      A = dS: the dSᵀ tile read transposed (MN-major A), B = K_j (MN-major);
///                       pieces of 64 × 64 split between the consumers (bwd_hopper_config.h)
#pragma once

#include <cuda.h>

#include <cstdint>

#include "../../../common/math.h"
#include "../../../common/tensor_core/ptx.cuh"
#include "../../07_tensor_cores/kernel/warp_tile.cuh"
#include "../../08_tensor_core_backward/kernel/backward.cuh"
#include "../../09_hopper/kernel/hopper.cuh"
#include "../../09_hopper/kernel/hopper_forward.cuh"
#include "bwd_hopper_config.h"

namespace ch11 {

/// What chapter 8's mask_transposed reads: `Cols` columns per pass (the B_r queries of the tile).
template <int Cols>
struct ColumnsView {
    static constexpr int kSub = Cols;
};

#if FA_SM90A

/// Line 10 (line 13) as one wgmma group, issued and committed, not waited for: Sᵀ = K_j Q_iᵀ
/// (dPᵀ = V_j dO_iᵀ), D / 16 k-steps; a_addr at the consumer's 64 rows of K_j (V_j), b_addr Q_i's
/// tile (dO_i's). The first k-step only writes the accumulators (wgmma_ss_first), so the last
/// tile's values need not stay in registers until here.
template <class T, class Cfg>
__device__ __forceinline__ void issue_scores(float (&acc)[Cfg::Br / 8][4], uint32_t a_addr, uint32_t b_addr) {
    using namespace tc::hopper;
    constexpr int Bc = Cfg::Bc, Br = Cfg::Br;
    wgmma_ss_first<T, 0, Br>(acc, kmajor_desc(a_addr), kmajor_desc(b_addr));
    #pragma unroll
    for (int kk = 1; kk < Cfg::D / 16; ++kk)
        wgmma_ss<T, 0, Br>(acc, kmajor_desc(a_addr + kmajor_kstep_offset(kk, Bc)),
                           kmajor_desc(b_addr + kmajor_kstep_offset(kk, Br)), 1);
    wgmma_commit();
}

/// Line 11, rounded and packed as the A fragments of line 12, one k-step (16 query columns) at a
/// time: Pᵀ = exp2(Sᵀ · scale · log2 e − L2) (column = query), kept in St in fp32 for line 14.
/// Chapter 8's p_and_ds and chapter 7's pack_p compute the same over the whole tile at once, and
/// the compiler then loads every column's L2 and D_i (B_r / 2 registers) ahead of the arithmetic:
/// beside Sᵀ, dPᵀ, dK_j and dV_j that no longer fits a consumer's registers. Here a compiler barrier
/// after each k-step keeps the next k-step's loads below it.
template <class T, int Br>
__device__ __forceinline__ void p_packed(float (&St)[Br / 8][4], uint32_t (&Pa)[1][Br / 16][4], const float* L2s,
                                         float scale_log2, int lane) {
    #pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk) {
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int n = 2 * kk + tc::p_ntile_of_a_reg(r);
            const int e0 = tc::p_elem_of_a_reg(r, 0), e1 = tc::p_elem_of_a_reg(r, 1);
            const float2 L = tc::ld_shared(reinterpret_cast<const float2*>(L2s + 8 * n + tc::frag_c_col(lane, e0)));
            St[n][e0] = tc::fast_exp2(St[n][e0] * scale_log2 - L.x);
            St[n][e1] = tc::fast_exp2(St[n][e1] * scale_log2 - L.y);
            Pa[0][kk][r] = tc::pack2<T>(St[n][e0], St[n][e1]);
        }
        asm volatile("" ::: "memory");
    }
}

/// Line 14, rounded and packed as the A fragments of line 16, a k-step at a time (as p_packed):
/// dSᵀ = Pᵀ ∘ (dPᵀ − D_i), Pᵀ in fp32 from p_packed.
template <class T, int Br>
__device__ __forceinline__ void ds_packed(const float (&Pt)[Br / 8][4], const float (&dPt)[Br / 8][4],
                                          uint32_t (&dSa)[1][Br / 16][4], const float* Dis, int lane) {
    #pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk) {
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int n = 2 * kk + tc::p_ntile_of_a_reg(r);
            const int e0 = tc::p_elem_of_a_reg(r, 0), e1 = tc::p_elem_of_a_reg(r, 1);
            const float2 Di = tc::ld_shared(reinterpret_cast<const float2*>(Dis + 8 * n + tc::frag_c_col(lane, e0)));
            dSa[0][kk][r] = tc::pack2<T>(Pt[n][e0] * (dPt[n][e0] - Di.x), Pt[n][e1] * (dPt[n][e1] - Di.y));
        }
        asm volatile("" ::: "memory");
    }
}

/// Line 12 (line 16) as one wgmma group, not waited for: dV_j += Pᵀ dO_i (dK_j += dSᵀ Q_i), the A
/// operand from registers, B_r / 16 k-steps of 16 queries each; `b_addr` is dO_i's tile (Q_i's).
template <class T, class Cfg>
__device__ __forceinline__ void issue_grad(float (&acc)[Cfg::D / 8][4], const uint32_t (&a)[1][Cfg::Br / 16][4],
                                           uint32_t b_addr) {
    using namespace tc::hopper;
    #pragma unroll
    for (int kk = 0; kk < Cfg::Br / 16; ++kk)
        wgmma_rs<T, 1, Cfg::D>(acc, a[0][kk], mnmajor_desc(b_addr + mnmajor_kstep_offset(kk), Cfg::Br), 1);
    wgmma_commit();
}

/// Writes the consumer's packed dSᵀ rows into the dSᵀ tile (B_c × B_r, blocks of 64 query
/// columns, 128-byte swizzle) for line 15, then fence_proxy_async: wgmma reads it next. Register r
/// of k-step kk holds the pair (row frag_a_row(lane, r), columns 16·kk + frag_a_col(lane, r, 0), + 1).
template <class Cfg>
__device__ __forceinline__ void store_ds(uint16_t* dSt, const uint32_t (&dSa)[1][Cfg::Br / 16][4], int c,
                                         int warp_in_wg, int lane) {
    using namespace tc::hopper;
    #pragma unroll
    for (int kk = 0; kk < Cfg::Br / 16; ++kk)
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = 64 * c + 16 * warp_in_wg + tc::frag_a_row(lane, r);
            const int col = 16 * kk + tc::frag_a_col(lane, r, 0);
            unsigned char* block = reinterpret_cast<unsigned char*>(dSt + (col / kAtomCols) * Cfg::Bc * kAtomCols);
            tc::st_shared(reinterpret_cast<uint32_t*>(block + sw128_offset(row, col % kAtomCols)), dSa[0][kk][r]);
        }
    fence_proxy_async();
}

/// Line 15 as one wgmma group, not waited for: the consumer's pieces of dQ_i = dS K_j (64 query
/// rows × 64 columns each, B_c / 16 k-steps of 16 keys). A = dS, read from the dSᵀ tile as an
/// MN-major operand (the queries run along its 128-byte rows); B = K_j, MN-major, all B_c keys.
template <class T, class Cfg>
__device__ __forceinline__ void issue_dq(float (&dQ)[Cfg::kDqPieces][8][4], uint32_t ds_addr, uint32_t k_addr, int c) {
    using namespace tc::hopper;
    constexpr int Bc = Cfg::Bc;
    #pragma unroll
    for (int k = 0; k < Cfg::kDqPieces; ++k) {
        const uint32_t a = ds_addr + uint32_t(dq_piece_rows(c, k, Cfg::Br, Cfg::D) * Bc * 128);
        const uint32_t b = k_addr + uint32_t(dq_piece_cols(c, k, Cfg::Br, Cfg::D) * Bc * 128);
        wgmma_ss_first<T, 1, 64, 1>(dQ[k], mnmajor_desc(a, Bc), mnmajor_desc(b, Bc));
        #pragma unroll
        for (int kk = 1; kk < Bc / 16; ++kk)
            wgmma_ss<T, 1, 64, 1>(dQ[k], mnmajor_desc(a + mnmajor_kstep_offset(kk), Bc),
                                  mnmajor_desc(b + mnmajor_kstep_offset(kk), Bc), 1);
    }
    wgmma_commit();
}

/// Steps 1–3: line 15's sums added to the fp32 workspace with float2 atomics (red.global.add.v2.f32),
/// rows past N skipped.
template <class Cfg>
__device__ __forceinline__ void dq_atomics(float* dQh, const float (&dQ)[Cfg::kDqPieces][8][4], int q0, int c,
                                           int warp_in_wg, int N, int lane) {
    constexpr int D = Cfg::D;
    #pragma unroll
    for (int k = 0; k < Cfg::kDqPieces; ++k)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = q0 + 64 * dq_piece_rows(c, k, Cfg::Br, D) + 16 * warp_in_wg + tc::frag_c_row(lane, 2 * h);
            if (row >= N) continue;
            float* at = dQh + std::size_t(row) * D + 64 * dq_piece_cols(c, k, Cfg::Br, D) + tc::frag_c_col(lane, 2 * h);
            #pragma unroll
            for (int d = 0; d < 8; ++d)
                atomicAdd(reinterpret_cast<float2*>(at + 8 * d), make_float2(dQ[k][d][2 * h], dQ[k][d][2 * h + 1]));
        }
}

/// Step 4: line 15's sums staged in shared memory for the consumer's dQ warp, fp32, piece by piece
/// in the layout the TMA reduce reads (dq_stage_offset: [64 rows][32] blocks, 128-byte swizzle),
/// then fence_proxy_async: the TMA reads them next. The swizzle permutes 16-byte chunks within a
/// row, and rows g and g ^ 1 of a half-warp swap the same two chunks: its 16 float2 stores share 8
/// bank slots, two each (a 2-way conflict, tests/chapter11_test.cpp).
template <class Cfg>
__device__ __forceinline__ void stage_dq(float* dQs, const float (&dQ)[Cfg::kDqPieces][8][4], int c, int warp_in_wg,
                                         int lane) {
    #pragma unroll
    for (int k = 0; k < Cfg::kDqPieces; ++k)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = 16 * warp_in_wg + tc::frag_c_row(lane, 2 * h);
            #pragma unroll
            for (int d = 0; d < 8; ++d) {
                const int off = dq_stage_offset(c * Cfg::kDqPieces + k, row, 8 * d + tc::frag_c_col(lane, 2 * h));
                tc::st_shared(reinterpret_cast<float2*>(reinterpret_cast<unsigned char*>(dQs) + off),
                              make_float2(dQ[k][d][2 * h], dQ[k][d][2 * h + 1]));
            }
        }
    tc::hopper::fence_proxy_async();
}

/// Step 6: query tile i's turn order (bwd_hopper_config.h, dq_turn). Lane 0 of a dQ warp waits
/// until the adds of every turn before this block's have completed.
struct DqOrder {
    int* counters;  ///< dq_counter(bh, i, c, T_r) of them, zeroed before the launch
    int j, N, Tr;   ///< this block's key block; the sequence length and its query tiles
    bool causal;
};

template <class Cfg>
__device__ __forceinline__ void wait_turn(const DqOrder& o, int* counter, int i) {
    const int turn = dq_turn(o.j, i, o.N, Cfg::Br, Cfg::Bc, o.causal);
    while (tc::hopper::ld_acquire_gpu(counter) < turn) {
    }
    tc::hopper::fence_proxy_async_global();  // this block's reduce-adds after the acquire
}
/// ... and once this block's adds have completed (not only read the staging), passes the turn on.
__device__ __forceinline__ void pass_turn(int* counter) {
    tc::hopper::tma_store_wait();
    tc::hopper::fence_proxy_async_global();  // the completed reduce-adds before the release
    tc::hopper::red_release_gpu_add(counter, 1);
}

/// Step 4, the dQ warp of consumer c (a warp of the producer warpgroup): for each query tile the
/// block visits, waits until the consumer has staged its pieces of dQ_i, and one lane has the TMA
/// add them to the workspace (two boxes of 64 rows × 32 columns per piece; rows past N lie outside
/// the tensor map and are not added), waits until the copies have read the staging, and hands it
/// back. Step 6: the adds wait for the tile's turn, and pass it on once complete.
template <class Cfg>
__device__ __forceinline__ void dq_writer(const CUtensorMap* map_dq, const float* dQs, int i_begin, int count, int bh,
                                          int c, int lane, const DqOrder& order) {
    using namespace tc::hopper;
    constexpr int D = Cfg::D, Br = Cfg::Br;
    for (int n = 0; n < count; ++n) {
        named_barrier_sync(dq_full_barrier(c), kDqHandoffThreads);
        if (lane == 0) {
            int* counter = order.counters + dq_counter(bh, i_begin + n, c, order.Tr);
            if constexpr (Cfg::kDeterministic) wait_turn<Cfg>(order, counter, i_begin + n);
            #pragma unroll
            for (int k = 0; k < Cfg::kDqPieces; ++k) {
                const int piece = c * Cfg::kDqPieces + k;
                const int row = (i_begin + n) * Br + 64 * dq_piece_rows(c, k, Br, D);
                #pragma unroll
                for (int b = 0; b < 64 / kAtomColsF32; ++b)
                    tma_reduce_add_3d(map_dq, dQs + dq_stage_offset(piece, 0, b * kAtomColsF32) / 4,
                                      64 * dq_piece_cols(c, k, Br, D) + b * kAtomColsF32, row, bh);
            }
            tma_store_commit();
            if constexpr (Cfg::kDeterministic)
                pass_turn(counter);
            else
                bulk_wait_read();
        }
        __syncwarp();
        if (dq_writer_frees(n, count)) named_barrier_arrive(dq_free_barrier(c), kDqHandoffThreads);
    }
    if (lane == 0) tma_store_wait();  // the adds are done before the block exits
}

#endif  // FA_SM90A

/// Lines 5–19 of Algorithm 2 for one K_j, V_j (block x of head (z, y); step 6 with the mask: key
/// block T_c − 1 − x): dK_j and dV_j, and line 15's dQ_i contributions added to the fp32 workspace
/// (by atomics in steps 1–3, by bulk reduce-adds from step 4, in a fixed order in step 6). The tensor maps (steps 2–6) describe Q, K, V, dO as [B·H][N][D] (hopper_layout.h),
/// map_dq (steps 4–6) the fp32 workspace the same way, in boxes of 32 columns × 64 rows;
/// dq_counters (step 6) the turn counters of dQ's adds, zeroed (null before step 6).
template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    hopper_dkdv_kernel(const ch8::BwdParams p, const __grid_constant__ CUtensorMap map_q,
                       const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                       const __grid_constant__ CUtensorMap map_do, const __grid_constant__ CUtensorMap map_dq,
                       int* dq_counters) {
#if FA_SM90A
    using namespace tc::hopper;
    constexpr int D = Cfg::D, Br = Cfg::Br, Bc = Cfg::Bc, kStages = Cfg::kStages;
    using Cols = ColumnsView<Br>;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* base = align_shared<kAtomBytes>(smem_raw);
    uint16_t* Ks = reinterpret_cast<uint16_t*>(base + Cfg::kOffK);
    uint16_t* Vs = reinterpret_cast<uint16_t*>(base + Cfg::kOffV);
    auto Q_stage = [&](int s) { return reinterpret_cast<uint16_t*>(base + Cfg::kOffQ + 2 * s * Cfg::kQTileBytes); };
    uint16_t* dSt = reinterpret_cast<uint16_t*>(base + Cfg::kOffDs);
    auto L_stage = [&](int s) { return reinterpret_cast<float*>(base + Cfg::kOffLD + 8 * s * Br); };
    float* dQs = reinterpret_cast<float*>(base + Cfg::kOffDq);
    uint64_t* kv_full = reinterpret_cast<uint64_t*>(base + Cfg::kOffBars);  // steps 2–4: K_j, V_j landed
    uint64_t* full = kv_full + 1;                                           // steps 2–4: stage's tiles landed
    uint64_t* empty = full + kStages;                                       // steps 3–4: consumers done

    const int j = key_block_of(int(blockIdx.x), int(gridDim.x), Cfg::kDeterministic && p.causal);  // step 6
    const int k0 = j * Bc;
    const int bh = int(blockIdx.z) * p.H + int(blockIdx.y);
    const std::size_t head = std::size_t(bh) * std::size_t(p.N);
    const int i_begin = first_query_tile(k0, Br, p.causal);  // line 8, causal: earlier tiles see no key
    const int count = query_tiles(p.N, k0, Br, p.causal);
    const float* L2h = p.L2 + std::size_t(bh) * p.Npad;
    const float* Dih = p.Di + std::size_t(bh) * p.Npad;

    auto issue_kv = [&] {  // steps 2–4, one thread: line 6 by TMA
        mbar_arrive_expect_tx(kv_full, 2 * Cfg::kTileBytes);
        ch9::tma_tile<Bc, D>(Ks, &map_k, kv_full, k0, bh);
        ch9::tma_tile<Bc, D>(Vs, &map_v, kv_full, k0, bh);
    };
    auto issue_q = [&](int n) {  // steps 2–6, one thread: line 9 by TMA, query tile n into its buffer
        const int s = ch9::ring_stage(n, kStages), q0 = (i_begin + n) * Br;
        uint64_t* bar = &full[s];
        mbar_arrive_expect_tx(bar, Cfg::kStageBytes);
        ch9::tma_tile<Br, D>(Q_stage(s), &map_q, bar, q0, bh);
        ch9::tma_tile<Br, D>(Q_stage(s) + Br * D, &map_do, bar, q0, bh);
        if constexpr (!Cfg::kProducer) {  // step 2; from step 3 on the consumers copy L_i, D_i (ld_value)
            bulk_load(L_stage(s), L2h + q0, Br * 4, bar);  // padded row vectors: whole tiles exist
            bulk_load(L_stage(s) + Br, Dih + q0, Br * 4, bar);
        }
    };
    // Step 3: the one entry of L_i · log2 e or D_i of query tile m that consumer thread ct (< 2·B_r)
    // copies into the tile's buffer. Written by ordinary stores and read after a named barrier, the
    // consumers' order is one compute-sanitizer's racecheck follows; L_i, D_i written by the TMA
    // and read by ordinary loads with only the mbarrier ring in between, it reports races.
    auto ld_value = [&](int m, int ct) {
        const int q0m = (i_begin + m) * Br;
        return ct < Br ? L2h[q0m + ct] : Dih[q0m + ct - Br];
    };
    auto load_q = [&](int n) {  // step 1, every thread: line 9 by cp.async
        const int s = n % kStages, q0 = (i_begin + n) * Br;
        ch9::load_tile_sw128<Br, D, Cfg::kThreads>(Q_stage(s), p.Q + head * D, q0, p.N);
        ch9::load_tile_sw128<Br, D, Cfg::kThreads>(Q_stage(s) + Br * D, p.dO + head * D, q0, p.N);
        ch8::load_row_vector<tc::Copy::kAsync>(L_stage(s), L2h + q0, Br, 0);
        ch8::load_row_vector<tc::Copy::kAsync>(L_stage(s) + Br, Dih + q0, Br, Br / 4);
    };

    if constexpr (Cfg::kTma) {  // step 2: the barriers
        if (threadIdx.x == 0) {
            mbar_init(kv_full, 1);
            for (int s = 0; s < kStages; ++s) {
                mbar_init(&full[s], 1);
                mbar_init(&empty[s], 4 * Cfg::kConsumers);  // step 3: one arrival per consumer warp
            }
            mbar_init_fence();
        }
        __syncthreads();
    }
    if constexpr (Cfg::kProducer) {  // step 3: the producer warpgroup loads (step 4: and adds dQ)
        if (threadIdx.x < 128) {
            setmaxnreg_dec<Cfg::kProducerRegs>();
            if (threadIdx.x == 0) {
                issue_kv();
                for (int n = 0; n < count; ++n) {
                    if (n >= kStages)  // the consumers are done with tile n − Stages (same buffer)
                        mbar_wait(&empty[ch9::ring_stage(n, kStages)], ch9::empty_parity(n, kStages));
                    issue_q(n);
                }
            } else if (Cfg::kDqBulk && (threadIdx.x / 32 == 1 || threadIdx.x / 32 == 2)) {  // step 4: the dQ
                const DqOrder order{dq_counters, j, p.N, (p.N + Br - 1) / Br, p.causal};  // step 6
                dq_writer<Cfg>(&map_dq, dQs, i_begin, count, bh, int(threadIdx.x) / 32 - 1,  // warps, one per
                               int(threadIdx.x) % 32, order);                                // consumer
            }
            return;
        }
        setmaxnreg_inc<Cfg::kConsumerRegs>();
    } else if constexpr (Cfg::kTma) {  // step 2: thread 0 fills the ring before the loop
        if (threadIdx.x == 0) {
            issue_kv();
            for (int n = 0; n < tc::min_int(kStages, count); ++n) issue_q(n);
        }
    } else {  // step 1: line 6 and the first tiles by cp.async, one group
        ch9::load_tile_sw128<Bc, D, Cfg::kThreads>(Ks, p.K + head * D, k0, p.N);
        ch9::load_tile_sw128<Bc, D, Cfg::kThreads>(Vs, p.V + head * D, k0, p.N);
        #pragma unroll
        for (int s = 0; s < kStages - 1; ++s) {
            if (s < count) load_q(s);
            tc::cp_async_commit();
        }
    }

    const int ct = int(threadIdx.x) - (Cfg::kProducer ? 128 : 0);  // thread index among the consumers
    const int c = ct / 128, warp_in_wg = (ct / 32) % 4, lane = ct % 32;
    const int wk0 = k0 + 64 * c + 16 * warp_in_wg;  // the warp's first key
    const uint32_t k_rows = smem_u32(Ks) + uint32_t(64 * c * 128), v_rows = smem_u32(Vs) + uint32_t(64 * c * 128);
    float dK[1][D / 8][4], dV[1][D / 8][4];  // line 7
    #pragma unroll
    for (int d = 0; d < D / 8; ++d)
        #pragma unroll
        for (int e = 0; e < 4; ++e) dK[0][d][e] = dV[0][d][e] = 0.0f;
    if constexpr (Cfg::kTma) mbar_wait(kv_full, 0);
    if constexpr (Cfg::kProducer) {  // step 3: L_i, D_i of the first tile, by the consumers
        if (ct < 2 * Br) tc::st_shared(L_stage(0) + ct, ld_value(0, ct));
        named_barrier_sync(kDsFullBarrier, kConsumerThreads);
    }
    float dQ[Cfg::kDqPieces][8][4];  // line 15's sums for one query tile (step 5: the tile before)
    auto hand_over_dq = [&](int m, int ln, int wi) {  // dQ of the block's query tile m leaves the registers
        if constexpr (Cfg::kDqBulk) {  // step 4: to the dQ warp through shared memory
            if (consumer_waits_dq_free(m)) named_barrier_sync(dq_free_barrier(c), kDqHandoffThreads);
            stage_dq<Cfg>(dQs, dQ, c, wi, ln);
            named_barrier_arrive(dq_full_barrier(c), kDqHandoffThreads);
        } else {
            dq_atomics<Cfg>(p.dQacc + head * D, dQ, (i_begin + m) * Br, c, wi, p.N, ln);
        }
    };

    for (int n = 0; n < count; ++n) {  // line 8
        const int s = ch9::ring_stage(n, kStages), q0 = (i_begin + n) * Br;
        if constexpr (Cfg::kTma) {  // step 2: wait for the bytes of tile n
            mbar_wait(&full[s], ch9::full_parity(n, kStages));
        } else {  // step 1: the cp.async pipeline (chapter 8's step 3)
            if (n + kStages - 1 < count) load_q(n + kStages - 1);
            tc::cp_async_commit();
            tc::cp_async_wait<kStages - 1>();
            fence_proxy_async();  // the generic-proxy writes become visible to wgmma's async proxy
            __syncthreads();
        }
        // The lane's shared-memory and workspace addresses depend on the lane alone; seen through
        // chapter 9's `opaque`, they are computed again in each iteration instead of once before
        // the loop and held across it, where they would not fit beside dK_j, dV_j, Sᵀ and dPᵀ.
        // The same for the shared-memory addresses the wgmma descriptors are made of: hoisted, the
        // descriptors of every k-step of K_j, V_j and dSᵀ would stay in registers (two each).
        const int ln = ch9::opaque(lane), wi = ch9::opaque(warp_in_wg);
        const uint32_t kr = uint32_t(ch9::opaque(int(k_rows))), vr = uint32_t(ch9::opaque(int(v_rows)));
        const uint32_t k_addr = uint32_t(ch9::opaque(int(smem_u32(Ks))));
        uint16_t* dS_n = dSt + ds_buffer(n, Cfg::kDsBuffers) * Bc * Br;  // step 5: two buffers in turn
        const uint32_t ds_addr = uint32_t(ch9::opaque(int(smem_u32(dS_n))));
        const uint32_t q_addr = smem_u32(Q_stage(s)), do_addr = q_addr + uint32_t(Cfg::kQTileBytes);
        const float* Ls = L_stage(s);

        float St[1][Br / 8][4], dPt[1][Br / 8][4];
        wgmma_fence();
        issue_scores<T, Cfg>(St[0], kr, q_addr);  // line 10
        const bool copies_ld = Cfg::kProducer && n + 1 < count && ct < 2 * Br;  // step 3: the next tile's
        const float ld_next = copies_ld ? ld_value(n + 1, ct) : 0.0f;           // L_i, D_i, stored below
        if constexpr (Cfg::kPipelineDq) {  // step 5 candidate: line 15 of the tile before finishes
            // under Sᵀ (its accumulators leave the registers before dPᵀ's arrive)
            wgmma_wait<1>();
            #pragma unroll
            for (int k = 0; k < Cfg::kDqPieces; ++k) touch_accumulators<8>(dQ[k]);
            if (n > 0) hand_over_dq(n - 1, ln, wi);
        }
        issue_scores<T, Cfg>(dPt[0], vr, do_addr);  // line 13
        wgmma_wait<Cfg::kOverlap ? 1 : 0>();  // step 5: Sᵀ alone, dPᵀ runs on
        touch_accumulators<Br / 8>(St[0]);
        if (q0 + Br > p.N || k0 + Bc > p.N || (p.causal && wk0 + 15 > q0))  // only edge tiles
            ch8::mask_transposed<Cols, 1>(St, wk0, q0, p.N, p.causal, ln);
        uint32_t Pa[1][Br / 16][4], dSa[1][Br / 16][4];
        p_packed<T, Br>(St[0], Pa, Ls, p.scale_log2, ln);  // line 11
        if constexpr (Cfg::kOverlap) {  // step 5: line 12 starts, then dPᵀ is waited for
            wgmma_fence();  // Pᵀ written by ordinary instructions
            issue_grad<T, Cfg>(dV[0], Pa, do_addr);  // line 12
            wgmma_wait<1>();
        }
        touch_accumulators<Br / 8>(dPt[0]);
        ds_packed<T, Br>(St[0], dPt[0], dSa, Ls + Br, ln);  // line 14
        wgmma_fence();  // Pᵀ and dSᵀ written by ordinary instructions
        if constexpr (!Cfg::kOverlap) issue_grad<T, Cfg>(dV[0], Pa, do_addr);  // line 12
        constexpr bool dk_first = Cfg::kLine15 != kBeforeDk;
        if constexpr (dk_first) issue_grad<T, Cfg>(dK[0], dSa, q_addr);  // line 16

        // line 15 through the dSᵀ tile, which both consumers write and read. Step 3: before writing
        // it, the other consumer's line 15 of the tile before must be done reading it. Step 5
        // writes buffer n mod 2, last read by the other consumer's line 15 of tile n − 2, which it
        // waited for before it met this one at the barrier of tile n − 1.
        if constexpr (Cfg::kProducer && Cfg::kDsBuffers == 1) named_barrier_sync(kDsFreeBarrier, kConsumerThreads);
        store_ds<Cfg>(dS_n, dSa, c, wi, ln);
        if constexpr (dk_first) {
            // lines 12 and 16 finish before line 15 starts: Pᵀ and dSᵀ, their A operands, stay in
            // registers until then, and would otherwise sit beside dQ_i's accumulators
            wgmma_wait<0>();
            touch_accumulators<D / 8>(dV[0]);
            touch_accumulators<D / 8>(dK[0]);
            if constexpr (Cfg::kProducer) ch9::release_stage(&empty[s], lane);  // step 3: Q_i, dO_i read
        }
        // step 3: the next tile's L_i, D_i go where the tile before's were read (by both consumers,
        // before they met at the last barrier)
        if (copies_ld) tc::st_shared(L_stage(ch9::ring_stage(n + 1, kStages)) + ct, ld_next);
        if constexpr (Cfg::kProducer)  // step 3: the consumers meet, the producer runs on
            named_barrier_sync(kDsFullBarrier, kConsumerThreads);
        else
            __syncthreads();
        issue_dq<T, Cfg>(dQ, ds_addr, k_addr, c);  // line 15
        if constexpr (Cfg::kLine15 == kBeforeDk) {  // step 5 candidate: line 16 under the hand-over
            wgmma_wait<1>();  // line 12 done: Pᵀ's registers are free for dQ_i's accumulators
            touch_accumulators<D / 8>(dV[0]);
            issue_grad<T, Cfg>(dK[0], dSa, q_addr);  // line 16
            wgmma_wait<1>();                         // line 15 done, line 16 runs on
            #pragma unroll
            for (int k = 0; k < Cfg::kDqPieces; ++k) touch_accumulators<8>(dQ[k]);
            hand_over_dq(n, ln, wi);
            wgmma_wait<0>();
            touch_accumulators<D / 8>(dK[0]);
            ch9::release_stage(&empty[s], lane);  // Q_i, dO_i read
        } else if constexpr (!Cfg::kPipelineDq) {  // wait for line 15 now (pipelined: in the next tile)
            wgmma_wait<0>();
            #pragma unroll
            for (int k = 0; k < Cfg::kDqPieces; ++k) touch_accumulators<8>(dQ[k]);
            hand_over_dq(n, ln, wi);
        }
        if constexpr (Cfg::kTma && !Cfg::kProducer) {  // step 2: once both consumers are done, refill
            __syncthreads();
            if (threadIdx.x == 0 && n + kStages < count) issue_q(n + kStages);
        } else if constexpr (!Cfg::kTma) {  // step 1: every warp is done with the buffer and with dSᵀ
            __syncthreads();
        }
    }
    if constexpr (Cfg::kPipelineDq) {  // step 5 candidate: line 15 of the last tile
        wgmma_wait<0>();
        #pragma unroll
        for (int k = 0; k < Cfg::kDqPieces; ++k) touch_accumulators<8>(dQ[k]);
        hand_over_dq(count - 1, lane, warp_in_wg);
    }
    // lines 17–18: dK_j (times the softmax scale, which S carried), dV_j
    ch8::store_acc<T, D>(p.dK + head * D, dK, p.scale, wk0, p.N, lane);
    ch8::store_acc<T, D>(p.dV + head * D, dV, 1.0f, wk0, p.N, lane);
#else
    __trap();  // not sm_90a: the host refuses to launch (device_unsupported_reason)
#endif
}

}  // namespace ch11
