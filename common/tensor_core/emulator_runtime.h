/// @file emulator_runtime.h
/// @brief The CPU emulator's runtime (declared in emulator.h, which includes this file): fibers,
/// warp collectives, __syncthreads, deferred cp.async. Header-only (inline): the one state is
/// shared by every translation unit that emulates kernels.
#pragma once


#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "fiber_switch.h"

namespace tc::emu {

namespace detail {

inline constexpr std::size_t kStackBytes = 256 * 1024;  // kernels keep their "registers" on this stack
inline constexpr std::size_t kMaxDeposit = 64;          // bytes one lane hands to a collective

using Copy = std::pair<void*, const void*>;

struct Fiber {
    Context context;  // where the fiber stopped (fiber_switch.h)
    std::vector<unsigned char> stack;
    Ids ids;
    bool done = false;
    std::vector<std::vector<Copy>> committed;  // cp.async groups, oldest first
    std::vector<Copy> open;                    // cp.async issued since the last commit
};

struct Warp {
    int arrived = 0;
    unsigned long generation = 0;  // completed collectives; deposits alternate between two buffers
    std::size_t bytes = 0;
    unsigned char deposits[2][32 * kMaxDeposit];
};

struct State {
    Context scheduler;
    // The pool only grows: launches of different block sizes reuse the fibers (and their stacks)
    // instead of freeing and zero-filling 256 KiB of stack per thread each time.
    std::vector<Fiber> pool;
    std::vector<Warp> warps;
    int threads = 0;  // threads per block of the running launch: pool[0, threads)
    int block_arrived = 0;
    unsigned long block_generation = 0;
    Fiber* current = nullptr;
    const std::function<void()>* body = nullptr;
    unsigned long events = 0;  // arrivals, completions and exits: progress, for deadlock detection
};

inline State& state() {
    static State s;
    return s;
}

inline Fiber& current() {
    State& s = state();
    if (s.current == nullptr) trap("a CUDA intrinsic was called outside an emulated kernel");
    return *s.current;
}

inline void yield() { switch_to(current().context, state().scheduler); }

[[noreturn]] inline void fiber_main() {
    State& s = state();
    (*s.body)();
    s.current->done = true;
    ++s.events;
    for (;;) yield();  // done: the scheduler does not resume it again
}

inline void run_block() {
    State& s = state();
    Fiber* const first = s.pool.data();
    Fiber* const last = first + s.threads;
    for (Fiber* it = first; it != last; ++it) {
        Fiber& f = *it;
        f.done = false;
        f.committed.clear();
        f.open.clear();
        make_context(f.context, f.stack.data(), f.stack.size(), fiber_main);
    }
    for (Warp& w : s.warps) w.arrived = 0, w.generation = 0;
    s.block_arrived = 0;
    for (;;) {
        bool all_done = true;
        const unsigned long before = s.events;
        for (Fiber* f = first; f != last; ++f) {
            if (f->done) continue;
            all_done = false;
            s.current = f;
            switch_to(s.scheduler, f->context);
        }
        s.current = nullptr;
        if (all_done) return;
        if (s.events == before)
            trap("deadlock: every thread waits at a collective or __syncthreads that not all threads reach");
    }
}

}  // namespace detail

inline const Ids& ids() { return detail::current().ids; }

inline int lane() { return int(detail::current().ids.thread_idx.x % 32); }

inline void sync_block() {
    detail::State& s = detail::state();
    const unsigned long generation = s.block_generation;
    ++s.events;
    if (++s.block_arrived == s.threads) {
        s.block_arrived = 0;
        ++s.block_generation;
        return;
    }
    while (s.block_generation == generation) detail::yield();
}

inline const unsigned char* warp_exchange(const void* in, std::size_t bytes) {
    detail::State& s = detail::state();
    detail::Fiber& f = detail::current();
    if (bytes > detail::kMaxDeposit) trap("warp collective: operand too large for the emulator");
    detail::Warp& w = s.warps[f.ids.thread_idx.x / 32];
    const unsigned long generation = w.generation;
    unsigned char* buffer = w.deposits[generation % 2];
    if (w.arrived == 0)
        w.bytes = bytes;
    else if (w.bytes != bytes)
        trap("warp collective: the lanes of a warp reached different collectives (divergence)");
    std::memcpy(buffer + lane() * bytes, in, bytes);
    ++s.events;
    if (++w.arrived == 32) {
        w.arrived = 0;
        ++w.generation;
    } else {
        while (w.generation == generation) detail::yield();
    }
    return buffer;
}

inline void cp_async_16(void* smem, const void* gmem) { detail::current().open.push_back({smem, gmem}); }

inline void cp_async_commit() {
    detail::Fiber& f = detail::current();
    f.committed.push_back(std::move(f.open));
    f.open.clear();
}

inline void cp_async_wait(int pending) {
    detail::Fiber& f = detail::current();
    while (int(f.committed.size()) > pending) {
        for (const detail::Copy& c : f.committed.front()) std::memcpy(c.first, c.second, 16);
        f.committed.erase(f.committed.begin());
    }
}

inline void trap(const char* why) {
    std::fprintf(stderr, "tensor-core emulator: %s\n", why);
    std::fflush(stderr);
    std::abort();
}

inline void launch(dim3 grid, dim3 block, unsigned char* smem, std::size_t smem_bytes,
                   const std::function<void()>& body) {
    detail::State& s = detail::state();
    if (block.y != 1 || block.z != 1 || block.x == 0 || block.x % 32 != 0 || block.x > 1024)
        trap("launch: blocks of whole warps in x only");
    if (smem_bytes > kMaxSmemBytes) trap("launch: more dynamic shared memory than a block can have");
    s.body = &body;
    if (s.pool.size() < block.x) s.pool.resize(block.x);
    s.threads = int(block.x);
    s.warps.resize(block.x / 32);
    for (unsigned t = 0; t < block.x; ++t) {
        detail::Fiber& f = s.pool[t];
        if (f.stack.empty()) f.stack.resize(detail::kStackBytes);
        f.ids.thread_idx = make_uint3(t, 0, 0);
        f.ids.grid_dim = grid;
        f.ids.block_dim = block;
    }
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                std::memset(smem, 0xFF, smem_bytes);  // NaN in fp16/bf16: unwritten reads show
                for (unsigned t = 0; t < block.x; ++t) s.pool[t].ids.block_idx = make_uint3(x, y, z);
                detail::run_block();
            }
    s.body = nullptr;
}

}  // namespace tc::emu
