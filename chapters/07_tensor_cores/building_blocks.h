/// @file building_blocks.h
/// @brief Chapter 7: the kernels' building blocks run alone on the GPU, so that a wrong fragment
/// index fails a small test that names it instead of a whole attention forward.
///
/// Each function launches one block that calls exactly the device functions the attention
/// kernels call (ptx.cuh, tile_io.cuh, warp_tile.cuh) and copies the result back.
#pragma once

#include <cstdint>
#include <vector>

namespace ch7::blocks {

/// C = A · B with one mma.sync.m16n8k16: A is 16×16 row-major, B is 16×8 with B[k·8 + n]; both
/// are rounded to T first. Returns C (16×8, row-major, fp32).
template <class T>
std::vector<float> mma_tile(const std::vector<float>& A, const std::vector<float>& B);

/// Which operand a fragment load reads from its 16-row tile.
enum class Operand {
    kQ,  ///< A of S = Q·Kᵀ (rows of Q, columns 16kk..16kk+15): 4 registers a0..a3
    kK,  ///< B of S = Q·Kᵀ (keys 0..15 as two n-tiles, d = 16kk..): 4 registers b[h][r] at 2h + r
    kV,  ///< B of O += P·V (keys 0..15, d = 16kk.. as two n-tiles): 4 registers b[h][r] at 2h + r
};

/// Loads a 16 × D tile of raw 16-bit values (`tile`, row-major; rows ≥ valid_rows are not read
/// and must come out as zeros) into shared memory with the kernels' tc::load_tile (cp.async, layout of
/// `step`: row-major for step 2, swizzled for step ≥ 3), then reads the fragments of `op` at
/// k-step kk with the kernels' fragment loaders of `step`. Returns lane l's four registers at
/// [4l .. 4l+3].
std::vector<uint32_t> fragment_registers(int step, int D, Operand op, int kk,
                                         const std::vector<uint16_t>& tile, int valid_rows);

/// S = Q · Kᵀ for 16 query rows and 16 keys (Q and K 16 × D, rounded to T) with the kernels'
/// scores() of `step`. Returns S (16 × 16, row-major).
template <class T>
std::vector<float> tile_scores(int step, int D, const std::vector<float>& Q, const std::vector<float>& K);

/// O = P · V for 16 rows and 16 keys: P (16 × 16, fp32, placed in S-accumulator layout, then
/// packed to T by pack_p) and V (16 × D, rounded to T) with the kernels' accumulate_pv of `step`.
/// Returns O (16 × D, row-major).
template <class T>
std::vector<float> tile_pv(int step, int D, const std::vector<float>& P, const std::vector<float>& V);

}  // namespace ch7::blocks
