/// @file decode_attention.cuh
/// @brief Chapter 10: attention for decoding (q_len new tokens against a long KV cache) on tensor
/// cores, split-KV with chapter 2's merge. This is the file to edit.
///
/// The variants (./chapter10 --kernel K; --ladder runs them all). Every one is decode_kernel below
/// with a DecodeConfig (decode_config.h), launched by launch.cu:
///   1  fa2-grid   chapter 7's kernel on chapter 7's grid: one block per (sequence, query head)
///                 reads the whole cache; B·H_q blocks, most SMs idle
///   2  split-kv   one block per (split, query head, sequence); each writes a partial O_s (fp32,
///                 normalized) and L_s; combine_kernel merges them with chapter 2's merge
///   3  gqa        one block per (split, KV head, sequence, 16-row block) holds the g query heads
///                 of that KV head (g·q_len rows): K and V are read once per 16-row block, not once
///                 per query head (once per KV head while g·q_len <= 16)
///   4  paged      as 3, K/V rows found through a block table (pages of P tokens, any order)
///   5  tuned      as 3 (or 4 on a paged cache), with the warps and pipeline depth of the sweep;
///                 the last block of each group to finish merges the splits (no second kernel)
///   6  fp8-kv     as 5 on a cache of e4m3 bytes with a scale per (sequence, KV head) for K and
///                 for V: half the bytes to read; each warp converts its keys of a tile to fp16 in
///                 shared memory (dequantize_warp_kv) and the products run in fp16 (bf16 Q is
///                 converted once), the scales applied in fp32 (s_K in the softmax scale, s_V in
///                 the output); append_fp8_kernel quantizes the new tokens
///
/// Who owns what. The block's query rows are one 16-row m-tile: packed row r is token r % q_len of
/// query head hq0 + r / q_len (step 3; steps 1–2 have one head, r = token); rows past g·q_len are
/// zero padding. Warp w takes keys 16w .. 16w + 15 of every K/V tile (B_c = 16·warps keys) and keeps
/// its own m, l and O for all 16 rows, in chapter 7's fragments (lane 4g + t: rows g and g + 8,
/// columns 2t, 2t + 1 of each 8-column tile). After the last tile the warps merge their (m, l, O)
/// through shared memory with chapter 2's merge; thread t then owns row t / (threads/16) and
/// columns 4·(t % (threads/16)) + 4·(threads/16)·k of the block's output. Step 5's combine in the
/// last block of a group: thread t merges the splits of the same row t / (threads/16), each of the
/// row's threads/16 lanes a share of its columns (combine_row).
///
/// Grid: (splits, query-head groups × row blocks, B); block: Warps warps. Block (s, y, b) reads
/// keys split_begin(s) .. split_end(s) of its KV head (split_plan.h); a split past the sequence's
/// last one returns at once (the grid is sized for the longest sequence).
#pragma once

#include <cstdint>
#include <type_traits>

#include "../../../common/math.h"
#include "../../../common/tensor_core/ptx.cuh"
#include "../../../common/tensor_core/tile_io.cuh"
#include "../../02_online_softmax/online_softmax.h"
#include "../../07_tensor_cores/kernel/online_softmax.cuh"
#include "../../07_tensor_cores/kernel/warp_tile.cuh"
#include "decode_config.h"
#include "fp8.h"
#include "split_plan.h"

