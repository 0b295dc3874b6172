/// @file dq_atomics.cuh
/// @brief Chapter 8: Algorithm 2's line 15 with --dq atomic, dQ_i += dS K_j added from every key
/// block into an fp32 workspace with atomicAdd (the dK/dV kernels of backward.cuh and
/// backward_fa2.cuh call it; convert_dq_kernel scales and rounds the sum afterwards).
///
///   load_ds_frag         the A operand: dS read transposed from the block's dSᵀ tile (ldmatrix.trans)
///   dq_add_tile          the adds of one 16 × 8 accumulator tile: one float per atomicAdd, or
///   dq_add_vector          (step 5's option, sm_90) float2 / float4 vector atomics
///   dq_add               steps 1–5: the B_r × D product shared among the warps, then its adds
///   dq_product,          line 15 in warp tiles of DqM m-tiles (step 5's option, step 6's layout),
///   dq_atomics             split in two so that step 6 can spread the adds between line 12's k-steps
#pragma once

#include <cstdint>
#include <type_traits>

#include "../../../common/tensor_core/layout.h"
#include "../../../common/tensor_core/ptx.cuh"
#include "../../07_tensor_cores/kernel/warp_tile.cuh"
#include "bwd_config.h"
#include "warp_mma.cuh"

namespace ch8 {
inline namespace FA_TC_KERNELS {

/// Floats one atomicAdd on global memory can add in this build: vector atomics (`atomicAdd` on
/// float2 and float4, PTX red.global.add.v2/.v4.f32) exist from compute capability 9.0; the
/// emulator has them too (emulator.h), so CI runs the vector path. The host asks a GPU which of
/// the two its code has (launch.cu, dq_vec_probe).
#if defined(FA_TC_EMULATE) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
constexpr int kMaxDqVec = 4;
#else
constexpr int kMaxDqVec = 1;
#endif
/// The floats per dQ atomicAdd a configuration runs in this build: its DqVec where vector atomics
/// exist, one otherwise (the scalar fallback).
template <class Cfg>
constexpr int kDqVecRun = Cfg::kDqVec <= kMaxDqVec ? Cfg::kDqVec : 1;

#if FA_TC_SM80

/// The A fragment of dS (query rows 16mt.., keys 16kk..) from the dSᵀ tile (row = key): the
/// transpose of what is stored. ldmatrix.trans of matrices (keys 0–7, queries 0–7),
/// (keys 0–7, queries 8–15), (keys 8–15, queries 0–7), (keys 8–15, queries 8–15) gives
/// a0..a3; a lane addresses them the way it addresses K rows for S = Q·Kᵀ (ldsm_k_offset).
template <class Cfg>
__device__ __forceinline__ void load_ds_frag(uint32_t (&a)[4], const uint16_t* dSt, int mt, int kk, int lane) {
    if constexpr (Cfg::kLdmatrix) {  // step 2: ldmatrix.trans
        tc::ldmatrix_x4_trans(a, dSt + tc::ldsm_k_offset(lane, kk, mt, Cfg::Br));
    } else {  // step 1: two 16-bit loads per register
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int q = 16 * mt + tc::frag_a_row(lane, r), key = 16 * kk + tc::frag_a_col(lane, r, 0);
            const uint32_t lo = tc::ld_shared(dSt + tc::row_major(key, q, Cfg::Br));
            const uint32_t hi = tc::ld_shared(dSt + tc::row_major(key + 1, q, Cfg::Br));
            a[r] = lo | (hi << 16);
        }
    }
}

/// Line 15's atomics for one 16 × 8 accumulator tile c of dQ_i with vector atomics (step 5's
/// option), fewer atomic instructions each adding a contiguous 8 or 16 bytes; see dq_add_tile for
/// `at`, row_g and kCheckRows.
///   Vec 2: each row's float2 at its own place: `at` plus an immediate.
///   Vec 4: lanes l and l ^ 1 (t even and t + 1) hold columns 4·(t/2)..4·(t/2) + 3 of both rows
///     between them. The even lane takes row g, the odd lane row g + 8: each gives the other the
///     row it does not take (one shuffle per pair of values exchanged), then adds one float4 of
///     its row, the even lane's two columns first.
/// Vector atomics need aligned addresses (8 or 16 bytes): the workspace starts a multiple of 1 KB
/// into its allocation (after L2 and D_i, whose rows are padded to multiples of 128), its rows are
/// D floats, and the columns a lane adds start at an even (Vec 2) or a multiple of 4 (Vec 4).
template <int Vec, bool kCheckRows, int D>
__device__ __forceinline__ void dq_add_vector(float* at, const float (&c)[4], int row_g, int N, int lane) {
    if constexpr (Vec == 2) {
        #pragma unroll
        for (int r = 0; r < 2; ++r)
            if (!kCheckRows || row_g + 8 * r < N)
                atomicAdd(reinterpret_cast<float2*>(at + 8 * D * r), make_float2(c[2 * r], c[2 * r + 1]));
    } else {
        static_assert(Vec == 4, "dq_add_vector: 2 or 4 floats per atomic");
        const bool odd = lane & 1;  // takes row g + 8
        const float give0 = odd ? c[0] : c[2], give1 = odd ? c[1] : c[3];
        const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
        const float4 v = odd ? make_float4(got0, got1, c[2], c[3]) : make_float4(c[0], c[1], got0, got1);
        if (!kCheckRows || row_g + (odd ? 8 : 0) < N)
            atomicAdd(reinterpret_cast<float4*>(at + (odd ? 8 * D - 2 : 0)), v);
    }
}

/// Line 15's atomics for one 16 × 8 accumulator tile c of dQ_i: one float per atomicAdd, or (step
/// 5) Vec floats (dq_add_vector). Lane l (g = l / 4, t = l % 4) holds rows g (c0, c1) and g + 8
/// (c2, c3), columns 2t and 2t + 1 (tc::frag_c_row, tc::frag_c_col); `at` is its element (g, 2t) of
/// the tile in the workspace (rows of D floats), so every add is `at` plus an immediate, and row_g
/// is that element's row of the head. Rows at or past N are skipped when kCheckRows: a Q_i tile
/// that ends at or before N needs no check, and without one the adds are straight-line code (with
/// it, each add sat in a branch of its own).
template <int Vec, bool kCheckRows, int D>
__device__ __forceinline__ void dq_add_tile(float* at, const float (&c)[4], int row_g, int N, int lane) {
    if constexpr (Vec == 1) {
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            if (!kCheckRows || row_g + 8 * (i / 2) < N) atomicAdd(at + 8 * D * (i / 2) + i % 2, c[i]);
    } else {  // step 5: vector atomics
        dq_add_vector<Vec, kCheckRows, D>(at, c, row_g, N, lane);
    }
}

/// The lane's element (g, 2t) of the 16 × 8 tile of dQ_i at rows row0.., columns col0.. in the
/// workspace (dq_add_tile's `at`).
template <int D>
__device__ __forceinline__ float* dq_lane_at(float* dQacc_head, int row0, int col0, int lane) {
    return dQacc_head + (row0 + tc::frag_c_row(lane, 0)) * D + col0 + tc::frag_c_col(lane, 0);
}

/// add(std::false_type{}) for a Q_i tile (rows q0..q0 + Br − 1) that ends at or before N, else
/// add(std::true_type{}): dq_add_tile's row check only where rows reach past N.
template <int Br, class Add>
__device__ __forceinline__ void with_row_check(int q0, int N, Add add) {
    if (q0 + Br <= N)
        add(std::false_type{});
    else
        add(std::true_type{});
}

/// Line 15's warp tile with DqM > 1 (step 5's option, step 6's layout): warp w takes m-tiles
/// mt0 = DqM·(w mod B_r/(16·DqM)).. and the kDqCols columns from 16·dd0, in kTiles 16 × 8
/// accumulator tiles, tile u = m·2·kPairs + n.
template <class Cfg>
struct DqWarpTile {
    static constexpr int M = Cfg::kDqM, kPairs = Cfg::kDqCols / 16;  // 16-column pairs of d per warp
    static constexpr int kRowUnits = Cfg::Br / 16 / M, kTiles = M * 2 * kPairs;
    int mt0, dd0;
    __device__ __forceinline__ explicit DqWarpTile(int warp)
        : mt0(M * (warp % kRowUnits)), dd0(kPairs * (warp / kRowUnits)) {}
};

/// Line 15's product for DqM > 1: acc = dS K_j for the warp's tile (DqWarpTile), the accumulators
/// held while it walks the keys 16 at a time: every K_j fragment serves DqM m-tiles, so the warps
/// together read K_j B_r/(16·DqM) times instead of B_r/16.
template <class T, class Cfg>
__device__ __forceinline__ void dq_product(float (&acc)[Cfg::kDqM][2 * (Cfg::kDqCols / 16)][4], const uint16_t* dSt,
                                           const uint16_t* Ks, int warp, int lane) {
    using Tile = DqWarpTile<Cfg>;
    const Tile w(warp);
    zero_acc(acc);
    if constexpr (Cfg::kPrefetch) {  // step 6 option: FA2's order of loads and products
        mma_prefetched<T, Tile::M, Tile::kPairs, Cfg::Bc / 16>(
            acc, [&](uint32_t(&a)[4], int m, int kk) { load_ds_frag<Cfg>(a, dSt, w.mt0 + m, kk, lane); },
            [&](uint32_t(&b)[2][2], int s, int kk) { ch7::load_v_frags<typename Cfg::Warp>(b, Ks, kk, w.dd0 + s, lane); });
    } else {
        #pragma unroll
        for (int kk = 0; kk < Cfg::Bc / 16; ++kk) {
            uint32_t a[Tile::M][4];
            #pragma unroll
            for (int m = 0; m < Tile::M; ++m) load_ds_frag<Cfg>(a[m], dSt, w.mt0 + m, kk, lane);
            #pragma unroll
            for (int s = 0; s < Tile::kPairs; ++s) {
                uint32_t b[2][2];
                ch7::load_v_frags<typename Cfg::Warp>(b, Ks, kk, w.dd0 + s, lane);  // B = K_j: keys × d, .trans
                #pragma unroll
                for (int m = 0; m < Tile::M; ++m) {
                    tc::mma_m16n8k16<T>(acc[m][2 * s], a[m], b[0]);
                    tc::mma_m16n8k16<T>(acc[m][2 * s + 1], a[m], b[1]);
                }
            }
        }
    }
}

/// Line 15's atomics for tiles first..first + Count − 1 of dq_product's acc (all kTiles, or step
/// 6's share between two k-steps of line 12, where the adds run beside tensor-core work instead of
/// in one burst that fills the memory pipeline). Unscaled: convert_dq_kernel applies the scale.
template <class Cfg, int Count>
__device__ __forceinline__ void dq_atomics(float* dQacc_head, const float (&acc)[Cfg::kDqM][2 * (Cfg::kDqCols / 16)][4],
                                           int q0, int N, int warp, int lane, int first) {
    using Tile = DqWarpTile<Cfg>;
    constexpr int D = Cfg::D, kDqVec = kDqVecRun<Cfg>;
    const Tile w(warp);
    float* at = dq_lane_at<D>(dQacc_head, q0 + 16 * w.mt0, 16 * w.dd0, lane);  // every tile's: this plus an immediate
    with_row_check<Cfg::Br>(q0, N, [&](auto check) {
        #pragma unroll
        for (int i = 0; i < Count; ++i) {
            const int u = first + i, m = u / (2 * Tile::kPairs), n = u % (2 * Tile::kPairs);
            if (u < Tile::kTiles)
                dq_add_tile<kDqVec, decltype(check)::value, D>(at + 16 * m * D + 8 * n, acc[m][n],
                                                               q0 + 16 * (w.mt0 + m) + tc::frag_c_row(lane, 0), N, lane);
        }
    });
}

/// Line 15 with atomics: dQ_i += dS K_j (unscaled; convert_dq_kernel applies the scale), from
/// the block's complete dSᵀ tile. The adds are Cfg::kDqVec floats wide where this build has
/// vector atomics, one float otherwise. How the B_r × D product is shared among the warps:
///   DqM = 1: B_r/16 m-tiles and, when there are more warps than m-tiles, column slices; warp w
///     takes units w, w + Warps, ... and holds the unit's dS fragments (B_c/16 of them) while it
///     walks its columns 16 at a time: every K_j fragment it reads serves one m-tile.
///   DqM = 2, 4 (step 5): dq_product, then dq_atomics of all its tiles.
template <class T, class Cfg>
__device__ __forceinline__ void dq_add(float* dQacc_head, const uint16_t* dSt, const uint16_t* Ks, int q0, int N,
                                       int warp, int lane) {
    constexpr int D = Cfg::D, kRowTiles = Cfg::Br / 16;
    constexpr int kDqVec = kDqVecRun<Cfg>;
    if constexpr (Cfg::kDqM == 1) {
        constexpr int kSlices = Cfg::kWarps > kRowTiles ? Cfg::kWarps / kRowTiles : 1;
        constexpr int kSliceTiles = D / 16 / kSlices;  // 16-column pairs of d per slice
        for (int u = warp; u < kRowTiles * kSlices; u += Cfg::kWarps) {
            const int mt = u % kRowTiles, slice = u / kRowTiles;
            uint32_t a[Cfg::Bc / 16][4];
            #pragma unroll
            for (int kk = 0; kk < Cfg::Bc / 16; ++kk) load_ds_frag<Cfg>(a[kk], dSt, mt, kk, lane);
            #pragma unroll
            for (int s = 0; s < kSliceTiles; ++s) {
                const int dd = slice * kSliceTiles + s;
                float acc[2][4] = {};
                #pragma unroll
                for (int kk = 0; kk < Cfg::Bc / 16; ++kk) {
                    uint32_t b[2][2];
                    ch7::load_v_frags<typename Cfg::Warp>(b, Ks, kk, dd, lane);  // B = K_j: keys × d, .trans
                    tc::mma_m16n8k16<T>(acc[0], a[kk], b[0]);
                    tc::mma_m16n8k16<T>(acc[1], a[kk], b[1]);
                }
                float* at = dq_lane_at<D>(dQacc_head, q0 + 16 * mt, 16 * dd, lane);
                with_row_check<Cfg::Br>(q0, N, [&](auto check) {
                    #pragma unroll
                    for (int h = 0; h < 2; ++h)
                        dq_add_tile<kDqVec, decltype(check)::value, D>(at + 8 * h, acc[h],
                                                                       q0 + 16 * mt + tc::frag_c_row(lane, 0), N, lane);
                });
            }
        }
    } else {
        float acc[Cfg::kDqM][2 * (Cfg::kDqCols / 16)][4];
        dq_product<T, Cfg>(acc, dSt, Ks, warp, lane);
        dq_atomics<Cfg, DqWarpTile<Cfg>::kTiles>(dQacc_head, acc, q0, N, warp, lane, 0);
    }
}

#endif  // FA_TC_SM80

}  // namespace FA_TC_KERNELS
}  // namespace ch8
