/// @file flash_forward.cuh
/// @brief Chapter 7: the FlashAttention-2 forward on tensor cores (fp16/bf16 in, fp32 accumulation
/// and softmax). Variants 2–6 are the kernel template in this file; this is the file to edit.
///
/// The variants (./chapter7 --kernel K; --ladder runs them all; each is kept and measured). Files
/// are in kernel/ unless named with their folder (tc/ is common/tensor_core/):
///   1  wmma       wmma_forward.cuh    nvcuda::wmma 16×16×16 fragments; S stored to shared memory
///                                     as fp32, P written back as 16-bit and reloaded, P·V stored
///                                     again and added to O by the lane that owns the row
///   2  mma-sync   flash_forward.cuh   mma.sync.m16n8k16 through inline PTX (tc/ptx.cuh): S, P, O
///                 warp_tile.cuh       stay in registers; P is rounded to 16 bits and reused as
///                 online_softmax.cuh  the A operand of P·V; row max/sum with two quad shuffles.
///                                     Fragments are read pair by pair from row-major tiles.
///   3  ldmatrix   warp_tile.cuh       ldmatrix.x4 (.trans for V) from XOR-swizzled tiles: one
///                 tc/layout.h         instruction per 4 fragment registers, no bank conflicts
///   4  cp-async   flash_forward.cuh   cp.async K/V pipeline, two buffers: tile j+1 loads while
///                 tc/tile_io.cuh      tile j computes
///   5  exp2       online_softmax.cuh  2^(x·c − m·c) with c = scale·log2 e (FFMA + EX2); O rescaled
///                                     only when a row max moved; l reduced over the quad once;
///                                     a lane's row max and sum as trees, not dependent chains
///   6  tuned      candidates.h        tiles per head dim (--sweep times the candidates), causal
///                                     query blocks launched heaviest first
/// Variants 2–6 are one kernel template, flash_forward_kernel<T, MmaConfig<Step, ...>>: `Step`
/// switches the features on cumulatively (tile_config.h), so each step's change sits in one
/// `if constexpr` labelled `// step N:` (grep -n "step 4" kernel/ shows what step 4 adds).
///
/// Who owns what (variants 2–6): warp w owns 16·m_tiles query rows of the block's Q tile; lane
/// 4g + t holds rows g and g + 8 of each of its m-tiles and, in every 8-wide column tile of S and
/// O, columns 2t and 2t + 1 (tc/layout.h has the picture). K_j and V_j are shared by the block.
///
/// Grid: (T_r query blocks, H, B); block: Warps warps. Block (x, h, b) computes the B_r query rows
/// of query block x (step 6, causal: gridDim.x − 1 − x, the longest rows first) of head (b, h),
/// reading K/V head (b, h / group) of N_k keys (grouped-query attention; N_k ≠ N with the causal
/// diagonal bottom-right: query i sees keys j ≤ i + N_k − N, as shape.h says).
/// Shared memory: the Q tile (B_r × D) and `Stages` buffers of (K_j, V_j), each B_c × D, 16-bit.
/// Registers per lane: S and O accumulators, row statistics (warp_tile.cuh, online_softmax.cuh).
///
/// Run on a GPU:   ./chapter7 --kernel K [--dtype fp16|bf16] [--dim 32|64|96|128|256] [--causal]
/// Test one kernel: make test-chapter7 VARIANT=K (its CPU-emulated tests, and with a GPU its GPU
///                 tests). The emulator (emulator/emulated_kernels.cpp) runs this same source lane
///                 by lane on the CPU, so a kernel change is tested even without a GPU.
/// Chapter 9 compiles this header too (FwdParams, for its wgmma kernel): a change here rebuilds it.
#pragma once

#include <cstdint>

#include "../../../common/math.h"
#include "tile_config.h"
#include "online_softmax.cuh"
#include "../../../common/tensor_core/ptx.cuh"
#include "../../../common/tensor_core/tile_io.cuh"
#include "warp_tile.cuh"

