// Chapter 12: measurements of the ring (measure.h): the per-step timeline, the exchange bandwidth.
#include <algorithm>
#include <cmath>

#include "../../common/check.h"
#include "../../common/device.h"
#include "measure.h"

namespace ch12 {

Timeline::Timeline(const Transport& transport, int steps)
    : transport_(transport), steps_(steps),
      events_(transport.local_ranks().size() * std::size_t(steps) * kMarks, nullptr),
      recorded_(events_.size(), 0) {
    for (std::size_t i = 0; i < transport.local_ranks().size(); ++i) {
        CUDA_CHECK(cudaSetDevice(transport.device_of(int(i))));
        for (int s = 0; s < steps; ++s)
            for (int m = 0; m < kMarks; ++m) CUDA_CHECK(cudaEventCreate(&events_[index(int(i), s, Mark(m))]));
    }
}

Timeline::~Timeline() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

std::size_t Timeline::index(int i, int s, Mark m) const {
    return (std::size_t(i) * std::size_t(steps_) + std::size_t(s)) * kMarks + std::size_t(m);
}

void Timeline::reset() { std::fill(recorded_.begin(), recorded_.end(), 0); }

void Timeline::record(int i, int s, Mark m, cudaStream_t stream) {
    CUDA_CHECK(cudaEventRecord(events_[index(i, s, m)], stream));
    recorded_[index(i, s, m)] = 1;
}

std::vector<std::vector<StepTimes>> Timeline::times() const {
    std::vector<std::vector<StepTimes>> out(transport_.local_ranks().size(), std::vector<StepTimes>(std::size_t(steps_)));
    for (std::size_t i = 0; i < out.size(); ++i) {
        CUDA_CHECK(cudaSetDevice(transport_.device_of(int(i))));
        // every mark as milliseconds after the first compute began (NaN: not recorded; an exchange
        // before it, step 1's all-gather, is negative)
        const cudaEvent_t origin = events_[index(int(i), 0, kComputeBegin)];
        CUDA_CHECK(cudaEventSynchronize(origin));
        std::vector<float> t(std::size_t(steps_) * kMarks, NAN);
        for (int s = 0; s < steps_; ++s)
            for (int m = 0; m < kMarks; ++m) {
                const std::size_t k = index(int(i), s, Mark(m));
                if (!recorded_[k]) continue;
                CUDA_CHECK(cudaEventSynchronize(events_[k]));
                CUDA_CHECK(cudaEventElapsedTime(&t[std::size_t(s) * kMarks + std::size_t(m)], origin, events_[k]));
            }
        auto mark = [&](int s, Mark m) { return t[std::size_t(s) * kMarks + std::size_t(m)]; };
        for (int s = 0; s < steps_; ++s) {
            StepTimes& st = out[i][std::size_t(s)];
            const bool computed = !std::isnan(mark(s, kComputeBegin)), sent = !std::isnan(mark(s, kCommBegin));
            if (computed) st.compute_ms = mark(s, kComputeEnd) - mark(s, kComputeBegin);
            if (computed && s > 0 && !std::isnan(mark(s - 1, kComputeEnd)))
                st.idle_ms = std::max(0.0f, mark(s, kComputeBegin) - mark(s - 1, kComputeEnd));
            if (!sent) continue;
            st.comm_ms = mark(s, kCommEnd) - mark(s, kCommBegin);
            for (int c = 0; c < steps_; ++c) {  // the exchange's overlap with every compute interval
                if (std::isnan(mark(c, kComputeBegin))) continue;
                const float lo = std::max(mark(s, kCommBegin), mark(c, kComputeBegin));
                const float hi = std::min(mark(s, kCommEnd), mark(c, kComputeEnd));
                st.hidden_ms += std::max(0.0f, hi - lo);
            }
        }
    }
    return out;
}

std::vector<std::vector<StepTimes>> gather_times(Transport& transport, const std::vector<std::vector<StepTimes>>& local) {
    static_assert(sizeof(StepTimes) == 4 * sizeof(float), "StepTimes travels as 4 floats");
    const std::size_t steps = local.empty() ? 0 : local[0].size(), bytes = steps * sizeof(StepTimes);
    const std::size_t P = std::size_t(transport.world_size());
    std::vector<fa::DeviceBuffer<float>> send, recv;
    std::vector<const void*> s;
    std::vector<void*> r;
    std::vector<cudaStream_t> streams;
    for (std::size_t i = 0; i < local.size(); ++i) {
        CUDA_CHECK(cudaSetDevice(transport.device_of(int(i))));
        std::vector<float> flat(steps * 4);
        std::copy_n(reinterpret_cast<const float*>(local[i].data()), flat.size(), flat.begin());
        send.emplace_back(flat);
        recv.emplace_back(P * steps * 4);
        s.push_back(send.back().get()), r.push_back(recv.back().get()), streams.push_back(cudaStreamLegacy);
    }
    transport.all_gather(s, r, bytes, streams);
    CUDA_CHECK(cudaSetDevice(transport.device_of(0)));
    const std::vector<float> all = recv[0].download();  // a blocking copy on the legacy stream: after the gather
    std::vector<std::vector<StepTimes>> out(P, std::vector<StepTimes>(steps));
    for (std::size_t q = 0; q < P; ++q) std::copy_n(all.data() + q * steps * 4, steps * 4, reinterpret_cast<float*>(out[q].data()));
    transport.barrier();  // every rank's gather is done before the buffers are freed
    return out;
}

float exchange_ms(Transport& transport, std::size_t bytes, int repeat) {
    std::vector<fa::DeviceBuffer<char>> a, b;
    std::vector<const void*> send;
    std::vector<void*> recv;
    std::vector<cudaStream_t> streams;
    for (std::size_t i = 0; i < transport.local_ranks().size(); ++i) {
        CUDA_CHECK(cudaSetDevice(transport.device_of(int(i))));
        a.emplace_back(bytes), b.emplace_back(bytes);
        send.push_back(a.back().get()), recv.push_back(b.back().get()), streams.push_back(cudaStreamLegacy);
    }
    transport.ring_exchange(send, recv, bytes, streams);  // warm-up: connections set up
    transport.barrier();
    CUDA_CHECK(cudaSetDevice(transport.device_of(0)));
    cudaEvent_t begin, end;
    CUDA_CHECK(cudaEventCreate(&begin));
    CUDA_CHECK(cudaEventCreate(&end));
    std::vector<float> ms;
    for (int k = 0; k < repeat; ++k) {
        CUDA_CHECK(cudaSetDevice(transport.device_of(0)));
        CUDA_CHECK(cudaEventRecord(begin, cudaStreamLegacy));
        transport.ring_exchange(send, recv, bytes, streams);
        CUDA_CHECK(cudaSetDevice(transport.device_of(0)));
        CUDA_CHECK(cudaEventRecord(end, cudaStreamLegacy));
        CUDA_CHECK(cudaEventSynchronize(end));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, begin, end));
        ms.push_back(t);
        transport.barrier();  // the next exchange starts together on every rank
    }
    CUDA_CHECK(cudaEventDestroy(begin));
    CUDA_CHECK(cudaEventDestroy(end));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace ch12
