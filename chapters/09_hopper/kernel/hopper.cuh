/// @file hopper.cuh
/// @brief The Hopper-only PTX instructions of chapter 9 (sm_90a), each in one small function:
/// wgmma (warpgroup matrix multiply, operands in shared memory through descriptors or A in
/// registers), its fence/commit/wait, mbarriers with transaction counts, TMA tensor loads and
/// stores, named barriers, setmaxnreg and the async-proxy fence. The numbers they take (descriptors, swizzle, boxes) come
/// from hopper_layout.h, which the CPU tests check.
///
/// A warpgroup is 4 consecutive warps (128 threads, the first warp index a multiple of 4): wgmma
/// is issued by all 128 threads together and computes a 64-row tile; warp w of the warpgroup holds
/// rows 16w..16w+15 of the fp32 accumulator, in the mma.sync m16n8 C layout
/// (common/tensor_core/layout.h) repeated for each 8-column slice: d[i][0..1] at row lane/4,
/// d[i][2..3] at row lane/4 + 8, columns 8i + 2(lane%4) + {0, 1}. So chapter 7's softmax, masking
/// and packing run on it unchanged.
///
/// These wrappers live in chapter 9, not in common/: they are part of what the chapter teaches;
/// chapter 11 (the backward on Hopper) includes them and adds the bulk copies it needs at the end.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "hopper_layout.h"

/// 1 while nvcc compiles device code for sm_90a (wgmma and setmaxnreg exist only there).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_SM90A 1
#else
#define FA_SM90A 0
#endif

namespace tc::hopper {

#if FA_SM90A

/// 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// The first byte of `smem` (the dynamic shared memory) whose shared-memory address is a multiple
/// of `Align`. Computed as an offset into the array, not by rounding the generic address as an
/// integer: then the compiler still knows that pointers derived from it point into shared memory,
/// and their plain loads and stores compile to LDS/STS with 32-bit addresses; through an integer
/// they become generic LD/ST with 64-bit addresses (slower, and two registers per address).
template <int Align>
__device__ __forceinline__ unsigned char* align_shared(unsigned char* smem) {
    return smem + ((Align - smem_u32(smem) % Align) % Align);
}

// ---- wgmma --------------------------------------------------------------------------------------
// d (64 × N, fp32) = A (64 × 16) · B (16 × N) + (scale_d ? d : 0), asynchronously. _ss: A and B in
// shared memory through descriptors (K-major A); _rs: A from registers (the mma.sync A fragment
// layout per warp, rows 16w..). TransB = 0: B K-major (Kᵀ, as K is stored); 1: B MN-major (V as
// stored). The accumulators must not be touched between the instruction and wgmma_wait.
#define FA_WGMMA_SS_N64(TY, C) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
                 "%32, %33, p, 1, 1, %36, %35;\n}\n" \
        : C(d[0][0]), C(d[0][1]), C(d[0][2]), C(d[0][3]), \
          C(d[1][0]), C(d[1][1]), C(d[1][2]), C(d[1][3]), \
          C(d[2][0]), C(d[2][1]), C(d[2][2]), C(d[2][3]), \
          C(d[3][0]), C(d[3][1]), C(d[3][2]), C(d[3][3]), \
          C(d[4][0]), C(d[4][1]), C(d[4][2]), C(d[4][3]), \
          C(d[5][0]), C(d[5][1]), C(d[5][2]), C(d[5][3]), \
          C(d[6][0]), C(d[6][1]), C(d[6][2]), C(d[6][3]), \
          C(d[7][0]), C(d[7][1]), C(d[7][2]), C(d[7][3]) \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransB), "n"(TransA) : "memory")
template <class T, int TransB, int TransA = 0>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    if constexpr (std::is_same_v<T, __half>) FA_WGMMA_SS_N64("f16", "+f");
    else FA_WGMMA_SS_N64("bf16", "+f");
}
template <class T, int TransB, int TransA = 0>
__device__ __forceinline__ void wgmma_ss_n64_first(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b) {
    constexpr int scale_d = 0;
    if constexpr (std::is_same_v<T, __half>) FA_WGMMA_SS_N64("f16", "=f");
    else FA_WGMMA_SS_N64("bf16", "=f");
}
#undef FA_WGMMA_SS_N64

#define FA_WGMMA_RS_N64(TY) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
                 "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
          "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
          "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
          "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
          "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
          "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TransB) : "memory")
template <class T, int TransB>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    if constexpr (std::is_same_v<T, __half>) FA_WGMMA_RS_N64("f16");
    else FA_WGMMA_RS_N64("bf16");
}
#undef FA_WGMMA_RS_N64

