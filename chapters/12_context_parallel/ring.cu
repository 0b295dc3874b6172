// Chapter 12: the ring forward (chapter12.h). Each rank holds its chunks of Q and K/V; at step s
// it holds the K/V of rank (r − s) mod P, computes its Q chunks against them with a single-GPU
// kernel, and merges each block's (O, L) into an fp32 running result (merge.h). The ladder:
//   step 1  all-gather every K/V first, then compute (no ring; P× the K/V memory)
//   step 2  the ring: exchange, wait, compute — communication and compute take turns
//   step 3  the ring overlapped: the next K/V travel (comm stream) while this one is computed
//   step 4  step 3 on zigzag shards, so that causal work is the same on every rank
// Compute runs on each device's legacy default stream (where chapters 7 and 9 launch); the comm
// streams are created non-blocking, so the default stream does not serialize with them, and the
// two are ordered by events only: `received` (K/V arrived: compute may read them) and `computed`
// (compute is done with a buffer: the next receive may overwrite it).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../common/check.h"
#include "../../common/dtype.h"
#include "../09_hopper/chapter9.h"
#include "chapter12.h"
#include "merge.h"
#include "ring_kernels.cuh"

namespace ch12 {

std::string step_name(int step) {
    static const char* names[] = {"1-all-gather", "2-ring", "3-overlap", "4-zigzag", "5-backward"};
    return step >= kFirstStep && step <= kLastStep ? names[step - 1] : "unknown";
}

Sharding sharding_of(int step) { return step >= kZigzag ? Sharding::kZigzag : Sharding::kContiguous; }

Compute compute_for(const fa::DeviceInfo& d, int D) {
    if (ch9::device_unsupported_reason(d).empty() && ch9::unsupported_reason(ch9::kTuned, fa::make_shape(1, 1, 1, D, false)).empty())
        return {9, ch9::kTuned};
    return {7, ch7::kTuned};
}

std::string compute_name(const Compute& c) {
    return "chapter " + std::to_string(c.chapter) + " " +
           (c.chapter == 9 ? ch9::variant_name(c.variant) : ch7::variant_name(c.variant));
}

int compute_Bc(const Compute& c, int D) {
    return c.chapter == 9 ? ch9::tiles(c.variant, D).Bc : ch7::tiles(c.variant, D).Bc;
}

template <class T>
void compute_forward(const Compute& c, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L) {
    if (c.chapter == 9)
        ch9::forward<T>(c.variant, s, Q, K, V, O, L);
    else
        ch7::forward<T>(c.variant, s, Q, K, V, O, L);
}

namespace {

constexpr int kMergeThreads = 128;

/// Merges one block's partial result into the running one, a block of threads per query row:
/// chapter 2's merge of the two logsumexps (merge.h), then O_acc = w_acc·O_acc + w_blk·O_blk.
/// Every thread reads L_acc before thread 0 overwrites it (the barrier).
template <class T>
__global__ void merge_kernel(float* O_acc, float* L_acc, const T* O_blk, const float* L_blk, std::size_t rows,
                             int D) {
    for (std::size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const MergeWeights w = merge_weights(L_acc[row], L_blk[row]);
        for (int d = threadIdx.x; d < D; d += blockDim.x) {
            const std::size_t e = row * std::size_t(D) + std::size_t(d);
            O_acc[e] = merge_output(w, O_acc[e], element_to_float(O_blk[e]));
        }
        __syncthreads();
        if (threadIdx.x == 0) L_acc[row] = w.L;
        __syncthreads();
    }
}

/// O = O_acc rounded to T; L = L_acc. Also the start of a run: O_acc = 0, L_acc = −inf (start).
template <class T>
__global__ void finish_kernel(T* O, float* L, float* O_acc, float* L_acc, std::size_t elems, std::size_t rows,
                              bool start) {
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
    for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < elems; e += stride) {
        if (start) O_acc[e] = 0.0f;
        else O[e] = element_from_float<T>(O_acc[e]);
    }
    for (std::size_t r = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; r < rows; r += stride) {
        if (start) L_acc[r] = -INFINITY;
        else L[r] = L_acc[r];
    }
}

}  // namespace

