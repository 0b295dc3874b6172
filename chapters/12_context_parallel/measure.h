/// @file measure.h
/// @brief Measurements of the ring. Where a run spends its time (`--timeline`): CUDA events at the
/// start and end of every step's compute (default stream) and of every exchange (comm stream), on
/// every local rank, read once the run has finished. An exchange is hidden where its interval lies
/// inside the compute intervals; a compute stream that waits between two steps shows the
/// communication that was not hidden. And what the link moves (`--bandwidth`): one ring exchange
/// of a given size, timed alone.
#pragma once

#include <cstddef>
#include <vector>

#include <cuda_runtime.h>

#include "transport.h"

namespace ch12 {

/// One ring step of one rank, in milliseconds.
struct StepTimes {
    float compute_ms = 0;  ///< the step's kernels, first start to last end (0: no compute)
    float comm_ms = 0;     ///< the exchange posted at this step (0: none)
    float hidden_ms = 0;   ///< the part of comm_ms that overlapped some step's compute
    float idle_ms = 0;     ///< compute idle before this step: waiting for its data
};

/// Events for `steps` steps on every local rank of `transport`; a run given a timeline records
/// into it. Each rank's times are measured from the start of its step 0's compute.
class Timeline {
public:
    enum Mark : int { kComputeBegin, kComputeEnd, kCommBegin, kCommEnd, kMarks };

    Timeline(const Transport& transport, int steps);
    ~Timeline();
    Timeline(const Timeline&) = delete;
    Timeline& operator=(const Timeline&) = delete;

    /// Forgets the marks of an earlier run (call before each run).
    void reset();
    /// Records mark m of step s of local rank i on `stream` (that rank's device is current).
    void record(int i, int s, Mark m, cudaStream_t stream);
    /// Each local rank's times per step, once the run has finished (synchronizes the events).
    std::vector<std::vector<StepTimes>> times() const;
    int steps() const { return steps_; }

private:
    std::size_t index(int i, int s, Mark m) const;
    const Transport& transport_;
    int steps_;
    std::vector<cudaEvent_t> events_;  ///< [local rank][step][mark]
    std::vector<char> recorded_;
};

/// Every rank's times (`local`: this process's ranks, in local_ranks() order) on every rank, by
/// an all-gather over the transport: out[r] is rank r's. Every rank must call it.
std::vector<std::vector<StepTimes>> gather_times(Transport& transport, const std::vector<std::vector<StepTimes>>& local);

/// Median milliseconds of one ring exchange of `bytes` each way (every rank sends to its
/// successor and receives from its predecessor), timed on local rank 0's stream over `repeat`
/// exchanges after a warm-up. Every rank must call it.
float exchange_ms(Transport& transport, std::size_t bytes, int repeat);

}  // namespace ch12
