/// @file hopper_config.h
/// @brief Chapter 9: the compile-time description of one step of the ladder (which features it
/// has, its tiles, its shared memory). Plain C++ so the CPU tests check the shapes.
#pragma once

#include <cstdint>

#include "../../../common/host_device.h"
#include "../../../common/tensor_core/hopper_layout.h"

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

/// One Hopper kernel. `Step` switches the features on cumulatively:
///   1  wgmma: S = Q·Kᵀ with both operands in shared memory (descriptors, 128-byte swizzle),
///      O += P̃·V with P̃ from registers; tiles loaded by every thread with cp.async
///   2  TMA: one thread loads K_j, V_j (and Q) with cp.async.bulk.tensor into a ring of `Stages`
///      buffers; each buffer's mbarrier counts the bytes in
///   3  warp specialization: a producer warpgroup issues the TMA loads, the consumer warpgroups
///      compute; "empty" mbarriers hand buffers back; setmaxnreg moves registers to the consumers
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

    static_assert(Step >= 1 && Step <= 3, "HopperConfig: steps 1..3");
    static_assert(D == 64 || D == 128, "HopperConfig: head dim 64 or 128");
    static_assert(Br == Bc, "HopperConfig: B_r = B_c, so no warpgroup ever skips a causal tile");
    static_assert(kTma ? Stages >= 2 : Stages == 1, "HopperConfig: TMA rings have >= 2 stages, step 1 one buffer");
};

}  // namespace ch9
