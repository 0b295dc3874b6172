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

/// The largest power of two ≤ x (x ≥ 1).
FA_HOST_DEVICE constexpr int pow2_floor(int x) { return x < 2 ? 1 : 2 * pow2_floor(x / 2); }

/// Columns Col0.. of load_tile: as many as a power of two that is at most min(D − Col0, Threads),
/// then the rest by recursion. Thread x moves the chunks of rows x / C + k·P (C = chunks per row of
/// this part, P = Threads / C rows per pass), column Col0 + 8·(x % C). P is a multiple of 8, so
/// every pass keeps the row's r % 8 and hence its swizzle: pass k's shared-memory offset is the
/// first pass's plus k·P·D, a constant the compiler folds into the instruction (no per-chunk
/// address registers). D = 64 and 128 are one part; D = 96 is 64 + 32 columns, and D = 256 with
/// 128 threads 128 + 128, so that every part has whole passes of 8 rows or more.
template <int Rows, int D, int Threads, bool Swizzled, Copy How, int Col0>
__device__ __forceinline__ void load_tile_columns(uint16_t* tile, const uint16_t* head, int row0, int N) {
    constexpr int kCols = pow2_floor(D - Col0 < Threads ? D - Col0 : Threads);
    constexpr int kChunksPerRow = kCols / 8;
    constexpr int kRowsPerPass = Threads / kChunksPerRow;
    static_assert(kCols >= 8 && Threads % kChunksPerRow == 0 && kRowsPerPass % 8 == 0 &&
                      Rows % kRowsPerPass == 0,
                  "load_tile: passes of whole rows, a multiple of 8 rows each");
    const int r = int(threadIdx.x) / kChunksPerRow, col = Col0 + 8 * (int(threadIdx.x) % kChunksPerRow);
    uint16_t* dst = tile + (Swizzled ? swizzle(r, col, D) : row_major(r, col, D));
    const uint16_t* src = head + (row0 + r) * D + col;
    #pragma unroll
    for (int k = 0; k < Rows / kRowsPerPass; ++k) {
        uint16_t* d = dst + k * kRowsPerPass * D;
        const bool valid = row0 + r + k * kRowsPerPass < N;
        if constexpr (How == Copy::kAsync) {
            cp_async_16_zfill(d, valid ? src + k * kRowsPerPass * D : head, valid);
        } else if (valid) {
            st_shared(reinterpret_cast<uint4*>(d), *reinterpret_cast<const uint4*>(src + k * kRowsPerPass * D));
        } else {
            st_shared(reinterpret_cast<uint4*>(d), make_uint4(0, 0, 0, 0));
        }
    }
    if constexpr (Col0 + kCols < D)
        load_tile_columns<Rows, D, Threads, Swizzled, How, Col0 + kCols>(tile, head, row0, N);
}

/// Loads rows row0 .. row0+Rows−1 of `head` (N rows of D elements, D a multiple of 8) into the
/// tile `tile`, stored swizzled (`Swizzled`) or row-major; rows ≥ N become zeros. All `Threads`
/// threads of the block call it. With Copy::kAsync the caller commits and waits; the zero rows are
/// cp.async too, with source size 0 (cp_async_16_zfill from the head's first row, which is never
/// read): one instruction without a branch per chunk. (With an ordinary zero store in the other
/// branch, ptxas put three predicated-off shared loads beside every cp.async.) Which thread moves
/// which chunk: load_tile_columns.
template <int Rows, int D, int Threads, bool Swizzled, Copy How>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* head, int row0, int N) {
    load_tile_columns<Rows, D, Threads, Swizzled, How, 0>(tile, head, row0, N);
}

#endif  // FA_TC_SM80

}  // namespace FA_TC_KERNELS
}  // namespace tc
