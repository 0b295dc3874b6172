/// @file timer.h
/// @brief Wall-clock timing of CPU code, and the statistics every benchmark reports.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace fa {

/// Summary of repeated timings, in milliseconds.
struct TimingStats {
    double median_ms = 0;
    double min_ms = 0;
    double max_ms = 0;
    int repeats = 0;
};

/// Median, min and max of a list of times (the list is copied and sorted).
inline TimingStats summarize(std::vector<double> ms) {
    TimingStats s;
    if (ms.empty()) return s;
    std::sort(ms.begin(), ms.end());
    const std::size_t n = ms.size();
    s.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    s.min_ms = ms.front();
    s.max_ms = ms.back();
    s.repeats = int(n);
    return s;
}

/// A stopwatch on the host's steady clock.
class WallTimer {
public:
    WallTimer() : start_(Clock::now()) {}
    void restart() { start_ = Clock::now(); }
    double elapsed_ms() const {
        return std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
    }

private:
    using Clock = std::chrono::steady_clock;
    Clock::time_point start_;
};

/// Times a CPU function: `warmup` untimed calls, then `repeat` timed ones.
template <class F>
TimingStats time_cpu(F&& f, int repeat, int warmup = 1) {
    for (int i = 0; i < warmup; ++i) f();
    std::vector<double> ms;
    for (int i = 0; i < repeat; ++i) {
        WallTimer t;
        f();
        ms.push_back(t.elapsed_ms());
    }
    return summarize(ms);
}

/// Prints one timing line: median and min time, and the rates they give for `flops` and `bytes`
/// (a rate is left out when its count is 0).
inline void print_timing(const char* label, const TimingStats& t, double flops, double bytes) {
    std::printf("  %-30s median %9.4f ms  min %9.4f ms", label, t.median_ms, t.min_ms);
    if (flops > 0) std::printf("  %8.3f TF/s", flops / (t.median_ms * 1e-3) / 1e12);
    if (bytes > 0) std::printf("  %8.1f GB/s", bytes / (t.median_ms * 1e-3) / 1e9);
    std::printf("\n");
}

}  // namespace fa
