/// @file layout.h
/// @brief Which lane of a warp holds which matrix element, for `mma.sync.m16n8k16` and
/// `ldmatrix`, and the XOR swizzle of shared-memory tiles. Plain C++ (host and device), so the CPU
/// tests check every index the kernels use.
///
/// Every fragment index in the kernels comes from the functions below; nothing is re-derived inline.
/// Notation: a warp has 32 lanes, lane = 4·g + t with g = lane / 4 (the "group", 0..7) and
/// t = lane % 4 (the thread in the group, 0..3). A 32-bit register holds two 16-bit elements; the
/// element with the lower column (or k) index sits in the low 16 bits.
///
/// mma.m16n8k16: D (16×8, fp32) = A (16×16, fp16/bf16, row-major) · B (16×8, col-major) + C.
///
///     A: 4 registers a0..a3 (8 elements)        B: 2 registers b0, b1 (4 elements)
///          k: 0..7        8..15                      n = g (one column per group)
///     rows 0..7   a0  |   a2      row = g             k 0..7   b0   k = 2t, 2t+1
///     rows 8..15  a1  |   a3      row = g + 8         k 8..15  b1   k = 8 + 2t, 8 + 2t + 1
///          cols 2t, 2t+1 of the 8-wide half
///
///     C/D: 4 floats c0..c3: c0, c1 = row g, cols 2t, 2t+1; c2, c3 = row g + 8, cols 2t, 2t+1
///
/// ldmatrix.m8n8.x4.b16: four 8×8 matrices of 16-bit elements. Lane l gives the shared-memory
/// address of row (l % 8) of matrix (l / 8); each row is 16 contiguous bytes. Matrix m lands in
/// register m. Without .trans, register m of lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 of
/// matrix m: exactly an A (or C-shaped) fragment of an 8×8 block. With .trans it holds rows
/// 2(l%4) and 2(l%4)+1 of column l/4: the element pairs a B fragment needs from a row-major V.
#pragma once

#include "../host_device.h"

