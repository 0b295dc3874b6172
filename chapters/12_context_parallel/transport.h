/// @file transport.h
/// @brief How K/V move between ranks: the one interface the ring calls, with two engines behind
/// it. NCCL moves them between GPUs (ncclSend/ncclRecv in a group, ncclAllGather); virtual ranks
/// run P ranks in one process on one GPU and move them by device copies (NCCL refuses two ranks on
/// one device), so that the ring's own code runs and is tested on a single GPU.
///
/// A process drives one or more local ranks (one under tools/launch.sh or torchrun; every rank
/// with --virtual P; every GPU of the machine in one process with ncclCommInitAll). Every call
/// takes one entry per local rank, in the order of local_ranks(), and enqueues work on that
/// rank's stream without waiting for it: the caller orders it against compute with events.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace ch12 {

class Transport {
public:
    virtual ~Transport() = default;
    /// P, the ranks in the ring.
    virtual int world_size() const = 0;
    /// The ranks this process drives.
    virtual const std::vector<int>& local_ranks() const = 0;
    /// The CUDA device of local rank i (made current before any work of that rank).
    virtual int device_of(int i) const = 0;
    /// "NCCL 2.28.9" or "virtual ranks (device copies on one GPU)".
    virtual std::string name() const = 0;
    /// One step of the ring: each local rank sends `bytes` from send[i] to rank + 1 and receives
    /// as many into recv[i] from rank − 1, on streams[i]. A receive buffer may be one this rank sent
    /// from at an earlier call (the ring's double buffering): it is not overwritten before that
    /// send has been read.
    virtual void ring_exchange(const std::vector<const void*>& send, const std::vector<void*>& recv,
                               std::size_t bytes, const std::vector<cudaStream_t>& streams) = 0;
    /// Every rank's `bytes` from send[i] land at recv[i] + rank·bytes on every rank, on streams[i].
    virtual void all_gather(const std::vector<const void*>& send, const std::vector<void*>& recv,
                            std::size_t bytes, const std::vector<cudaStream_t>& streams) = 0;
    /// Returns when every rank has reached it, with each local rank's device idle.
    virtual void barrier() = 0;
};

/// P virtual ranks on the current device (P ≥ 1).
std::unique_ptr<Transport> make_virtual_transport(int P);

/// Empty when this build has NCCL; otherwise how to get it.
std::string nccl_missing_reason();

/// One rank of an NCCL ring of `world` processes: the rank uses device `device`; rank 0 writes
/// the NCCL unique id to `rendezvous` (atomically: a temporary file renamed), the others wait for
/// it (up to `timeout_s` seconds). Exits with a message if NCCL is missing or fails.
std::unique_ptr<Transport> make_nccl_transport(int rank, int world, int device, const std::string& rendezvous,
                                               int timeout_s);

/// Every one of the first `gpus` devices as a rank of one NCCL ring in this process
/// (ncclCommInitAll). Exits with a message if NCCL is missing or fails.
std::unique_ptr<Transport> make_nccl_transport_all(int gpus);

}  // namespace ch12
