/// @file warp_tile.cuh
/// @brief Chapter 7: one warp's share of a tile, in mma.sync fragments (steps 2–6).
///
/// Who owns what: warp w of the block owns query rows wr .. wr + 16·MTiles − 1 of the Q tile
/// (wr = w·16·MTiles), as MTiles m-tiles of 16 rows. For each m-tile mt, lane = 4g + t holds
///   S[mt][n][i]  score of row 16mt + tc::frag_c_row(lane, i), key 8n + tc::frag_c_col(lane, i) of the tile
///   O[mt][d][i]  output of the same row, column 8d + tc::frag_c_col(lane, i)
/// i.e. rows g and g+8 of the m-tile, two adjacent columns of every 8-column n-tile. The four
/// lanes of a group (a "quad") together hold whole rows: row statistics need only two shuffles.
///
/// Step 2 reads fragments element pair by element pair from a row-major tile (bank conflicts: see
/// README); step 3 reads them with ldmatrix from a swizzled tile (conflict-free).
/// Chapters 8, 9 and 10 compile this header too (their fragment loads and products): a change here rebuilds them.
#pragma once

#include <cstdint>

#include "../../../common/tensor_core/layout.h"
#include "../../../common/tensor_core/ptx.cuh"

namespace ch7 {
inline namespace FA_TC_KERNELS {

#if FA_TC_SM80

/// Step 2: the 32 bits at (row, col), (row, col + 1) of a row-major tile (col even).
template <class Cfg>
__device__ __forceinline__ uint32_t pair_at(const uint16_t* tile, int row, int col) {
    return tc::ld_shared(reinterpret_cast<const uint32_t*>(tile + tc::row_major(row, col, Cfg::D)));
}

/// A fragment (16 rows × 16 k) of the Q tile: rows r0.., columns 16kk...
template <class Cfg>
__device__ __forceinline__ void load_a_frag(uint32_t (&a)[4], const uint16_t* Qs, int r0, int kk,
                                            int lane) {
    if constexpr (Cfg::kLdmatrix) {  // step 3: ldmatrix
        tc::ldmatrix_x4(a, Qs + tc::ldsm_a_offset(lane, r0, kk, Cfg::D));
    } else {  // step 2: element pairs
        #pragma unroll
        for (int r = 0; r < 4; ++r)
            a[r] = pair_at<Cfg>(Qs, r0 + tc::frag_a_row(lane, r), 16 * kk + tc::frag_a_col(lane, r, 0));
    }
}

/// B fragments of S = Q·Kᵀ for the n-tiles 2nn (keys 16nn..+7) and 2nn+1 (keys 16nn+8..+15) of
/// the K tile, k-step kk (d = 16kk..+15). B[k][n] = K[key n][d k]: a key row is a B column.
template <class Cfg>
__device__ __forceinline__ void load_k_frags(uint32_t (&b)[2][2], const uint16_t* Ks, int nn,
                                             int kk, int lane) {
    if constexpr (Cfg::kLdmatrix) {  // step 3: ldmatrix
        uint32_t r[4];
        tc::ldmatrix_x4(r, Ks + tc::ldsm_k_offset(lane, nn, kk, Cfg::D));
        b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
    } else {  // step 2: element pairs
        #pragma unroll
        for (int h = 0; h < 2; ++h)
            #pragma unroll
            for (int r = 0; r < 2; ++r)
                b[h][r] = pair_at<Cfg>(Ks, 16 * nn + 8 * h + tc::frag_b_col(lane),
                                       16 * kk + tc::frag_b_row(lane, r, 0));
    }
}

/// B fragments of O += P·V for keys 16kk..+15 and the d-tiles 2dd (d = 16dd..+7) and 2dd+1
/// (d = 16dd+8..+15). B[k][n] = V[key k][d n]: the pair a register holds is two keys apart in
/// memory, hence .trans (step 3) or two 16-bit loads (step 2).
template <class Cfg>
__device__ __forceinline__ void load_v_frags(uint32_t (&b)[2][2], const uint16_t* Vs, int kk,
                                             int dd, int lane) {
    if constexpr (Cfg::kLdmatrix) {  // step 3: ldmatrix.trans
        uint32_t r[4];
        tc::ldmatrix_x4_trans(r, Vs + tc::ldsm_v_offset(lane, kk, dd, Cfg::D));
        b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
    } else {  // step 2: two 16-bit loads per register
        #pragma unroll
        for (int h = 0; h < 2; ++h)
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int key = 16 * kk + tc::frag_b_row(lane, r, 0), d = 16 * dd + 8 * h + tc::frag_b_col(lane);
                const uint32_t lo = tc::ld_shared(Vs + tc::row_major(key, d, Cfg::D));
                const uint32_t hi = tc::ld_shared(Vs + tc::row_major(key + 1, d, Cfg::D));
                b[h][r] = lo | (hi << 16);
            }
    }
}

/// Q fragments a warp keeps in registers for the whole key loop (step 6 option) — or a one-element
/// placeholder that the compiler removes when they stay in shared memory.
template <class Cfg>
struct QFrags {
    static constexpr int kM = Cfg::kQInRegs ? Cfg::kMTiles : 1;
    static constexpr int kK = Cfg::kQInRegs ? Cfg::D / 16 : 1;
    uint32_t a[kM][kK][4];
};

/// Loads every Q fragment of the warp's rows (rows wr.. of the Q tile) into registers.
template <class Cfg>
__device__ __forceinline__ void load_q_frags(QFrags<Cfg>& q, const uint16_t* Qs, int wr, int lane) {
    #pragma unroll
    for (int mt = 0; mt < QFrags<Cfg>::kM; ++mt)
        #pragma unroll
        for (int kk = 0; kk < QFrags<Cfg>::kK; ++kk) load_a_frag<Cfg>(q.a[mt][kk], Qs, wr + 16 * mt, kk, lane);
}

/// Alg. 1 line 8: S = Q_i K_jᵀ for the warp's rows (wr..) and all B_c keys of the K tile.
template <class T, class Cfg>
__device__ __forceinline__ void scores(float (&S)[Cfg::kMTiles][Cfg::Bc / 8][4], const uint16_t* Qs,
                                       const QFrags<Cfg>& q, const uint16_t* Ks, int wr, int lane) {
    constexpr int MT = Cfg::kMTiles;
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int n = 0; n < Cfg::Bc / 8; ++n)
            #pragma unroll
            for (int i = 0; i < 4; ++i) S[mt][n][i] = 0.0f;
    #pragma unroll
    for (int kk = 0; kk < Cfg::D / 16; ++kk) {
        uint32_t a[MT][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            if constexpr (Cfg::kQInRegs) {  // step 6 option: Q in registers
                #pragma unroll
                for (int r = 0; r < 4; ++r) a[mt][r] = q.a[mt][kk][r];
            } else {  // Q fragments from shared memory
                load_a_frag<Cfg>(a[mt], Qs, wr + 16 * mt, kk, lane);
            }
        }
        #pragma unroll
        for (int nn = 0; nn < Cfg::Bc / 16; ++nn) {
            uint32_t b[2][2];
            load_k_frags<Cfg>(b, Ks, nn, kk, lane);
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                tc::mma_m16n8k16<T>(S[mt][2 * nn], a[mt], b[0]);
                tc::mma_m16n8k16<T>(S[mt][2 * nn + 1], a[mt], b[1]);
            }
        }
    }
}

