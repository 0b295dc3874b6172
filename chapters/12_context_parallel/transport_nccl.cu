// Chapter 12: the NCCL transport (transport.h). Built with NCCL where the Makefile finds nccl.h
// and libnccl (FA_HAVE_NCCL); elsewhere the functions say how to get it and exit.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "../../common/check.h"
#include "../../common/exit_codes.h"
#include "transport.h"

#ifdef FA_HAVE_NCCL
#include <nccl.h>

/// Checks an NCCL call: prints the call, file, line and NCCL's reason, and exits.
#define NCCL_CHECK(call)                                                                       \
    do {                                                                                       \
        const ncclResult_t nccl_r_ = (call);                                                   \
        if (nccl_r_ != ncclSuccess) {                                                          \
            std::fprintf(stderr, "NCCL error %s at %s:%d: %s\n", ncclGetErrorString(nccl_r_), \
                         __FILE__, __LINE__, #call);                                           \
            std::exit(fa::kExitFailed);                                                        \
        }                                                                                      \
    } while (0)
#endif

namespace ch12 {

#ifdef FA_HAVE_NCCL

namespace {

class NcclTransport final : public Transport {
public:
    /// Takes the communicators of this process's ranks (ranks[i] on devices[i]).
    NcclTransport(int world, std::vector<int> ranks, std::vector<int> devices, std::vector<ncclComm_t> comms)
        : world_(world), ranks_(std::move(ranks)), devices_(std::move(devices)), comms_(std::move(comms)) {}
    ~NcclTransport() override {
        for (ncclComm_t c : comms_) ncclCommDestroy(c);
    }
    int world_size() const override { return world_; }
    const std::vector<int>& local_ranks() const override { return ranks_; }
    int device_of(int i) const override { return devices_[std::size_t(i)]; }
    std::string name() const override {
        int v = 0;
        NCCL_CHECK(ncclGetVersion(&v));
        return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
    }

    // One group: every local rank's send and receive are posted together, so neither waits for
    // the other to be posted first (a ring of blocking sends would deadlock).
    void ring_exchange(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes,
                       const std::vector<cudaStream_t>& streams) override {
        NCCL_CHECK(ncclGroupStart());
        for (std::size_t i = 0; i < ranks_.size(); ++i) {
            const int next = (ranks_[i] + 1) % world_, prev = (ranks_[i] + world_ - 1) % world_;
            NCCL_CHECK(ncclSend(send[i], bytes, ncclChar, next, comms_[i], streams[i]));
            NCCL_CHECK(ncclRecv(recv[i], bytes, ncclChar, prev, comms_[i], streams[i]));
        }
        NCCL_CHECK(ncclGroupEnd());
    }

    void all_gather(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes,
                    const std::vector<cudaStream_t>& streams) override {
        NCCL_CHECK(ncclGroupStart());
        for (std::size_t i = 0; i < ranks_.size(); ++i)
            NCCL_CHECK(ncclAllGather(send[i], recv[i], bytes, ncclChar, comms_[i], streams[i]));
        NCCL_CHECK(ncclGroupEnd());
    }

    // An all-reduce of one float on each rank's default stream, then the devices synchronized.
    void barrier() override {
        std::vector<float*> one(ranks_.size());
        for (std::size_t i = 0; i < ranks_.size(); ++i) {
            CUDA_CHECK(cudaSetDevice(devices_[i]));
            CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&one[i]), sizeof(float)));
        }
        NCCL_CHECK(ncclGroupStart());
        for (std::size_t i = 0; i < ranks_.size(); ++i)
            NCCL_CHECK(ncclAllReduce(one[i], one[i], 1, ncclFloat, ncclSum, comms_[i], cudaStreamLegacy));
        NCCL_CHECK(ncclGroupEnd());
        for (std::size_t i = 0; i < ranks_.size(); ++i) {
            CUDA_CHECK(cudaSetDevice(devices_[i]));
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(one[i]));
        }
    }

