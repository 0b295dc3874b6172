/// @file bwd_hopper_config.h
/// @brief Chapter 11: the compile-time description of one step of the ladder (its features, tiles
/// and shared memory), and the protocol of its rings and barriers as plain functions, so that the
/// CPU tests check them without a GPU.
#pragma once

#include <cstdint>

#include "../../../common/dispatch.h"
#include "../../../common/host_device.h"
#include "../../09_hopper/kernel/hopper_config.h"
#include "../../09_hopper/kernel/hopper_layout.h"

namespace ch11 {

// ---- the ring of Q_i, dO_i, L_i, D_i buffers (steps 2–6) --------------------------------------
// The n-th query tile a block visits (n = i − i_begin) lives in buffer n mod Stages; chapter 9's
// ring functions (ring_stage, full_parity, empty_parity) give its buffer and mbarrier phases.

/// Depth of the Q_i/dO_i ring of the ladder: two stages (a stage holds Q_i and dO_i, 32 KB at
/// B_r × D = 64 × 128, beside K_j and V_j, 64 KB, dSᵀ and the dQ staging).
constexpr int kLadderStages = 2;

/// Algorithm 2 line 8 with the causal mask: the first query tile (of B_r rows) that sees any key of
/// the block starting at key k0 (queries before k0 see none of its keys).
FA_HOST_DEVICE constexpr int first_query_tile(int k0, int Br, bool causal) { return causal ? k0 / Br : 0; }
/// Query tiles a block visits: from first_query_tile to T_r − 1 (at least one, since k0 < N).
FA_HOST_DEVICE constexpr int query_tiles(int N, int k0, int Br, bool causal) {
    return (N + Br - 1) / Br - first_query_tile(k0, Br, causal);
}

// ---- line 15, dQ_i += dS K_j, shared by the two consumer warpgroups ----------------------------
// dQ_i is B_r × D; it is computed in pieces of 64 × 64 (one wgmma m64n64 chain over the B_c keys),
// (B_r / 64) · (D / 64) of them, split evenly between the consumers: consumer c takes pieces
// c·P/2 .. (c + 1)·P/2 − 1 (P the count). Piece q covers query rows 64·(q / (D/64)).. and
// columns 64·(q mod (D/64))..

/// Pieces of one consumer warpgroup.
FA_HOST_DEVICE constexpr int dq_pieces_per_consumer(int Br, int D) { return (Br / 64) * (D / 64) / 2; }
/// Row block (of 64 query rows) of piece k of consumer c.
FA_HOST_DEVICE constexpr int dq_piece_rows(int c, int k, int Br, int D) {
    return (c * dq_pieces_per_consumer(Br, D) + k) / (D / 64);
}
/// Column block (of 64 columns of d) of piece k of consumer c.
FA_HOST_DEVICE constexpr int dq_piece_cols(int c, int k, int Br, int D) {
    return (c * dq_pieces_per_consumer(Br, D) + k) % (D / 64);
}

/// Step 4: where element (row, col) of piece `piece` (= c · dq_pieces_per_consumer + k, row and col
/// within the piece, 0..63) is staged for the TMA reduce-add: piece after piece, each as two fp32
/// blocks of [64 rows][32 columns] with the 128-byte swizzle (hopper_layout.h, sw128_offset_f32),
/// so that a consumer's pieces are boxes of their own and its dQ warp adds them without waiting
/// for the other consumer. Byte offset from the staging base.
FA_HOST_DEVICE constexpr int dq_stage_offset(int piece, int row, int col) {
    return piece * 64 * 64 * 4 + tc::hopper::sw128_offset_f32(row, col, 64);
}

/// Step 5: the dSᵀ buffer of the n-th query tile (of `buffers`, 1 or 2).
FA_HOST_DEVICE constexpr int ds_buffer(int n, int buffers) { return n % buffers; }

// ---- named barriers (steps 3–6; 0 is __syncthreads') -------------------------------------------
/// The two consumers (256 threads) meet after both wrote their rows of dSᵀ (line 15 reads all of them).
constexpr int kDsFullBarrier = 1;
/// ... and before either writes the next dSᵀ (the other's line 15 may still be reading the last).
constexpr int kDsFreeBarrier = 2;
/// Step 4: consumer c arrives when its pieces of dQ_i are staged; its dQ warp waits (128 + 32).
FA_HOST_DEVICE constexpr int dq_full_barrier(int c) { return 3 + c; }
/// Step 4: consumer c's dQ warp arrives when the staged pieces have been read; the consumer waits.
FA_HOST_DEVICE constexpr int dq_free_barrier(int c) { return 5 + c; }
constexpr int kConsumerThreads = 256;
/// Step 4: a consumer warpgroup and its dQ warp (one per consumer, so the two hand over apart).
constexpr int kDqHandoffThreads = 128 + 32;
/// Step 4: a dQ warp arrives on its free barrier after tiles 0..count − 2 (its consumer waits
/// before staging tiles 1..count − 1): as many arrivals as waits, none left on the barrier.
FA_HOST_DEVICE constexpr bool dq_writer_frees(int n, int count) { return n < count - 1; }
FA_HOST_DEVICE constexpr bool consumer_waits_dq_free(int n) { return n > 0; }

// ---- step 6: dQ_i's adds in a fixed order (the deterministic mode) ------------------------------
// Floating-point addition is not associative: from step 4 on, the key blocks' dQ_i contributions
// reach the fp32 workspace in whatever order the blocks arrive, so two runs may differ in the last
// bits of dQ. Step 6 numbers the blocks that add to query tile i (their "turns") and makes the dQ
// warp of turn t wait until turn t − 1's adds have completed: a counter per (head, query tile,
// consumer) in global memory, read with acquire and advanced with release. The order follows the
// blocks' natural arrival, so that in steady state no block waits: without the mask every block
// starts at query tile 0 and they arrive in the order of their key blocks; with it, key block j
// starts at tile first_query_tile(j·B_c), so at tile i the block that starts there arrives first,
// and the blocks that started earlier come after it, the latest key block first.

/// Key blocks whose dQ contributions reach query tile i (Algorithm 2 line 8: those whose keys some
/// row of the tile sees): all T_c without the mask, with it those starting before the tile's end.
FA_HOST_DEVICE constexpr int dq_adders(int i, int N, int Br, int Bc, bool causal) {
    const int Tc = (N + Bc - 1) / Bc, seen = ((i + 1) * Br + Bc - 1) / Bc;
    return causal && seen < Tc ? seen : Tc;
}
/// The turn of key block j at query tile i (0 adds first): j without the mask, the reverse with it.
FA_HOST_DEVICE constexpr int dq_turn(int j, int i, int N, int Br, int Bc, bool causal) {
    return causal ? dq_adders(i, N, Br, Bc, causal) - 1 - j : j;
}
/// The key block that block x of the grid (of T_c along x) takes. A block waits only for turns
/// before its own, and the hardware starts a grid's blocks in the order of their index, so the
/// blocks it waits for must have lower indices (or, were they not yet started, the waiting blocks
/// could hold every SM): with the mask, step 6 runs the key blocks last to first.
FA_HOST_DEVICE constexpr int key_block_of(int x, int Tc, bool reversed) { return reversed ? Tc - 1 - x : x; }
/// The counter of (head bh, query tile i, consumer c) among B·H · T_r · 2.
FA_HOST_DEVICE constexpr int dq_counter(int bh, int i, int c, int Tr) { return (bh * Tr + i) * 2 + c; }

/// Where line 15 (dQ_i += dS K_j) sits among a query tile's products: step 5's candidates
/// (Step5Tiles). Steps 1–4 use kAfterDk.
enum Line15 : int {
    kAfterDk = 0,      ///< issued once lines 12 and 16 are done, waited for at once, handed over
    kUnderNextSt = 1,  ///< issued after line 16, waited for and handed over under the next tile's Sᵀ
    kBeforeDk = 2,     ///< issued between lines 12 and 16 (FlashAttention-3's order): line 16 runs
                       ///< while dQ_i is handed over
};

/// One step of the ladder (chapters/11_hopper_backward/README.md), cumulative:
///   1  wgmma: Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ from swizzled shared memory, dV_j += Pᵀ dO_i and
///      dK_j += dSᵀ Q_i with Pᵀ, dSᵀ from registers, dQ_i += dS K_j from shared memory (dSᵀ read
///      transposed); every thread loads Q_i, dO_i, L_i, D_i with cp.async; dQ by float2 atomics
///   2  TMA: one thread loads K_j, V_j, then Q_i, dO_i (tensor maps) and L_i, D_i (bulk copies)
///      into a ring of `Stages` buffers counted on mbarriers
///   3  warp specialization: a producer warpgroup (setmaxnreg down) loads Q_i, dO_i; two consumer
///      warpgroups (setmaxnreg up) compute, hand buffers back on "empty" mbarriers, and copy the
///      next tile's L_i, D_i themselves; the consumers meet at named barriers only
///   4  dQ by TMA: the consumers stage dQ_i in shared memory (fp32, 128-byte swizzle), one warp of
///      the producer warpgroup adds it to the fp32 workspace with TMA reduce-adds
///      (cp.reduce.async.bulk.tensor .add, boxes of 64 rows × 32 columns); one dQ warp per
///      consumer, each adding that consumer's pieces
///   5  overlap: inside a consumer, the exponentials of Pᵀ run while dPᵀ is still on the tensor
///      cores, and dSᵀ while dV_j += Pᵀ dO_i is (wgmma.wait_group 1); dSᵀ in two buffers taken in
///      turn; `L15` (a candidate of Step5Tiles) places line 15 among the products (Line15)
///   6  deterministic: step 5's tuned candidate with each query tile's dQ adds in a fixed order
///      of the key blocks (dq_turn), the next waiting for the last to complete
/// Every step: B_c = 128 keys per block, 64 per consumer warpgroup (each owns its rows of dK_j,
/// dV_j); B_r query rows per tile (64 at D = 128, 128 at D = 64).
template <int Step, int D_, int Br_, int Stages, int L15 = kAfterDk>
struct BwdConfig {
    static constexpr int kStep = Step;
    static constexpr int D = D_;
    static constexpr int Br = Br_;
    static constexpr int Bc = 128;
    static constexpr int kStages = Stages;
    static constexpr int kConsumers = 2;
    static constexpr bool kTma = Step >= 2;       ///< step 2: TMA into an mbarrier ring
    static constexpr bool kProducer = Step >= 3;  ///< step 3: a producer warpgroup
    static constexpr bool kDqBulk = Step >= 4;    ///< step 4: dQ by TMA reduce-add
    static constexpr bool kOverlap = Step >= 5;   ///< step 5: softmax arithmetic under the products
    static constexpr bool kDeterministic = Step >= 6;  ///< step 6: dQ_i's adds in the order of dq_turn
    static constexpr int kDsBuffers = kOverlap ? 2 : 1;  ///< step 5: dSᵀ tiles taken in turn
    static constexpr int kLine15 = L15;  ///< step 5 candidate: where line 15 sits (Line15)
    static constexpr bool kPipelineDq = L15 == kUnderNextSt;
    static constexpr int kThreads = 128 * (kConsumers + (kProducer ? 1 : 0));
    /// Step 3: setmaxnreg. One block per SM holds the 64 K registers: launched with 168 per thread
    /// (65536 / 384 rounded down to a multiple of 8), the producer gives back all but 24, and
    /// each consumer thread grows to 240 (24 + 2 · 240 = 3 · 168).
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;
    static constexpr int kDqPieces = dq_pieces_per_consumer(Br, D);

