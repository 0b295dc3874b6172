/// @file candidates.h
/// @brief Chapter 8: the tile configurations of the ladder and of step 5's search, listed once
/// for the GPU launcher (launch.cu) and the CPU emulator (emulator/emulated_kernels.cpp).
#pragma once

#include "../../../common/dispatch.h"
#include "bwd_config.h"

namespace ch8 {

/// A dK/dV kernel configuration with the separate dQ kernel that goes with it (--dq split);
/// lists of them are fa::ConfigList (common/dispatch.h).
template <class Bwd, class Dq>
struct KernelPair {
    using BwdCfg = Bwd;
    using DqCfg = Dq;
};

/// Steps 1–4: 4 warps (B_c = 64), B_r = 64; one Q_i buffer until step 3, then two. The dQ kernel:
/// 4 warps (B_r = 64), B_c = 64.
template <int Step, int D>
using LadderPair = KernelPair<BwdConfig<Step, D, 4, 64, (Step >= 3 ? 2 : 1), false>, DqConfig<Step, D, 4, 64>>;
template <int D>
using Ladder = fa::ConfigList<LadderPair<1, D>, LadderPair<2, D>, LadderPair<3, D>, LadderPair<4, D>>;

/// Step 5's candidates t0, t1, ... (the program's --tiles names; step 6's are f0, f1, ...), in list
/// order, BwdConfig<5, D, warps, B_r, stages, K/V in registers, pass width, dQ atomic width,
/// m-tiles per warp in line 15>.
/// Registers per lane ≈ dK_j, dV_j (D) + one pass's Sᵀ, dPᵀ, Pᵀ, dSᵀ (1.5 · pass width) + K_j, V_j
/// fragments if kept (D/2) + addresses, at most 255 (`make chapter8 EXTRA_NVCCFLAGS=-Xptxas=-v`).
template <class Bwd, int DqWarps>
using Tuned = KernelPair<Bwd, DqConfig<5, Bwd::D, DqWarps, 64>>;
/// t6–t9 are t2 and t4 (D = 64), t1 and t3 (D = 128) with float2 and float4 dQ atomics (the last
/// template argument; on GPUs before compute capability 9.0 they run scalar atomics, i.e. as the
/// candidate they copy). t10 (both head dims) is t9 and t11 (D = 128) is t7 with line 15 in warp tiles
/// of two m-tiles (DqM = 2): each K_j fragment read for dQ_i serves 32 query rows instead of 16
/// (README, "Shared-memory reads per tile"). t7 at D = 64 gains nothing from it (its dQ_i warp tiles
/// would go from 16 × 32 to 32 × 16: the same bytes), so it has no such twin.
using Candidates64 = fa::ConfigList<Tuned<BwdConfig<5, 64, 4, 64, 2, false, 64>, 4>,
                                      Tuned<BwdConfig<5, 64, 8, 64, 2, false, 64>, 8>,
                                      Tuned<BwdConfig<5, 64, 8, 64, 2, true, 64>, 8>,
                                      Tuned<BwdConfig<5, 64, 8, 128, 2, false, 64>, 8>,
                                      Tuned<BwdConfig<5, 64, 8, 128, 2, true, 32>, 8>,
                                      Tuned<BwdConfig<5, 64, 4, 128, 2, false, 32>, 4>,
                                      Tuned<BwdConfig<5, 64, 8, 64, 2, true, 64, 2>, 8>,
                                      Tuned<BwdConfig<5, 64, 8, 64, 2, true, 64, 4>, 8>,
                                      Tuned<BwdConfig<5, 64, 8, 128, 2, true, 32, 2>, 8>,
                                      Tuned<BwdConfig<5, 64, 8, 128, 2, true, 32, 4>, 8>,
                                      Tuned<BwdConfig<5, 64, 8, 128, 2, true, 32, 4, 2>, 8>>;
using Candidates128 = fa::ConfigList<Tuned<BwdConfig<5, 128, 4, 64, 2, false, 32>, 4>,
                                        Tuned<BwdConfig<5, 128, 8, 64, 2, false, 32>, 8>,
                                        Tuned<BwdConfig<5, 128, 8, 64, 2, false, 64>, 8>,
                                        Tuned<BwdConfig<5, 128, 8, 128, 2, false, 32>, 8>,
                                        Tuned<BwdConfig<5, 128, 4, 128, 2, false, 32>, 4>,
                                        Tuned<BwdConfig<5, 128, 8, 64, 3, false, 32>, 8>,
                                        Tuned<BwdConfig<5, 128, 8, 64, 2, false, 32, 2>, 8>,
                                        Tuned<BwdConfig<5, 128, 8, 64, 2, false, 32, 4>, 8>,
                                        Tuned<BwdConfig<5, 128, 8, 128, 2, false, 32, 2>, 8>,
                                        Tuned<BwdConfig<5, 128, 8, 128, 2, false, 32, 4>, 8>,
                                        Tuned<BwdConfig<5, 128, 8, 128, 2, false, 32, 4, 2>, 8>,
                                        Tuned<BwdConfig<5, 128, 8, 64, 2, false, 32, 4, 2>, 8>>;

/// Step 6's candidates f0, f1, ..., in list order, Fa2LayoutConfig<D, warps, B_c, B_r, stages, K/V in registers, pass width, dQ
/// atomic width>: 8 warps as 4 along the keys × 2 (queries in lines 10–14, D in lines 12 and 16), B_c
/// = 128 and float4 dQ atomics as t9, and FA2's B_r for its sm80 layout (README, "Step 6"): 64 at
/// D = 128, where two 128-row Q_i, dO_i stages would not fit beside K_j, V_j, Pᵀ and dSᵀ; 128 at
/// D = 64. --dq split pairs each with t9's dQ kernel. f0 and f1 hold Sᵀ 16 queries at a time (passes
/// of 32 and 16); f2 holds Sᵀ of the whole 32-query pass (FA2's 32 × 32 warp tile of S); f3 and f4
/// are f0 and f2 with every warp product's loads one k-step ahead (Fa2LayoutConfig's Prefetch).
/// f5, f6, f7 are f1, f2, f4 with float2 dQ atomics: with line 15's adds spread between the k-steps
/// of line 12 (backward_fa2.cuh) they need no shuffle and no register moves, which float4's do.
template <class Bwd>
using Fa2Pair = KernelPair<Bwd, DqConfig<5, Bwd::D, 8, 64>>;
using Fa2Candidates64 = fa::ConfigList<Fa2Pair<Fa2LayoutConfig<64, 8, 128, 128, 2, true, 32, 4>>,
                                        Fa2Pair<Fa2LayoutConfig<64, 8, 128, 128, 2, true, 16, 4>>,
                                        Fa2Pair<Fa2LayoutConfig<64, 8, 128, 128, 2, true, 32, 4, 32>>,
                                        Fa2Pair<Fa2LayoutConfig<64, 8, 128, 128, 2, true, 32, 4, 16, true>>,
                                        Fa2Pair<Fa2LayoutConfig<64, 8, 128, 128, 2, true, 32, 4, 32, true>>,
                                        Fa2Pair<Fa2LayoutConfig<64, 8, 128, 128, 2, true, 16, 2>>,
                                        Fa2Pair<Fa2LayoutConfig<64, 8, 128, 128, 2, true, 32, 2, 32>>,
                                        Fa2Pair<Fa2LayoutConfig<64, 8, 128, 128, 2, true, 32, 2, 32, true>>>;
using Fa2Candidates128 = fa::ConfigList<Fa2Pair<Fa2LayoutConfig<128, 8, 128, 64, 2, false, 32, 4>>,
                                         Fa2Pair<Fa2LayoutConfig<128, 8, 128, 64, 2, false, 16, 4>>,
                                         Fa2Pair<Fa2LayoutConfig<128, 8, 128, 64, 2, false, 32, 4, 32>>,
                                         Fa2Pair<Fa2LayoutConfig<128, 8, 128, 64, 2, false, 32, 4, 16, true>>,
                                         Fa2Pair<Fa2LayoutConfig<128, 8, 128, 64, 2, false, 32, 4, 32, true>>,
                                         Fa2Pair<Fa2LayoutConfig<128, 8, 128, 64, 2, false, 16, 2>>,
                                         Fa2Pair<Fa2LayoutConfig<128, 8, 128, 64, 2, false, 32, 2, 32>>,
                                         Fa2Pair<Fa2LayoutConfig<128, 8, 128, 64, 2, false, 32, 2, 32, true>>>;

/// Step 5's candidates per head dim and its default: the fastest in the sweep (./chapter8 --sweep;
/// README, step 5), t9: B_c = B_r = 128 with float4 dQ atomics at both head dims.
template <int D>
struct Step5Tiles;
template <> struct Step5Tiles<64> : fa::Tuning<Candidates64, 9> {};
template <> struct Step5Tiles<128> : fa::Tuning<Candidates128, 9> {};
/// Step 6's candidates per head dim and its default (README, step 6): the fastest in the H200
/// sweeps, f6 (FA2's 32 × 32 tile of S, float2 dQ atomics) at D = 128 and f5 (f1 with float2
/// atomics) at D = 64.
template <int D>
struct Step6Tiles;
template <> struct Step6Tiles<64> : fa::Tuning<Fa2Candidates64, 5> {};
template <> struct Step6Tiles<128> : fa::Tuning<Fa2Candidates128, 6> {};

}  // namespace ch8