/// Sets to −inf the scores of keys past N_k and, with the causal mask, of keys after the query's
/// last visible key. k0 is the tile's first key; q_row0 the warp's first query row in key
/// coordinates: its row plus N_k − N, so that row i sees keys up to i + N_k − N (the diagonal
/// bottom-right, shape.h; with N_k = N the row itself).
template <class Cfg>
__device__ __forceinline__ void mask_scores(float (&S)[Cfg::kMTiles][Cfg::Bc / 8][4], int q_row0,
                                            int k0, int N_k, bool causal, int lane) {
    #pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt)
        #pragma unroll
        for (int n = 0; n < Cfg::Bc / 8; ++n)
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = q_row0 + 16 * mt + tc::frag_c_row(lane, i);
                const int key = k0 + 8 * n + tc::frag_c_col(lane, i);
                if (key >= N_k || (causal && key > row)) S[mt][n][i] = -INFINITY;
            }
}

/// P̃ stays in registers: rounded to T and packed as the A fragments of P̃·V. The accumulators
/// of S n-tiles 2kk and 2kk+1 are exactly the A fragment of k-step kk (layout.h, p_ntile_of_a_reg),
/// so no element changes lanes. Halves the registers P̃ needs (two 16-bit values per register).
template <class T, class Cfg>
__device__ __forceinline__ void pack_p(uint32_t (&P)[Cfg::kMTiles][Cfg::Bc / 16][4],
                                       const float (&S)[Cfg::kMTiles][Cfg::Bc / 8][4]) {
    #pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt)
        #pragma unroll
        for (int kk = 0; kk < Cfg::Bc / 16; ++kk)
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
                const float(&acc)[4] = S[mt][2 * kk + tc::p_ntile_of_a_reg(r)];
                P[mt][kk][r] = tc::pack2<T>(acc[tc::p_elem_of_a_reg(r, 0)], acc[tc::p_elem_of_a_reg(r, 1)]);
            }
}

/// Alg. 1 line 10 (second half): O += P̃ V_j, with P̃ packed by pack_p.
template <class T, class Cfg>
__device__ __forceinline__ void accumulate_pv(float (&O)[Cfg::kMTiles][Cfg::D / 8][4],
                                              const uint32_t (&P)[Cfg::kMTiles][Cfg::Bc / 16][4],
                                              const uint16_t* Vs, int lane) {
    #pragma unroll
    for (int kk = 0; kk < Cfg::Bc / 16; ++kk)
        #pragma unroll
        for (int dd = 0; dd < Cfg::D / 16; ++dd) {
            uint32_t b[2][2];
            load_v_frags<Cfg>(b, Vs, kk, dd, lane);
            #pragma unroll
            for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
                tc::mma_m16n8k16<T>(O[mt][2 * dd], P[mt][kk], b[0]);
                tc::mma_m16n8k16<T>(O[mt][2 * dd + 1], P[mt][kk], b[1]);
            }
        }
}

#endif  // FA_TC_SM80

}  // namespace FA_TC_KERNELS
}  // namespace ch7