namespace ch10 {
inline namespace FA_TC_KERNELS {

/// What every decoding kernel gets: device arrays, 16-bit elements as raw bits.
struct DecodeParams {
    const uint16_t* Q;   ///< (B, H_q, q_len, D): the new tokens' queries
    const uint16_t* K;   ///< cache: contiguous (B, H_kv, N_max, D), or the page pool (pages, H_kv, P, D)
    const uint16_t* V;   ///< same layout as K (step 6: e4m3 bytes, two per 16-bit word)
    const float* K_scale;  ///< step 6: (B, H_kv), the dequantization scale s_K of each KV head's K
    const float* V_scale;  ///< step 6: (B, H_kv), s_V of its V
    const int* table;    ///< paged: block table (B, max_pages), pool page of each P keys
    const int* lens;     ///< (B): cache length of each sequence, new tokens included
    uint16_t* O;         ///< (B, H_q, q_len, D)
    float* L;            ///< (B, H_q, q_len): logsumexp of each row (natural log)
    float* O_part;       ///< splits > 1: (B, H_q, q_len, splits, D), each split's normalized O_s
    float* L_part;       ///< splits > 1: (B, H_q, q_len, splits), each split's L_s
    int* counters;       ///< step 5: one per block row of the grid (B · gridDim.y), zero between launches
    int B, H_q, H_kv, q_len, N_max;
    int max_pages, page_shift;  ///< paged: table row length, log2 of the page size
    int heads_per_block;        ///< query heads one block holds: g (step 3) or 1
    int row_blocks;             ///< ceil(heads_per_block · q_len / 16)
    int chunk;                  ///< keys per split (a multiple of B_c)
    int splits;                 ///< gridDim.x: the most splits any sequence has
    float scale, scale_log2;    ///< softmax scale, and times log2(e)
    bool fused_combine;         ///< step 5: the last split of each group to finish merges them all
};

/// m of a row before its first visible key. Chapter 7 starts at −inf because its first tile holds
/// key 0, seen by every row; here a warp's first keys may lie past the split or after a new token,
/// and −inf − (−inf) would be NaN. A finite floor far below any score keeps e^{x − m} = 0 for
/// masked x and is replaced by the first real score (its e^{floor − m} = 0 rescales nothing).
constexpr float kNoKeyYet = -1e30f;

#if FA_TC_SM80

/// Step 4: the K and V tiles of keys key0 .. key0 + B_c − 1 of KV head h from a paged cache,
/// stored swizzled like chapter 7's load_tile; keys ≥ key_end become zeros (never read: past a
/// sequence's length a page holds another sequence's rows, or nothing). The tile's keys lie in runs
/// of consecutive pool rows (split_plan.h, tile_run): one block-table entry per run, shared by K
/// and V, and inside a run the addressing of a contiguous cache. P ≥ B_c: the tile is one run, and
/// load_tile reads it. P < B_c: B_c / P runs; thread x moves 16-byte chunk x % (D/8) of tile rows
/// i = x / (D/8) + k·(threads/(D/8)), as load_tile does, and looks a run's page up once, at its
/// first row among the thread's rows. Rows are counted in 16-bit words (step 6: D/2 words).
template <class Cfg>
__device__ __forceinline__ void load_paged_kv(uint16_t* K_tile, uint16_t* V_tile, const DecodeParams& p,
                                              const int* table_row, int key0, int key_end, int h) {
    constexpr int D = Cfg::kRowWords, Bc = Cfg::Bc, kChunks = D / 8, kRowsPerPass = Cfg::kThreads / kChunks;
    static_assert(Bc % kRowsPerPass == 0 && kRowsPerPass % 8 == 0, "load_paged_kv: whole passes");
    const int shift = p.page_shift;
    const int n = key_end - key0;  // rows of the tile that hold keys of the split
    if (Bc <= (1 << shift)) {
        const std::size_t run = tile_run_row(table_row, key0, 0, shift, h, p.H_kv, D);
        tc::load_tile<Bc, D, Cfg::kThreads, true, tc::Copy::kAsync>(K_tile, p.K + run, 0, n);
        tc::load_tile<Bc, D, Cfg::kThreads, true, tc::Copy::kAsync>(V_tile, p.V + run, 0, n);
        return;
    }
    const int r = int(threadIdx.x) / kChunks, col = 8 * (int(threadIdx.x) % kChunks);
    const int dst = tc::swizzle(r, col, D);
    int run = -1;             // the run whose first row is at run_row
    std::size_t run_row = 0;
    #pragma unroll
    for (int k = 0; k < Bc / kRowsPerPass; ++k) {
        const int i = r + k * kRowsPerPass;
        uint16_t* dK = K_tile + dst + k * kRowsPerPass * D;
        uint16_t* dV = V_tile + dst + k * kRowsPerPass * D;
        if (i < n) {
            if (tile_run(i, shift) != run) {  // the first of the thread's rows in this run: its page
                run = tile_run(i, shift);
                run_row = tile_run_row(table_row, key0, run, shift, h, p.H_kv, D);
            }
            const std::size_t at = run_row + std::size_t(row_in_run(i, shift) * D + col);
            tc::cp_async_16(dK, p.K + at);
            tc::cp_async_16(dV, p.V + at);
        } else {
            tc::st_shared(reinterpret_cast<uint4*>(dK), make_uint4(0, 0, 0, 0));
            tc::st_shared(reinterpret_cast<uint4*>(dV), make_uint4(0, 0, 0, 0));
        }
    }
}

/// Two e4m3 bytes (the low one first) as two fp16 values packed in 32 bits, the low one first: one
/// conversion instruction (cvt.rn.f16x2.e4m3x2), and exact (e4m3_value says why).
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint32_t two) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xFFFFu), __NV_E4M3);
    return uint32_t(h.x) | uint32_t(h.y) << 16;
}

