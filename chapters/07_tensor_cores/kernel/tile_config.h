/// @file tile_config.h
/// @brief Chapter 7: the tile shape of a kernel, described once: at compile time by MmaConfig
/// (variants 2–6: which optimization steps it has and its tiles), at run time by TileConfig, its
/// view derived from it (MmaConfig::kTiles). Plain C++ so the tests can check the shapes.
/// Chapters 8, 9 and 10 compile this header too (8 and 10 build their configs on MmaConfig): a change here rebuilds them.
#pragma once

#include <string>

namespace ch7 {

/// The tile shape of a kernel, as the program, the tests and the sweep see it.
struct TileConfig {
    int warps;       ///< warps per block
    int m_tiles;     ///< 16-row m-tiles each warp owns
    int Bc;          ///< keys per K/V tile (B_c)
    int stages;      ///< K/V buffers in shared memory (1: loaded synchronously each tile)
    bool q_in_regs;  ///< Q fragments kept in registers for the whole key loop
    /// Query rows per block: B_r = 16 · m_tiles · warps.
    constexpr int Br() const { return 16 * m_tiles * warps; }
    /// "B_r x B_c = 128 x 64, 4 warps x 2 m-tiles, 2 stages, Q in smem".
    std::string str() const;
};

/// One mma.sync kernel. `Step` (2..6) switches on the features of the ladder cumulatively:
///   2  mma.sync m16n8k16, S and P in registers, quad-shuffle row max/sum
///   3  ldmatrix (.trans for V) from XOR-swizzled shared memory
///   4  cp.async K/V pipeline of `Stages` buffers
///   5  exp2 with the softmax scale folded into log2(e); O rescaled only when a row max moved;
///      the row sums l reduced across the quad once, at the end; row max and sum as trees
///   6  causal blocks scheduled heaviest first; tiles chosen per head dim (tuning_candidates)
/// The tile: `Warps` warps, each owning `MTiles` m-tiles of 16 query rows (B_r = 16·MTiles·Warps),
/// `Bc` keys per K/V tile, Q fragments kept in registers for the whole loop when `QInRegs`.
template <int Step, int D_, int Warps, int MTiles, int Bc_, int Stages, bool QInRegs>
struct MmaConfig {
    static constexpr int kStep = Step;
    static constexpr int D = D_;
    static constexpr int kWarps = Warps;
    static constexpr int kMTiles = MTiles;
    static constexpr int Bc = Bc_;
    static constexpr int kStages = Stages;
    static constexpr bool kQInRegs = QInRegs;

    static constexpr int kThreads = 32 * Warps;
    static constexpr int kWarpRows = 16 * MTiles;  ///< query rows one warp owns
    static constexpr int Br = Warps * kWarpRows;   ///< query rows of the block
    static constexpr TileConfig kTiles{Warps, MTiles, Bc_, Stages, QInRegs};  ///< the run-time view

    static constexpr bool kLdmatrix = Step >= 3;    ///< ldmatrix + swizzled shared memory
    static constexpr bool kCpAsync = Step >= 4;     ///< cp.async multi-stage K/V pipeline
    static constexpr bool kExp2 = Step >= 5;        ///< folded exp2, lazy rescale, l reduced once
    static constexpr bool kHeavyFirst = Step >= 6;  ///< causal: the longest query blocks start first

    /// 16-bit elements of shared memory: the Q tile and `Stages` (K_j, V_j) pairs.
    static constexpr int kSmemElems = Br * D + Stages * 2 * Bc * D;
    static constexpr int kSmemBytes = 2 * kSmemElems;

    static_assert(Step >= 2 && Step <= 6, "MmaConfig: steps 2..6 use mma.sync");
    static_assert(D % 32 == 0 && D >= 32 && D <= 256,
                  "MmaConfig: head dim a multiple of 32 up to 256 (whole or half swizzle atoms)");
    static_assert(Bc % 16 == 0, "MmaConfig: B_c is a multiple of 16 (one P·V k-step)");
    static_assert(kCpAsync ? Stages >= 2 : Stages == 1,
                  "MmaConfig: the cp.async pipeline needs >= 2 stages; synchronous loads use 1");
    static_assert(!QInRegs || kLdmatrix, "MmaConfig: Q fragments in registers come with ldmatrix");
};

}  // namespace ch7