namespace ch7 {
inline namespace FA_TC_KERNELS {

/// What every forward kernel of the chapter gets: device arrays in the layout of shape.h, 16-bit
/// elements passed as raw bits (the instructions choose fp16 or bf16).
struct FwdParams {
    const uint16_t* Q;
    const uint16_t* K;
    const uint16_t* V;
    uint16_t* O;
    float* L;
    int N, H;
    int N_k;           ///< keys per K/V head
    int group;         ///< query heads per K/V head: H / H_kv
    float scale;       ///< softmax scale
    float scale_log2;  ///< scale · log2(e), for the exp2 form
    bool causal;
};

/// Alg. 1 of FlashAttention-2 for one block of query rows, in the variant `Cfg` describes.
template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) flash_forward_kernel(const FwdParams p) {
#if FA_TC_SM80
    constexpr int D = Cfg::D, Br = Cfg::Br, Bc = Cfg::Bc, MT = Cfg::kMTiles, kStages = Cfg::kStages;
    constexpr int kThreads = Cfg::kThreads;
    constexpr bool kSwizzled = Cfg::kLdmatrix;  // step 3: swizzled tiles
    constexpr tc::Copy kCopy = Cfg::kCpAsync ? tc::Copy::kAsync : tc::Copy::kSync;  // step 4: cp.async
    extern __shared__ __align__(128) unsigned char smem_raw[];
    uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
    uint16_t* KVs = Qs + Br * D;  // stage s: K at KVs + s·2·B_c·D, V right after it

    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    // step 6: heaviest first
    const int q_block = Cfg::kHeavyFirst && p.causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
    const int q0 = q_block * Br;               // first query row of the block
    const int wr = warp * Cfg::kWarpRows;      // the warp's first row in the Q tile
    const int wq0 = q0 + wr, wq_last = wq0 + Cfg::kWarpRows - 1;
    const std::size_t head = (std::size_t(blockIdx.z) * p.H + blockIdx.y) * std::size_t(p.N);
    const std::size_t kv_head = (std::size_t(blockIdx.z) * (p.H / p.group) + blockIdx.y / p.group) * std::size_t(p.N_k);
    const uint16_t* Qh = p.Q + head * D;
    const uint16_t* Kh = p.K + kv_head * D;
    const uint16_t* Vh = p.V + kv_head * D;
    // Row i's last visible key is i + diag (causal, bottom-right): the mask compares keys with
    // rows moved by diag into key coordinates.
    const int diag = p.N_k - p.N;
    // Alg. 1 line 6, with the causal mask: no key after the block's last row is ever needed (none
    // at all when every row of the block precedes the diagonal: O = 0, L = −inf, reference.h).
    const int key_end = p.causal ? tc::max_int(0, tc::min_int(p.N_k, q0 + Br + diag)) : p.N_k;
    const int Tc = fa::ceil_div(key_end, Bc);
    auto K_stage = [&](int j) { return KVs + (j % kStages) * 2 * Bc * D; };
    auto load_kv = [&](int j) {  // Alg. 1 line 7: K_j, V_j
        tc::load_tile<Bc, D, kThreads, kSwizzled, kCopy>(K_stage(j), Kh, j * Bc, p.N_k);
        tc::load_tile<Bc, D, kThreads, kSwizzled, kCopy>(K_stage(j) + Bc * D, Vh, j * Bc, p.N_k);
    };

    // Alg. 1 line 4: Q_i. With cp.async it travels in the group of K_0, V_0, and the first
    // Stages − 1 tiles are in flight before the loop starts.
    tc::load_tile<Br, D, kThreads, kSwizzled, kCopy>(Qs, Qh, q0, p.N);
    if constexpr (Cfg::kCpAsync) {  // step 4: tiles in flight before the loop
        #pragma unroll
        for (int j = 0; j < kStages - 1; ++j) {
            if (j < Tc) load_kv(j);
            tc::cp_async_commit();
        }
    }

    // Alg. 1 line 5
    float O[MT][D / 8][4];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int d = 0; d < D / 8; ++d)
            #pragma unroll
            for (int i = 0; i < 4; ++i) O[mt][d][i] = 0.0f;
    RowStats<Cfg> st;
    init_rows<Cfg>(st);
    QFrags<Cfg> q;

    for (int j = 0; j < Tc; ++j) {
        if constexpr (Cfg::kCpAsync) {  // step 4: the pipeline
            // Tile j's group is complete once at most Stages − 2 younger groups are pending; the
            // barrier makes every thread's copies visible and tells that every warp is done with
            // tile j − 1, whose buffer the load issued next (tile j + Stages − 1) overwrites.
            tc::cp_async_wait<kStages - 2>();
            __syncthreads();
            if (j + kStages - 1 < Tc) load_kv(j + kStages - 1);
            tc::cp_async_commit();  // an empty group past the end keeps the count uniform
        } else {  // steps 2–3: synchronous loads
            __syncthreads();  // every warp is done with the previous K_j, V_j
            load_kv(j);
            __syncthreads();
        }
        const int k0 = j * Bc;
        if (p.causal && k0 > wq_last + diag) continue;  // every key of the tile is after every row of the warp
        if constexpr (Cfg::kQInRegs)  // step 6 option: Q in registers
            if (j == 0) load_q_frags<Cfg>(q, Qs, wr, lane);
        const uint16_t* Ks = K_stage(j);
        const uint16_t* Vs = Ks + Bc * D;

        float S[MT][Bc / 8][4];
        scores<T, Cfg>(S, Qs, q, Ks, wr, lane);                             // line 8
        if (k0 + Bc > p.N_k || (p.causal && k0 + Bc - 1 > wq0 + diag))      // only edge tiles
            mask_scores<Cfg>(S, wq0 + diag, k0, p.N_k, p.causal, lane);
        online_softmax<Cfg>(S, st, O, p.scale, p.scale_log2);               // lines 9–10
        uint32_t P[MT][Bc / 16][4];
        pack_p<T, Cfg>(P, S);
        accumulate_pv<T, Cfg>(O, P, Vs, lane);                              // line 10
    }
    // step 4: no copy in flight when the block ends (a block whose rows see no key, Tc = 0, never
    // waited for its Q_i)
    if constexpr (Cfg::kCpAsync) tc::cp_async_wait<0>();
    store_rows<T, Cfg>(O, st, p.O + head * D, p.L + head, wq0, p.N, p.scale, lane);  // lines 12–15
#else
    __trap();  // compute capability < 8.0: the host refuses to launch (device_unsupported_reason)
#endif
}

}  // namespace FA_TC_KERNELS
}  // namespace ch7
