// Chapter 12: virtual ranks — P ranks of the ring in one process on one GPU, K/V moved by device
// copies, with the same ordering guarantees NCCL gives the ring (transport.h).
#include <string>
#include <vector>

#include "../../common/check.h"
#include "transport.h"

namespace ch12 {

namespace {

class VirtualTransport final : public Transport {
public:
    explicit VirtualTransport(int P) : P_(P), ready_(std::size_t(P)), read_done_(std::size_t(P)) {
        CUDA_CHECK(cudaGetDevice(&device_));
        for (int r = 0; r < P; ++r) {
            ranks_.push_back(r);
            CUDA_CHECK(cudaEventCreateWithFlags(&ready_[std::size_t(r)], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&read_done_[std::size_t(r)], cudaEventDisableTiming));
        }
    }
    ~VirtualTransport() override {
        for (int r = 0; r < P_; ++r) cudaEventDestroy(ready_[std::size_t(r)]), cudaEventDestroy(read_done_[std::size_t(r)]);
    }
    int world_size() const override { return P_; }
    const std::vector<int>& local_ranks() const override { return ranks_; }
    int device_of(int) const override { return device_; }
    std::string name() const override { return "virtual ranks (device copies on one GPU)"; }

    // Rank r's receive is a copy from its predecessor's send buffer. That buffer must hold what
    // the predecessor's stream put there (ready), and r's receive buffer must no longer be read:
    // it may be the buffer r sent from at an earlier call, which r's successor copied from
    // (read_done of the successor, recorded after that call's copies or a later call's).
    void ring_exchange(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes,
                       const std::vector<cudaStream_t>& streams) override {
        for (int r = 0; r < P_; ++r) CUDA_CHECK(cudaEventRecord(ready_[std::size_t(r)], streams[std::size_t(r)]));
        for (int r = 0; r < P_; ++r) {
            const std::size_t prev = std::size_t((r + P_ - 1) % P_), next = std::size_t((r + 1) % P_);
            cudaStream_t st = streams[std::size_t(r)];
            CUDA_CHECK(cudaStreamWaitEvent(st, ready_[prev], 0));
            CUDA_CHECK(cudaStreamWaitEvent(st, read_done_[next], 0));
            CUDA_CHECK(cudaMemcpyAsync(recv[std::size_t(r)], send[prev], bytes, cudaMemcpyDeviceToDevice, st));
        }
        // recorded after every wait above was enqueued, so each wait saw the previous call's event
        for (int r = 0; r < P_; ++r) CUDA_CHECK(cudaEventRecord(read_done_[std::size_t(r)], streams[std::size_t(r)]));
    }

    void all_gather(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes,
                    const std::vector<cudaStream_t>& streams) override {
        for (int r = 0; r < P_; ++r) CUDA_CHECK(cudaEventRecord(ready_[std::size_t(r)], streams[std::size_t(r)]));
        for (int r = 0; r < P_; ++r)
            for (int q = 0; q < P_; ++q) {
                cudaStream_t st = streams[std::size_t(r)];
                CUDA_CHECK(cudaStreamWaitEvent(st, ready_[std::size_t(q)], 0));
                CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(recv[std::size_t(r)]) + std::size_t(q) * bytes,
                                           send[std::size_t(q)], bytes, cudaMemcpyDeviceToDevice, st));
            }
    }

    void barrier() override { CUDA_CHECK(cudaDeviceSynchronize()); }

private:
    int P_, device_ = 0;
    std::vector<int> ranks_;
    std::vector<cudaEvent_t> ready_, read_done_;
};

}  // namespace

std::unique_ptr<Transport> make_virtual_transport(int P) { return std::make_unique<VirtualTransport>(P); }

}  // namespace ch12
