/// @file backward_fa2.cuh
/// @brief Chapter 8, step 6: the dK/dV kernel (FA2 Algorithm 2, lines 5–19) in FlashAttention-2's
/// own warp layout. Steps 1–5 give every warp 16 keys, so every warp reads all of Q_i and dO_i twice
/// per tile (README, "Shared-memory traffic per tile"); here every product that reads Q_i or dO_i
/// has warp tiles of 32 rows, and Pᵀ, dSᵀ are exchanged through shared memory.
///
/// Who owns what (Fa2LayoutConfig in bwd_config.h): warp w is (kw, qw) = (w mod kKeyWarps,
/// w / kKeyWarps) in a grid of kKeyWarps (keys) × kQueryWarps.
///   lines 10–14: keys 32kw..32kw + 31 of K_j, V_j × queries qw · kWarpQueries.. of Q_i, in passes
///     of Sub: dPᵀ of the pass in registers (2 m-tiles × Sub/8 n-tiles), Sᵀ beside it SSub queries
///     at a time (16, or the whole pass), P and dS in fp32, then Pᵀ and dSᵀ rounded to 16 bits and
///     written to their B_c × B_r tiles in shared memory; with Prefetch every warp product in
///     mma_prefetched's order (warp_mma.cuh);
///   lines 12, 16: the same 32 keys × columns qw · kWarpCols.. of dV_j, dK_j (fp32 registers for
///     the whole inner loop), k = the B_r queries of the tile: A = Pᵀ or dSᵀ rows from shared
///     memory (half of them written by the other warps of the key group), B = dO_i or Q_i read
///     with ldmatrix.trans;
///   line 15: dq_product (dq_atomics.cuh) with 32-row warp tiles, then its adds (dq_atomics) a few
///     tiles at a time between the k-steps of line 12.
/// Everything else is steps 1–5's: the preprocess and dQ conversion kernels, the tile loads, the
/// masks, P and dS, the dQ atomics, the causal start of the inner loop.
#pragma once

#include "backward.cuh"

