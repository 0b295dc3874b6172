/// @file emulator.h
/// @brief The tensor-core toolkit's CPU emulator that runs the kernels' own source, so the kernels are tested
/// where no GPU is (CI, a laptop) and a student can step through one lane with a debugger.
///
/// Every CUDA thread of a block is a fiber (fiber_switch.h) on one host thread; fibers run until
/// they reach a warp collective (mma.sync, ldmatrix, a shuffle, a vote, __syncwarp) or
/// __syncthreads, then the next fiber runs. A collective completes when all 32 lanes of the warp
/// have reached it; each lane then computes its own result from the 32 deposits, from the PTX
/// definitions written out again in emulated_ptx.h (not from layout.h: the emulator is a second
/// reading of the ISA). cp.async copies are held back until the cp.async.wait_group that completes
/// their group, and shared memory starts as 0xFF bytes (NaN in 16 bits), so a wrong stage or a
/// read of a tile nothing wrote show up as wrong or NaN outputs. Blocks run one after the other.
///
/// Races on shared memory (emulator_shadow.h). A shadow of the block's shared memory keeps, for
/// every two bytes, the last write (thread, source line, barrier interval), the last reads, and
/// whether a cp.async is still filling them. Two accesses of the same bytes by different threads,
/// one a write, must be separated by a __syncthreads(), or for two lanes of one warp by a
/// __syncwarp(); a cp.async writes its bytes from its issue until the wait_group that completes its
/// group, and counts as written by its thread at that wait; an ldmatrix or wmma load/store is one
/// access of the whole warp. A pair that no barrier separates is a race on a GPU in whichever order
/// the fibers ran, so the check does not depend on the emulator's schedule: the first such pair
/// stops the launch, and launch() throws tc::emu::Race, whose message names the kind
/// (read-after-write, write-after-read, write-after-write, or bytes a cp.async is still filling),
/// both threads (warp, lane) with their source lines, the bytes, and the __syncthreads after which
/// both happened.
///
/// What it sees: the accesses of the emulated instructions (ldmatrix, cp.async, wmma load/store)
/// and of tc::ld_shared / tc::st_shared (ptx.cuh), through which the kernels make every plain load
/// and store of shared memory. What it cannot see: a plain `*p` on shared memory that bypasses
/// them; global memory (races between blocks, and the order of atomics, blocks running one after
/// the other here). Among the lanes of one warp it checks a write against the warp's last reader
/// only. Nor can it show speed, or the hardware's own rounding inside an mma.
///
/// A chapter's emulated build is one .cpp file that defines FA_TC_EMULATE, includes this header and
/// emulated_ptx.h (and emulated_wmma.h for wmma kernels), then the chapter's kernel headers, and
/// defines the kernels' dynamic shared memory `smem_raw` (kMaxSmemBytes) in the kernels' namespace
/// (chapter 7: emulator/emulated_kernels.cpp). The kernel headers never include the emulator.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector_functions.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace tc::emu {

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

/// How a kernel touches shared memory, as a race report names it.
enum class Access : unsigned char { kLoad, kStore, kLdmatrix, kCpAsync, kWmmaLoad, kWmmaStore };
/// Records that the running thread (its whole warp, for ldmatrix and wmma) reads or writes `bytes`
/// of shared memory at `p`, made at file:line; stops the launch on a race (launch() throws Race).
void shared_read(const void* p, std::size_t bytes, Access how, const char* file, int line);
void shared_write(const void* p, std::size_t bytes, Access how, const char* file, int line);
/// Whether `p` points into the kernels' shared memory (wmma loads and stores may use global memory).
bool in_shared(const void* p);

/// A race on shared memory, or an access outside the block's shared memory: what launch() throws.
struct Race : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// __syncwarp(): waits for the 32 lanes, and orders their shared-memory accesses before and after.
void sync_warp();

/// cp.async of 16 bytes: recorded, performed when a cp.async.wait_group completes its group;
/// file:line is where it was issued.
void cp_async_16(void* smem, const void* gmem, const char* file, int line);
/// cp.async.commit_group: closes this thread's open group.
void cp_async_commit();
/// cp.async.wait_group n: performs every committed group of this thread but the n youngest.
void cp_async_wait(int pending);

/// Stops the emulation with a message (what __trap() does on a GPU).
[[noreturn]] void trap(const char* why);

/// The most dynamic shared memory a block can have (Hopper's 227 KB and a margin); a chapter's
/// `smem_raw` holds this many bytes.
constexpr std::size_t kMaxSmemBytes = 228 * 1024;

/// Runs body() as every thread of every block of `grid` (blocks of `block` threads, blockDim.x only),
/// one block after the other. `smem` is the kernels' dynamic shared memory (their `smem_raw`, of
/// kMaxSmemBytes), `smem_bytes` (≤ kMaxSmemBytes) of which the block may use, set to 0xFF before
/// each block. Throws Race at the first race on shared memory (the launch stops there).
void launch(dim3 grid, dim3 block, unsigned char* smem, std::size_t smem_bytes, const std::function<void()>& body);

}  // namespace tc::emu

// ---- what nvcc provides and a host compiler does not ----------------------------------------------
#define __launch_bounds__(...)
#define threadIdx (::tc::emu::ids().thread_idx)
#define blockIdx (::tc::emu::ids().block_idx)
#define gridDim (::tc::emu::ids().grid_dim)
#define blockDim (::tc::emu::ids().block_dim)

inline void __syncthreads() { ::tc::emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::tc::emu::sync_warp(); }
template <class V>
V __shfl_xor_sync(unsigned, V v, int lane_mask) {
    return ::tc::emu::exchange(v)[::tc::emu::lane() ^ lane_mask];
}
inline int __any_sync(unsigned, int predicate) {
    const int* all = ::tc::emu::exchange(predicate);
    for (int l = 0; l < 32; ++l)
        if (all[l]) return 1;
    return 0;
}
/// atomicAdd: fibers run one at a time and switch only at collectives and barriers, so a plain
/// read-modify-write is atomic here.
inline float atomicAdd(float* address, float value) {
    const float old = *address;
    *address = old + value;
    return old;
}
/// The vector forms of compute capability 9.0 (red.global.add.v2/.v4.f32), element by element.
inline float2 atomicAdd(float2* address, float2 value) {
    const float2 old = *address;
    address->x = old.x + value.x, address->y = old.y + value.y;
    return old;
}
inline float4 atomicAdd(float4* address, float4 value) {
    const float4 old = *address;
    address->x = old.x + value.x, address->y = old.y + value.y, address->z = old.z + value.z,
    address->w = old.w + value.w;
    return old;
}
[[noreturn]] inline void __trap() { ::tc::emu::trap("__trap()"); }

#include "emulator_runtime.h"
