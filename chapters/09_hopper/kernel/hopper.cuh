/// @file hopper.cuh
/// @brief The Hopper-only PTX chapter 9 uses, one small function per instruction (README.md has
/// the table): wgmma and its fences, mbarrier, TMA (cp.async.bulk.tensor), fence.proxy.async,
/// named barriers, setmaxnreg. wgmma and setmaxnreg need the sm_90a target (-gencode arch=compute_90a,code=sm_90a).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ch9 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CH9_SM90A 1
#else
#define CH9_SM90A 0
#endif

#if CH9_SM90A

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
    return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// ---- wgmma: one warpgroup (4 warps) multiplies a 64×N tile, asynchronously ----------------------

/// d (64×N fp32, N/2 registers a thread) = A·B (+ d when `accumulate`), A and B in shared memory
/// by descriptor (layout.h), both K-major.
template <class T, int N>
__device__ void wgmma_ss(float (&d)[N / 2], std::uint64_t a, std::uint64_t b, int accumulate);
/// d += A·B with A (64×16) in registers (the mma.sync A-fragment layout, per warp 16 rows) and B
/// in shared memory, MN-major (transposed by wgmma).
template <class T, int N>
__device__ void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t b);
#include "wgmma_generated.inc"

/// Orders this warpgroup's earlier register and shared-memory writes before the next wgmma reads.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/// Closes the wgmmas issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// Waits until at most `Pending` committed groups are still running.
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
/// Keeps the compiler from moving reads or writes of accumulator registers across a wgmma
/// fence or wait (the registers are the asynchronous instruction's operands meanwhile).
template <int R>
__device__ __forceinline__ void fence_registers(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- mbarrier: a shared-memory barrier with an arrival count and a transaction byte count --------

__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
/// Makes the barrier initializations visible to the copy engine (the async proxy).
__device__ __forceinline__ void mbarrier_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// One arrival that also announces `bytes` of copies that will complete on this barrier.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
/// Spins until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, std::uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}

// ---- TMA: the copy engine moves a box of a tensor into shared memory ----------------------------

/// Copies the box at (c0, c1, c2) of the tensor `map` describes into `dst`; completes `bytes`
/// (announced by expect_tx) on `bar`. Rows past the tensor's end arrive as zeros.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            std::uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
            "r"(smem_u32(dst)),
        "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
        : "memory");
}

/// Copies the box at (c0, c1, c2) of the tensor `map` describes from `src` in shared memory to
/// global memory (elements outside the tensor are not written), as part of this thread's bulk group.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, int c0, int c1, int c2, const void* src) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                     reinterpret_cast<std::uint64_t>(map)),
                 "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(src))
                 : "memory");
}
/// Closes this thread's bulk copies into a group, and waits until they have read shared memory.
__device__ __forceinline__ void tma_store_commit_and_wait_read() {
    asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

/// Orders this thread's ordinary shared-memory writes before later reads by wgmma or TMA (the
/// async proxy); each writing thread runs it before the barrier that publishes the data.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- named barriers: a barrier among some warps of the block (id 0 is __syncthreads) ---------------

/// Waits until `threads` threads (whole warps) have reached barrier `id`, counting this warp.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/// Counts this warp at barrier `id` without waiting.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- setmaxnreg: move registers between warpgroups ----------------------------------------------

template <int Registers>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}
template <int Registers>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

#endif  // CH9_SM90A

}  // namespace ch9