/// Step 6: the warp's own keys of K_j and V_j (rows 16w .. 16w + 15 of each), staged as the cache
/// stores them (rows of D e4m3 bytes, swizzled as load_tile stores rows of D/2 16-bit words),
/// converted to fp16 into the same rows of `tile`, in the swizzled layout chapter 7's ldmatrix
/// reads. Only the warp reads those rows, so a __syncwarp, not a block barrier, orders the
/// conversion before the reads. Shared memory, not registers, because mma.sync's B fragments come
/// from ldmatrix over 16-bit rows (V transposed): converting after ldmatrix would need a transpose of
/// 8-bit fragments, which chapter 7's tile does not have. Always fp16, whatever T: e4m3 → fp16 is
/// one instruction per pair, e4m3 → bf16 four (through fp16 and fp32). The scales are not applied
/// here: they are one fp32 multiply per row elsewhere. Lane l converts 16-byte chunks l, l + 32, …
/// of the warp's 32 rows: 16 elements in, two chunks of 8 out.
template <class Cfg>
__device__ __forceinline__ void dequantize_warp_kv(uint16_t* tile, const uint16_t* staged, int warp, int lane) {
    constexpr int kWords = Cfg::kRowWords, kChunks = kWords / 8;
    static_assert(2 * kWarpKeys * kChunks % 32 == 0, "dequantize_warp_kv: whole passes");
    #pragma unroll
    for (int x = lane; x < 2 * kWarpKeys * kChunks; x += 32) {
        const int i = x / kChunks, c = 8 * (x % kChunks);  // the warp's row i (V from kWarpKeys on)
        const int r = (i < kWarpKeys ? 0 : Cfg::Bc - kWarpKeys) + kWarpKeys * warp + i;  // row of the tile
        const uint4 in = tc::ld_shared(reinterpret_cast<const uint4*>(staged + tc::swizzle(r, c, kWords)));
        const uint4 lo = make_uint4(e4m3x2_to_half2(in.x), e4m3x2_to_half2(in.x >> 16), e4m3x2_to_half2(in.y),
                                    e4m3x2_to_half2(in.y >> 16));
        const uint4 hi = make_uint4(e4m3x2_to_half2(in.z), e4m3x2_to_half2(in.z >> 16), e4m3x2_to_half2(in.w),
                                    e4m3x2_to_half2(in.w >> 16));
        tc::st_shared(reinterpret_cast<uint4*>(tile + tc::swizzle(r, 2 * c, Cfg::D)), lo);
        tc::st_shared(reinterpret_cast<uint4*>(tile + tc::swizzle(r, 2 * c + 8, Cfg::D)), hi);
    }
    __syncwarp();
}

/// Step 6 with bf16 inputs: the Q tile (16 rows of D) rewritten in place as fp16, so that the
/// products run in fp16 like the K/V tiles they meet. Exact for |q| in fp16's normal range
/// (2⁻¹⁴ … 65504): bf16's 8 significant bits fit in fp16's 11 (the host refuses larger Q).
template <class Cfg>
__device__ __forceinline__ void q_to_half(uint16_t* Qs) {
    constexpr int kPairs = kQRows * Cfg::D / 2;
    for (int x = int(threadIdx.x); x < kPairs; x += Cfg::kThreads) {
        uint32_t* two = reinterpret_cast<uint32_t*>(Qs) + x;
        const uint32_t b = tc::ld_shared(two);
        tc::st_shared(two, tc::pack2<__half>(tc::bits_to_float<__nv_bfloat16>(uint16_t(b & 0xFFFFu)),
                                             tc::bits_to_float<__nv_bfloat16>(uint16_t(b >> 16))));
    }
}

/// Sets to −inf the scores of keys at or past the split's end and of keys after a row's new token
/// (causal among the new tokens). k0 is the warp's first key; r0 the tile's first packed row.
template <class W>
__device__ __forceinline__ void mask_keys(float (&S)[1][W::Bc / 8][4], int k0, int key_end, int len,
                                          int q_len, int r0, int rows, int lane) {
    #pragma unroll
    for (int n = 0; n < W::Bc / 8; ++n)
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = r0 + tc::frag_c_row(lane, i);
            const int token = r < rows ? r % q_len : q_len - 1;  // padding rows: any token will do
            const int key = k0 + 8 * n + tc::frag_c_col(lane, i);
            if (key >= key_end || key >= key_limit(len, q_len, token)) S[0][n][i] = -INFINITY;
        }
}

