/// @file online_softmax.cuh
/// @brief Chapter 7: the online softmax on mma accumulators (Alg. 1 lines 9–10 and 12–15), steps
/// 2–4 (natural exp of scaled scores) and step 5 onward (exp2 with the scale folded in).
///
/// A lane holds, for each m-tile mt, two rows: h = 0 is row g (accumulator elements 0, 1) and
/// h = 1 is row g + 8 (elements 2, 3). It holds a quarter of each such row; the other three
/// quarters sit in the other lanes of its quad, so a row max or sum is the lane's own partial
/// result combined over the quad with two xor-shuffles (fa::group_max<4>, fa::group_sum<4>).
/// Chapters 9 and 10 compile this header too (the online softmax of their kernels): a change here rebuilds them.
#pragma once

#include <cstdint>

#include "../../../common/warp.cuh"
#include "../../../common/tensor_core/layout.h"
#include "../../../common/tensor_core/ptx.cuh"

namespace ch7 {
inline namespace FA_TC_KERNELS {

#if FA_TC_SM80

/// m_i and l_i of the rows a lane holds ([mt][h], see above). Steps 2–4 keep m scaled (in units
/// of S·scale) and l summed over the quad; step 5 keeps m unscaled (raw Q·Kᵀ) and l as this lane's
/// partial sum, reduced over the quad once at the end.
template <class Cfg>
struct RowStats {
    float m[Cfg::kMTiles][2];
    float l[Cfg::kMTiles][2];
};

/// Alg. 1 line 5: m = −inf, l = 0.
template <class Cfg>
__device__ __forceinline__ void init_rows(RowStats<Cfg>& st) {
    #pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt)
        #pragma unroll
        for (int h = 0; h < 2; ++h) st.m[mt][h] = -INFINITY, st.l[mt][h] = 0.0f;
}

/// Max of the lane's entries of row (mt, h) over the quad: the row max of S over the tile, as one
/// chain of fmaxf. Steps 2–4 keep it as the ladder measured them; step 5 on takes the same max as a
/// tree (lane_row_reduce, below).
template <class Cfg>
__device__ __forceinline__ float tile_row_max(const float (&S)[Cfg::kMTiles][Cfg::Bc / 8][4], int mt, int h) {
    float mx = -INFINITY;
    #pragma unroll
    for (int n = 0; n < Cfg::Bc / 8; ++n) mx = fmaxf(mx, fmaxf(S[mt][n][2 * h], S[mt][n][2 * h + 1]));
    return fa::group_max<4>(mx);
}

/// v[n] = op(v[n], v[n + W]) for n < W, then the same with W / 2, ..., 1: a tree whose every loop
/// has a constant trip count, so it unrolls and v stays in registers (a loop `for (w = NT/2; w > 0;
/// w /= 2)` was left rolled by nvcc at B_c = 128, putting v in local memory).
template <int W, int NT, class Op>
__device__ __forceinline__ void fold_halves(float (&v)[NT], Op op) {
    #pragma unroll
    for (int n = 0; n < W; ++n) v[n] = op(v[n], v[n + W]);
    if constexpr (W > 1) fold_halves<W / 2>(v, op);
}

/// op over the lane's 2·(B_c/8) entries of row (mt, h), as a tree: log2 steps of independent
/// operations instead of one chain of dependent ones (each waits for the last to finish).
template <class Cfg, class Op>
__device__ __forceinline__ float lane_row_reduce(const float (&S)[Cfg::kMTiles][Cfg::Bc / 8][4], int mt,
                                                 int h, Op op) {
    constexpr int NT = Cfg::Bc / 8;
    static_assert((NT & (NT - 1)) == 0, "lane_row_reduce: B_c / 8 is a power of two");
    float v[NT];
    #pragma unroll
    for (int n = 0; n < NT; ++n) v[n] = op(S[mt][n][2 * h], S[mt][n][2 * h + 1]);
    fold_halves<NT / 2>(v, op);
    return v[0];
}

/// O rows (mt, h) times alpha.
template <class Cfg>
__device__ __forceinline__ void rescale_row(float (&O)[Cfg::kMTiles][Cfg::D / 8][4], int mt, int h, float alpha) {
    #pragma unroll
    for (int d = 0; d < Cfg::D / 8; ++d) O[mt][d][2 * h] *= alpha, O[mt][d][2 * h + 1] *= alpha;
}

/// The row max the exponents subtract: m, or 0 while m = −inf. A row that sees no key (causal with
/// N > N_k) keeps m = −inf through every tile; e^{x − m} would be e^{−inf − (−inf)} = NaN, with 0
/// it is e^{−inf} = 0, and so is the rescale factor, leaving l = 0 and O = 0 (FlashAttention-2's
/// guard). Every other row has a finite m after the first tile, because tile 0 comes first and
/// holds key 0, which every row that sees a key sees: for those the guard changes no bit.
__device__ __forceinline__ float exponent_max(float m) { return m == -INFINITY ? 0.0f : m; }

/// Alg. 1 lines 9–10 (first half): new row max m, P̃ = exp(S·scale − m) in place of S, l and O
/// rescaled by e^{m_old − m} (exponent_max says what a row that sees no key does).
///
/// Steps 2–4: expf(x·scale − m) with m scaled; the quad-sum of l and the O rescale every tile.
/// Step 5: P̃ = 2^(x·c − m·c) with c = scale·log2(e): one FFMA and one MUFU.EX2 per score; O and l
/// are rescaled only when some row max of the warp moved (alpha = 1 exactly otherwise, so skipping
/// changes no bit); l stays a per-lane partial sum; the lane's share of a row max and of a row sum
/// is taken as a tree (lane_row_reduce), not as one dependent chain.
template <class Cfg>
__device__ __forceinline__ void online_softmax(float (&S)[Cfg::kMTiles][Cfg::Bc / 8][4],
                                               RowStats<Cfg>& st,
                                               float (&O)[Cfg::kMTiles][Cfg::D / 8][4],
                                               float scale, float scale_log2) {
    constexpr int MT = Cfg::kMTiles, NT = Cfg::Bc / 8;
    if constexpr (!Cfg::kExp2) {  // steps 2–4: natural exp of scaled scores
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float m_new = fmaxf(st.m[mt][h], tile_row_max<Cfg>(S, mt, h) * scale);
                const float m_exp = exponent_max(m_new);
                const float alpha = expf(st.m[mt][h] - m_exp);
                float sum = 0.0f;
                #pragma unroll
                for (int n = 0; n < NT; ++n)
                    #pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float& x = S[mt][n][2 * h + e];
                        x = expf(x * scale - m_exp);
                        sum += x;
                    }
                st.l[mt][h] = alpha * st.l[mt][h] + fa::group_sum<4>(sum);
                st.m[mt][h] = m_new;
                rescale_row<Cfg>(O, mt, h, alpha);
            }
    } else {  // step 5: exp2, scale folded in, lazy rescale
        float alpha[MT][2], tile_sum[MT][2];
        bool moved = false;
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float m_new = fmaxf(st.m[mt][h], fa::group_max<4>(lane_row_reduce<Cfg>(
                    S, mt, h, [](float a, float b) { return fmaxf(a, b); })));
                moved |= m_new != st.m[mt][h];
                const float m_exp = exponent_max(m_new);
                alpha[mt][h] = tc::fast_exp2((st.m[mt][h] - m_exp) * scale_log2);
                st.m[mt][h] = m_new;
                const float mc = m_exp * scale_log2;
                #pragma unroll
                for (int n = 0; n < NT; ++n)
                    #pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float& x = S[mt][n][2 * h + e];
                        x = tc::fast_exp2(fmaf(x, scale_log2, -mc));
                    }
                tile_sum[mt][h] = lane_row_reduce<Cfg>(S, mt, h, [](float a, float b) { return a + b; });
            }
        if (__any_sync(0xffffffffu, moved)) {
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                #pragma unroll
                for (int h = 0; h < 2; ++h) {
                    st.l[mt][h] *= alpha[mt][h];
                    rescale_row<Cfg>(O, mt, h, alpha[mt][h]);
                }
        }
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int h = 0; h < 2; ++h) st.l[mt][h] += tile_sum[mt][h];
    }
}