#define FA_WGMMA_SS_N128(TY, C) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
                 "%64, %65, p, 1, 1, %68, %67;\n}\n" \
        : C(d[0][0]), C(d[0][1]), C(d[0][2]), C(d[0][3]), \
          C(d[1][0]), C(d[1][1]), C(d[1][2]), C(d[1][3]), \
          C(d[2][0]), C(d[2][1]), C(d[2][2]), C(d[2][3]), \
          C(d[3][0]), C(d[3][1]), C(d[3][2]), C(d[3][3]), \
          C(d[4][0]), C(d[4][1]), C(d[4][2]), C(d[4][3]), \
          C(d[5][0]), C(d[5][1]), C(d[5][2]), C(d[5][3]), \
          C(d[6][0]), C(d[6][1]), C(d[6][2]), C(d[6][3]), \
          C(d[7][0]), C(d[7][1]), C(d[7][2]), C(d[7][3]), \
          C(d[8][0]), C(d[8][1]), C(d[8][2]), C(d[8][3]), \
          C(d[9][0]), C(d[9][1]), C(d[9][2]), C(d[9][3]), \
          C(d[10][0]), C(d[10][1]), C(d[10][2]), C(d[10][3]), \
          C(d[11][0]), C(d[11][1]), C(d[11][2]), C(d[11][3]), \
          C(d[12][0]), C(d[12][1]), C(d[12][2]), C(d[12][3]), \
          C(d[13][0]), C(d[13][1]), C(d[13][2]), C(d[13][3]), \
          C(d[14][0]), C(d[14][1]), C(d[14][2]), C(d[14][3]), \
          C(d[15][0]), C(d[15][1]), C(d[15][2]), C(d[15][3]) \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransB), "n"(TransA) : "memory")
template <class T, int TransB, int TransA = 0>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    if constexpr (std::is_same_v<T, __half>) FA_WGMMA_SS_N128("f16", "+f");
    else FA_WGMMA_SS_N128("bf16", "+f");
}
template <class T, int TransB, int TransA = 0>
__device__ __forceinline__ void wgmma_ss_n128_first(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b) {
    constexpr int scale_d = 0;
    if constexpr (std::is_same_v<T, __half>) FA_WGMMA_SS_N128("f16", "=f");
    else FA_WGMMA_SS_N128("bf16", "=f");
}
#undef FA_WGMMA_SS_N128

#define FA_WGMMA_RS_N128(TY) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
                 "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
          "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
          "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
          "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
          "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
          "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
          "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
          "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
          "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), \
          "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
          "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), \
          "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
          "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
          "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TransB) : "memory")
template <class T, int TransB>
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    if constexpr (std::is_same_v<T, __half>) FA_WGMMA_RS_N128("f16");
    else FA_WGMMA_RS_N128("bf16");
}
#undef FA_WGMMA_RS_N128

/// wgmma of width N (64 or 128): the one the tile needs. TransA = 1 (chapter 11): A MN-major, its
/// 64 rows (M) contiguous along each 128-byte row of the tile and the reduction index down the rows,
/// described like an MN-major B (mnmajor_desc).
template <class T, int TransB, int N, int TransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 64 || N == 128, "wgmma_ss: N is 64 or 128");
    if constexpr (N == 64) wgmma_ss_n64<T, TransB, TransA>(d, desc_a, desc_b, scale_d);
    else wgmma_ss_n128<T, TransB, TransA>(d, desc_a, desc_b, scale_d);
}
/// d = A·B, the first k-step of a product (chapter 11): wgmma_ss with scale_d = 0, but d written
/// only, so that the compiler need not keep d's old values in registers up to this instruction
/// (with wgmma_ss's read-write operands they stay live from their last use, over a whole loop).
template <class T, int TransB, int N, int TransA = 0>
__device__ __forceinline__ void wgmma_ss_first(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b) {
    static_assert(N == 64 || N == 128, "wgmma_ss_first: N is 64 or 128");
    if constexpr (N == 64) wgmma_ss_n64_first<T, TransB, TransA>(d, desc_a, desc_b);
    else wgmma_ss_n128_first<T, TransB, TransA>(d, desc_a, desc_b);
}
template <class T, int TransB, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    static_assert(N == 64 || N == 128, "wgmma_rs: N is 64 or 128");
    if constexpr (N == 64) wgmma_rs_n64<T, TransB>(d, a, desc_b, scale_d);
    else wgmma_rs_n128<T, TransB>(d, a, desc_b, scale_d);
}

/// wgmma.fence: orders this thread's earlier register writes (accumulators rescaled, P packed)
/// before the next wgmma reads them. Needed before the first wgmma of every batch.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

/// wgmma.commit_group: closes the batch of wgmma issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