/// The block's output for one row: chapter 2's merge of the warps' (m, l), each warp's weight
/// e^{M_w − M} / l = state.prob(M_w) applied to its unnormalized O_w (Alg. 1 lines 12–15), written
/// as O, L (one split) or as the split's partial O_s, L_s. The calling thread owns columns
/// c0 + 4·(threads/16)·k of the row. Step 6: O_w = P̃·V8 over e4m3 values, so the weights carry
/// V's scale, v_scale (1 before).
template <class T, class Cfg>
__device__ __forceinline__ void write_row(const DecodeParams& p, const float* Ow, const float* Mw, const float* lw,
                                          int row, int c0, std::size_t out_row, int s, bool partial, float v_scale) {
    constexpr int D = Cfg::D, kThreadsPerRow = Cfg::kThreads / kQRows, kCols = D / (4 * kThreadsPerRow);
    ch2::OnlineState state;
    #pragma unroll
    for (int w = 0; w < Cfg::kWarps; ++w)
        state.merge(ch2::OnlineState{tc::ld_shared(&Mw[w * kQRows + row]), tc::ld_shared(&lw[w * kQRows + row])});
    float weight[Cfg::kWarps];
    #pragma unroll
    for (int w = 0; w < Cfg::kWarps; ++w) weight[w] = state.prob(tc::ld_shared(&Mw[w * kQRows + row])) * v_scale;
    #pragma unroll
    for (int k = 0; k < kCols; ++k) {
        const int col = c0 + 4 * kThreadsPerRow * k;
        float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (int w = 0; w < Cfg::kWarps; ++w) {
            const float4 v = tc::ld_shared(reinterpret_cast<const float4*>(Ow + (w * kQRows + row) * D + col));
            o[0] += weight[w] * v.x, o[1] += weight[w] * v.y, o[2] += weight[w] * v.z, o[3] += weight[w] * v.w;
        }
        if (partial) {
            *reinterpret_cast<float4*>(p.O_part + (out_row * p.splits + s) * D + col) = make_float4(o[0], o[1], o[2], o[3]);
        } else {
            uint2 bits = make_uint2(tc::pack2<T>(o[0], o[1]), tc::pack2<T>(o[2], o[3]));
            *reinterpret_cast<uint2*>(p.O + out_row * D + col) = bits;
        }
    }
    if (c0 == 0) (partial ? p.L_part[out_row * p.splits + s] : p.L[out_row]) = state.logsumexp();
}

/// A load past L1 (ld.global.cg): partials that other blocks wrote during this kernel.
template <class V>
__device__ __forceinline__ V load_cg(const V* p) {
#if defined(__CUDA_ARCH__)
    return __ldcg(p);
#else
    return *p;
#endif
}

/// Hints L2 to fetch the 128-byte line at `p` (prefetch.global.L2): nothing is written, so a line
/// fetched in vain costs bandwidth, never correctness. The emulator has no cache: nothing to do.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

/// Step 5 (Cfg::kEarlyPrefetch): L2 prefetches of what a block reads first, issued before it reads
/// lens[b], so that the wait for lens[b] overlaps the wait for its first data instead of preceding
/// it. The block's Q rows (q_rows of them, at most 16) and, in a contiguous cache, rows key0 ..
/// key0 + (Stages − 1)·B_c of K and V as if the split were full (clipped to N_max, the end of the
/// sequence's allocation: rows past lens[b] are fetched in vain, never read). A paged cache finds
/// its rows through the block table: only the table's line holding the split's first page is
/// prefetched (its index clipped to the table row). Thread x takes lines x, x + threads, …
template <class Cfg>
__device__ __forceinline__ void prefetch_first_reads(const DecodeParams& p, const uint16_t* Q_rows, int q_rows,
                                                     const uint16_t* Kh, const uint16_t* Vh, const int* table_row,
                                                     int key0) {
    constexpr int D = Cfg::D, kLineElems = 64;  // 128-byte lines of 16-bit elements
    const int t = int(threadIdx.x);
    const int q_lines = (q_rows < kQRows ? q_rows : kQRows) * D / kLineElems;
    for (int i = t; i < q_lines; i += Cfg::kThreads) prefetch_l2(Q_rows + i * kLineElems);
    if constexpr (Cfg::kPaged) {
        const int page = key0 >> p.page_shift;
        if (t == 0) prefetch_l2(table_row + (page < p.max_pages ? page : p.max_pages - 1));
    } else {
        const int kv_rows = p.N_max - key0 < (Cfg::kStages - 1) * Cfg::Bc ? p.N_max - key0 : (Cfg::kStages - 1) * Cfg::Bc;
        for (int i = t; i < kv_rows * D / kLineElems; i += Cfg::kThreads) {
            const std::size_t at = std::size_t(key0) * D + std::size_t(i) * kLineElems;
            prefetch_l2(Kh + at), prefetch_l2(Vh + at);
        }
    }
}

