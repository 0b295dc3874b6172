/// @file hopper_config.h
/// @brief Chapter 9: the compile-time description of one step of the ladder (which features it
/// has, its tiles, its shared memory). Plain C++ so the CPU tests check the shapes.
#pragma once

#include <cstdint>

#include "../../../common/host_device.h"
#include "../../../common/tensor_core/hopper_layout.h"
#include "../../07_tensor_cores/kernel/candidates.h"

namespace ch9 {

// ---- the ring of K/V buffers (steps 2–3), as plain functions so a CPU test can run the protocol --
// Tile j lives in buffer j mod Stages. An mbarrier's phases alternate parity 0, 1, 0, ...; waiting
// for parity p returns once the phase of that parity has completed (mbarrier.try_wait.parity).

/// The buffer tile j is loaded into.
FA_HOST_DEVICE constexpr int ring_stage(int j, int stages) { return j % stages; }
/// The parity of the phase of full[ring_stage(j)] that tile j's bytes complete: it is the
/// (j / Stages)-th use of that buffer.
FA_HOST_DEVICE constexpr std::uint32_t full_parity(int j, int stages) { return std::uint32_t((j / stages) & 1); }
/// Step 3: before loading tile j ≥ Stages the producer waits until the consumers have released
/// tile j − Stages (same buffer): the phase of empty[ring_stage(j)] that release completes.
FA_HOST_DEVICE constexpr std::uint32_t empty_parity(int j, int stages) { return full_parity(j - stages, stages); }

// ---- pingpong (steps 4–6): the two consumer warpgroups take turns at the tensor cores ----------
// Turn k of a consumer warpgroup issues, back to back, the product S = Q_i K_kᵀ of tile k (while
// k < T_c) and the product O += P̃ V_{k−1} of the tile before (from k = 1 on): T_c + 1 turns, the
// first with S_0 alone, the last with P̃·V_{T_c−1} alone. Between two of its turns a warpgroup runs
// a softmax on the CUDA cores, and the other warpgroup's turn keeps the tensor cores busy.
// The turns alternate 0, 1, 0, 1, ... through two named barriers of 256 threads: before turn k,
// consumer c waits (bar.sync) on turn_barrier(c) until its own 128 threads and 128 arrivals
// (bar.arrive) of the other consumer are in; after it, c arrives on the other's barrier.

/// Turns of one consumer warpgroup over T_c key tiles.
FA_HOST_DEVICE constexpr int turn_count(int Tc) { return Tc + 1; }
/// The tile whose S turn k issues, or −1 (the last turn has none).
FA_HOST_DEVICE constexpr int turn_s_tile(int k, int Tc) { return k < Tc ? k : -1; }
/// The tile whose P̃·V turn k issues, or −1 (the first turn has none).
FA_HOST_DEVICE constexpr int turn_pv_tile(int k) { return k - 1; }
/// Threads a turn barrier counts: one consumer warpgroup waiting, the other arriving.
constexpr int kTurnThreads = 256;
/// Hardware barrier consumer `wg` waits on for its turn (0 is __syncthreads'; 3 and 4 are step 6's).
FA_HOST_DEVICE constexpr int turn_barrier(int wg) { return 1 + wg; }
/// Before its first turn consumer 1 arrives on consumer 0's barrier, so consumer 0 goes first.
FA_HOST_DEVICE constexpr bool opens_first_turn(int wg) { return wg == 1; }
/// After turn k a consumer hands the turn over (arrives on the other's barrier), except consumer 1
/// after its last turn: no turn of consumer 0 follows, and an arrival nobody waits for would stay
/// on the barrier.
FA_HOST_DEVICE constexpr bool hands_over(int wg, int k, int Tc) { return !(wg == 1 && k == turn_count(Tc) - 1); }
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
/// Hardware barrier consumer `wg` meets on (128 threads, its own) before its O tile is stored.
FA_HOST_DEVICE constexpr int store_barrier(int wg) { return 3 + wg; }

/// One Hopper kernel. `Step` switches the features on cumulatively:
///   1  wgmma: S = Q·Kᵀ with both operands in shared memory (descriptors, 128-byte swizzle),
///      O += P̃·V with P̃ from registers; tiles loaded by every thread with cp.async
///   2  TMA: one thread loads K_j, V_j (and Q) with cp.async.bulk.tensor into a ring of `Stages`
///      buffers; each buffer's mbarrier counts the bytes in
///   3  warp specialization: a producer warpgroup issues the TMA loads, the consumer warpgroups
///      compute; "empty" mbarriers hand buffers back; setmaxnreg moves registers to the consumers
///   4  pingpong: the consumer warpgroups take turns at the tensor cores (named barriers), each
///      issuing S of tile k and P̃·V of tile k − 1 together, so one's softmax runs under the
///      other's products
///   5  intra-warpgroup overlap: a consumer waits for S alone (wgmma.wait_group 1) and runs the
///      softmax while its own P̃·V of the tile before is still on the tensor cores; O is rescaled
///      once that product is done
///   6  tuned: O_i leaves through shared memory and a TMA store; 3 stages in the ring
/// Every step: 2 consumer warpgroups of 64 query rows each (B_r = 128), B_c = 128 keys per tile,
/// the exp2 online softmax of chapter 7 step 5 on the wgmma accumulators, causal blocks heaviest
/// first.
template <int Step, int D_, int Stages>
struct HopperConfig {
    static constexpr int kStep = Step;
    static constexpr int D = D_;
    static constexpr int Bc = 128;
    static constexpr int kStages = Stages;
    static constexpr int kConsumers = 2;                 ///< consumer warpgroups
    static constexpr int Br = 64 * kConsumers;           ///< query rows of the block
    static constexpr bool kTma = Step >= 2;              ///< step 2: TMA into an mbarrier ring
    static constexpr bool kProducer = Step >= 3;         ///< step 3: a producer warpgroup
    static constexpr int kThreads = 128 * (kConsumers + (kProducer ? 1 : 0));
    static constexpr bool kPingpong = Step >= 4;         ///< step 4: turns at the tensor cores
    static constexpr bool kOverlap = Step >= 5;          ///< step 5: softmax under the own P̃·V
    static constexpr bool kTmaStore = Step >= 6;         ///< step 6: O by TMA store
    static constexpr int kProducerRegs = 40;             ///< step 3: setmaxnreg of the producer
    static constexpr int kConsumerRegs = 232;            ///< step 3: setmaxnreg of the consumers

