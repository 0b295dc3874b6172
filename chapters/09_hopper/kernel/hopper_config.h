/// @file hopper_config.h
/// @brief Chapter 9: the compile-time description of one step of the ladder (which features it
/// has, its tiles, its shared memory). Plain C++ so the CPU tests check the shapes.
#pragma once

#include <cstdint>

#include "../../../common/dispatch.h"
#include "../../../common/host_device.h"
#include "hopper_layout.h"

namespace ch9 {

// ---- the ring of K/V buffers (steps 2–6), as plain functions so a CPU test can run the protocol --
// Tile j lives in buffer j mod Stages. An mbarrier's phases alternate parity 0, 1, 0, ...; waiting
// for parity p returns once the phase of that parity has completed (mbarrier.try_wait.parity).

/// The depth of the K/V ring of steps 2–5: three stages, the most that fit beside Q at D = 128
/// (3 × 64 KB + 32 KB of the 227 KB a block may have). Step 6's candidates also try two.
constexpr int kLadderStages = 3;

/// The buffer tile j is loaded into.
FA_HOST_DEVICE constexpr int ring_stage(int j, int stages) { return j % stages; }
/// The parity of the phase of full[ring_stage(j)] that tile j's bytes complete: it is the
/// (j / Stages)-th use of that buffer.
FA_HOST_DEVICE constexpr std::uint32_t full_parity(int j, int stages) { return std::uint32_t((j / stages) & 1); }
/// Step 3: before loading tile j ≥ Stages the producer waits until the consumers have released
/// tile j − Stages (same buffer): the phase of empty[ring_stage(j)] that release completes.
FA_HOST_DEVICE constexpr std::uint32_t empty_parity(int j, int stages) { return full_parity(j - stages, stages); }

// ---- pingpong (steps 4–6): the consumer warpgroups take turns at the tensor cores ---------------
// Turn k of a consumer warpgroup issues, back to back, the product S = Q_i K_kᵀ of tile k (while
// k < T_c) and the product O += P̃ V_{k−1} of the tile before (from k = 1 on): T_c + 1 turns, the
// first with S_0 alone, the last with P̃·V_{T_c−1} alone. Between two of its turns a warpgroup runs
// a softmax on the CUDA cores, and the other warpgroups' turns keep the tensor cores busy.
// The turns go round 0, 1, 0, 1, ... with two consumers, 0, 1, 2, 0, 1, 2, ... with three (as
// FlashAttention-3's scheduler barriers), through one named barrier per consumer, of 256 threads:
// before turn k, consumer c waits (bar.sync) on turn_barrier(c) until its own 128 threads and 128
// arrivals (bar.arrive) of the consumer before it are in; after it, c arrives on the barrier of
// the consumer after it (next_turn_barrier).

/// Turns of one consumer warpgroup over T_c key tiles.
FA_HOST_DEVICE constexpr int turn_count(int Tc) { return Tc + 1; }
/// The tile whose S turn k issues, or −1 (the last turn has none).
FA_HOST_DEVICE constexpr int turn_s_tile(int k, int Tc) { return k < Tc ? k : -1; }
/// The tile whose P̃·V turn k issues, or −1 (the first turn has none).
FA_HOST_DEVICE constexpr int turn_pv_tile(int k) { return k - 1; }
/// Threads a turn barrier counts: one consumer warpgroup waiting, the one before it arriving.
constexpr int kTurnThreads = 256;
/// The most consumer warpgroups a block has (their turn and store barriers are all distinct).
constexpr int kMaxConsumers = 3;
/// Hardware barrier consumer `wg` waits on for its turn: 1, 2, 3 (0 is __syncthreads').
FA_HOST_DEVICE constexpr int turn_barrier(int wg) { return 1 + wg; }
/// The barrier consumer `wg` of `consumers` arrives on after its turn: that of the next consumer.
FA_HOST_DEVICE constexpr int next_turn_barrier(int wg, int consumers) { return turn_barrier((wg + 1) % consumers); }
/// Before its first turn the last consumer arrives on consumer 0's barrier, so consumer 0 goes first.
FA_HOST_DEVICE constexpr bool opens_first_turn(int wg, int consumers) { return wg == consumers - 1; }
/// After turn k a consumer hands the turn over (arrives on the next one's barrier), except the last
/// consumer after its last turn: no turn of consumer 0 follows, and an arrival nobody waits for
/// would stay on the barrier.
FA_HOST_DEVICE constexpr bool hands_over(int wg, int k, int Tc, int consumers) {
    return !(wg == consumers - 1 && k == turn_count(Tc) - 1);
}
/// wgmma groups a consumer lets stay in flight when it reads the S of a turn (wgmma.wait_group N;
/// groups complete in the order they were committed). Step 4 waits for everything (0). Step 5
/// lets the turn's P̃·V, committed after S, run on under the softmax (1), except in the first
/// turn, which has no P̃·V: S is the only group, and 1 would let S itself still run.
FA_HOST_DEVICE constexpr int s_wait_depth(bool overlap, bool turn_has_pv) { return overlap && turn_has_pv ? 1 : 0; }

// ---- step 6: O_i leaves through shared memory and a TMA store --------------------------------
/// Rows of one TMA store box of O: a consumer warpgroup's 64 rows (64 columns per box, as loads).
constexpr int kOBoxRows = 64;
/// Where consumer `wg` stages columns 64b..64b+63 of its rows of O_i, in elements from the start
/// of the Q tile: its own rows of Q's block b (no other warpgroup reads them, and its last S has
/// finished reading them). Each box then starts 1024-byte aligned, as the 128-byte swizzle needs.
FA_HOST_DEVICE constexpr int o_stage_offset(int wg, int b, int Br) {
    return b * Br * tc::hopper::kAtomCols + wg * kOBoxRows * tc::hopper::kAtomCols;
}
/// Hardware barrier consumer `wg` meets on (128 threads, its own) before its O tile is stored:
/// 4, 5, 6, after the turn barriers.
FA_HOST_DEVICE constexpr int store_barrier(int wg) { return 1 + kMaxConsumers + wg; }

// ---- step 6, persistent: one block per SM loops over the work items -------------------------
// A work item is one block of Alg. 1 (a query block i of one head of one batch): T_r · B·H items.
// A persistent grid has min(#SMs, items) blocks; block b runs items w = b, b + gridDim.x, ...
// Two gains over a block per item: the next item's Q and first K_j, V_j load while the consumers
// still compute the last products of the current item and store its O (the producer runs ahead);
// and the last wave no longer leaves SMs idle behind a few long causal blocks (the tail), since
// the blocks take the heaviest items first and the light ones fill in at the end.

/// One work item: the query block i (rows B_r·i ..) and the (batch, head) index b·H + h.
struct WorkItem {
    int q_block, bh;
};
/// Item w of T_r · BH. Causal: q_block-major, the last query blocks (T_r − 1, the most key tiles)
/// of every head first, so work never increases along w. Not causal: every item costs the same;
/// the query blocks of one head are neighbours, so blocks running at the same time share its K, V
/// in L2 (the order of the grid of steps 1–6).
FA_HOST_DEVICE constexpr WorkItem work_item(int w, int Tr, int BH, bool causal) {
    return causal ? WorkItem{Tr - 1 - w / BH, w % BH} : WorkItem{w % Tr, w / Tr};
}
/// Blocks of a persistent grid: one per SM, never more than there are items.
FA_HOST_DEVICE constexpr int persistent_blocks(int sm_count, int items) { return sm_count < items ? sm_count : items; }
/// The parity of the phase of q_full that item n of a block (its n-th, from 0) completes: the Q
/// tile is loaded once per item. The producer waits for the phase of q_empty that the consumers
/// complete after item n − 1, parity q_parity(n − 1), before it loads item n's Q.
FA_HOST_DEVICE constexpr std::uint32_t q_parity(int n) { return std::uint32_t(n & 1); }

/// One Hopper kernel. `Step` switches the features on cumulatively:
///   1  wgmma: S = Q·Kᵀ with both operands in shared memory (descriptors, 128-byte swizzle),
///      O += P̃·V with P̃ from registers; tiles loaded by every thread with cp.async
///   2  TMA: one thread loads K_j, V_j (and Q) with cp.async.bulk.tensor into a ring of `Stages`
///      buffers (kLadderStages in steps 2–5); each buffer's mbarrier counts the bytes in
///   3  warp specialization: a producer warpgroup issues the TMA loads, the consumer warpgroups
///      compute; "empty" mbarriers hand buffers back; setmaxnreg moves registers to the consumers
///   4  pingpong: the consumer warpgroups take turns at the tensor cores (named barriers), each
///      issuing S of tile k and P̃·V of tile k − 1 together, so one's softmax runs under the
///      others' products
///   5  intra-warpgroup overlap: a consumer waits for S alone (wgmma.wait_group 1) and runs the
///      softmax while its own P̃·V of the tile before is still on the tensor cores; O is rescaled
///      once that product is done
///   6  tuned: O_i leaves through shared memory and a TMA store; the depth of the ring, the number
///      of consumer warpgroups and whether they take turns (steps 4–5) or run free (step 3's loop)
///      are the candidates of Step6Tiles
/// Every step: consumer warpgroups of 64 query rows each (2 in steps 1–5: B_r = 128), B_c = 128
/// keys per tile, the exp2 online softmax of chapter 7 step 5 on the wgmma accumulators, causal
/// blocks heaviest first. `Consumers` = 3 (B_r = 192, turns going round the three or none) and
/// `Turns` = false (step 3's free loop after step 3) are step 6 candidates.
/// `Persistent` (step 6 candidates): a block per SM loops over the work items (work_item above).
template <int Step, int D_, int Stages, int Consumers = 2, bool Turns = true, bool Persistent = false>
struct HopperConfig {
    static constexpr int kStep = Step;
    static constexpr int D = D_;
    static constexpr int Bc = 128;
    static constexpr int kStages = Stages;
    static constexpr int kConsumers = Consumers;         ///< consumer warpgroups
    static constexpr int Br = 64 * kConsumers;           ///< query rows of the block
    static constexpr bool kTma = Step >= 2;              ///< step 2: TMA into an mbarrier ring
    static constexpr bool kProducer = Step >= 3;         ///< step 3: a producer warpgroup
    static constexpr int kThreads = 128 * (kConsumers + (kProducer ? 1 : 0));
    static constexpr bool kPingpong = Step >= 4 && Turns;  ///< step 4: turns at the tensor cores
    static constexpr bool kOverlap = Step >= 5 && Turns;   ///< step 5: softmax under the own P̃·V
    static constexpr bool kTmaStore = Step >= 6;         ///< step 6: O by TMA store
    static constexpr bool kPersistent = Persistent;      ///< step 6: a block per SM, looping over items
    /// Step 3: setmaxnreg of the producer and of each consumer. The register file holds 64 K
    /// 32-bit registers per SM and the block has it alone (one block per SM): with two consumers
    /// 40 + 2·232 per thread of a warpgroup, with three 32 + 3·160 (FA3's split).
    static constexpr int kProducerRegs = kConsumers == 2 ? 40 : 32;
    static constexpr int kConsumerRegs = kConsumers == 2 ? 232 : 160;