/// The merge of one output row's n splits by `Lanes` consecutive lanes of a warp (step 2:
/// combine_kernel, a warp per row; step 5: the last block of a group, threads/16 lanes per row, so
/// that all the block's rows merge at once). The splits' logsumexps L_s are entries of one softmax:
/// lane l pushes L_l, L_{l+Lanes}, … into an online state (chapter 2, Alg. 1), the row's lanes'
/// states meet with chapter 2's merge (Alg. 2) in a butterfly of xor shuffles, and then
/// O = Σ_s e^{L_s − L} O_s = Σ_s state.prob(L_s)·O_s and L = state.logsumexp(). Lane l owns the
/// vectors l, l + Lanes, … of W = min(4, D/Lanes) floats of each O_s (one float4 at D = 128 with a
/// warp per row, a float2 at D = 64; four float4 at D = 128 with 8 lanes); sixteen vectors are in
/// flight per lane. Reads past L1 (load_cg): in step 5 other blocks wrote the partials during this
/// kernel. n = 0: a padding row of step 5, whose lanes only take part in the shuffles.
template <class T, int D, int Lanes>
__device__ __forceinline__ void combine_row(const DecodeParams& p, std::size_t row, int n, int lane) {
    constexpr int kWidth = D / Lanes < 4 ? D / Lanes : 4, kVecs = D / (kWidth * Lanes);
    constexpr int kBatch = 16 / kVecs;  // splits per batch of loads: sixteen vectors in flight per lane
    static_assert((kWidth == 2 || kWidth == 4) && kVecs * kWidth * Lanes == D && Lanes <= 32 &&
                      (Lanes & (Lanes - 1)) == 0,
                  "combine_row: whole float2 or float4 vectors per lane, a power-of-two number of lanes");
    using Vec = std::conditional_t<kWidth == 4, float4, float2>;
    const float* Ls = p.L_part + row * p.splits;
    const Vec* Os = reinterpret_cast<const Vec*>(p.O_part + row * p.splits * D) + lane;

    ch2::OnlineState state;
    for (int s = lane; s < n; s += Lanes) state.push(load_cg(Ls + s));
    #pragma unroll
    for (int offset = Lanes / 2; offset > 0; offset >>= 1) {  // stays inside the row's lanes
        ch2::OnlineState other;
        other.m = __shfl_xor_sync(0xffffffffu, state.m, offset);
        other.d = __shfl_xor_sync(0xffffffffu, state.d, offset);
        state.merge(other);
    }
    // O = Σ_s prob(L_s)·O_s in batches of kBatch splits: a batch's loads are all issued before the
    // first is used, so a lane waits for one round trip to L2 per batch, not one per split (an
    // unrolled loop that loads and uses each split in turn was measured to wait for each).
    float o[kVecs][kWidth] = {};
    for (int s0 = 0; s0 < n; s0 += kBatch) {
        float L_b[kBatch] = {};
        Vec O_b[kBatch][kVecs] = {};
        #pragma unroll
        for (int i = 0; i < kBatch; ++i)
            if (s0 + i < n) {
                L_b[i] = load_cg(Ls + s0 + i);
                #pragma unroll
                for (int c = 0; c < kVecs; ++c) O_b[i][c] = load_cg(Os + std::size_t(s0 + i) * (D / kWidth) + c * Lanes);
            }
        #pragma unroll
        for (int i = 0; i < kBatch; ++i)
            if (s0 + i < n) {
                const float w = state.prob(L_b[i]);
                #pragma unroll
                for (int c = 0; c < kVecs; ++c) {
                    o[c][0] += w * O_b[i][c].x, o[c][1] += w * O_b[i][c].y;
                    if constexpr (kWidth == 4) o[c][2] += w * O_b[i][c].z, o[c][3] += w * O_b[i][c].w;
                }
            }
    }
    if (n < 1) return;  // a padding row: nothing to write
    #pragma unroll
    for (int c = 0; c < kVecs; ++c)
        #pragma unroll
        for (int e = 0; e < kWidth; e += 2)
            *reinterpret_cast<uint32_t*>(p.O + row * D + kWidth * (lane + c * Lanes) + e) =
                tc::pack2<T>(o[c][e], o[c][e + 1]);
    if (lane == 0) p.L[row] = state.logsumexp();
}

#endif  // FA_TC_SM80