namespace tc {

/// min(a, b) and max(a, b) for host and device code alike.
FA_HOST_DEVICE constexpr int min_int(int a, int b) { return a < b ? a : b; }
FA_HOST_DEVICE constexpr int max_int(int a, int b) { return a > b ? a : b; }

/// The group g = lane / 4 of a lane (0..7).
FA_HOST_DEVICE constexpr int lane_group(int lane) { return lane / 4; }
/// The thread t = lane % 4 of a lane within its group (0..3).
FA_HOST_DEVICE constexpr int lane_in_group(int lane) { return lane % 4; }

/// Row (0..15) of both A elements of register r (0..3) held by `lane`.
FA_HOST_DEVICE constexpr int frag_a_row(int lane, int r) { return lane_group(lane) + 8 * (r % 2); }
/// Column k (0..15) of A element e of register r held by `lane`.
FA_HOST_DEVICE constexpr int frag_a_col(int lane, int r, int e) {
    return 2 * lane_in_group(lane) + e + 8 * (r / 2);
}
/// Row k (0..15) of B element e of register r (0, 1) held by `lane`.
FA_HOST_DEVICE constexpr int frag_b_row(int lane, int r, int e) {
    return 2 * lane_in_group(lane) + e + 8 * r;
}
/// Column n (0..7) of every B element held by `lane`.
FA_HOST_DEVICE constexpr int frag_b_col(int lane) { return lane_group(lane); }
/// Row (0..15) of accumulator element i (0..3) held by `lane`.
FA_HOST_DEVICE constexpr int frag_c_row(int lane, int i) { return lane_group(lane) + 8 * (i / 2); }
/// Column (0..7) of accumulator element i held by `lane`.
FA_HOST_DEVICE constexpr int frag_c_col(int lane, int i) { return 2 * lane_in_group(lane) + i % 2; }

/// P stays in registers: the A fragment of P·V for keys 16kk..16kk+15 is built from the
/// accumulators of the two S n-tiles 2kk (keys 16kk..+7) and 2kk+1 (keys 16kk+8..+15). A register
/// r of that fragment packs accumulator elements (2·(r%2), 2·(r%2)+1) of n-tile 2kk + r/2: same
/// row (g or g+8), columns 2t and 2t+1. These two functions say which; the tests check that the
/// row and column match frag_a_row/frag_a_col for every lane.
FA_HOST_DEVICE constexpr int p_ntile_of_a_reg(int r) { return r / 2; }
/// Accumulator element that becomes element e of A register r (see p_ntile_of_a_reg).
FA_HOST_DEVICE constexpr int p_elem_of_a_reg(int r, int e) { return 2 * (r % 2) + e; }

/// ldmatrix.x4 of a 16×16 A block (rows × k, row-major in shared memory): lane supplies row
/// ldsm_a_row(lane), columns ldsm_a_col(lane)..+7 of the block. Matrices in register order:
/// (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3.
FA_HOST_DEVICE constexpr int ldsm_a_row(int lane) { return lane % 8 + 8 * ((lane / 8) % 2); }
/// Column offset (0 or 8) of the row a lane addresses for an A block.
FA_HOST_DEVICE constexpr int ldsm_a_col(int lane) { return 8 * (lane / 16); }

/// ldmatrix.x4 (no .trans) of the B operands of S = Q·Kᵀ for two n-tiles of keys: the block is 16
/// keys × 16 d of K, row-major (a key row is a column of B = Kᵀ, contiguous over k = d). Matrices
/// in register order: (keys 0-7, d 0-7) = b0 of n-tile 0, (keys 0-7, d 8-15) = b1 of n-tile 0,
/// (keys 8-15, d 0-7) = b0 of n-tile 1, (keys 8-15, d 8-15) = b1 of n-tile 1.
FA_HOST_DEVICE constexpr int ldsm_k_row(int lane) { return lane % 8 + 8 * (lane / 16); }
/// Column (d) offset (0 or 8) of the K row a lane addresses.
FA_HOST_DEVICE constexpr int ldsm_k_col(int lane) { return 8 * ((lane / 8) % 2); }

/// ldmatrix.x4.trans of the B operands of O += P·V for two n-tiles of d: the block is 16 keys × 16
/// d of V, row-major (B[k][n] = V[key k][d n]; .trans turns rows into the k pairs). Matrices in
/// register order: (keys 0-7, d 0-7) = b0 of d-tile 0, (keys 8-15, d 0-7) = b1 of d-tile 0,
/// (keys 0-7, d 8-15) = b0 of d-tile 1, (keys 8-15, d 8-15) = b1 of d-tile 1.
FA_HOST_DEVICE constexpr int ldsm_v_row(int lane) { return lane % 8 + 8 * ((lane / 8) % 2); }
/// Column (d) offset (0 or 8) of the V row a lane addresses.
FA_HOST_DEVICE constexpr int ldsm_v_col(int lane) { return 8 * (lane / 16); }

/// Element offset of (row, col) in a shared-memory tile whose rows hold `D` 16-bit elements (D a
/// multiple of 32, at most 256), XOR-swizzled in 16-byte chunks. A row is cut into swizzle atoms
/// of 64 elements (128 bytes, all 32 banks) and, when D % 64 = 32, a last half atom of 32:
///   in a whole atom, chunk c of row r is stored at chunk c ^ (r % 8);
///   in the half atom (4 chunks: the whole row at D = 32, the last third at D = 96), at
///   c ^ ((r / 2) % 4), within the half atom.
/// Eight consecutive rows read at the same logical chunk (one 8×8 ldmatrix matrix, rows from a
/// multiple of 8) then touch eight different 16-byte bank groups = all 32 banks once. In a whole
/// atom the eight chunks are a permutation of an aligned group of eight. In a half atom a row is
/// 64 bytes: two rows share the 32 banks (r % 2 picks the half, also at D = 96, whose rows are
/// 192 = 128 + 64 bytes apart), and (r / 2) % 4 spreads the four rows of each half over its four
/// bank groups. At D = 64, 128, 256 every chunk is in a whole atom: the swizzle is c ^ (r % 8).
FA_HOST_DEVICE constexpr int swizzle(int row, int col, int D) {
    if (D % 64 == 0 || col < D / 64 * 64) return row * D + (((col / 8) ^ (row % 8)) * 8) + col % 8;
    return row * D + (((col / 8) ^ ((row / 2) % 4)) * 8) + col % 8;  // the half atom
}

/// The offset of an ldmatrix row address, split into a per-lane part and compile-time constants:
///     swizzle(R0 + lr, 16·kk + lc, D) == R0·D + swizzled_k_step(swizzle(lr, lc, D), kk)
/// for D a multiple of 64, R0 a multiple of 8, lr in 0..15, lc in {0, 8} and 16·kk < D. R0 keeps
/// r % 8, so only the chunk index changes: chunk 2kk + lc/8 of row lr lands at chunk
/// (2kk + lc/8) ^ (lr % 8), i.e. the lane's own chunk XOR 2kk. In elements: the lane's offset XOR
/// 16·(kk % 4) for the low three chunk bits, plus 64·(kk / 4) for the atom (those bits of the
/// lane's offset are zero since lr·D is a multiple of 64·(D / 64)). So per lane and operand the
/// kernel needs 4 offsets, and every other k-step is one of them plus an immediate. The tests
/// check the identity for every lane, kk and D.
FA_HOST_DEVICE constexpr int swizzled_k_step(int lane_offset, int kk) {
    return (lane_offset ^ (16 * (kk % 4))) + 64 * (kk / 4);
}

/// Where `lane` stores (or reads with ordinary loads) register r of its A fragment of rows
/// R0 + 16·mt.., columns C0 + 16·kk.. of a swizzled tile of rows of D elements (a multiple of 64),
/// from the lane's offset in the k-step-0 fragment's column half r / 2:
///     half_offset = swizzle(R0 + lane_group(lane), C0 + 2·lane_in_group(lane) + 8·(r / 2), D).
/// The result is swizzle(R0 + 16·mt + frag_a_row(lane, r), C0 + 16·kk + frag_a_col(lane, r, 0), D)
/// when R0 is a multiple of 8 and, for kk < K (a power of two), C0 a multiple of 16·K: rows 8 and 16
/// further keep r % 8, an immediate R·D; the k-step bits of C0's chunk are zero, so the step is the
/// XOR of swizzled_k_step. A warp's 4 · MT · K registers then need two offsets per k-step (ptxas
/// otherwise kept one address register per register stored). The tests check it for every lane.
FA_HOST_DEVICE constexpr int swizzled_a_frag_offset(int half_offset, int mt, int kk, int r, int D) {
    return swizzled_k_step(half_offset, kk) + (16 * mt + 8 * (r % 2)) * D;
}

/// swizzle(lr, 16·kk + lc, D) split the same way for every D the swizzle takes (the identity above
/// with R0 = 0; the tests check it for every lane, kk and D):
///   D a multiple of 64: swizzled_k_step of the lane's offset, as above;
///   a whole atom of D = 96: the same step taken within the row (lr·96 is not a multiple of 64,
///   so the XOR must not reach it), plus lr·D;
///   the half atom (D = 32, or columns 64..95 of D = 96): the lane's offset in it, XOR 16 for its
///   second k-step (chunk bit 1: the lane's own chunk, 0 or 1, XOR (lr / 2) % 4, stays below 4).
/// At most one more offset per lane and operand, computed once.
FA_HOST_DEVICE constexpr int swizzled_offset(int lr, int lc, int kk, int D) {
    if (D % 64 == 0) return swizzled_k_step(swizzle(lr, lc, D), kk);
    const int whole_steps = D / 64 * 4;  // k-steps of 16 columns in the whole atoms
    if (kk >= whole_steps) return swizzle(lr, 16 * whole_steps + lc, D) ^ (16 * (kk - whole_steps));
    return lr * D + swizzled_k_step(swizzle(lr, lc, D) - lr * D, kk);
}

/// Row address (element offset in a swizzled tile) lane `lane` passes to ldmatrix.x4 for the A
/// fragment of rows r0..r0+15 (r0 a multiple of 8), k-step kk.
FA_HOST_DEVICE constexpr int ldsm_a_offset(int lane, int r0, int kk, int D) {
    return r0 * D + swizzled_offset(ldsm_a_row(lane), ldsm_a_col(lane), kk, D);
}
/// Row address for the B fragments of keys 16nn..16nn+15 (two n-tiles), k-step kk, of a K tile.
FA_HOST_DEVICE constexpr int ldsm_k_offset(int lane, int nn, int kk, int D) {
    return 16 * nn * D + swizzled_offset(ldsm_k_row(lane), ldsm_k_col(lane), kk, D);
}
/// Row address (for .trans) for the B fragments of keys 16kk..16kk+15 and d-tiles 2dd, 2dd+1 of a
/// V tile.
FA_HOST_DEVICE constexpr int ldsm_v_offset(int lane, int kk, int dd, int D) {
    return 16 * kk * D + swizzled_offset(ldsm_v_row(lane), ldsm_v_col(lane), dd, D);
}

/// Element offset of (row, col) in a plain row-major tile (steps 1 and 2).
FA_HOST_DEVICE constexpr int row_major(int row, int col, int D) { return row * D + col; }

}  // namespace tc
