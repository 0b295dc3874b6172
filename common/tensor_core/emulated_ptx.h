/// @file emulated_ptx.h
/// @brief The PTX instructions of ptx.cuh for the CPU emulator (emulator.h), written
/// from the PTX ISA's definitions (fragment layouts of mma.m16n8k16, the matrices of ldmatrix),
/// independently of layout.h, so the emulator checks the kernels' index math instead of repeating it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "emulator.h"

/// Tells ptx.cuh that the emulated instructions are declared.
#define FA_TC_EMULATED_PTX 1
#include "ptx.cuh"  // pack2, bits_to_float: plain conversions, the same in both builds

namespace tc {
inline namespace emulated {

namespace isa {

/// The 16-bit value in half `e` (0: bits 0–15) of a 32-bit register, as a float.
template <class T>
float element(std::uint32_t reg, int e) {
    return bits_to_float<T>(static_cast<std::uint16_t>(e ? reg >> 16 : reg & 0xFFFFu));
}

/// PTX ISA, mma.m16n8k16 with .f16/.bf16 A: a lane holds a0..a7 (two per register);
/// groupID = lane >> 2, threadID_in_group = lane % 4;
/// row = groupID for a0, a1, a4, a5, groupID + 8 for a2, a3, a6, a7;
/// col = threadID_in_group·2 + (i & 1), + 8 for a4..a7.
/// Returns the lane and element index i that hold A[row][col].
inline void a_holder(int row, int col, int& lane, int& i) {
    lane = 4 * (row % 8) + (col % 8) / 2;
    i = (col % 2) + 2 * (row / 8) + 4 * (col / 8);
}
/// B (16 × 8): b0..b3; row (k) = threadID_in_group·2 + (i & 1), + 8 for b2, b3; col = groupID.
inline void b_holder(int k, int n, int& lane, int& i) {
    lane = 4 * n + (k % 8) / 2;
    i = (k % 2) + 2 * (k / 8);
}
/// C/D (16 × 8 fp32): c0..c3; row = groupID, + 8 for c2, c3; col = threadID_in_group·2 + (i & 1).
inline void c_position(int lane, int i, int& row, int& col) {
    row = lane / 4 + 8 * (i / 2);
    col = 2 * (lane % 4) + (i % 2);
}

}  // namespace isa

/// mma.sync.m16n8k16.row.col.f32.{f16,bf16}: d = A·B + d over the warp's fragments. Each lane
/// computes its own four outputs in fp32, products summed in k order.
template <class T>
void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    struct Operands {
        std::uint32_t a[4], b[2];
    };
    const Operands* all = emu::exchange(Operands{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}});
    const int lane = emu::lane();
    for (int i = 0; i < 4; ++i) {
        int row, col;
        isa::c_position(lane, i, row, col);
        float acc = d[i];
        for (int k = 0; k < 16; ++k) {
            int la, ia, lb, ib;
            isa::a_holder(row, k, la, ia);
            isa::b_holder(k, col, lb, ib);
            acc += isa::element<T>(all[la].a[ia / 2], ia % 2) * isa::element<T>(all[lb].b[ib / 2], ib % 2);
        }
        d[i] = acc;
    }
}

/// ldmatrix.sync.aligned.m8n8.x4.shared.b16: threads 8m..8m+7 give the addresses of rows 0..7 of
/// matrix m; each thread receives, in register m, row lane/4, elements 2·(lane%4) and +1 of
/// matrix m (with .trans: column lane/4, rows 2·(lane%4) and +1). The warp reads the 32 rows
/// together: each lane records its row, as read by the warp, when it reaches the instruction.
inline void ldmatrix_x4_any(std::uint32_t (&r)[4], const void* row_address, bool trans, const char* file, int line) {
    emu::shared_read(row_address, 16, emu::Access::kLdmatrix, file, line);
    const void* const* rows = emu::exchange(row_address);
    const int lane = emu::lane(), g = lane / 4, t = lane % 4;
    auto at = [&](int m, int row, int col) {
        return std::uint32_t(static_cast<const std::uint16_t*>(rows[8 * m + row])[col]);
    };
    for (int m = 0; m < 4; ++m)
        r[m] = trans ? at(m, 2 * t, g) | (at(m, 2 * t + 1, g) << 16) : at(m, g, 2 * t) | (at(m, g, 2 * t + 1) << 16);
}
inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_address, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    ldmatrix_x4_any(r, row_address, false, file, line);
}
inline void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row_address, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    ldmatrix_x4_any(r, row_address, true, file, line);
}

inline void cp_async_16(void* smem, const void* gmem, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    emu::cp_async_16(smem, gmem, file, line);
}
/// Source size 0 when !valid: the 16 bytes become zeros when the group completes, as on the GPU.
inline void cp_async_16_zfill(void* smem, const void* gmem, bool valid, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    static const std::uint32_t zeros[4] = {};
    emu::cp_async_16(smem, valid ? gmem : zeros, file, line);
}
inline void cp_async_commit() { emu::cp_async_commit(); }
template <int Pending>
void cp_async_wait() {
    emu::cp_async_wait(Pending);
}

/// A plain load or store of shared memory (ptx.cuh), recorded in the emulator's shadow first.
template <class V>
V ld_shared(const V* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    emu::shared_read(p, sizeof(V), emu::Access::kLoad, file, line);
    return *p;
}
template <class V>
void st_shared(V* p, const V& value, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    emu::shared_write(p, sizeof(V), emu::Access::kStore, file, line);
    *p = value;
}

/// ex2.approx.ftz.f32 (to within its 2^-22: the emulator uses the exact 2^x).
inline float fast_exp2(float x) { return std::exp2(x); }

}  // namespace emulated
}  // namespace tc
