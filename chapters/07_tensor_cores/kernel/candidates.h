/// @file candidates.h
/// @brief Chapter 7: the tile configurations of variants 2–6, listed once for the GPU launcher
/// (launch.cu) and the CPU emulator (emulator/emulated_kernels.cpp).
#pragma once

#include <type_traits>

#include "../../../common/dispatch.h"
#include "tile_config.h"

namespace ch7 {

/// Steps 2–5: 4 warps of one m-tile (B_r = 64), B_c = 64; synchronous loads until step 4, then
/// two K/V buffers.
template <int Step, int D>
using LadderConfig = MmaConfig<Step, D, 4, 1, 64, (Step >= 4 ? 2 : 1), false>;

/// Variant 6's candidates: MmaConfig<6, D, warps, m-tiles, B_c, stages, Q in registers>. Register
/// budget per lane ≈ O (m_tiles·D/2) + S (m_tiles·B_c/2) + Q (m_tiles·D/4 if kept) + addresses,
/// at most 255. FlashAttention-2's own shapes (B_r = 128 with B_c = 128 for D = 64 and B_c = 64
/// for D = 128) spill a few registers in this kernel. D = 128's candidate 6 is that shape; it
/// spills on sm_90 and the course's rule is no spills in a default kernel (what it costs and gains
/// is measured in the README, step 6). The last candidate of each list is 8 warps of 2 m-tiles
/// (B_r = 256): each K/V tile loaded once for twice the rows. Every other candidate compiles
/// without spills for sm_80..sm_90 (`make chapter7 EXTRA_NVCCFLAGS=-Xptxas=-v` shows it).
using Candidates64 = fa::ConfigList<MmaConfig<6, 64, 4, 2, 64, 2, false>,   //
                                MmaConfig<6, 64, 4, 2, 64, 2, true>,    //
                                MmaConfig<6, 64, 4, 2, 64, 3, true>,    //
                                MmaConfig<6, 64, 4, 1, 128, 2, true>,   //
                                MmaConfig<6, 64, 4, 1, 64, 3, true>,    //
                                MmaConfig<6, 64, 8, 1, 64, 2, true>,    //
                                MmaConfig<6, 64, 8, 2, 64, 2, true>>;
using Candidates128 = fa::ConfigList<MmaConfig<6, 128, 4, 2, 32, 2, false>,  //
                                 MmaConfig<6, 128, 4, 2, 32, 3, false>,  //
                                 MmaConfig<6, 128, 4, 1, 64, 2, true>,   //
                                 MmaConfig<6, 128, 4, 1, 32, 2, false>,  //
                                 MmaConfig<6, 128, 8, 1, 64, 2, false>,  //
                                 MmaConfig<6, 128, 8, 1, 32, 2, true>,   //
                                 MmaConfig<6, 128, 4, 2, 64, 2, false>,  //
                                 MmaConfig<6, 128, 8, 2, 32, 2, false>>;

/// Head dims 32, 96 and 256: candidates chosen from the register and shared-memory budget, not
/// yet timed on a GPU (README, "Head dimensions": why each one, and how to measure them).
/// D = 32: O and Q take half the registers of D = 64, so D = 64's shapes fit with room to spare;
/// candidate 2 is FlashAttention-2's own 128 × 128, at the register limit. D = 96: candidate 0 is
/// D = 128's default shape; candidate 3, FlashAttention-2's 128 × 64, spills. D = 256:
/// O alone is 128 registers per lane, so one m-tile per warp; B_c = 32 keeps S small, and the
/// shared memory (Q: 32 KB per 64 rows; K_j, V_j: 32 KB per 32 keys and stage) stays within
/// sm_80's 163 KB.
using Candidates32 = fa::ConfigList<MmaConfig<6, 32, 4, 2, 64, 3, true>,    //
                                MmaConfig<6, 32, 4, 2, 64, 2, false>,   //
                                MmaConfig<6, 32, 4, 2, 128, 2, true>,   //
                                MmaConfig<6, 32, 4, 1, 128, 2, true>,   //
                                MmaConfig<6, 32, 8, 2, 64, 2, true>>;
using Candidates96 = fa::ConfigList<MmaConfig<6, 96, 4, 2, 32, 2, false>,   //
                                MmaConfig<6, 96, 4, 2, 32, 3, false>,   //
                                MmaConfig<6, 96, 4, 1, 64, 2, true>,    //
                                MmaConfig<6, 96, 4, 2, 64, 2, false>>;
using Candidates256 = fa::ConfigList<MmaConfig<6, 256, 4, 1, 32, 2, false>,  //
                                 MmaConfig<6, 256, 4, 1, 32, 3, false>,  //
                                 MmaConfig<6, 256, 4, 1, 64, 2, false>,  //
                                 MmaConfig<6, 256, 8, 1, 32, 2, false>>;

/// Variant 6's candidates for head dim D and the one it uses by default: the fastest without
/// spills in `./chapter7 --sweep` (the measurements, and the runs they come from, are in the
/// README: step 6 for D = 64 and 128, "Head dimensions" for the others).
template <int D>
struct TunedTiles;
template <> struct TunedTiles<32> : fa::Tuning<Candidates32, 2> {};
template <> struct TunedTiles<64> : fa::Tuning<Candidates64, 2> {};
template <> struct TunedTiles<96> : fa::Tuning<Candidates96, 0> {};
template <> struct TunedTiles<128> : fa::Tuning<Candidates128, 0> {};
template <> struct TunedTiles<256> : fa::Tuning<Candidates256, 0> {};

}  // namespace ch7