    // Shared memory, in bytes from a 1024-byte aligned base: K_j, V_j (B_c × D each), then per
    // stage Q_i and dO_i (B_r × D each), all as [rows][64] swizzle blocks; dSᵀ (B_c × B_r, blocks of
    // 64 queries); step 4's dQ staging (B_r × D fp32 in 64 × 64 pieces, dq_stage_offset);
    // L_i · log2 e and D_i per stage (B_r floats each); the mbarriers (kv_full, full and empty per
    // stage).
    static constexpr int kTileBytes = 2 * Bc * D;   ///< K_j or V_j
    static constexpr int kQTileBytes = 2 * Br * D;  ///< Q_i or dO_i
    static constexpr int kOffK = 0;
    static constexpr int kOffV = kOffK + kTileBytes;
    static constexpr int kOffQ = kOffV + kTileBytes;  ///< stage s: Q_i at kOffQ + 2·s·kQTileBytes, dO_i after
    static constexpr int kOffDs = kOffQ + 2 * Stages * kQTileBytes;
    static constexpr int kOffDq = kOffDs + kDsBuffers * 2 * Bc * Br;
    static constexpr int kDqBytes = kDqBulk ? Br * D * 4 : 0;
    static constexpr int kOffLD = kOffDq + kDqBytes;  ///< stage s: L2 at + 8·s·B_r bytes, D_i after
    static constexpr int kOffBars = kOffLD + 2 * Stages * Br * 4;
    static constexpr int kBarriers = 1 + 2 * Stages;
    static constexpr int kSmemBytes = kOffBars + 8 * kBarriers + tc::hopper::kAtomBytes;  // + alignment slack
    /// Bytes the TMA brings per stage: Q_i, dO_i, and in step 2 L_i, D_i (from step 3 on the
    /// consumers copy those: hopper_backward.cuh, ld_value).
    static constexpr int kStageBytes = 2 * kQTileBytes + (kProducer ? 0 : 2 * Br * 4);

