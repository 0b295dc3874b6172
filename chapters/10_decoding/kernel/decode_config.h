/// @file decode_config.h
/// @brief Chapter 10: the shape of a decoding kernel, described once: which steps of the ladder it
/// has, its warps and pipeline depth, and the one-warp tile in chapter 7's terms.
#pragma once

#include "../../07_tensor_cores/kernel/tile_config.h"

namespace ch10 {

/// Rows of the query tile: one mma m-tile. A block holds the new tokens of its query heads
/// (step 3: all g heads of one KV head) in these rows, padded with zero rows.
constexpr int kQRows = 16;
/// Keys each warp takes from every K/V tile: one k-step of P·V (two n-tiles of S).
constexpr int kWarpKeys = 16;

/// One decoding kernel. Steps 1–3 of the ladder are one kernel launched three ways (the grid,
/// the split plan and the heads per block are run-time arguments, launch.cu); step 4 compiles the
/// block-table loads in (`Paged`); step 5 picks `Warps` and `Stages` from a sweep.
/// The block: `Warps` warps share each K/V tile of B_c = 16·Warps keys, warp w taking keys
/// 16w .. 16w + 15 of it; `Stages` K/V buffers, Stages − 1 of them in flight while one is used
/// (chapter 7's cp.async pipeline). `EarlyPrefetch` (step 5): L2 prefetches of the block's first
/// reads before it reads its sequence's length (prefetch_first_reads). `Fp8` (step 6): the cache
/// holds e4m3 bytes; the `Stages` buffers hold them as stored, and one more 16-bit K/V tile holds
/// the tile being used, each warp converting its own keys to fp16 (dequantize_warp_kv).
template <int D_, int Warps, int Stages, bool Paged, bool EarlyPrefetch = false, bool Fp8 = false>
struct DecodeConfig {
    static constexpr int D = D_;
    static constexpr int kWarps = Warps;
    static constexpr int kThreads = 32 * Warps;
    static constexpr int Bc = kWarpKeys * Warps;  ///< keys of one K/V tile (B_c)
    static constexpr int kStages = Stages;
    static constexpr bool kPaged = Paged;          ///< step 4: the block table
    static constexpr bool kEarlyPrefetch = EarlyPrefetch;  ///< step 5: first reads before lens[b]
    static constexpr bool kFp8 = Fp8;              ///< step 6: an e4m3 cache
    /// 16-bit words of one cached row of K or V: D elements of 2 bytes, or of 1 byte (step 6). The
    /// cache is addressed in these words, so the loads of steps 1–5 move e4m3 rows unchanged.
    static constexpr int kRowWords = Fp8 ? D_ / 2 : D_;

    /// One warp's tile in chapter 7's terms: 16 query rows (one m-tile), 16 keys, ldmatrix from
    /// swizzled tiles, exp2 with the scale folded in, Q fragments in registers (chapter 7, step 6).
    using WarpTile = ch7::MmaConfig<6, D_, 1, 1, kWarpKeys, 2, true>;

    /// Threads that load the Q tile (chapter 7's load_tile moves whole rows per pass).
    static constexpr int kQThreads = 128;

    /// Shared memory: the Q tile, `Stages` (K_j, V_j) buffers as the cache stores them, and (step 6)
    /// one 16-bit (K_j, V_j) tile; after the key loop the buffers hold each warp's unnormalized O
    /// (fp32) and its row statistics (m, l) for the merge.
    static constexpr int kPipelineBytes = 2 * (kQRows * D_ + Stages * 2 * Bc * kRowWords + (Fp8 ? 2 * Bc * D_ : 0));
    static constexpr int kMergeBytes = 2 * kQRows * D_ + 4 * Warps * kQRows * (D_ + 2);
    static constexpr int kSmemBytes = kPipelineBytes > kMergeBytes ? kPipelineBytes : kMergeBytes;

    static_assert(Stages >= 2, "DecodeConfig: the cp.async pipeline needs >= 2 stages");
    static_assert(32 * Warps >= kQThreads, "DecodeConfig: at least 4 warps (the Q tile load)");
};

}  // namespace ch10
