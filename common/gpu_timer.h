/// @file gpu_timer.h
/// @brief Times GPU work with CUDA events: warm-up first, L2 flushed before every repetition.
///
/// Without the flush, a kernel run twice on the same inputs finds them in L2 the second time and
/// looks faster than it is on fresh data. The flush buffer is allocated once per timer (twice the
/// device's L2 size) and overwritten before each timed launch.
#pragma once

#include <vector>

#include <cuda_runtime_api.h>

#include "check.h"
#include "timer.h"

namespace fa {

/// CUDA-event timer. `launch` is any callable that enqueues the work on the stream given to time()
/// (the default stream unless one is given).
class GpuTimer {
public:
    explicit GpuTimer(bool flush_l2 = true) {
        CUDA_CHECK(cudaEventCreate(&start_));
        CUDA_CHECK(cudaEventCreate(&stop_));
        if (flush_l2) {
            int device = 0, l2_bytes = 0;
            CUDA_CHECK(cudaGetDevice(&device));
            CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
            flush_bytes_ = 2 * std::size_t(l2_bytes > 0 ? l2_bytes : (8 << 20));
            CUDA_CHECK(cudaMalloc(&flush_, flush_bytes_));
        }
    }
    ~GpuTimer() {
        cudaFree(flush_);
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
    }
    GpuTimer(const GpuTimer&) = delete;
    GpuTimer& operator=(const GpuTimer&) = delete;

    /// Runs `launch` `warmup` times untimed, then `repeat` times timed; returns the statistics.
    /// `after_flush`, when given, is enqueued after each flush and before the timed region (chapter
    /// 10 reads another buffer there, so that the flush's dirty lines are written back untimed).
    /// The flush and the events go on `stream`, the stream `launch` and `after_flush` use.
    template <class Launch, class AfterFlush = void (*)()>
    TimingStats time(Launch&& launch, int repeat, int warmup = 2, AfterFlush after_flush = [] {},
                     cudaStream_t stream = 0) {
        for (int i = 0; i < warmup; ++i) launch();
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<double> ms;
        for (int i = 0; i < repeat; ++i) {
            if (flush_ != nullptr) CUDA_CHECK(cudaMemsetAsync(flush_, i & 0xFF, flush_bytes_, stream));
            after_flush();
            CUDA_CHECK(cudaEventRecord(start_, stream));
            launch();
            CUDA_CHECK(cudaEventRecord(stop_, stream));
            CUDA_CHECK(cudaEventSynchronize(stop_));
            float t = 0;
            CUDA_CHECK(cudaEventElapsedTime(&t, start_, stop_));
            ms.push_back(t);
        }
        return summarize(ms);
    }

private:
    cudaEvent_t start_ = nullptr, stop_ = nullptr;
    void* flush_ = nullptr;
    std::size_t flush_bytes_ = 0;
};

}  // namespace fa