    static_assert(Step >= 1 && Step <= 6, "BwdConfig: steps 1..6");
    static_assert(L15 == kAfterDk || Step >= 5, "BwdConfig: moving line 15 is a step 5 candidate");
    static_assert(L15 >= kAfterDk && L15 <= kBeforeDk, "BwdConfig: Line15 has three places");
    static_assert(D == 64 || D == 128, "BwdConfig: head dim 64 or 128");
    static_assert(Br == 64 || Br == 128, "BwdConfig: B_r is the N of a wgmma: 64 or 128");
    static_assert((Br / 64) * (D / 64) % 2 == 0, "BwdConfig: dQ_i's 64 x 64 pieces split evenly between two consumers");
    static_assert(Stages >= 1 && (kTma || Stages <= 2), "BwdConfig: step 1's cp.async pipeline has 1 or 2 stages");
    static_assert(!kProducer || Stages >= 2,
                  "BwdConfig: from step 3 the consumers copy the next tile's L_i, D_i into a buffer neither reads");
    static_assert(Br % 128 == 0 || 128 % Br == 0, "BwdConfig: B_r divides the 128-row padding of L2, D_i");
    static_assert(kOffQ % tc::hopper::kAtomBytes == 0 && kOffDs % tc::hopper::kAtomBytes == 0 &&
                      kOffDq % tc::hopper::kAtomBytes == 0,
                  "BwdConfig: swizzled tiles start 1024-byte aligned");
    static_assert(kOffLD % 16 == 0 && kOffBars % 8 == 0, "BwdConfig: bulk copies 16-byte aligned");
    static_assert(!kProducer || kProducerRegs + kConsumers * kConsumerRegs == 3 * 168,
                  "BwdConfig: setmaxnreg must hand out exactly the registers the block was launched with");
};

/// The most dynamic shared memory a block may opt into on compute capability 9.0 (227 KB).
constexpr int kSmemOptIn = ch9::kSmemOptIn;

/// The query rows per tile of head dim D (FlashAttention-3's choice on Hopper): 64 at D = 128, where
/// dK_j and dV_j take 128 of a consumer's registers and 128 rows of Q_i, dO_i would not fit twice
/// in shared memory beside K_j, V_j; 128 at D = 64.
template <int D>
constexpr int kLadderBr = D == 128 ? 64 : 128;

/// The ladder's configuration of steps 1–4 at head dim D.
template <int Step, int D>
using LadderConfig = BwdConfig<Step, D, kLadderBr<D>, kLadderStages>;

/// Step 5's candidates (./chapter11 --sweep times them, --tiles C runs one), listed with fa::Tuning
/// (common/dispatch.h): the three places of line 15 (Line15), in that order. Moving it under the
/// next Sᵀ keeps dQ_i's 32 accumulators a while longer, and that Sᵀ runs alone on the tensor cores
/// while they leave (dPᵀ is issued after them, to stay within 240 registers); moving it before
/// line 16 holds dQ_i's accumulators beside dSᵀ's A fragments (192 of 240 registers at D = 128).
/// The defaults are the fastest of `./chapter11 --sweep` at N = 8192 (README, "Step 5").
template <int D>
constexpr int kTunedLine15 = D == 64 ? kAfterDk : kBeforeDk;
template <int D>
struct Step5Tiles : fa::Tuning<fa::ConfigList<BwdConfig<5, D, kLadderBr<D>, kLadderStages, kAfterDk>,
                                              BwdConfig<5, D, kLadderBr<D>, kLadderStages, kUnderNextSt>,
                                              BwdConfig<5, D, kLadderBr<D>, kLadderStages, kBeforeDk>>,
                               kTunedLine15<D>> {};  // the list is in Line15's order: index = place

/// Step 6: step 5's tuned candidate, its dQ adds in order.
template <int D>
using Step6Config = BwdConfig<6, D, kLadderBr<D>, kLadderStages, kTunedLine15<D>>;

}  // namespace ch11