template <class T>
RingForward<T>::RingForward(Transport& transport, const fa::AttnShape& s, int step, Compute c)
    : transport_(transport), shape_(s), step_(step), compute_(c) {
    if (step < kFirstStep || step > kLastStep) {
        std::fprintf(stderr, "ch12::RingForward: step %d does not exist (%d..%d)\n", step, kFirstStep, kLastStep);
        std::exit(fa::kExitBadInput);
    }
    layout_ = {s.N, transport.world_size(), sharding_of(step)};
    slot_rows_ = s.heads_total() * std::size_t(layout_.max_chunk_length());
    slot_elems_ = slot_rows_ * std::size_t(s.D);
    const std::size_t cpr = std::size_t(layout_.chunks_per_rank()), P = std::size_t(layout_.P);
    ranks_.resize(transport.local_ranks().size());
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        RankState<T>& st = ranks_[i];
        st.rank = transport.local_ranks()[i];
        st.device = transport.device_of(int(i));
        CUDA_CHECK(cudaSetDevice(st.device));
        st.Q = fa::DeviceBuffer<T>(cpr * slot_elems_);
        st.kv_own = fa::DeviceBuffer<T>(2 * cpr * slot_elems_);  // K slots, then V slots
        if (step == kAllGather) {
            st.kv_all = fa::DeviceBuffer<T>(P * 2 * cpr * slot_elems_);
        } else {
            st.kv_ring[0] = fa::DeviceBuffer<T>(2 * cpr * slot_elems_);
            st.kv_ring[1] = fa::DeviceBuffer<T>(2 * cpr * slot_elems_);
        }
        st.O = fa::DeviceBuffer<T>(cpr * slot_elems_);
        st.L = fa::DeviceBuffer<float>(cpr * slot_rows_);
        st.O_acc = fa::DeviceBuffer<float>(cpr * slot_elems_);
        st.L_acc = fa::DeviceBuffer<float>(cpr * slot_rows_);
        st.O_blk = fa::DeviceBuffer<T>(slot_elems_);
        st.L_blk = fa::DeviceBuffer<float>(slot_rows_);
        st.Q_win = fa::DeviceBuffer<T>(slot_elems_);
        st.O_win = fa::DeviceBuffer<T>(slot_elems_);
        st.L_win = fa::DeviceBuffer<float>(slot_rows_);
        st.Q_win.zero();  // the padding rows of a short window: finite, computed and dropped
        // what the kernels write (chapter 9 by TMA stores) starts as NaN: a row they miss poisons O
        for (fa::DeviceBuffer<T>* x : {&st.O_blk, &st.O_win}) x->poison();
        for (fa::DeviceBuffer<float>* x : {&st.L_blk, &st.L_win}) x->poison();
        CUDA_CHECK(cudaStreamCreateWithFlags(&st.comm, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&st.computed, cudaEventDisableTiming));
        for (cudaEvent_t& e : st.received) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
}

template <class T>
RingForward<T>::~RingForward() {
    for (RankState<T>& st : ranks_) {
        cudaSetDevice(st.device);
        cudaStreamDestroy(st.comm);
        cudaEventDestroy(st.computed);
        for (cudaEvent_t e : st.received) cudaEventDestroy(e);
    }
}

template <class T>
void RingForward<T>::load(const fa::AttnProblem& p) {
    for (RankState<T>& st : ranks_) {
        std::vector<float> kv = to_slots(layout_, shape_.heads_total(), shape_.D, st.rank, p.K);
        const std::vector<float> v = to_slots(layout_, shape_.heads_total(), shape_.D, st.rank, p.V);
        kv.insert(kv.end(), v.begin(), v.end());  // K slots, then V slots
        CUDA_CHECK(cudaSetDevice(st.device));
        st.Q.upload(fa::convert_from_float<T>(to_slots(layout_, shape_.heads_total(), shape_.D, st.rank, p.Q)));
        st.kv_own.upload(fa::convert_from_float<T>(kv));
    }
}

