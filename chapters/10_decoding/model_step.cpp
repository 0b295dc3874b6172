// Chapter 10: a decoding step of all layers' attention, plain or captured in a CUDA graph
// (model_step.h).
#include "model_step.h"

#include <string>

#include "../../common/check.h"
#include "../../common/device.h"

namespace ch10 {

std::size_t layer_bytes(const DecodeShape& s, bool fp8, const SplitPlan& plan) {
    constexpr std::size_t k16 = 2, kInt = sizeof(int), kFloat = sizeof(float);
    const std::size_t scales = std::size_t(s.B) * s.H_kv;
    const std::size_t cache = fp8 ? 2 * s.cache_elems() + 2 * scales * kFloat : 2 * s.cache_elems() * k16;
    const std::size_t table = s.paged() ? std::size_t(s.B) * s.max_pages() : 1;  // stored_cache's table
    return (2 * s.q_elems() + 2 * s.new_kv_elems()) * k16 + cache + (table + std::size_t(s.B)) * kInt +
           (s.rows() + partial_floats(s, plan) + partial_rows(s, plan)) * kFloat + s.rows() * kInt;
}

Stream::Stream() { CUDA_CHECK(cudaStreamCreate(&stream_)); }
Stream::~Stream() { cudaStreamDestroy(stream_); }

StreamGraph::StreamGraph(cudaStream_t stream, const std::function<void(cudaStream_t)>& enqueue) {
    // Global mode: a call that is unsafe while a stream is captured (a synchronizing copy, say)
    // fails instead of quietly running outside the graph.
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    enqueue(stream);
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec_, graph_, 0));
    CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &nodes_));
}

StreamGraph::~StreamGraph() {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
}

void StreamGraph::launch(cudaStream_t stream) const { CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

template <class T>
ModelStep<T>::ModelStep(const DecodeArraysOwner<T, false>& first, int layers, int variant, const SplitPlan& plan,
                        int candidate)
    : variant_(variant), candidate_(candidate), plan_(plan) {
    const std::string what = std::to_string(layers) + " layers of " + first.shape().str() + " (a model step)";
    fa::require_free_memory(std::size_t(layers) * layer_bytes(first.shape(), variant == kFp8, plan), what.c_str());
    for (int l = 0; l < layers; ++l) {
        layers_.push_back(std::make_unique<DecodeArraysOwner<T, false>>(first));
        arrays_.push_back(layers_.back()->arrays(plan));
    }
}

template <class T>
void ModelStep<T>::enqueue(cudaStream_t stream) const {
    for (std::size_t l = 0; l < layers_.size(); ++l) {
        layers_[l]->append(stream);
        decode<T>(variant_, layers_[l]->shape(), arrays_[l], plan_, candidate_, stream);
    }
}

template <class T>
void ModelStep<T>::poison() {
    for (auto& layer : layers_) layer->arrays(plan_);  // the same arrays again, poisoned
}

namespace {
// part(layer) of every layer, one after the other.
template <class T, class Part>
std::vector<float> layer_after_layer(const std::vector<std::unique_ptr<DecodeArraysOwner<T, false>>>& layers, Part part) {
    std::vector<float> all;
    for (const auto& layer : layers) {
        const std::vector<float> x = part(*layer);
        all.insert(all.end(), x.begin(), x.end());
    }
    return all;
}
}  // namespace

template <class T>
std::vector<float> ModelStep<T>::O() const {
    return layer_after_layer(layers_, [](const DecodeArraysOwner<T, false>& a) { return a.O(); });
}
template <class T>
std::vector<float> ModelStep<T>::L() const {
    return layer_after_layer(layers_, [](const DecodeArraysOwner<T, false>& a) { return a.L(); });
}

template class ModelStep<__half>;
template class ModelStep<__nv_bfloat16>;

}  // namespace ch10
