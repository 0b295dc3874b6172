/// @file tile_io.cuh
/// @brief Moving a tile of rows between global and shared memory.
///
/// A tile is `Rows` rows of D 16-bit elements, taken from rows row0.. of one head; rows at or past N
/// are filled with zeros (never read out of bounds, never leave shared memory unwritten: V rows
/// past N must be 0 because P = 0 times an uninitialized NaN would still be NaN). Each thread
/// moves 16-byte chunks (8 elements); consecutive threads cover a row left to right, so global
/// accesses are coalesced 16-byte loads.
#pragma once

#include <cstdint>

#include "layout.h"
#include "ptx.cuh"

namespace tc {
inline namespace FA_TC_KERNELS {

/// How a tile gets from global to shared memory.
enum class Copy {
    kSync,   ///< 16-byte load into a register, then a 16-byte store (steps 1–3)
    kAsync,  ///< cp.async (steps 4–6): completes later, see ptx.cuh
};

#if FA_TC_SM80

/// Loads rows row0 .. row0+Rows−1 of `head` (N rows of D elements) into the tile `tile`, stored
/// swizzled (`Swizzled`) or row-major; rows ≥ N become zeros. All `Threads` threads of the block call
/// it. With Copy::kAsync the caller commits and waits (the zero rows are ordinary stores).
///
/// Thread x moves the chunks of rows x / (D/8) + k·P (P = Threads / (D/8) rows per pass), column
/// 8·(x % (D/8)). P is a multiple of 8, so every pass keeps the row's r % 8 and hence its swizzle:
/// pass k's shared-memory offset is the first pass's plus k·P·D, a constant the compiler folds
/// into the instruction (no per-chunk address registers).
template <int Rows, int D, int Threads, bool Swizzled, Copy How>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* head, int row0, int N) {
    constexpr int kChunksPerRow = D / 8;
    constexpr int kRowsPerPass = Threads / kChunksPerRow;
    static_assert(Threads % kChunksPerRow == 0 && kRowsPerPass % 8 == 0 && Rows % kRowsPerPass == 0,
                  "load_tile: passes of whole rows, a multiple of 8 rows each");
    const int r = int(threadIdx.x) / kChunksPerRow, col = 8 * (int(threadIdx.x) % kChunksPerRow);
    uint16_t* dst = tile + (Swizzled ? swizzle(r, col, D) : row_major(r, col, D));
    const uint16_t* src = head + (row0 + r) * D + col;
    #pragma unroll
    for (int k = 0; k < Rows / kRowsPerPass; ++k) {
        uint16_t* d = dst + k * kRowsPerPass * D;
        if (row0 + r + k * kRowsPerPass < N) {
            if constexpr (How == Copy::kAsync)
                cp_async_16(d, src + k * kRowsPerPass * D);
            else
                *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(src + k * kRowsPerPass * D);
        } else {
            *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
        }
    }
}

#endif  // FA_TC_SM80

}  // namespace FA_TC_KERNELS
}  // namespace tc