template <class T>
void RingForward<T>::poison_outputs() {
    for (RankState<T>& st : ranks_) {
        CUDA_CHECK(cudaSetDevice(st.device));
        st.O.poison();
        st.L.poison();
    }
}

// The K/V a rank holds at step s: its own at step 0, then the two ring buffers in turn.
template <class T>
const T* RingForward<T>::kv_at(const RankState<T>& st, int s) const {
    return s == 0 ? st.kv_own.get() : st.kv_ring[(s - 1) % 2].get();
}

template <class T>
std::vector<const T*> RingForward<T>::kv_ptrs(int s) const {
    std::vector<const T*> v;
    for (const RankState<T>& st : ranks_) v.push_back(kv_at(st, s));
    return v;
}

// One block: the kernel writes the block's (O, L) into O_blk, L_blk (through the staging windows
// when the chunks' lengths differ), then the merge adds them into the running result.
template <class T>
void RingForward<T>::compute_block(RankState<T>& st, const BlockTask& t, const T* K, const T* V) {
    if (t.kind == Block::kSkip) return;
    const fa::AttnShape& s = shape_;
    const int a = layout_.chunk_length(t.q_chunk), b = layout_.chunk_length(t.k_chunk);
    const T* Q = st.Q.get() + std::size_t(t.q_slot) * slot_elems_;
    if (a == b) {
        const fa::AttnShape blk = fa::make_shape(s.B, s.H, a, s.D, t.kind == Block::kDiagonal, s.scale);
        compute_forward<T>(compute_, blk, Q, K, V, st.O_blk.get(), st.L_blk.get());
    } else {  // a full block of unequal chunks (never the diagonal): equal-length windows
        const fa::AttnShape blk = fa::make_shape(s.B, s.H, b, s.D, false, s.scale);
        for (const Window& w : windows(a, b)) {
            copy_rows(st.Q_win.get(), b, 0, Q, a, w.q_begin, w.rows, s.heads_total(), s.D);
            compute_forward<T>(compute_, blk, st.Q_win.get(), K, V, st.O_win.get(), st.L_win.get());
            copy_rows(st.O_blk.get(), a, w.q_begin, st.O_win.get(), b, 0, w.rows, s.heads_total(), s.D);
            copy_rows(st.L_blk.get(), a, w.q_begin, st.L_win.get(), b, 0, w.rows, s.heads_total(), 1);
        }
    }
    const std::size_t rows = s.heads_total() * std::size_t(a);
    merge_kernel<T><<<grid_for(rows, 1), kMergeThreads>>>(st.O_acc.get() + std::size_t(t.q_slot) * slot_elems_,
                                                          st.L_acc.get() + std::size_t(t.q_slot) * slot_rows_,
                                                          st.O_blk.get(), st.L_blk.get(), rows, s.D);
    CUDA_CHECK_LAUNCH();
}

// Step s of rank st.rank: its Q chunks against the K chunks of rank (r − s) mod P held in `kv`.
template <class T>
void RingForward<T>::compute_step(RankState<T>& st, int s, const T* kv) {
    const std::size_t cpr = std::size_t(layout_.chunks_per_rank());
    for (const BlockTask& t : step_blocks(layout_, shape_.causal, st.rank, s))
        compute_block(st, t, kv + std::size_t(t.k_slot) * slot_elems_, kv + (cpr + std::size_t(t.k_slot)) * slot_elems_);
}