/// Alg. 1 of FlashAttention-2 for one split of one KV head's cache and the block's 16 query rows,
/// then the merge of the warps' states (chapter 2's merge) and the write of O, L (one split) or of
/// the split's partial O_s, L_s.
template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) decode_kernel(const DecodeParams p) {
#if FA_TC_SM80
    using W = typename Cfg::WarpTile;
    using TM = std::conditional_t<Cfg::kFp8, __half, T>;  // the products' type (step 6: fp16)
    constexpr int D = Cfg::D, Bc = Cfg::Bc, kStages = Cfg::kStages, kThreads = Cfg::kThreads;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
    uint16_t* KVs = Qs + kQRows * D;  // stage s: K at KVs + s·2·B_c·D, V right after it
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;

    // step 3: the block's query heads hq0 .. hq0 + heads_per_block − 1 share KV head h_kv
    const int b = int(blockIdx.z), s = int(blockIdx.x);
    const int group = int(blockIdx.y) / p.row_blocks, r0 = kQRows * (int(blockIdx.y) % p.row_blocks);
    const int hq0 = group * p.heads_per_block, h_kv = hq0 / (p.H_q / p.H_kv);
    const int rows = p.heads_per_block * p.q_len;  // packed rows (head, token); Q rows are contiguous
    const std::size_t row0 = (std::size_t(b) * p.H_q + hq0) * p.q_len;  // the group's first row of Q, O, L
    const int* table_row = p.table + std::size_t(b) * p.max_pages;
    constexpr int kRowWords = Cfg::kRowWords;  // a cached row in 16-bit words (step 6: D bytes)
    const uint16_t* Kh = p.K + contiguous_row(b, h_kv, 0, p.H_kv, p.N_max, kRowWords);
    const uint16_t* Vh = p.V + contiguous_row(b, h_kv, 0, p.H_kv, p.N_max, kRowWords);
    if constexpr (Cfg::kEarlyPrefetch)  // step 5: the first reads start before lens[b] is known
        prefetch_first_reads<Cfg>(p, p.Q + (row0 + r0) * D, rows - r0, Kh, Vh, table_row, split_begin(s, p.chunk));

    // step 2: this block's split of sequence b; splits past the sequence's last one do nothing
    const int len = p.lens[b];
    if (s >= splits_of(len, p.q_len, p.chunk)) return;
    const int key_begin = split_begin(s, p.chunk), key_end = split_end(s, len, p.q_len, p.chunk);
    const int Tc = fa::ceil_div(key_end - key_begin, Bc);
    auto K_stage = [&](int j) { return KVs + (j % kStages) * 2 * Bc * kRowWords; };
    auto load_kv = [&](int j) {  // Alg. 1 line 7: K_j, V_j
        const int k0 = key_begin + j * Bc;
        if constexpr (Cfg::kPaged) {  // step 4: through the block table
            load_paged_kv<Cfg>(K_stage(j), K_stage(j) + Bc * kRowWords, p, table_row, k0, key_end, h_kv);
        } else {
            tc::load_tile<Bc, kRowWords, kThreads, true, tc::Copy::kAsync>(K_stage(j), Kh, k0, key_end);
            tc::load_tile<Bc, kRowWords, kThreads, true, tc::Copy::kAsync>(K_stage(j) + Bc * kRowWords, Vh, k0, key_end);
        }
    };
    // Alg. 1 line 4: Q_i, rows r0 .. r0 + 15 of the group (zeros past `rows`). It travels in the
    // group of K_0, V_0, and Stages − 1 tiles are in flight before the loop starts (step 5: more).
    if (int(threadIdx.x) < Cfg::kQThreads)
        tc::load_tile<kQRows, D, Cfg::kQThreads, true, tc::Copy::kAsync>(Qs, p.Q + row0 * D, r0, rows);
    #pragma unroll
    for (int j = 0; j < kStages - 1; ++j) {
        if (j < Tc) load_kv(j);
        tc::cp_async_commit();
    }
    ch7::QFrags<W> q;

    // step 6: S = Q (s_K K8)^T = s_K (Q K8^T), so s_K joins the softmax scale; O = P̃ (s_V V8) =
    // s_V (P̃ V8), so s_V multiplies the output (write_row). The products see e4m3 values only, in
    // fp16, and P̃ is rounded to fp16 before P̃·V8.
    float scale = p.scale, scale_log2 = p.scale_log2, v_scale = 1.0f;
    if constexpr (Cfg::kFp8) {
        const std::size_t head = std::size_t(b) * p.H_kv + h_kv;
        scale *= p.K_scale[head], scale_log2 *= p.K_scale[head], v_scale = p.V_scale[head];
    }
    uint16_t* KV16 = KVs + kStages * 2 * Bc * kRowWords;  // step 6: the tile in use, in 16 bits

    // Alg. 1 line 5, for the warp's keys
    float O[1][D / 8][4];
    #pragma unroll
    for (int d = 0; d < D / 8; ++d)
        #pragma unroll
        for (int i = 0; i < 4; ++i) O[0][d][i] = 0.0f;
    ch7::RowStats<W> st;
    #pragma unroll
    for (int h = 0; h < 2; ++h) st.m[0][h] = kNoKeyYet, st.l[0][h] = 0.0f;

    for (int j = 0; j < Tc; ++j) {
        // Tile j has landed once at most Stages − 2 younger groups are pending; the barrier also
        // says every warp is done with tile j − 1, whose buffer the next load overwrites.
        tc::cp_async_wait<kStages - 2>();
        __syncthreads();
        if (j + kStages - 1 < Tc) load_kv(j + kStages - 1);
        tc::cp_async_commit();  // an empty group past the end keeps the count uniform
        if (j == 0) {
            if constexpr (Cfg::kFp8 && !std::is_same_v<T, __half>) {  // step 6: Q to fp16, once
                q_to_half<Cfg>(Qs);
                __syncthreads();
            }
            ch7::load_q_frags<W>(q, Qs, 0, lane);  // Q fragments stay in registers
        }
        const uint16_t* KV_j = K_stage(j);
        const int k0 = key_begin + j * Bc + kWarpKeys * warp;  // the warp's first key
        if (k0 >= key_end) continue;                             // the warp's keys are past the split
        if constexpr (Cfg::kFp8) {  // step 6: the warp's rows of tile j to fp16
            dequantize_warp_kv<Cfg>(KV16, KV_j, warp, lane);
            KV_j = KV16;
        }
        const uint16_t* Ks = KV_j + kWarpKeys * warp * D;
        const uint16_t* Vs = KV_j + Bc * D + kWarpKeys * warp * D;

        float S[1][W::Bc / 8][4];
        ch7::scores<TM, W>(S, Qs, q, Ks, 0, lane);                                  // line 8
        if (k0 + kWarpKeys > key_end || k0 + kWarpKeys > key_limit(len, p.q_len, 0))  // edge keys only
            mask_keys<W>(S, k0, key_end, len, p.q_len, r0, rows, lane);
        ch7::online_softmax<W>(S, st, O, scale, scale_log2);                        // lines 9–10
        uint32_t P[1][W::Bc / 16][4];
        ch7::pack_p<TM, W>(P, S);
        ch7::accumulate_pv<TM, W>(O, P, Vs, lane);                                  // line 10
    }

    // The warps' states meet in shared memory: the K/V buffers are free once every warp is past
    // the loop and no copy is pending. Warp w writes Ow[w][row][col] (unnormalized, fp32) and its
    // row statistics in natural-log units, M_w = m·scale and l_w.
    tc::cp_async_wait<0>();
    __syncthreads();
    float* Ow = reinterpret_cast<float*>(KVs);
    float* Mw = Ow + Cfg::kWarps * kQRows * D;
    float* lw = Mw + Cfg::kWarps * kQRows;
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = tc::frag_c_row(lane, 2 * h);
        const float l = fa::group_sum<4>(st.l[0][h]);  // chapter 7, step 5: l reduced over the quad once
        if (tc::lane_in_group(lane) == 0)
            tc::st_shared(&Mw[warp * kQRows + row], st.m[0][h] * scale), tc::st_shared(&lw[warp * kQRows + row], l);
        #pragma unroll
        for (int d = 0; d < D / 8; ++d)
            tc::st_shared(reinterpret_cast<float2*>(Ow + (warp * kQRows + row) * D + 8 * d + tc::frag_c_col(lane, 2 * h)),
                          make_float2(O[0][d][2 * h], O[0][d][2 * h + 1]));
    }
    __syncthreads();

    // Thread t owns row t / (threads/16) of the block's output and writes it (write_row: chapter
    // 2's merge of the warps' states, then Alg. 1 lines 12–15).
    constexpr int kThreadsPerRow = kThreads / kQRows;
    const int row = int(threadIdx.x) / kThreadsPerRow, c0 = 4 * (int(threadIdx.x) % kThreadsPerRow);
    const bool real_row = r0 + row < rows;  // not a padding row
    const std::size_t out_row = row0 + r0 + row;
    const bool partial = p.splits > 1;      // step 2: a partial result for the combine
    if (real_row) write_row<T, Cfg>(p, Ow, Mw, lw, row, c0, out_row, s, partial, v_scale);
    if (!(partial && p.fused_combine)) return;

    // step 5: the combine inside the last block of the group to finish (no second kernel). The
    // barrier orders every thread's partials before thread 0's release fence, and that fence before
    // the count (cooperative groups' grid barrier does the same); the block that counts the group's
    // last split resets the counter, fences (acquire) and reads the group's partials past L1. Every
    // thread merges: thread t takes row t / (threads/16), as in write_row, with the row's
    // threads/16 lanes (combine_row), so all the block's rows have their loads in flight at once.
    int* last = reinterpret_cast<int*>(Qs);  // the Q tile is no longer needed
    __syncthreads();
    if (threadIdx.x == 0) {
        int* counter = p.counters + std::size_t(b) * gridDim.y + blockIdx.y;
        __threadfence();
        tc::st_shared(last, int(atomicAdd(counter, 1) == splits_of(len, p.q_len, p.chunk) - 1));
        if (tc::ld_shared(last)) *counter = 0;  // ready for the next launch
        __threadfence();
    }
    __syncthreads();
    if (tc::ld_shared(last))
        combine_row<T, D, kThreadsPerRow>(p, real_row ? out_row : row0 + r0,
                                          real_row ? splits_of(len, p.q_len, p.chunk) : 0,
                                          int(threadIdx.x) % kThreadsPerRow);