/// wgmma.wait_group N: waits until at most N committed groups are in flight; only then may the
/// accumulators of the completed groups be read (and their shared-memory operands be reused).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/// Tells the compiler that the accumulators changed here (after wgmma_wait): no read of them may
/// move above this point, where the asynchronous wgmma had not yet written them.
template <int N>
__device__ __forceinline__ void touch_accumulators(float (&d)[N][4]) {
    #pragma unroll
    for (int i = 0; i < N; ++i)
        #pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

// ---- proxies ----------------------------------------------------------------------------------
/// fence.proxy.async: makes this thread's ordinary (generic-proxy) shared-memory writes visible to
/// the async proxy, which wgmma and TMA read through. After the writes, before the barrier that
/// precedes the wgmma.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- mbarrier -----------------------------------------------------------------------------------
/// mbarrier.init: a barrier in shared memory that completes a phase when `count` arrivals and all
/// expected transaction bytes have come in.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

/// Makes the initialized barriers visible to the other threads and to the TMA unit.
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/// mbarrier.arrive.expect_tx: one arrival, and `bytes` more transaction bytes to wait for (the TMA
/// loads issued next complete them).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}

/// mbarrier.arrive: one arrival (a consumer saying it is done with a buffer).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

/// mbarrier.try_wait.parity in a loop: returns once the phase of parity `parity` has completed.
/// Phases alternate 0, 1, 0, ...: the n-th use of a barrier waits for parity n % 2.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
}

// ---- TMA ----------------------------------------------------------------------------------------
/// cp.async.bulk.tensor.3d: the TMA unit copies the box at coordinates (col, row, head) of the
/// tensor `map` describes into shared memory at `dst` (swizzled as the map says; rows outside the
/// tensor zero-filled) and counts its bytes on `bar`. The TMA takes tensors of 1 to 5 dimensions
/// (.1d ... .5d); Q, K, V and O are described as 3-D [B·H][N][D] (hopper_layout.h, tma_box).
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, uint64_t* bar, int col, int row, int head) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
        ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(head), "r"(smem_u32(bar))
        : "memory");
}

/// cp.async.bulk.tensor.3d, the other way (step 6): the TMA unit copies the box at (col, row, head)
/// from shared memory at `src` (swizzled as the map says) into the tensor `map` describes; the parts
/// of the box outside the tensor (rows past N) are not written. Completion is tracked per thread in
/// bulk groups (tma_store_commit, tma_store_wait). The shared-memory bytes were written by ordinary
/// stores: every writing thread runs fence_proxy_async, then a barrier, before this is issued.
__device__ __forceinline__ void tma_store_3d(const void* map, const void* src, int col, int row, int head) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(head), "r"(smem_u32(src))
                 : "memory");
}

/// cp.async.bulk.commit_group: closes this thread's bulk copies issued so far into one group.
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

/// cp.async.bulk.wait_group 0: waits until every bulk group of this thread has completed, its
/// writes to global memory included (not only its reads of shared memory, which `.read` waits for).
__device__ __forceinline__ void tma_store_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// ---- named barriers -----------------------------------------------------------------------------
/// bar.sync id, count: this warp arrives at hardware barrier `id` (0 is __syncthreads') and waits
/// until `count` threads (a multiple of 32, whole warps) have arrived, by bar.sync or bar.arrive.
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
/// bar.arrive id, count: this warp arrives and goes on; it counts toward the `count` of a bar.sync
/// other warps wait in (a signal, as a producer's to a consumer).
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// ---- registers ----------------------------------------------------------------------------------
/// setmaxnreg: every thread of the warpgroup gives back registers down to Regs (dec) or takes
/// them up to Regs (inc) from the pool the block released; Regs is a multiple of 8 in 24..256.
template <int Regs>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
}
template <int Regs>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
}

// ---- bulk copies without a tensor map (chapter 11) -------------------------------------------
/// cp.async.bulk: the TMA unit copies `bytes` contiguous bytes (a multiple of 16, both addresses
/// 16-byte aligned) from global memory into shared memory and counts them on `bar` (chapter 11's
/// L_i and D_i row vectors: no tensor map for a plain run of floats).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

/// cp.reduce.async.bulk.tensor.3d .add (chapter 11): the TMA unit adds the box at (col, row, head)
/// of the fp32 tensor `map` describes, from shared memory at `src` (swizzled as the map says), into
/// global memory element by element (each add atomic); parts of the box outside the tensor (rows
/// past N) are not added. In this thread's current bulk group, as tma_store_3d.
__device__ __forceinline__ void tma_reduce_add_3d(const void* map, const void* src, int col, int row, int head) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(head), "r"(smem_u32(src))
                 : "memory");
}

/// cp.async.bulk.wait_group.read 0: every bulk group of this thread has finished reading shared
/// memory (its writes to global memory may still be on their way; tma_store_wait waits for those).
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

// ---- counters between blocks (chapter 11, step 6) ----------------------------------------------
/// ld.acquire.gpu: reads a counter another block advances; this thread's later memory accesses are
/// ordered after the read (they see what the block that advanced it wrote before its release).
__device__ __forceinline__ int ld_acquire_gpu(const int* counter) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
    return v;
}
/// red.release.gpu.add: advances the counter by `n` after this thread's earlier writes are visible
/// GPU-wide.
__device__ __forceinline__ void red_release_gpu_add(int* counter, int n) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(counter), "r"(n) : "memory");
}
/// fence.proxy.async.global: orders this thread's ordinary (generic proxy) accesses to global memory
/// with its TMA (async proxy) ones, both ways: a TMA reduce-add issued after an acquire, and a
/// release after a completed TMA reduce-add, keep their order.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

#endif  // FA_SM90A

}  // namespace tc::hopper