template <class T>
void RingForward<T>::run(Timeline* tl) {
    if (tl != nullptr) tl->reset();
    const int P = layout_.P;
    const std::size_t cpr = std::size_t(layout_.chunks_per_rank()), kv_bytes = 2 * cpr * slot_elems_ * sizeof(T);
    const unsigned fin_grid = grid_for(cpr * slot_elems_, 256);
    std::vector<cudaStream_t> comms;
    for (RankState<T>& st : ranks_) {  // O_acc = 0, L_acc = −inf; `computed` marks everything before this run
        CUDA_CHECK(cudaSetDevice(st.device));
        finish_kernel<T><<<fin_grid, 256>>>(st.O.get(), st.L.get(), st.O_acc.get(), st.L_acc.get(),
                                            cpr * slot_elems_, cpr * slot_rows_, true);
        CUDA_CHECK_LAUNCH();
        CUDA_CHECK(cudaEventRecord(st.computed, cudaStreamLegacy));
        CUDA_CHECK(cudaStreamWaitEvent(st.comm, st.computed, 0));
        comms.push_back(st.comm);
    }
    if (step_ == kAllGather) {
        std::vector<const void*> send;
        std::vector<void*> recv;
        for (RankState<T>& st : ranks_) send.push_back(st.kv_own.get()), recv.push_back(st.kv_all.get());
        mark_comm(tl, 0, Timeline::kCommBegin);
        transport_.all_gather(send, recv, kv_bytes, comms);
        mark_comm(tl, 0, Timeline::kCommEnd);
        for (std::size_t i = 0; i < ranks_.size(); ++i) {
            RankState<T>& st = ranks_[i];
            CUDA_CHECK(cudaSetDevice(st.device));
            CUDA_CHECK(cudaEventRecord(st.received[0], st.comm));
            CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, st.received[0], 0));
            for (int s = 0; s < P; ++s) {
                if (tl != nullptr) tl->record(int(i), s, Timeline::kComputeBegin, cudaStreamLegacy);
                compute_step(st, s, st.kv_all.get() + std::size_t(kv_owner(P, st.rank, s)) * 2 * cpr * slot_elems_);
                if (tl != nullptr) tl->record(int(i), s, Timeline::kComputeEnd, cudaStreamLegacy);
            }
        }
    } else {
        const bool overlap = step_ >= kOverlap;
        for (int s = 0; s < P; ++s) {
            if (s + 1 < P) {  // the K/V of step s go to the successor; those of step s + 1 arrive
                std::vector<const void*> send;
                std::vector<void*> recv;
                for (RankState<T>& st : ranks_) {
                    CUDA_CHECK(cudaSetDevice(st.device));
                    CUDA_CHECK(cudaStreamWaitEvent(st.comm, st.computed, 0));  // the buffer received into is free
                    send.push_back(kv_at(st, s));
                    recv.push_back(const_cast<T*>(kv_at(st, s + 1)));
                }
                mark_comm(tl, s, Timeline::kCommBegin);
                transport_.ring_exchange(send, recv, kv_bytes, comms);
                mark_comm(tl, s, Timeline::kCommEnd);
                for (RankState<T>& st : ranks_) {
                    CUDA_CHECK(cudaSetDevice(st.device));
                    CUDA_CHECK(cudaEventRecord(st.received[s % 2], st.comm));
                }
            }
            for (std::size_t i = 0; i < ranks_.size(); ++i) {
                RankState<T>& st = ranks_[i];
                CUDA_CHECK(cudaSetDevice(st.device));
                // step 2 waits for the exchange just posted (turns); step 3 only for the one posted a
                // step earlier, which brought the K/V it computes on now (overlap)
                const int wait_for = overlap ? s - 1 : (s + 1 < P ? s : s - 1);
                if (wait_for >= 0) CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, st.received[wait_for % 2], 0));
                if (tl != nullptr) tl->record(int(i), s, Timeline::kComputeBegin, cudaStreamLegacy);
                compute_step(st, s, kv_at(st, s));
                if (tl != nullptr) tl->record(int(i), s, Timeline::kComputeEnd, cudaStreamLegacy);
                CUDA_CHECK(cudaEventRecord(st.computed, cudaStreamLegacy));
            }
        }
    }
    for (RankState<T>& st : ranks_) {
        CUDA_CHECK(cudaSetDevice(st.device));
        finish_kernel<T><<<fin_grid, 256>>>(st.O.get(), st.L.get(), st.O_acc.get(), st.L_acc.get(),
                                            cpr * slot_elems_, cpr * slot_rows_, false);
        CUDA_CHECK_LAUNCH();
    }
}

