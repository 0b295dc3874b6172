// Waiting for a kernel with a time limit, for the tests of kernels whose barrier waits could spin
// forever (chapters 9 and 11: mbarriers, named barriers).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "../common/check.h"

namespace fa::test {

/// Waits for the kernel just launched. A planted mistake in an mbarrier's arrival count or parity,
/// or in a named barrier's count, makes the kernel wait forever instead of failing a check; past
/// FA_TEST_HANG_SECONDS (default 60: the longest launch of these tests takes milliseconds, under
/// the sanitizer seconds) `program` says so and stops, since a kernel that never ends keeps the GPU.
inline void finish_or_stop(const char* program, const std::string& what) {
    const char* env = std::getenv("FA_TEST_HANG_SECONDS");
    const double limit = env != nullptr ? std::atof(env) : 60.0;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        const cudaError_t e = cudaStreamQuery(nullptr);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit) {
            std::fprintf(stderr,
                         "\n%s: %s did not finish within %.0f s: a barrier wait that never completes (a hang). "
                         "Stopping the test program.\n",
                         program, what.c_str(), limit);
            std::fflush(nullptr);
            std::_Exit(3);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

}  // namespace fa::test
