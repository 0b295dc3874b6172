/// @file flash_tc.cuh
/// @brief Chapter 7, variants 2–6: the FlashAttention-2 forward on mma.sync, one kernel template
/// whose MmaConfig says which steps of the ladder it has (mma_config.h).
///
/// Grid: (T_r query blocks, H, B); block: Warps warps. Block (x, h, b) computes the B_r query rows
/// of query block x (step 6, causal: gridDim.x − 1 − x, the longest rows first) of head (b, h).
/// Shared memory: the Q tile (B_r × D) and `Stages` buffers of (K_j, V_j), each B_c × D, 16-bit.
/// Registers per lane: S and O accumulators, row statistics (warp_tile.cuh, online_softmax.cuh).
#pragma once

#include <cstdint>

#include "mma_config.h"
#include "online_softmax.cuh"
#include "ptx.cuh"
#include "tile_io.cuh"
#include "warp_tile.cuh"

namespace ch7 {
inline namespace FA_CH7_KERNELS {

/// What every forward kernel of the chapter gets: device arrays in the layout of shape.h, 16-bit
/// elements passed as raw bits (the instructions choose fp16 or bf16).
struct FwdParams {
    const uint16_t* Q;
    const uint16_t* K;
    const uint16_t* V;
    uint16_t* O;
    float* L;
    int N, H;
    float scale;       ///< softmax scale
    float scale_log2;  ///< scale · log2(e), for the exp2 form
    bool causal;
};

/// Alg. 1 of FlashAttention-2 for one block of query rows, in the variant `Cfg` describes.
template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) flash_tc_kernel(const FwdParams p) {
#if FA_CH7_SM80
    constexpr int D = Cfg::D, Br = Cfg::Br, Bc = Cfg::Bc, MT = Cfg::kMTiles, kStages = Cfg::kStages;
    constexpr int kThreads = Cfg::kThreads;
    constexpr bool kSwizzled = Cfg::kLdmatrix;
    constexpr Copy kCopy = Cfg::kCpAsync ? Copy::kAsync : Copy::kSync;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
    uint16_t* KVs = Qs + Br * D;  // stage s: K at KVs + s·2·B_c·D, V right after it

    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int q_block = Cfg::kHeavyFirst && p.causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
    const int q0 = q_block * Br;               // first query row of the block
    const int wr = warp * Cfg::kWarpRows;      // the warp's first row in the Q tile
    const int wq0 = q0 + wr, wq_last = wq0 + Cfg::kWarpRows - 1;
    const std::size_t head = (std::size_t(blockIdx.z) * p.H + blockIdx.y) * std::size_t(p.N);
    const uint16_t* Qh = p.Q + head * D;
    const uint16_t* Kh = p.K + head * D;
    const uint16_t* Vh = p.V + head * D;
    // Alg. 1 line 6, with the causal mask: no key after the block's last row is ever needed.
    const int key_end = p.causal ? min_int(p.N, q0 + Br) : p.N;
    const int Tc = (key_end + Bc - 1) / Bc;
    auto K_stage = [&](int j) { return KVs + (j % kStages) * 2 * Bc * D; };
    auto load_kv = [&](int j) {  // Alg. 1 line 7: K_j, V_j
        load_tile<Bc, D, kThreads, kSwizzled, kCopy>(K_stage(j), Kh, j * Bc, p.N);
        load_tile<Bc, D, kThreads, kSwizzled, kCopy>(K_stage(j) + Bc * D, Vh, j * Bc, p.N);
    };

    // Alg. 1 line 4: Q_i. With cp.async it travels in the group of K_0, V_0, and the first
    // Stages − 1 tiles are in flight before the loop starts.
    load_tile<Br, D, kThreads, kSwizzled, kCopy>(Qs, Qh, q0, p.N);
    if constexpr (Cfg::kCpAsync) {
        FA_UNROLL
        for (int j = 0; j < kStages - 1; ++j) {
            if (j < Tc) load_kv(j);
            cp_async_commit();
        }
    }

    // Alg. 1 line 5
    float O[MT][D / 8][4];
    FA_UNROLL
    for (int mt = 0; mt < MT; ++mt)
        FA_UNROLL
        for (int d = 0; d < D / 8; ++d)
            FA_UNROLL
            for (int i = 0; i < 4; ++i) O[mt][d][i] = 0.0f;
    RowStats<Cfg> st;
    init_rows<Cfg>(st);
    QFrags<Cfg> q;

    for (int j = 0; j < Tc; ++j) {
        if constexpr (Cfg::kCpAsync) {
            // Tile j's group is complete once at most Stages − 2 younger groups are pending; the
            // barrier makes every thread's copies visible and tells that every warp is done with
            // tile j − 1, whose buffer the load issued next (tile j + Stages − 1) overwrites.
            cp_async_wait<kStages - 2>();
            __syncthreads();
            if (j + kStages - 1 < Tc) load_kv(j + kStages - 1);
            cp_async_commit();  // an empty group past the end keeps the count uniform
        } else {
            __syncthreads();  // every warp is done with the previous K_j, V_j
            load_kv(j);
            __syncthreads();
        }
        const int k0 = j * Bc;
        if (p.causal && k0 > wq_last) continue;  // every key of the tile is after every row of the warp
        if constexpr (Cfg::kQInRegs)
            if (j == 0) load_q_frags<Cfg>(q, Qs, wr, lane);
        const uint16_t* Ks = K_stage(j);
        const uint16_t* Vs = Ks + Bc * D;

        float S[MT][Bc / 8][4];
        scores<T, Cfg>(S, Qs, q, Ks, wr, lane);                             // line 8
        if (k0 + Bc > p.N || (p.causal && k0 + Bc - 1 > wq0))               // only edge tiles
            mask_scores<Cfg>(S, wq0, k0, p.N, p.causal, lane);
        online_softmax<Cfg>(S, st, O, p.scale, p.scale_log2);               // lines 9–10
        uint32_t P[MT][Bc / 16][4];
        pack_p<T, Cfg>(P, S);
        accumulate_pv<T, Cfg>(O, P, Vs, lane);                              // line 10
    }
    store_rows<T, Cfg>(O, st, p.O + head * D, p.L + head, wq0, p.N, p.scale, lane);  // lines 12–15
#else
    __trap();  // compute capability < 8.0: the host refuses to launch (device_unsupported_reason)
#endif
}

}  // namespace FA_CH7_KERNELS
}  // namespace ch7