    // What chapter 7's softmax, masking and packing (online_softmax.cuh, warp_tile.cuh) read: a
    // warp owns one 16-row m-tile of the warpgroup's 64 rows; the exp2 form of its step 5.
    static constexpr int kMTiles = 1;
    static constexpr bool kExp2 = true;

    /// Bytes of shared memory: Q (B_r × D), `Stages` pairs (K_j, V_j) of B_c × D, 16-bit, stored
    /// as [rows][64] swizzle blocks; then the mbarriers (full and empty per stage, one for Q);
    /// then slack to align the tiles to 1024 bytes (dynamic shared memory is only 16-byte aligned).
    static constexpr int kTileBytes = 2 * (Br * D + Stages * 2 * Bc * D);
    static constexpr int kBarriers = 2 * Stages + 1;
    static constexpr int kSmemBytes = kTileBytes + 8 * kBarriers + tc::hopper::kAtomBytes;
    /// Bytes TMA brings per stage (K_j and V_j).
    static constexpr int kStageBytes = 2 * 2 * Bc * D;

    static_assert(Step >= 1 && Step <= 6, "HopperConfig: steps 1..6");
    static_assert(!kPingpong || kConsumers == 2, "HopperConfig: the turns alternate between two consumers");
    static_assert(D == 64 || D == 128, "HopperConfig: head dim 64 or 128");
    static_assert(Br == Bc, "HopperConfig: B_r = B_c, so no warpgroup ever skips a causal tile");
    static_assert(kTma ? Stages >= 2 : Stages == 1, "HopperConfig: TMA rings have >= 2 stages, step 1 one buffer");
};

/// The most dynamic shared memory a block may opt into on compute capability 9.0 (227 KB).
constexpr int kSmemOptIn = 227 * 1024;

/// Whether every configuration of a list fits kSmemOptIn.
template <class... Cfgs>
constexpr bool fits_smem(ch7::ConfigList<Cfgs...>) {
    return ((Cfgs::kSmemBytes <= kSmemOptIn) && ...);
}

/// Step 6's tile candidates (./chapter9 --sweep times them all, --tiles C runs one), listed with
/// chapter 7's ConfigList and Tuning. B_r = B_c = 128 and the two consumer warpgroups are fixed
/// (the turns assume two, and B_c is the width of the S wgmma), so the candidates differ in the
/// depth of the K/V ring. A stage holds K_j and V_j, 32 KB at D = 64 and 64 KB at D = 128, beside
/// Q (16 or 32 KB): D = 128 fits 2 and 3 stages (4 would need 288 KB of tiles); D = 64 lists 2 to
/// 4 (144 KB of tiles; 5 and 6 stages would fit too, and are left out to keep the build small).
/// The 2-stage candidate is step 6 with step 5's ring, so set beside step 5 it isolates the TMA
/// store of O. The default is 3 stages, what step 6 has used since it was written: no GPU has
/// timed the other candidates yet.
template <int D>
struct Step6Tiles;
template <>
struct Step6Tiles<64> : ch7::Tuning<ch7::ConfigList<HopperConfig<6, 64, 2>, HopperConfig<6, 64, 3>,  //
                                                    HopperConfig<6, 64, 4>>,
                                    1> {};
template <>
struct Step6Tiles<128> : ch7::Tuning<ch7::ConfigList<HopperConfig<6, 128, 2>, HopperConfig<6, 128, 3>>, 1> {};
static_assert(fits_smem(Step6Tiles<64>::List{}) && fits_smem(Step6Tiles<128>::List{}),
              "Step6Tiles: every candidate must fit the 227 KB a block may opt into");

}  // namespace ch9