#else
    __trap();  // compute capability < 8.0: the host refuses to launch (device_unsupported_reason)
#endif
}


/// Step 2: the combine. One warp per output row (sequence b, query head, token), 4 rows per
/// block: combine_row merges the row's splits with chapter 2's online softmax.
template <class T, int D>
__global__ void __launch_bounds__(128) combine_kernel(const DecodeParams p) {
#if FA_TC_SM80
    const std::size_t row = std::size_t(blockIdx.x) * 4 + threadIdx.x / 32;
    const std::size_t rows = std::size_t(p.B) * p.H_q * p.q_len;
    if (row >= rows) return;
    const int b = int(row / (std::size_t(p.H_q) * p.q_len));
    combine_row<T, D, 32>(p, row, splits_of(p.lens[b], p.q_len, p.chunk), int(threadIdx.x) % 32);
#else
    __trap();
#endif
}

/// What the append kernels get: the new tokens' K and V and the cache to write them into.
struct AppendParams {
    const uint16_t* K_new;  ///< (B, H_kv, q_len, D)
    const uint16_t* V_new;
    uint16_t* K;            ///< cache, contiguous or paged (as DecodeParams::K)
    uint16_t* V;
    const float* K_scale;   ///< step 6: (B, H_kv), the scales the new tokens are quantized with
    const float* V_scale;
    const int* table;       ///< paged: block table (B, max_pages); null: contiguous
    const int* lens;        ///< (B): cache lengths after the append
    int B, H_kv, q_len, D, N_max, max_pages, page_shift;
};