    // What chapter 7's softmax, masking and packing (online_softmax.cuh, warp_tile.cuh) read: a
    // warp owns one 16-row m-tile of the warpgroup's 64 rows; the exp2 form of its step 5.
    static constexpr int kMTiles = 1;
    static constexpr bool kExp2 = true;

    /// Bytes of shared memory: Q (B_r × D), `Stages` pairs (K_j, V_j) of B_c × D, 16-bit, stored
    /// as [rows][64] swizzle blocks; then the mbarriers (full and empty per stage, q_full for Q,
    /// and when persistent q_empty); then slack to align the tiles to 1024 bytes (dynamic shared
    /// memory is only 16-byte aligned).
    static constexpr int kTileBytes = 2 * (Br * D + Stages * 2 * Bc * D);
    static constexpr int kBarriers = 2 * Stages + 1 + (Persistent ? 1 : 0);
    static constexpr int kSmemBytes = kTileBytes + 8 * kBarriers + tc::hopper::kAtomBytes;
    /// Bytes TMA brings per stage (K_j and V_j).
    static constexpr int kStageBytes = 2 * 2 * Bc * D;

    static_assert(Step >= 1 && Step <= 6, "HopperConfig: steps 1..6");
    static_assert(kConsumers == 2 || kConsumers == 3, "HopperConfig: two or three consumer warpgroups");
    static_assert(kConsumers <= kMaxConsumers, "HopperConfig: at most kMaxConsumers consumers (barrier ids)");
    static_assert(kConsumers == 2 || Step == 6, "HopperConfig: three consumers are a step 6 candidate");
    static_assert(Turns || Step == 6, "HopperConfig: free-running consumers after step 3 are a step 6 candidate");
    static_assert(!Persistent || Step == 6, "HopperConfig: a persistent grid is a step 6 candidate");
    static_assert(!kProducer || 128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 64 * 1024,
                  "HopperConfig: setmaxnreg asks for more registers than the SM has");
    static_assert(D == 64 || D == 128, "HopperConfig: head dim 64 or 128");
    // With B_r = 192 > B_c a warpgroup of a causal block may meet a tile whose keys all lie after
    // its rows: mask_scores sets it to −∞, and the online softmax leaves m, l and O as they were
    // (m is finite by then: tile 0, which every row sees first, holds key 0).
    static_assert(kTma ? Stages >= 2 : Stages == 1, "HopperConfig: TMA rings have >= 2 stages, step 1 one buffer");
};

/// The most dynamic shared memory a block may opt into on compute capability 9.0 (227 KB).
constexpr int kSmemOptIn = 227 * 1024;

/// Whether every configuration of a list fits kSmemOptIn.
template <class... Cfgs>
constexpr bool fits_smem(fa::ConfigList<Cfgs...>) {
    return ((Cfgs::kSmemBytes <= kSmemOptIn) && ...);
}

/// Step 6's tile candidates (./chapter9 --sweep times them all, --tiles C runs one), listed with
/// fa::Tuning (common/dispatch.h). B_c = 128 is fixed (the width of the S wgmma); they differ in
///   - the depth of the K/V ring. A stage holds K_j and V_j, 32 KB at D = 64 and 64 KB at D = 128,
///     beside Q (B_r × D × 2 bytes): with B_r = 128, D = 128 fits 2 and 3 stages (4 would need
///     288 KB of tiles);
///   - the schedule: turns with the intra-warpgroup overlap (steps 4–5), or consumers that run
///     free as in step 3. At D = 64 the products of a tile take half the time they take at
///     D = 128 while the softmax takes the same, so a turn may end before the next consumer's
///     softmax does, and the turns can cost more than they hide;
///   - two consumers (B_r = 128) or three (B_r = 192, 160 registers each, FlashAttention-3's tile
///     at D = 64), free or in turns that go round the three: more query rows per K/V tile loaded,
///     more warps to hide the softmax behind. At D = 64 only: at D = 128 O (64 registers), S (64)
///     and P̃ (32) leave too few of the 160 for the rest, and ptxas spills;
///   - a block per work item, or a persistent grid (the last candidate of each list: the
///     default's schedule with a block per SM looping over the items, work_item).
/// Candidates 0–3 are the same at both head dims: {3, 2} stages × {turns, free}, two consumers.
/// Candidate 0 is step 5's configuration, so set beside step 5 it isolates the TMA store of O.
/// The defaults are the fastest of `./chapter9 --sweep` at N = 8192, causal and not (README,
/// "Step 6"): at D = 128 three stages in turns; at D = 64 three consumers in turns that go round
/// the three, four stages (FlashAttention-3's choice at D = 64). No default spills.
template <int D>
struct Step6Tiles;
template <>
struct Step6Tiles<64>
    : fa::Tuning<fa::ConfigList<HopperConfig<6, 64, 3>, HopperConfig<6, 64, 2>,                          //
                                  HopperConfig<6, 64, 3, 2, false>, HopperConfig<6, 64, 2, 2, false>,      //
                                  HopperConfig<6, 64, 3, 3, false>, HopperConfig<6, 64, 2, 3, false>,      //
                                  HopperConfig<6, 64, 3, 3, true>, HopperConfig<6, 64, 4, 3, true>,        //
                                  HopperConfig<6, 64, 4, 3, true, true>>,
                  7> {};
template <>
struct Step6Tiles<128> : fa::Tuning<fa::ConfigList<HopperConfig<6, 128, 3>, HopperConfig<6, 128, 2>,     //
                                                     HopperConfig<6, 128, 3, 2, false>,                 //
                                                     HopperConfig<6, 128, 2, 2, false>,                 //
                                                     HopperConfig<6, 128, 3, 2, true, true>>,
                                     0> {};
static_assert(fits_smem(Step6Tiles<64>::List{}) && fits_smem(Step6Tiles<128>::List{}),
              "Step6Tiles: every candidate must fit the 227 KB a block may opt into");

}  // namespace ch9
