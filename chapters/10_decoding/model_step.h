/// @file model_step.h
/// @brief Chapter 10: one decoding step of a whole model's attention, as an inference engine runs
/// it. L layers, each with its own KV cache; per layer the append of the new tokens' K and V, then
/// the decoding kernel. The step goes on one stream as plain launches, or is captured once into a
/// CUDA graph and replayed with one launch (README, "A step of the whole model").
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "decoding.h"
#include "problem.h"

namespace ch10 {

/// Bytes of one layer's arrays as DecodeArraysOwner holds them after arrays(plan): Q, the new
/// tokens, the cache (16-bit, or e4m3 with its scales when `fp8`), the block table, the lengths, O,
/// L, the partials of `plan` and the counters. What a model step allocates per layer.
std::size_t layer_bytes(const DecodeShape& s, bool fp8, const SplitPlan& plan);

/// A stream of its own (cudaStreamCreate: ordered with the legacy default stream, so the
/// DeviceBuffers' copies and memsets need no extra synchronization), destroyed with the object.
class Stream {
public:
    Stream();
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    operator cudaStream_t() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

/// The work `enqueue` puts on `stream`, captured once into a CUDA graph (nothing runs during the
/// capture) and instantiated; launch() replays all of it with one call. The kernels keep the
/// arguments they were captured with: the same pointers, shapes and plans at every replay.
class StreamGraph {
public:
    StreamGraph(cudaStream_t stream, const std::function<void(cudaStream_t)>& enqueue);
    ~StreamGraph();
    StreamGraph(const StreamGraph&) = delete;
    StreamGraph& operator=(const StreamGraph&) = delete;
    void launch(cudaStream_t stream) const;
    /// Nodes of the graph: here, one per kernel launch captured.
    std::size_t nodes() const { return nodes_; }

private:
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
    std::size_t nodes_ = 0;
};

/// `layers` layers, each a copy of `first`'s arrays as they are (cache, new tokens, Q), and the
/// step over all of them: for each layer in turn, the append of its new tokens (append_kv, or
/// append_fp8 for kernel 6), then decode with `plan`. The lengths do not advance, so every step
/// writes the same rows and reads the same cache: steps repeat, and their outputs compare.
template <class T>
class ModelStep {
public:
    /// Exits with one message (fa::require_free_memory) when the layers do not fit on the GPU.
    ModelStep(const DecodeArraysOwner<T, false>& first, int layers, int variant, const SplitPlan& plan,
              int candidate = -1);
    /// Enqueues one step on `stream`.
    void enqueue(cudaStream_t stream) const;
    /// Fills every layer's O, L and partials with NaN, before a run whose outputs are compared.
    void poison();
    /// O (B, H_q, q_len, D) and L of every layer, layer after layer.
    std::vector<float> O() const;
    std::vector<float> L() const;
    DecodeArraysOwner<T, false>& layer(int l) { return *layers_[std::size_t(l)]; }
    int layers() const { return int(layers_.size()); }

private:
    int variant_, candidate_;
    SplitPlan plan_;
    std::vector<std::unique_ptr<DecodeArraysOwner<T, false>>> layers_;
    std::vector<DecodeArrays<T>> arrays_;  // each layer's pointers, the same at every step
};

}  // namespace ch10