// Marks an exchange's begin or end on every local rank's comm stream (with a timeline only).
template <class T>
void RingForward<T>::mark_comm(Timeline* tl, int s, Timeline::Mark m) {
    if (tl == nullptr) return;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        CUDA_CHECK(cudaSetDevice(ranks_[i].device));
        tl->record(int(i), s, m, ranks_[i].comm);
    }
}

std::size_t forward_bytes_per_rank(const fa::AttnShape& s, int P, int step) {
    const Layout l{s.N, P, sharding_of(step)};
    const std::size_t cpr = std::size_t(l.chunks_per_rank()), rows = s.heads_total() * std::size_t(l.max_chunk_length());
    const std::size_t slot = rows * std::size_t(s.D), e = 2;  // 16-bit elements
    // the constructor's buffers: Q, kv_own, kv_ring[2] (or kv_all), O, O_blk, Q_win, O_win in T;
    // L, O_acc, L_acc, L_blk, L_win in fp32
    const std::size_t kv = step == kAllGather ? std::size_t(P) * 2 * cpr * slot : 2 * 2 * cpr * slot;
    return e * (cpr * slot + 2 * cpr * slot + kv + cpr * slot + 3 * slot) +
           4 * (cpr * rows + cpr * slot + cpr * rows + 2 * rows);
}

template <class T>
void RingForward<T>::gather(std::vector<float>& O, std::vector<float>& L) {
    std::vector<const T*> o;
    std::vector<const float*> l;
    std::vector<cudaStream_t> streams;
    for (const RankState<T>& st : ranks_) o.push_back(st.O.get()), l.push_back(st.L.get()), streams.push_back(st.comm);
    O = gather_slots<T>(transport_, layout_, shape_.heads_total(), shape_.D, o, streams);
    L = gather_slots<float>(transport_, layout_, shape_.heads_total(), 1, l, streams);
}

template <class E>
std::vector<float> gather_slots(Transport& t, const Layout& l, std::size_t heads, int width,
                                const std::vector<const E*>& local, const std::vector<cudaStream_t>& streams) {
    const std::size_t per_rank = std::size_t(l.chunks_per_rank()) * heads * std::size_t(l.max_chunk_length()) *
                                 std::size_t(width);
    std::vector<fa::DeviceBuffer<E>> all;
    std::vector<const void*> send;
    std::vector<void*> recv;
    for (std::size_t i = 0; i < local.size(); ++i) {
        CUDA_CHECK(cudaSetDevice(t.device_of(int(i))));
        CUDA_CHECK(cudaDeviceSynchronize());  // the slots are written
        all.emplace_back(std::size_t(l.P) * per_rank);
        send.push_back(local[i]), recv.push_back(all.back().get());
    }
    t.all_gather(send, recv, per_rank * sizeof(E), streams);
    for (std::size_t i = 0; i < local.size(); ++i) {  // `all` is freed on return: wait for every copy
        CUDA_CHECK(cudaSetDevice(t.device_of(int(i))));
        CUDA_CHECK(cudaStreamSynchronize(streams[i]));
    }
    CUDA_CHECK(cudaSetDevice(t.device_of(0)));
    const std::vector<float> slots = fa::convert_to_float(all[0].download());
    std::vector<float> whole(heads * std::size_t(l.N) * std::size_t(width), 0.0f);
    for (int q = 0; q < l.P; ++q) from_slots(l, heads, width, q, slots.data() + std::size_t(q) * per_rank, whole);
    return whole;
}

template void compute_forward<__half>(const Compute&, const fa::AttnShape&, const __half*, const __half*,
                                      const __half*, __half*, float*);
template void compute_forward<__nv_bfloat16>(const Compute&, const fa::AttnShape&, const __nv_bfloat16*,
                                             const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*);
#define FA_CH12_GATHER(E)                                                                                     \
    template std::vector<float> gather_slots<E>(Transport&, const Layout&, std::size_t, int, const std::vector<const E*>&, \
                                                const std::vector<cudaStream_t>&);
FA_CH12_GATHER(__half)
FA_CH12_GATHER(__nv_bfloat16)
FA_CH12_GATHER(float)
template class RingForward<__half>;
template class RingForward<__nv_bfloat16>;

}  // namespace ch12
