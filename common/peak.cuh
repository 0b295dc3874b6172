/// @file peak.cuh
/// @brief The rate of one instruction alone (chapter 7's mma.sync, chapter 9's wgmma): a kernel
/// that issues nothing else, timed as one full wave of blocks.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "check.h"
#include "device.h"
#include "gpu_timer.h"

namespace fa {

/// Times `kernel` (`threads` threads per block, no dynamic shared memory; every thread writes one
/// float of `out`, so that no work is dead code) on one full wave of blocks, as many as are
/// resident at once on every SM, so every SM is busy to the end. Prints the median as `label`
/// and returns TF/s for `flops_per_block` per block (median of `repeat` runs, after a warm-up).
/// Nothing is flushed: the kernel has no memory traffic to speak of.
inline double peak_tflops(void (*kernel)(float* out), int threads, double flops_per_block, const char* label,
                          int repeat) {
    const DeviceInfo dev = device_info();
    int blocks_per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, threads, 0));
    const int blocks = dev.sm_count * blocks_per_sm;
    DeviceBuffer<float> out(std::size_t(blocks) * std::size_t(threads));
    GpuTimer timer(false);
    const TimingStats t = timer.time(
        [&] {
            kernel<<<blocks, threads>>>(out.get());
            CUDA_CHECK_LAUNCH();
        },
        repeat);
    const double flops = flops_per_block * blocks;
    print_timing(label, t, flops, 0);
    return flops / (t.median_ms * 1e-3) / 1e12;
}

}  // namespace fa