namespace ch8 {
inline namespace FA_TC_KERNELS {

#if FA_TC_SM80

/// Lines 10 and 13 for a warp tile: S = rows wk.. of K_j (or V_j), or their fragments kept in
/// registers, times the rows of Q_i (or dO_i) at Bs, transposed: chapter 7's scores, or with
/// Prefetch the same products in mma_prefetched's order.
template <class T, class W, bool Prefetch>
__device__ __forceinline__ void warp_scores(float (&S)[2][W::Bc / 8][4], const uint16_t* As, const ch7::QFrags<W>& f,
                                            const uint16_t* Bs, int wk, int lane) {
    if constexpr (!Prefetch) {
        ch7::scores<T, W>(S, As, f, Bs, wk, lane);
    } else {
        zero_acc(S);
        mma_prefetched<T, 2, W::Bc / 16, W::D / 16>(
            S,
            [&](uint32_t(&a)[4], int mt, int kk) {
                if constexpr (W::kQInRegs) {
                    #pragma unroll
                    for (int r = 0; r < 4; ++r) a[r] = f.a[mt][kk][r];
                } else {
                    ch7::load_a_frag<W>(a, As, wk + 16 * mt, kk, lane);
                }
            },
            [&](uint32_t(&b)[2][2], int np, int kk) { ch7::load_k_frags<W>(b, Bs, np, kk, lane); });
    }
}

/// Lines 12 and 16 in the FA2 layout: acc (32 key rows wk.., kWarpCols columns from 16 · dd0) +=
/// A · B, A = rows wk..wk + 31 of a Pᵀ or dSᵀ tile (B_c × B_r), B = the Q_i or dO_i tile read
/// transposed (k = its B_r queries, 16 at a time, in the order steps 4–5 add them); after_step(kk)
/// after k-step kk's products.
template <class T, class Cfg, class AfterStep = NoStep>
__device__ __forceinline__ void accumulate_cols(float (&acc)[2][Cfg::kWarpCols / 8][4], const uint16_t* At,
                                                const uint16_t* Bs, int wk, int dd0, int lane,
                                                AfterStep after_step = {}) {
    if constexpr (Cfg::kPrefetch) {
        mma_prefetched<T, 2, Cfg::kWarpCols / 16, Cfg::Br / 16>(
            acc, [&](uint32_t(&a)[4], int mt, int kk) { ch7::load_a_frag<typename Cfg::PdsTile>(a, At, wk + 16 * mt, kk, lane); },
            [&](uint32_t(&b)[2][2], int s, int kk) { ch7::load_v_frags<typename Cfg::Warp>(b, Bs, kk, dd0 + s, lane); },
            after_step);
    } else {
        #pragma unroll
        for (int kk = 0; kk < Cfg::Br / 16; ++kk) {
            uint32_t a[2][4];
            #pragma unroll
            for (int mt = 0; mt < 2; ++mt) ch7::load_a_frag<typename Cfg::PdsTile>(a[mt], At, wk + 16 * mt, kk, lane);
            #pragma unroll
            for (int s = 0; s < Cfg::kWarpCols / 16; ++s) {
                uint32_t b[2][2];
                ch7::load_v_frags<typename Cfg::Warp>(b, Bs, kk, dd0 + s, lane);  // B = queries × d, .trans
                #pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    tc::mma_m16n8k16<T>(acc[mt][2 * s], a[mt], b[0]);
                    tc::mma_m16n8k16<T>(acc[mt][2 * s + 1], a[mt], b[1]);
                }
            }
            after_step(kk);
        }
    }
}

#endif  // FA_TC_SM80

/// Step 6: lines 5–19 for one K_j, V_j (block x of K/V head (z, y)) with FA2's warp layout, summed
/// over the query heads of the group (GroupTiles); with kAtomicDq also line 15 by atomicAdd.
template <class T, class Cfg, bool kAtomicDq>
__global__ void __launch_bounds__(Cfg::kThreads, 1) dkdv_fa2_kernel(const BwdParams p) {
#if FA_TC_SM80
    constexpr int D = Cfg::D, Br = Cfg::Br, Bc = Cfg::Bc, Sub = Cfg::kSub, SSub = Cfg::kSSub, kStages = Cfg::kStages;
    using W = typename Cfg::Warp;         // dPᵀ: 32 keys × Sub queries
    using WS = typename Cfg::WarpS;       // Sᵀ: 32 keys × SSub queries
    using Slice = typename Cfg::Slice;
    constexpr tc::Copy kCopy = tc::Copy::kAsync;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    uint16_t* Ks = reinterpret_cast<uint16_t*>(smem_raw);
    uint16_t* Vs = Ks + Bc * D;
    uint16_t* QdO = Vs + Bc * D;                 // stage s: Q_i at QdO + s·2·B_r·D, dO_i after it
    uint16_t* Pt = QdO + kStages * 2 * Br * D;   // Pᵀ, B_c × B_r
    uint16_t* dSt = Pt + Bc * Br;                // dSᵀ, B_c × B_r
    float* LD = reinterpret_cast<float*>(dSt + Bc * Br);  // stage s: L2 at LD + 2·s·B_r, D_i after

    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int kw = warp % Cfg::kKeyWarps, qw = warp / Cfg::kKeyWarps;
    const int k0 = int(blockIdx.x) * Bc, wk = 32 * kw, wk0 = k0 + wk;  // block's and warp's first key
    const int wq = qw * Cfg::kWarpQueries;                             // warp's first query of a tile (lines 10–14)
    const int dd0 = qw * Cfg::kWarpCols / 16;                          // its first 16-column pair of dK_j, dV_j
    const int diag = p.N_k - p.N;  // query q sees keys up to q + diag (causal, bottom-right)
    const GroupTiles tiles = group_tiles(p, k0, Br);
    auto load_q = [&](int t) { load_query_tile<Cfg, true, kCopy>(QdO, LD, p, tiles, t); };  // line 9
    load_kv_block<Cfg, true, kCopy>(Ks, Vs, p, k0);  // line 6, in the cp.async group of the first Q_i
    #pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < tiles.count) load_q(s);
        tc::cp_async_commit();
    }

    float dK[2][Cfg::kWarpCols / 8][4], dV[2][Cfg::kWarpCols / 8][4];  // line 7: 32 keys × kWarpCols
    zero_acc(dK);
    zero_acc(dV);
    ch7::QFrags<WS> kf;  // step 6 option: the warp's 32 rows of K_j, V_j as registers
    ch7::QFrags<W> vf;

