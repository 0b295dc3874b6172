/// @file emulator.h
/// @brief Chapter 7: a CPU emulator that runs the kernels' own source, so the kernels are tested
/// where no GPU is (CI, a laptop) and a student can step through one lane with a debugger.
///
/// Every CUDA thread of a block is a fiber (ucontext) on one host thread; fibers run until they
/// reach a warp collective (mma.sync, ldmatrix, a shuffle, a vote, __syncwarp) or __syncthreads,
/// then the next fiber runs. A collective completes when all 32 lanes of the warp have reached it;
/// each lane then computes its own result from the 32 deposits, from the PTX definitions written
/// out again in emulated_ptx.h (not from layout.h: the emulator is a second reading of the ISA).
/// cp.async copies are held back until the cp.async.wait_group that completes their group, and
/// shared memory starts as 0xFF bytes (NaN in 16 bits), so a missing wait, a wrong stage, or a
/// read of a tile nothing wrote all show up as wrong or NaN outputs. Blocks run one after the
/// other. What it cannot show: speed, real races between warps (fibers switch only at
/// collectives and barriers), and the hardware's own rounding inside an mma.
///
/// Include this before the kernel headers, with FA_CH7_EMULATE defined (emulated_kernels.cpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector_functions.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace ch7::emu {

/// threadIdx, blockIdx, gridDim, blockDim of the running fiber.
struct Ids {
    uint3 thread_idx, block_idx;
    dim3 grid_dim, block_dim;
};
const Ids& ids();
/// Lane (0..31) of the running fiber.
int lane();

/// __syncthreads(): waits until every thread of the block has reached it.
void sync_block();
/// Deposits `bytes` from `in` for this lane and waits until the 32 lanes of the warp have; returns
/// the deposits, lane l's at l·bytes (valid until this lane's next collective).
const unsigned char* warp_exchange(const void* in, std::size_t bytes);
/// Typed warp_exchange: all 32 deposits.
template <class V>
const V* exchange(const V& in) {
    return reinterpret_cast<const V*>(warp_exchange(&in, sizeof in));
}

/// cp.async of 16 bytes: recorded, performed when a cp.async.wait_group completes its group.
void cp_async_16(void* smem, const void* gmem);
/// cp.async.commit_group: closes this thread's open group.
void cp_async_commit();
/// cp.async.wait_group n: performs every committed group of this thread but the n youngest.
void cp_async_wait(int pending);

/// Stops the emulation with a message (what __trap() does on a GPU).
[[noreturn]] void trap(const char* why);

/// Runs body() as every thread of every block of `grid` (blocks of `block` threads, blockDim.x only),
/// with `smem_bytes` of dynamic shared memory (ch7::smem_raw), one block after the other.
void launch(dim3 grid, dim3 block, std::size_t smem_bytes, const std::function<void()>& body);

}  // namespace ch7::emu

// ---- what nvcc provides and a host compiler does not ----------------------------------------------
#define __launch_bounds__(...)
#define threadIdx (::ch7::emu::ids().thread_idx)
#define blockIdx (::ch7::emu::ids().block_idx)
#define gridDim (::ch7::emu::ids().grid_dim)
#define blockDim (::ch7::emu::ids().block_dim)

inline void __syncthreads() { ::ch7::emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
    const int none = 0;
    ::ch7::emu::exchange(none);
}
template <class V>
V __shfl_xor_sync(unsigned, V v, int lane_mask) {
    return ::ch7::emu::exchange(v)[::ch7::emu::lane() ^ lane_mask];
}
inline int __any_sync(unsigned, int predicate) {
    const int* all = ::ch7::emu::exchange(predicate);
    for (int l = 0; l < 32; ++l)
        if (all[l]) return 1;
    return 0;
}
[[noreturn]] inline void __trap() { ::ch7::emu::trap("__trap()"); }
