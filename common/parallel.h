/// @file parallel.h
/// @brief `parallel_for`: spreads independent CPU work (reference rows, heads) over the host's cores.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace fa {

/// Calls fn(i) for every i in [0, n), on up to hardware_concurrency() threads. Items are taken one
/// at a time from a shared counter, so uneven items (causal rows) still balance.
template <class Fn>
void parallel_for(std::size_t n, Fn fn) {
    const std::size_t workers =
        std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
    if (workers <= 1) {
        for (std::size_t i = 0; i < n; ++i) fn(i);
        return;
    }
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> pool;
    for (std::size_t w = 0; w < workers; ++w)
        pool.emplace_back([&] {
            for (std::size_t i = next++; i < n; i = next++) fn(i);
        });
    for (std::thread& t : pool) t.join();
}

}  // namespace fa