    for (int t = 0; t < tiles.count; ++t) {  // line 8, over the group's heads
        tc::cp_async_wait<kStages - 2>();
        __syncthreads();  // tile t visible; every warp done with tile t − 1, its Pᵀ and dSᵀ included
        if (t + kStages - 1 < tiles.count) load_q(t + kStages - 1);
        tc::cp_async_commit();
        if constexpr (Cfg::kKVInRegs) {  // step 6: K_j, V_j fragments loaded once
            if (t == 0) ch7::load_q_frags<WS>(kf, Ks, wk, lane), ch7::load_q_frags<W>(vf, Vs, wk, lane);
        }
        const int q0 = tiles.i(t) * Br;
        const uint16_t* Qs = QdO + (t % kStages) * 2 * Br * D;
        const uint16_t* dOs = Qs + Br * D;
        const float* Ls = LD + (t % kStages) * 2 * Br;

        #pragma unroll 1
        for (int pass = 0; pass < Cfg::kWarpQueries / Sub; ++pass) {  // the warp's queries, Sub at a time
            const int c0 = wq + pass * Sub, qc = q0 + c0;
            if (p.causal && wk0 > qc + Sub - 1 + diag) {  // every key of the warp after every query: P = dS = 0
                uint32_t zero[2][SSub / 16][4] = {};
                #pragma unroll
                for (int h = 0; h < Sub / SSub; ++h) {
                    store_a_frags<Slice>(Pt, zero, wk, c0 + SSub * h, lane);
                    store_a_frags<Slice>(dSt, zero, wk, c0 + SSub * h, lane);
                }
                continue;
            }
            float dPt[2][Sub / 8][4];
            warp_scores<T, W, Cfg::kPrefetch>(dPt, Vs, vf, dOs + c0 * D, wk, lane);  // line 13: dPᵀ = V_j dO_iᵀ
            #pragma unroll
            for (int h = 0; h < Sub / SSub; ++h) {  // SSub queries at a time: Sᵀ of one slice beside dPᵀ of the pass
                const int cs = c0 + SSub * h, qs = q0 + cs;
                float St[2][SSub / 8][4], dPs[2][SSub / 8][4];
                warp_scores<T, WS, Cfg::kPrefetch>(St, Ks, kf, Qs + cs * D, wk, lane);  // line 10: Sᵀ = K_j Q_iᵀ
                #pragma unroll
                for (int mt = 0; mt < 2; ++mt)
                    #pragma unroll
                    for (int n = 0; n < SSub / 8; ++n)
                        #pragma unroll
                        for (int e = 0; e < 4; ++e) dPs[mt][n][e] = dPt[mt][SSub / 8 * h + n][e];
                if (qs + SSub > p.N || k0 + Bc > p.N_k || (p.causal && wk0 + 31 > qs + diag))  // only edge tiles
                    mask_transposed<Slice>(St, wk0, qs + diag, p.N_k, p.causal, lane);
                p_and_ds<Slice>(St, dPs, Ls + cs, Ls + Br + cs, p.scale_log2, lane);  // lines 11, 14 (fp32 P)
                uint32_t Pa[2][SSub / 16][4], dSa[2][SSub / 16][4];
                ch7::pack_p<T, WS>(Pa, St);  // P and dS rounded to 16 bits here, as the mirror rounds them
                ch7::pack_p<T, WS>(dSa, dPs);
                store_a_frags<Slice>(Pt, Pa, wk, cs, lane);
                store_a_frags<Slice>(dSt, dSa, wk, cs, lane);
            }
        }
        __syncthreads();  // Pᵀ, dSᵀ complete: lines 12, 15, 16 read rows other warps wrote
        if constexpr (kAtomicDq) {
            // line 15's product first (in the other order ptxas spilled: README, "Step 6"), its
            // atomics a few at a time between the k-steps of line 12, beside tensor-core work (in
            // one burst they filled the memory pipeline and the next instructions waited for it)
            constexpr int kPerStep = fa::ceil_div(DqWarpTile<Cfg>::kTiles, Br / 16);
            float dQ[Cfg::kDqM][2 * (Cfg::kDqCols / 16)][4];
            dq_product<T, Cfg>(dQ, dSt, Ks, warp, lane);
            accumulate_cols<T, Cfg>(dV, Pt, dOs, wk, dd0, lane, [&](int kk) {  // line 12: dV_j += Pᵀ dO_i
                dq_atomics<Cfg, kPerStep>(p.dQacc + tiles.bh(t) * p.N * D, dQ, q0, p.N, warp, lane, kPerStep * kk);
            });
        } else {
            accumulate_cols<T, Cfg>(dV, Pt, dOs, wk, dd0, lane);  // line 12: dV_j += Pᵀ dO_i
        }
        accumulate_cols<T, Cfg>(dK, dSt, Qs, wk, dd0, lane);  // line 16: dK_j += dSᵀ Q_i
    }
    // lines 17–18: the warp's 32 keys × kWarpCols columns of dK_j (times the softmax scale) and dV_j
    store_acc<T, D>(p.dK + kv_head_offset(p, D), dK, p.scale, wk0, p.N_k, lane, 16 * dd0);
    store_acc<T, D>(p.dV + kv_head_offset(p, D), dV, 1.0f, wk0, p.N_k, lane, 16 * dd0);
#else
    __trap();  // compute capability < 8.0: the host refuses to launch
#endif
}

}  // namespace FA_TC_KERNELS
}  // namespace ch8
