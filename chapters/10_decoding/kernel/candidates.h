/// @file candidates.h
/// @brief Chapter 10: the kernel configurations, listed once for the GPU launcher (launch.cu) and
/// the CPU emulator (emulator/emulated_kernels.cpp).
#pragma once

#include "../../../common/dispatch.h"
#include "decode_config.h"

namespace ch10 {

/// Steps 1–4: four warps (B_c = 64 keys per tile), two K/V buffers: chapter 7's step-4 pipeline.
template <int D, bool Paged>
using LadderConfig = DecodeConfig<D, 4, 2, Paged>;

/// Variant 5's candidates, DecodeConfig<D, warps, stages, paged, early prefetch>: more stages keep
/// more bytes in flight per block; more warps make each tile (B_c = 16·warps keys) larger; the
/// early prefetch starts a block's first reads before it reads its sequence's length. Shared
/// memory at D = 128: 70 KB (4 warps, 2 stages), 103 KB (3 stages), 136 KB (4 stages), 136 KB
/// (8 warps, 2 stages), 103 KB (3 stages, prefetch): 3, 2, 1, 1 and 2 blocks per SM on an H100.
/// The default, candidate 1, is the fastest in `./chapter10 --sweep` (README, step 5).
template <int D, bool Paged>
struct TunedTiles
    : fa::Tuning<fa::ConfigList<DecodeConfig<D, 4, 2, Paged>, DecodeConfig<D, 4, 3, Paged>, DecodeConfig<D, 4, 4, Paged>,
                                DecodeConfig<D, 8, 2, Paged>, DecodeConfig<D, 4, 3, Paged, true>>,
                 1> {};
/// Step 6: kernel 5's default tiles (4 warps, 3 stages) on an e4m3 cache. Shared memory at
/// D = 128: 4 KB of Q, 48 KB of e4m3 stages, 32 KB for the 16-bit tile in use.
template <int D, bool Paged>
using Fp8Config = DecodeConfig<D, 4, 3, Paged, false, true>;

constexpr int kTunedCandidateCount = TunedTiles<128, false>::List::size;

}  // namespace ch10
