/// @file layout.h
/// @brief Chapter 9's plain functions (host and device, tested on the CPU): the 128-byte swizzle,
/// the wgmma shared-memory matrix descriptor, the TMA box of a tile, and each step's plan.
///
/// A tile of R rows × D 16-bit columns is kept in shared memory as D/64 column chunks, each R rows
/// of 128 bytes (64 elements), chunk after chunk. Inside a chunk the 16-byte pieces of row r are
/// permuted: piece p lands at p XOR (r mod 8). That is the "128B swizzle" both the copy engine (TMA,
/// CU_TENSOR_MAP_SWIZZLE_128B) and wgmma (descriptor mode 1) understand, so neither sees a bank
/// conflict: the 8 rows of an 8×8 core matrix hit 8 different 16-byte bank groups.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CH9_HD __host__ __device__
#else
#define CH9_HD
#endif

namespace ch9 {

/// Element offset of (r, c) in a swizzled R × D tile (see the file comment).
CH9_HD constexpr int swizzle128(int r, int c, int R) {
    return (c / 64) * R * 64 + r * 64 + (((c % 64) / 8) ^ (r % 8)) * 8 + c % 8;
}

/// The fields of a wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
/// bits 0–13 start address / 16, 16–29 leading byte offset / 16, 32–45 stride byte offset / 16,
/// 62–63 swizzle mode (1 = 128-byte swizzle). Addresses are shared-window byte addresses.
CH9_HD constexpr std::uint64_t matrix_descriptor(std::uint32_t smem_address, std::uint32_t leading_bytes,
                                                 std::uint32_t stride_bytes) {
    return std::uint64_t((smem_address & 0x3FFFF) >> 4) | (std::uint64_t((leading_bytes & 0x3FFFF) >> 4) << 16) |
           (std::uint64_t((stride_bytes & 0x3FFFF) >> 4) << 32) | (std::uint64_t(1) << 62);
}

/// K-major operand (Q as A, K as B of S = Q Kᵀ): rows of the tile are M (or N), columns are the
/// reduction dim k. One wgmma reads 16 columns = 32 bytes of each 128-byte row; 8-row groups are
/// 1024 bytes apart (stride byte offset); the leading offset is unused with the 128B swizzle.
/// k-step kk (columns 16kk..16kk+15) of a tile starting at `tile` with R rows, from row `row0`.
CH9_HD constexpr std::uint64_t k_major_descriptor(std::uint32_t tile, int R, int row0, int kk) {
    return matrix_descriptor(tile + std::uint32_t(((kk * 16) / 64) * R * 128 + row0 * 128 + (kk % 4) * 32), 16,
                             1024);
}

/// MN-major operand (V as B of O += P V, transposed by wgmma): the tile's rows are the reduction
/// dim (keys), its columns the output dim D, contiguous. k-step kk reads rows 16kk..16kk+15:
/// 8-row groups 1024 bytes apart (stride byte offset), 64-column chunks R·128 bytes apart
/// (leading byte offset).
CH9_HD constexpr std::uint64_t mn_major_descriptor(std::uint32_t tile, int R, int kk) {
    return matrix_descriptor(tile + std::uint32_t(kk * 16 * 128), std::uint32_t(R * 128), 1024);
}

/// The box one TMA copy moves for a tile of `rows` rows: 64 columns (128 bytes, the widest a
/// 128B-swizzled box can be) × rows × 1 head; a D-wide tile takes D/64 copies.
struct TmaBox {
    int cols, rows, heads, copies;
    CH9_HD constexpr int bytes() const { return cols * rows * heads * 2 * copies; }
};
CH9_HD constexpr TmaBox tma_box(int rows, int D) { return {64, rows, 1, D / 64}; }

/// Key tiles query tile i (rows i·Br ..) visits: all of them, or with the causal mask those
/// up to the diagonal (Alg. 1 line 5 of FlashAttention-2, bounded by the mask).
CH9_HD constexpr int key_tiles(int i, int Br, int Bc, int N, bool causal) {
    const int all = (N + Bc - 1) / Bc;
    const int diagonal = ((i + 1) * Br + Bc - 1) / Bc;
    return causal && diagonal < all ? diagonal : all;
}

/// Key tile j needs a mask for query tile i: it holds keys ≥ N, or (causal) keys above a row.
CH9_HD constexpr bool needs_mask(int i, int j, int Br, int Bc, int N, bool causal) {
    return (j + 1) * Bc > N || (causal && (j + 1) * Bc - 1 > i * Br);
}

/// The ring of K/V stages: key tile j lives in stage j mod S and its barrier completes for the
/// (j / S)-th time, so a waiter expects phase parity (j / S) mod 2.
CH9_HD constexpr int stage_of(int j, int stages) { return j % stages; }
CH9_HD constexpr std::uint32_t parity_of(int j, int stages) { return std::uint32_t((j / stages) & 1); }

/// setmaxnreg in step 3: the producer warpgroup keeps few registers, the consumers take the rest.
/// The register file (65536 a multiprocessor) must hold 128 threads of each: producer + consumers.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;

/// The ladder.
enum Step : int {
    kWgmma = 1,       ///< wgmma from swizzled shared memory, tiles loaded by every thread
    kTma = 2,         ///< + TMA loads of K/V into a 2-stage ring of mbarriers
    kSpecialized = 3, ///< + a producer warpgroup, setmaxnreg, consumers never load
    kPingpong = 4,    ///< + the two consumers take turns on the tensor cores (named barriers)
    kOverlap = 5,     ///< + S of tile j issued with P V of tile j − 1, before the softmax of j
    kTmaStore = 6,    ///< + O written through shared memory (over Q) by a TMA store
};
constexpr int kFirstStep = kWgmma;
constexpr int kLastStep = kTmaStore;

/// Step 4's turns: consumer 0 issues its products for tile j, then consumer 1, then consumer 0 for
/// j + 1... Before its products a consumer waits (bar.sync) on its own named barrier; after issuing
/// them it arrives (bar.arrive) on the other's. Consumer 1 arrives once before its first tile to
/// let consumer 0 start, and not after its last, so that each barrier sees as many arrivals as
/// waits. Named barrier 0 is __syncthreads; consumer w uses 1 + w.
CH9_HD constexpr int turn_barrier(int wg) { return 1 + wg; }
CH9_HD constexpr bool arrives_before_first(int wg) { return wg == 1; }
CH9_HD constexpr bool arrives_after(int wg, int j, int n_tiles) { return !(wg == 1 && j == n_tiles - 1); }

/// Step 6: consumer w's 128 threads meet on named barrier 3 + w once its slice of O is in shared
/// memory, before one of them hands the slice to TMA.
CH9_HD constexpr int store_barrier(int wg) { return 3 + wg; }

/// Key tile whose stage a consumer releases after iteration j: step 5 still reads V_{j−1} while
/// it computes the softmax of tile j, so it frees stage j − 1 (and the last stage after the loop).
CH9_HD constexpr int released_after(int step, int j) { return step >= kOverlap ? j - 1 : j; }

/// Tiles and threads of a step: B_r = 128 query rows per block (64 per consumer warpgroup, the M
/// of one wgmma), B_c = 128 keys per tile.
struct StepConfig {
    int Br, Bc, consumers, producer, stages;
    CH9_HD constexpr int threads() const { return 128 * (consumers + producer); }
    /// Dynamic shared memory: Q, the K/V stages, 8 bytes per mbarrier, 1024 for alignment.
    CH9_HD constexpr int smem_bytes(int D) const {
        return (Br * D + 2 * stages * Bc * D) * 2 + 8 * (2 * stages + 1) + 1024;
    }
};
CH9_HD constexpr StepConfig step_config(int step) {
    return step == kWgmma ? StepConfig{128, 128, 2, 0, 1}
         : step == kTma   ? StepConfig{128, 128, 2, 0, 2}
                          : StepConfig{128, 128, 2, 1, 2};  // steps 3-6
}

}  // namespace ch9
