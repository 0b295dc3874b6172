/// @file hopper_layout.h
/// @brief The plain-C++ side of the Hopper instructions (chapter 9): the 128-byte swizzle of
/// shared-memory tiles, the 64-bit shared-memory matrix descriptor of wgmma, and the box of a TMA
/// tensor map. Host and device functions, so the CPU tests check every number the kernels use.
///
/// Tiles: a 16-bit matrix with 64 columns per row (128 bytes) is one "swizzle atom" wide; a tile
/// of D = 128 columns is stored as two such [rows][64] blocks, one after the other. Each block
/// starts at a multiple of 1024 bytes (8 rows), the period of the swizzle.
#pragma once

#include <cstdint>

#include "../../../common/host_device.h"

namespace tc::hopper {

/// Columns of one swizzle atom: 64 16-bit elements = 128 bytes.
constexpr int kAtomCols = 64;
/// Bytes of 8 atom rows, the period of the 128-byte swizzle and the alignment tiles need.
constexpr int kAtomBytes = 1024;

/// 128-byte swizzle (TMA's CU_TENSOR_MAP_SWIZZLE_128B, wgmma's swizzle mode 1): the byte offset of
/// element (row, col) of a [rows][64] block of 16-bit elements. The 16-byte chunk col / 8 of a row
/// is stored at chunk (col / 8) XOR (row % 8): eight consecutive rows put a column's chunk in eight
/// different bank groups, so neither the TMA writes nor the tensor-core reads collide.
FA_HOST_DEVICE constexpr int sw128_offset(int row, int col) {
    return row * 128 + (((col / 8) ^ (row % 8)) * 16) + (col % 8) * 2;
}

/// Swizzle mode field of a descriptor (bits 62–63).
enum class Swizzle : std::uint64_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

/// The shared-memory matrix descriptor wgmma reads an operand through (PTX ISA, "Matrix
/// Descriptor Format"): bits 0–13 start address >> 4, bits 16–29 leading-dimension byte offset
/// >> 4, bits 32–45 stride-dimension byte offset >> 4, bits 49–51 base offset (0: tiles are
/// 1024-byte aligned), bits 62–63 the swizzle mode.
FA_HOST_DEVICE constexpr std::uint64_t make_smem_desc(std::uint32_t smem_addr, std::uint32_t lbo_bytes,
                                                      std::uint32_t sbo_bytes, Swizzle swizzle) {
    return std::uint64_t((smem_addr & 0x3FFFFu) >> 4) | (std::uint64_t((lbo_bytes >> 4) & 0x3FFFu) << 16) |
           (std::uint64_t((sbo_bytes >> 4) & 0x3FFFu) << 32) | (std::uint64_t(swizzle) << 62);
}

/// K-major operand (Q as A and K as B of S = Q·Kᵀ: the reduction index d runs along the rows):
/// 128-byte swizzle, 8-row core groups 1024 bytes apart (SBO); LBO is unused with this swizzle
/// (set to 16 bytes, encoded 1). k-step kk (16 columns) of a tile stored as [rows][64] blocks of
/// `rows` rows: block kk / 4, plus 32 bytes per 16 columns inside the 128-byte row (the hardware
/// applies the swizzle to the final address, so the start moves by the unswizzled offset).
FA_HOST_DEVICE constexpr std::uint32_t kmajor_kstep_offset(int kk, int rows) {
    return std::uint32_t((kk / 4) * rows * 128 + (kk % 4) * 32);
}
FA_HOST_DEVICE constexpr std::uint64_t kmajor_desc(std::uint32_t addr) {
    return make_smem_desc(addr, 16, kAtomBytes, Swizzle::k128B);
}

/// MN-major operand (V as B of O += P·V, stored as loaded, [keys][64] blocks: the output index d
/// runs along the rows, the reduction index, the key, down them; the instruction's transpose bit
/// set). Key rows 128 bytes apart, groups of 8 keys 1024 bytes apart (SBO), the next 64 output
/// columns one block further (LBO = rows · 128 bytes). k-step kk (16 keys) starts 16 rows down.
FA_HOST_DEVICE constexpr std::uint32_t mnmajor_kstep_offset(int kk) { return std::uint32_t(kk * 16 * 128); }
FA_HOST_DEVICE constexpr std::uint64_t mnmajor_desc(std::uint32_t addr, int rows) {
    return make_smem_desc(addr, std::uint32_t(rows * 128), kAtomBytes, Swizzle::k128B);
}

/// fp32 tiles (chapter 11's dQ staging): a row of 32 floats is one 128-byte swizzle atom; a tile of
/// D columns is stored as D / 32 blocks of [rows][32], one after the other, each 1024-byte aligned.
/// The byte offset of element (row, col) of a tile of `rows` rows.
constexpr int kAtomColsF32 = 32;
FA_HOST_DEVICE constexpr int sw128_offset_f32(int row, int col, int rows) {
    return (col / kAtomColsF32) * rows * 128 + row * 128 + ((((col % kAtomColsF32) / 4) ^ (row % 8)) * 16) +
           (col % 4) * 4;
}

/// The TMA tensor map of a Q, K or V array [B·H][N][D] (16-bit, row-major) as a 3-D tensor
/// (innermost first: d, row, head), read in boxes of 64 columns × `box_rows` rows × 1 head.
/// Three dimensions, not one [B·H·N][D] matrix, so that a box reaching past row N of a head is
/// zero-filled by the TMA instead of reading the next head's rows.
struct TmaBox {
    std::uint64_t dims[3];     ///< {D, N, B·H}
    std::uint64_t strides[2];  ///< bytes between rows and between heads (dimension 0 is contiguous)
    std::uint32_t box[3];      ///< {64, box_rows, 1}
    std::uint32_t bytes() const { return box[0] * box[1] * box[2] * 2; }  ///< bytes one box brings
};
inline TmaBox tma_box(std::uint64_t BH, std::uint64_t N, std::uint64_t D, std::uint32_t box_rows) {
    return {{D, N, BH}, {D * 2, N * D * 2}, {std::uint32_t(kAtomCols), box_rows, 1}};
}

}  // namespace tc::hopper