private:
    int world_;
    std::vector<int> ranks_, devices_;
    std::vector<ncclComm_t> comms_;
};

bool file_complete(const std::string& path) {
    struct stat st{};
    return stat(path.c_str(), &st) == 0 && std::size_t(st.st_size) == sizeof(ncclUniqueId);
}

/// Rank 0 writes the id to path.tmp.<pid> and renames it to path, so that a reader sees either no
/// file or the whole id. A file already there would be an earlier run's id: refused.
void publish_id(const ncclUniqueId& id, const std::string& path) {
    struct stat st{};
    if (stat(path.c_str(), &st) == 0) {
        std::fprintf(stderr, "chapter12: rendezvous file %s already exists (an earlier run's?): remove it or "
                     "choose a new path\n", path.c_str());
        std::exit(fa::kExitBadInput);
    }
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    const bool ok = f != nullptr && std::fwrite(&id, sizeof id, 1, f) == 1;
    if ((f != nullptr && std::fclose(f) != 0) || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::fprintf(stderr, "chapter12: cannot write the rendezvous file %s\n", path.c_str());
        std::exit(fa::kExitFailed);
    }
}

ncclUniqueId await_id(const std::string& path, int timeout_s) {
    const auto start = std::chrono::steady_clock::now();
    while (!file_complete(path)) {
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(timeout_s)) {
            std::fprintf(stderr, "chapter12: no NCCL id in %s after %d s (is rank 0 running, with the same "
                         "--rendezvous on a file system all ranks see?)\n", path.c_str(), timeout_s);
            std::exit(fa::kExitFailed);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ncclUniqueId id;
    FILE* f = std::fopen(path.c_str(), "rb");
    const bool ok = f != nullptr && std::fread(&id, sizeof id, 1, f) == 1;
    if (f != nullptr) std::fclose(f);
    if (!ok) {
        std::fprintf(stderr, "chapter12: cannot read the rendezvous file %s\n", path.c_str());
        std::exit(fa::kExitFailed);
    }
    return id;
}

}  // namespace

std::string nccl_missing_reason() { return ""; }

std::unique_ptr<Transport> make_nccl_transport(int rank, int world, int device, const std::string& rendezvous,
                                               int timeout_s) {
    ncclUniqueId id;
    if (rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        publish_id(id, rendezvous);
    } else {
        id = await_id(rendezvous, timeout_s);
    }
    CUDA_CHECK(cudaSetDevice(device));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank));
    return std::make_unique<NcclTransport>(world, std::vector<int>{rank}, std::vector<int>{device},
                                           std::vector<ncclComm_t>{comm});
}

std::unique_ptr<Transport> make_nccl_transport_all(int gpus) {
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(gpus));
    std::vector<int> devices(static_cast<std::size_t>(gpus));
    for (int g = 0; g < gpus; ++g) devices[std::size_t(g)] = g;
    NCCL_CHECK(ncclCommInitAll(comms.data(), gpus, devices.data()));
    return std::make_unique<NcclTransport>(gpus, devices, devices, comms);
}

#else  // no NCCL in this build

std::string nccl_missing_reason() {
    return "this build has no NCCL: install it (Debian/Ubuntu: libnccl-dev; or pip install nvidia-nccl-cu12) "
           "or point NCCL_HOME at it, then rebuild (make chapter12); --virtual P runs without it";
}

namespace {
[[noreturn]] void no_nccl() {
    std::fprintf(stderr, "chapter12: %s\n", nccl_missing_reason().c_str());
    std::exit(fa::kExitNoGpu);
}
}  // namespace

std::unique_ptr<Transport> make_nccl_transport(int, int, int, const std::string&, int) { no_nccl(); }
std::unique_ptr<Transport> make_nccl_transport_all(int) { no_nccl(); }

#endif

}  // namespace ch12
