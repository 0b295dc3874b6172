/// @file ptx.cuh
/// @brief The few PTX instructions the tensor-core kernels use (chapter 7 onward), each in one
/// small function (mma.sync, ldmatrix, cp.async, ex2), plus the 16-bit packing of two floats and
/// the plain loads and stores of shared memory (ld_shared, st_shared).
///
/// Everything here needs compute capability 8.0 (bf16 mma, cp.async); the callers compile their
/// bodies only for `__CUDA_ARCH__ >= 800` (FA_TC_SM80, build.h). The emulated build gets the same
/// functions from emulated_ptx.h, written from the PTX ISA.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "build.h"

#if defined(FA_TC_EMULATE)
#if !defined(FA_TC_EMULATED_PTX)
#error "the emulated build includes emulator.h and emulated_ptx.h before the kernel headers"
#endif
#else
#include "../fast_math.cuh"
#endif

namespace tc {
inline namespace FA_TC_KERNELS {

#if FA_TC_SM80 && !defined(FA_TC_EMULATE)

/// d += a · b for one m16n8k16 tile: A 16×16 and B 16×8 in T (half or bfloat16), D fp32.
/// Fragment layouts: layout.h.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    if constexpr (std::is_same_v<T, __half>) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        static_assert(std::is_same_v<T, __nv_bfloat16>, "mma_m16n8k16: T is half or bfloat16");
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

/// 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// ldmatrix.x4: lane l passes the address of row l % 8 of matrix l / 8 (16 bytes); r[m] receives
/// row lane/4, columns 2(lane%4), 2(lane%4)+1 of matrix m.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row_address)));
}

/// ldmatrix.x4.trans: as ldmatrix_x4, but r[m] receives rows 2(lane%4), 2(lane%4)+1 of column
/// lane/4 of matrix m (the transpose).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row_address)));
}

/// cp.async of 16 bytes global → shared, bypassing L1 (.cg). Completes asynchronously: it belongs
/// to the next cp_async_commit() group and is visible after cp_async_wait + __syncthreads().
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}

/// cp_async_16 when `valid`; otherwise nothing is read and the 16 bytes of shared memory become
/// zeros (source size 0), e.g. for rows past the end of a matrix. `gmem` must be a valid global
/// address either way.
__device__ __forceinline__ void cp_async_16_zfill(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "r"(valid ? 16 : 0));
}

/// Closes the group of cp.async issued by this thread since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

/// Waits until at most `Pending` of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

/// 2^x with the hardware approximation (MUFU.EX2, relative error about 2^-22; 2^-inf = 0).
using fa::fast_exp2;

/// `*p` on shared memory. On the GPU nothing but the load; the kernels route every plain access of
/// shared memory through these two so that the emulator sees it (its race check, emulator.h).
template <class V>
__device__ __forceinline__ V ld_shared(const V* p) {
    return *p;
}
/// `*p = value` on shared memory (see ld_shared).
template <class V>
__device__ __forceinline__ void st_shared(V* p, const V& value) {
    *p = value;
}

#endif  // FA_TC_SM80 && !FA_TC_EMULATE

/// Two floats rounded to T (nearest even) and packed into 32 bits, `lo` in the low half: the
/// order an mma fragment register wants (lower column or k index first).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    uint32_t bits;
    if constexpr (std::is_same_v<T, __half>) {
        const __half2 h = __floats2half2_rn(lo, hi);
        std::memcpy(&bits, &h, sizeof bits);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        std::memcpy(&bits, &h, sizeof bits);
    }
    return bits;
}

/// The 16-bit value `bits` of type T (half or bfloat16) as a float (exact).
template <class T>
__device__ __forceinline__ float bits_to_float(uint16_t bits) {
    if constexpr (std::is_same_v<T, __half>) {
        __half_raw raw;
        raw.x = bits;
        return __half2float(__half(raw));
    } else {
        __nv_bfloat16_raw raw;
        raw.x = bits;
        return __bfloat162float(__nv_bfloat16(raw));
    }
}

}  // namespace FA_TC_KERNELS
}  // namespace tc