/// Alg. 1 lines 12–15: O_i = O / l and L_i = m·scale + log l (natural log, like the reference),
/// written for the warp's rows below N. q_row0 is the warp's first row in the sequence; Oh and Lh
/// point at the head's rows. A row that saw no key has l = 0: O = 0 (not 0/0) and L = −inf + log 0
/// = −inf, the reference's convention (reference.h).
template <class T, class Cfg>
__device__ __forceinline__ void store_rows(const float (&O)[Cfg::kMTiles][Cfg::D / 8][4],
                                           const RowStats<Cfg>& st, uint16_t* Oh, float* Lh,
                                           int q_row0, int N, float scale, int lane) {
    constexpr int MT = Cfg::kMTiles;
    float l[MT][2];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        // step 5: l reduced over the quad once
        for (int h = 0; h < 2; ++h) l[mt][h] = Cfg::kExp2 ? fa::group_sum<4>(st.l[mt][h]) : st.l[mt][h];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = q_row0 + 16 * mt + tc::frag_c_row(lane, 2 * h);
            if (row >= N) continue;
            const float inv_l = l[mt][h] > 0.0f ? 1.0f / l[mt][h] : 0.0f;
            #pragma unroll
            for (int d = 0; d < Cfg::D / 8; ++d) {
                uint16_t* dst = Oh + row * Cfg::D + 8 * d + tc::frag_c_col(lane, 2 * h);
                *reinterpret_cast<uint32_t*>(dst) = tc::pack2<T>(O[mt][d][2 * h] * inv_l, O[mt][d][2 * h + 1] * inv_l);
            }
            if (tc::lane_in_group(lane) == 0)
                // step 5: m kept unscaled
                Lh[row] = (Cfg::kExp2 ? st.m[mt][h] * scale : st.m[mt][h]) + logf(l[mt][h]);
        }
}

#endif  // FA_TC_SM80

}  // namespace FA_TC_KERNELS
}  // namespace ch7
