/// @file emulator_runtime.h
/// @brief The CPU emulator's runtime (declared in emulator.h, which includes this file): fibers,
/// warp collectives, __syncthreads, deferred cp.async, each told to the race check
/// (emulator_shadow.h). Header-only (inline): the one state is shared by every translation unit
/// that emulates kernels.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "emulator_shadow.h"
#include "fiber_switch.h"

namespace tc::emu {

namespace detail {

inline constexpr std::size_t kStackBytes = 256 * 1024;  // kernels keep their "registers" on this stack
inline constexpr std::size_t kMaxDeposit = 64;          // bytes one lane hands to a collective

/// A cp.async in flight: 16 bytes from src to dst, issued at the shadow's site `site`.
struct Copy {
    void* dst;
    const void* src;
    std::uint16_t site;
};

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
    unsigned long synced = ~0ul;  // the generation of the last __syncwarp told to the shadow
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
    Shadow shadow;     // the race check
    std::string race;  // the first race's report: the block stops, then launch() throws it
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
    for (Warp& w : s.warps) w.arrived = 0, w.generation = 0, w.synced = ~0ul;
    s.block_arrived = 0;
    s.shadow.begin_block(first->ids.block_idx);
    for (;;) {
        bool all_done = true;
        const unsigned long before = s.events;
        for (Fiber* f = first; f != last; ++f) {
            if (f->done) continue;
            all_done = false;
            s.current = f;
            switch_to(s.scheduler, f->context);
            if (!s.race.empty()) break;  // a race stops the block: its fibers are never resumed
        }
        s.current = nullptr;
        if (all_done || !s.race.empty()) return;
        if (s.events == before)
            trap("deadlock: every thread waits at a collective or __syncthreads that not all threads reach");
    }
}

/// Stops the block at a race: the scheduler never resumes this fiber, and launch() throws.
[[noreturn]] inline void stop(const std::string& report) {
    state().race = report;
    for (;;) yield();
}

/// Checks and records the running thread's access of `bytes` at p (its warp's, for ldmatrix and
/// wmma), made at file:line; returns its Mark.
inline Mark record(const void* p, std::size_t bytes, Mode mode, Access how, const char* file, int line) {
    State& s = state();
    const bool collective = how == Access::kLdmatrix || how == Access::kWmmaLoad || how == Access::kWmmaStore;
    const Mark me = s.shadow.mark(int(current().ids.thread_idx.x), collective, how, file, line);
    if (!s.shadow.access(p, bytes, mode, me)) stop(s.shadow.report());
    return me;
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
        s.shadow.barrier();
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

inline void sync_warp() {
    detail::State& s = detail::state();
    detail::Warp& w = s.warps[detail::current().ids.thread_idx.x / 32];
    const unsigned long generation = w.generation;
    const int none = 0;
    warp_exchange(&none, sizeof none);
    // the first lane to leave tells the shadow, before any lane's access after the barrier
    if (w.synced != generation) w.synced = generation, s.shadow.warp_barrier(int(&w - s.warps.data()));
}

inline bool in_shared(const void* p) { return detail::state().shadow.contains(p); }

inline void shared_read(const void* p, std::size_t bytes, Access how, const char* file, int line) {
    detail::record(p, bytes, detail::Mode::kRead, how, file, line);
}

inline void shared_write(const void* p, std::size_t bytes, Access how, const char* file, int line) {
    detail::record(p, bytes, detail::Mode::kWrite, how, file, line);
}

inline void cp_async_16(void* smem, const void* gmem, const char* file, int line) {
    const detail::Mark me = detail::record(smem, 16, detail::Mode::kFill, Access::kCpAsync, file, line);
    detail::current().open.push_back({smem, gmem, me.site});
}

inline void cp_async_commit() {
    detail::Fiber& f = detail::current();
    f.committed.push_back(std::move(f.open));
    f.open.clear();
}

inline void cp_async_wait(int pending) {
    detail::Fiber& f = detail::current();
    detail::Shadow& shadow = detail::state().shadow;
    while (int(f.committed.size()) > pending) {
        for (const detail::Copy& c : f.committed.front()) {
            std::memcpy(c.dst, c.src, 16);
            shadow.land(c.dst, shadow.landing(int(f.ids.thread_idx.x), c.site));
        }
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
    s.shadow.attach(smem, smem_bytes, int(block.x / 32));
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
                if (!s.race.empty()) {
                    s.body = nullptr;
                    throw Race(std::exchange(s.race, std::string()));
                }
            }
    s.body = nullptr;
}

}  // namespace tc::emu