/// Where thread x's 16-byte chunk of the new tokens (B, H_kv, q_len, D) goes: chunk x of the
/// inputs, elements src .. src + 7, lands at cache element dst (an element offset: of 16-bit
/// elements, or of e4m3 bytes in step 6) of KV head `head` (b·H_kv + h), at position
/// len − q_len + i. `valid` is false past the last chunk.
struct AppendChunk {
    std::size_t src, dst, head;
    bool valid;
};
__device__ __forceinline__ AppendChunk append_chunk(const AppendParams& a) {
    const std::size_t chunk = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t chunks_per_row = std::size_t(a.D) / 8;
    const std::size_t row = chunk / chunks_per_row;  // (b, h, i) of the new tokens
    if (row >= std::size_t(a.B) * a.H_kv * a.q_len) return {0, 0, 0, false};
    const int col = 8 * int(chunk % chunks_per_row), i = int(row % a.q_len);
    const int h = int(row / a.q_len % a.H_kv), b = int(row / a.q_len / a.H_kv);
    const int key = a.lens[b] - a.q_len + i;
    const std::size_t dst = a.table != nullptr
                                ? paged_row(a.table + std::size_t(b) * a.max_pages, key, a.page_shift, h, a.H_kv, a.D)
                                : contiguous_row(b, h, key, a.H_kv, a.N_max, a.D);
    return {row * a.D + col, dst + col, std::size_t(b) * a.H_kv + h, true};
}

/// Appends the q_len new tokens' K and V of every (sequence, KV head) at cache positions
/// len − q_len .. len − 1. Thread x copies 16-byte chunk x of the (B, H_kv, q_len, D) inputs.
__global__ void __launch_bounds__(256) append_kv_kernel(const AppendParams a) {
    const AppendChunk c = append_chunk(a);
    if (!c.valid) return;
    *reinterpret_cast<uint4*>(a.K + c.dst) = *reinterpret_cast<const uint4*>(a.K_new + c.src);
    *reinterpret_cast<uint4*>(a.V + c.dst) = *reinterpret_cast<const uint4*>(a.V_new + c.src);
}

/// Eight T values (16 bytes) as eight e4m3 bytes e4m3(x / s) (e4m3_quantize: nearest, and
/// saturated at ±448).
template <class T>
__device__ __forceinline__ uint2 quantize8(uint4 x, float s) {
    const uint32_t in[4] = {x.x, x.y, x.z, x.w};
    uint32_t out[2] = {0, 0};
    #pragma unroll
    for (int e = 0; e < 8; ++e) {
        const uint16_t bits = uint16_t(in[e / 2] >> (16 * (e % 2)));
        out[e / 4] |= uint32_t(e4m3_quantize(tc::bits_to_float<T>(bits), s)) << (8 * (e % 4));
    }
    return make_uint2(out[0], out[1]);
}

/// Step 6: the append into an e4m3 cache. The new tokens are quantized with their KV head's
/// scale, which the cache already has: a token beyond ±448·s is clipped to ±448·s (the scale is
/// not changed, so the rows already cached keep their meaning). Thread x quantizes 16-byte chunk x
/// of the inputs into 8 bytes of the cache.
template <class T>
__global__ void __launch_bounds__(256) append_fp8_kernel(const AppendParams a) {
    const AppendChunk c = append_chunk(a);
    if (!c.valid) return;
    uint8_t* K8 = reinterpret_cast<uint8_t*>(a.K);
    uint8_t* V8 = reinterpret_cast<uint8_t*>(a.V);
    *reinterpret_cast<uint2*>(K8 + c.dst) = quantize8<T>(*reinterpret_cast<const uint4*>(a.K_new + c.src), a.K_scale[c.head]);
    *reinterpret_cast<uint2*>(V8 + c.dst) = quantize8<T>(*reinterpret_cast<const uint4*>(a.V_new + c.src), a.V_scale[c.head]);
}

}  // namespace FA_TC_KERNELS
}  // namespace ch10
