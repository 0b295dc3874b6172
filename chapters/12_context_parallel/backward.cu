// Chapter 12: the backward over the ring (chapter12.h, RingBackward). FlashAttention-2's
// Algorithm 2 needs, for a block of queries Q_i against keys K_j, V_j, only the block's own
// inputs and two numbers per query row from the whole sequence: L_i (the forward's logsumexp,
// already global after the ring forward) and D_i = rowsum(dO_i ∘ O_i) (line 4, local to the rank
// that holds row i). So every block of the score matrix can be done where the forward did it:
//   - K_j, V_j travel the ring as in the forward's step 3 (the next ones in flight meanwhile);
//   - dQ_i += dS_ij K_j (line 15) lands in the rank's own fp32 workspace over all P steps;
//   - dK_j += dS_ijᵀ Q_i, dV_j += P_ijᵀ dO_i (lines 12, 16) are summed for the rank that holds
//     K_j, V_j: each rank adds its queries' terms into a travelling fp32 sum that follows the K/V
//     one step behind, and one last hop after step P − 1 brings every sum to its owner.
// The sum a rank receives at step s is only needed after it has computed step s's terms into
// dKV_part, so its transfer hides under that compute like the K/V's (X_s = received + dKV_part).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../common/check.h"
#include "../../common/dtype.h"
#include "../../common/exit_codes.h"
#include "../11_hopper_backward/chapter11.h"
#include "chapter12.h"
#include "ring_kernels.cuh"

namespace ch12 {

BwdCompute backward_compute_for(const fa::DeviceInfo& d, int D) {
    if (ch11::device_unsupported_reason(d).empty() &&
        ch11::unsupported_reason(ch11::kOverlap, fa::make_shape(1, 1, 1, D, false)).empty())
        return {11, ch11::kOverlap};
    return {8, ch8::kFa2Layout};
}

std::string compute_name(const BwdCompute& c) {
    return "chapter " + std::to_string(c.chapter) + " " +
           (c.chapter == 11 ? ch11::variant_name(c.variant) : ch8::variant_name(c.variant));
}

template <class T>
void compute_backward_part(const BwdCompute& c, int part, const fa::AttnShape& s, const ch8::BwdTensors<T>& t,
                           const ch8::Workspace& w) {
    if (c.chapter == 11)
        ch11::backward_part<T>(part, c.variant, s, t, w);
    else
        ch8::backward_part<T>(part, c.variant, ch8::kAtomic, s, t, w);
}

template <class T>
RingBackward<T>::RingBackward(RingForward<T>& forward, BwdCompute c) : fwd_(forward), compute_(c) {
    if (forward.step_ < kRing) {
        std::fprintf(stderr, "ch12::RingBackward: the backward travels the ring's K/V buffers: run it after a "
                     "forward of step %d or later (step %d gathers K/V instead)\n", kRing, forward.step_);
        std::exit(fa::kExitBadInput);
    }
    const fa::AttnShape& s = fwd_.shape_;
    const Layout& l = fwd_.layout_;
    const std::size_t cpr = std::size_t(l.chunks_per_rank()), slot = fwd_.slot_elems_;
    const std::size_t work =
        ch8::workspace_floats(fa::make_shape(s.B, s.H, l.max_chunk_length(), s.D, false, s.scale), ch8::kAtomic);
    ranks_.resize(fwd_.ranks_.size());
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        BwdRankState<T>& b = ranks_[i];
        CUDA_CHECK(cudaSetDevice(fwd_.ranks_[i].device));
        b.dO = fa::DeviceBuffer<T>(cpr * slot);
        b.dQ = fa::DeviceBuffer<T>(cpr * slot);
        b.dKV = fa::DeviceBuffer<T>(2 * cpr * slot);
        b.dKV_blk = fa::DeviceBuffer<T>(2 * slot);
        b.Q_win = fa::DeviceBuffer<T>(slot);
        b.dO_win = fa::DeviceBuffer<T>(slot);
        b.O_win = fa::DeviceBuffer<T>(slot);
        b.L_win = fa::DeviceBuffer<float>(fwd_.slot_rows_);
        for (std::size_t m = 0; m < cpr; ++m) b.work.emplace_back(work);
        b.work_win = fa::DeviceBuffer<float>(work);
        b.dKV_part = fa::DeviceBuffer<float>(2 * cpr * slot);
        for (fa::DeviceBuffer<float>& x : b.dKV_ring) x = fa::DeviceBuffer<float>(2 * cpr * slot);
        b.dKV_blk.poison();  // what the kernels write starts as NaN: a row they miss poisons dK, dV
    }
}

template <class T>
void RingBackward<T>::load(const std::vector<float>& dO) {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        const RankState<T>& f = fwd_.ranks_[i];
        CUDA_CHECK(cudaSetDevice(f.device));
        ranks_[i].dO.upload(
            fa::convert_from_float<T>(to_slots(fwd_.layout_, fwd_.shape_.heads_total(), fwd_.shape_.D, f.rank, dO)));
    }
}

template <class T>
void RingBackward<T>::poison_outputs() {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        CUDA_CHECK(cudaSetDevice(fwd_.ranks_[i].device));
        ranks_[i].dQ.poison();
        ranks_[i].dKV.poison();
    }
}

// The problem of one chunk against a chunk of the same length.
template <class T>
fa::AttnShape RingBackward<T>::slot_shape(int chunk, bool causal) const {
    const fa::AttnShape& s = fwd_.shape_;
    return fa::make_shape(s.B, s.H, fwd_.layout_.chunk_length(chunk), s.D, causal, s.scale);
}

// Chapter 8's workspace (L·log2 e, D_i, the dQ_i sums) of Q slot q_slot, laid out for its length.
template <class T>
ch8::Workspace RingBackward<T>::workspace(const RankState<T>& f, BwdRankState<T>& b, int q_slot) const {
    const int chunk = fwd_.layout_.chunks_of_rank(f.rank)[std::size_t(q_slot)];
    return ch8::split_workspace(b.work[std::size_t(q_slot)].get(), slot_shape(chunk, false), ch8::kAtomic);
}

// Part `part` of the backward (0: the preprocess, 2: the dQ conversion) on each of the rank's Q
// slots, with the slot's rows, dO, O, L and workspace.
template <class T>
void RingBackward<T>::per_q_slot(RankState<T>& f, BwdRankState<T>& b, int part) {
    const std::vector<int> chunks = fwd_.layout_.chunks_of_rank(f.rank);
    for (std::size_t m = 0; m < chunks.size(); ++m) {
        if (fwd_.layout_.chunk_length(chunks[m]) == 0) continue;
        const std::size_t at = m * fwd_.slot_elems_;
        const ch8::BwdTensors<T> x{f.Q.get() + at, nullptr, nullptr, f.O.get() + at, b.dO.get() + at,
                                   f.L.get() + m * fwd_.slot_rows_, b.dQ.get() + at, nullptr, nullptr};
        compute_backward_part<T>(compute_, part, slot_shape(chunks[m], false), x, workspace(f, b, int(m)));
    }
}

// Line 4 for each Q slot: D_i and L·log2 e into the slot's workspace, its dQ_i sums zeroed; the
// travelling sum a rank starts at step 0 is zero too.
template <class T>
void RingBackward<T>::start(RankState<T>& f, BwdRankState<T>& b) {
    per_q_slot(f, b, 0);
    CUDA_CHECK(cudaMemsetAsync(b.dKV_ring[0].get(), 0, b.dKV_ring[0].bytes(), cudaStreamLegacy));
}

// dKV_part of K slot t.k_slot += the block's dK_j, dV_j (rounded to T by the kernel), in fp32.
template <class T>
void RingBackward<T>::add_block_terms(BwdRankState<T>& b, const BlockTask& t) {
    const std::size_t cpr = std::size_t(fwd_.layout_.chunks_per_rank()), slot = fwd_.slot_elems_;
    const int n = fwd_.layout_.chunk_length(t.k_chunk), D = fwd_.shape_.D;
    const std::size_t heads = fwd_.shape_.heads_total();
    add_rows<T>(b.dKV_part.get() + std::size_t(t.k_slot) * slot, n, 0, b.dKV_blk.get(), n, 0, n, heads, D);
    add_rows<T>(b.dKV_part.get() + (cpr + std::size_t(t.k_slot)) * slot, n, 0, b.dKV_blk.get() + slot, n, 0, n, heads,
                D);
}

// A window of a full block of unequal chunks: w.rows query rows staged at rows [0, w.rows) of
// arrays of n = w.n rows, the rest zero (Q = dO = O = L = 0: P = 1, dP = D_i = 0, so dS = 0 and
// the padded rows add nothing); the window's own D_i and dQ_i sums, then its dQ_i rows added to the
// slot's sums.
template <class T>
void RingBackward<T>::compute_window(RankState<T>& f, BwdRankState<T>& b, const BlockTask& t, const Window& w,
                                     const T* K, const T* V) {
    const fa::AttnShape& s = fwd_.shape_;
    const std::size_t heads = s.heads_total(), q = std::size_t(t.q_slot) * fwd_.slot_elems_, slot = fwd_.slot_elems_;
    const int a = fwd_.layout_.chunk_length(t.q_chunk), n = w.n;
    if (w.rows < n) {
        for (T* x : {b.Q_win.get(), b.dO_win.get(), b.O_win.get()})
            CUDA_CHECK(cudaMemsetAsync(x, 0, b.Q_win.bytes(), cudaStreamLegacy));
        CUDA_CHECK(cudaMemsetAsync(b.L_win.get(), 0, b.L_win.bytes(), cudaStreamLegacy));
    }
    copy_rows(b.Q_win.get(), n, 0, f.Q.get() + q, a, w.q_begin, w.rows, heads, s.D);
    copy_rows(b.dO_win.get(), n, 0, b.dO.get() + q, a, w.q_begin, w.rows, heads, s.D);
    copy_rows(b.O_win.get(), n, 0, f.O.get() + q, a, w.q_begin, w.rows, heads, s.D);
    copy_rows(b.L_win.get(), n, 0, f.L.get() + std::size_t(t.q_slot) * fwd_.slot_rows_, a, w.q_begin, w.rows, heads, 1);
    const fa::AttnShape win = fa::make_shape(s.B, s.H, n, s.D, false, s.scale);
    const ch8::Workspace ws = ch8::split_workspace(b.work_win.get(), win, ch8::kAtomic);
    const ch8::BwdTensors<T> x{b.Q_win.get(), K, V, b.O_win.get(), b.dO_win.get(), b.L_win.get(),
                               b.dQ.get() + q, b.dKV_blk.get(), b.dKV_blk.get() + slot};
    compute_backward_part<T>(compute_, 0, win, x, ws);
    compute_backward_part<T>(compute_, 1, win, x, ws);
    add_rows<float>(workspace(f, b, t.q_slot).dQacc, a, w.q_begin, ws.dQacc, n, 0, w.rows, heads, s.D);
    add_block_terms(b, t);
}

// One block: the dK/dV kernel adds dQ_i's terms into the Q slot's workspace and writes dK_j, dV_j
// of the block, which go into this step's terms. Unequal chunks run as disjoint windows.
template <class T>
void RingBackward<T>::compute_block(RankState<T>& f, BwdRankState<T>& b, const BlockTask& t, const T* K, const T* V) {
    if (t.kind == Block::kSkip) return;
    const int a = fwd_.layout_.chunk_length(t.q_chunk), n = fwd_.layout_.chunk_length(t.k_chunk);
    if (a != n) {  // a full block of unequal chunks (never the diagonal)
        for (const Window& w : disjoint_windows(a, n)) compute_window(f, b, t, w, K, V);
        return;
    }
    const std::size_t q = std::size_t(t.q_slot) * fwd_.slot_elems_;
    const ch8::BwdTensors<T> x{f.Q.get() + q, K, V, f.O.get() + q, b.dO.get() + q,
                               f.L.get() + std::size_t(t.q_slot) * fwd_.slot_rows_, b.dQ.get() + q,
                               b.dKV_blk.get(), b.dKV_blk.get() + fwd_.slot_elems_};
    compute_backward_part<T>(compute_, 1, slot_shape(t.q_chunk, t.kind == Block::kDiagonal), x, workspace(f, b, t.q_slot));
    add_block_terms(b, t);
}

// Step s of rank f.rank: its Q chunks against the K/V chunks of rank (r − s) mod P in `kv`, the
// dK_j, dV_j terms into a zeroed dKV_part.
template <class T>
void RingBackward<T>::compute_step(RankState<T>& f, BwdRankState<T>& b, int s, const T* kv) {
    const std::size_t cpr = std::size_t(fwd_.layout_.chunks_per_rank()), slot = fwd_.slot_elems_;
    CUDA_CHECK(cudaMemsetAsync(b.dKV_part.get(), 0, b.dKV_part.bytes(), cudaStreamLegacy));
    for (const BlockTask& t : step_blocks(fwd_.layout_, fwd_.shape_.causal, f.rank, s))
        compute_block(f, b, t, kv + std::size_t(t.k_slot) * slot, kv + (cpr + std::size_t(t.k_slot)) * slot);
}

// The travelling sums of step s − 1 go to the successor; the predecessor's arrive in the other
// buffer (s = P: the last hop, home).
template <class T>
void RingBackward<T>::exchange_sums(int s) {
    std::vector<const void*> send;
    std::vector<void*> recv;
    std::vector<cudaStream_t> comms;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        send.push_back(ranks_[i].dKV_ring[(s - 1) % 2].get());
        recv.push_back(ranks_[i].dKV_ring[s % 2].get());
        comms.push_back(fwd_.ranks_[i].comm);
    }
    fwd_.transport_.ring_exchange(send, recv, ranks_[0].dKV_part.bytes(), comms);
}

// dK, dV of the rank's own chunks = the sums that came home (in dKV_ring[held]), rounded to T;
// line 21 for each Q slot: dQ = scale · its sums, rounded to T.
template <class T>
void RingBackward<T>::finish(RankState<T>& f, BwdRankState<T>& b, int held) {
    round_to_elements<T>(b.dKV.get(), b.dKV_ring[held].get(), b.dKV.size());
    per_q_slot(f, b, 2);
}

template <class T>
void RingBackward<T>::run(Timeline* tl) {
    if (tl != nullptr) tl->reset();
    const int P = fwd_.layout_.P;
    const std::size_t kv_bytes = fwd_.ranks_[0].kv_own.bytes();
    std::vector<cudaStream_t> comms;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {  // `computed` marks the forward's reads of the ring buffers
        RankState<T>& f = fwd_.ranks_[i];
        CUDA_CHECK(cudaSetDevice(f.device));
        start(f, ranks_[i]);
        CUDA_CHECK(cudaEventRecord(f.computed, cudaStreamLegacy));
        comms.push_back(f.comm);
    }
    for (int s = 0; s < P; ++s) {
        const bool kv_next = s + 1 < P, sums = s >= 1;
        if (kv_next || sums) {
            std::vector<const void*> send;
            std::vector<void*> recv;
            for (RankState<T>& f : fwd_.ranks_) {
                CUDA_CHECK(cudaSetDevice(f.device));
                // the buffers received into are no longer read, and step s − 1's sums are complete
                CUDA_CHECK(cudaStreamWaitEvent(f.comm, f.computed, 0));
                send.push_back(fwd_.kv_at(f, s));
                recv.push_back(const_cast<T*>(fwd_.kv_at(f, s + 1)));
            }
            fwd_.mark_comm(tl, s, Timeline::kCommBegin);
            if (kv_next) fwd_.transport_.ring_exchange(send, recv, kv_bytes, comms);
            if (sums) exchange_sums(s);
            fwd_.mark_comm(tl, s, Timeline::kCommEnd);
            for (RankState<T>& f : fwd_.ranks_) {
                CUDA_CHECK(cudaSetDevice(f.device));
                CUDA_CHECK(cudaEventRecord(f.received[s % 2], f.comm));
            }
        }
        for (std::size_t i = 0; i < ranks_.size(); ++i) {
            RankState<T>& f = fwd_.ranks_[i];
            BwdRankState<T>& b = ranks_[i];
            CUDA_CHECK(cudaSetDevice(f.device));
            // the K/V of step s came with the exchange posted a step earlier (the forward's overlap)
            if (s >= 1) CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, f.received[(s - 1) % 2], 0));
            if (tl != nullptr) tl->record(int(i), s, Timeline::kComputeBegin, cudaStreamLegacy);
            compute_step(f, b, s, fwd_.kv_at(f, s));
            // the predecessor's sums of step s − 1 came with this step's exchange: X_s = them + dKV_part
            if (sums) CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, f.received[s % 2], 0));
            add_rows<float>(b.dKV_ring[s % 2].get(), 0, 0, b.dKV_part.get(), 0, 0, int(b.dKV_part.size()), 1, 1);
            if (tl != nullptr) tl->record(int(i), s, Timeline::kComputeEnd, cudaStreamLegacy);
            CUDA_CHECK(cudaEventRecord(f.computed, cudaStreamLegacy));
        }
    }
    for (RankState<T>& f : fwd_.ranks_) {  // the last hop: every sum to the owner of its chunks
        CUDA_CHECK(cudaSetDevice(f.device));
        CUDA_CHECK(cudaStreamWaitEvent(f.comm, f.computed, 0));
    }
    fwd_.mark_comm(tl, P, Timeline::kCommBegin);
    exchange_sums(P);
    fwd_.mark_comm(tl, P, Timeline::kCommEnd);
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        RankState<T>& f = fwd_.ranks_[i];
        CUDA_CHECK(cudaSetDevice(f.device));
        CUDA_CHECK(cudaEventRecord(f.received[P % 2], f.comm));
        CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, f.received[P % 2], 0));
        finish(f, ranks_[i], P % 2);
    }
}

template <class T>
void RingBackward<T>::gather(std::vector<float>& dQ, std::vector<float>& dK, std::vector<float>& dV) {
    const std::size_t cpr = std::size_t(fwd_.layout_.chunks_per_rank()), heads = fwd_.shape_.heads_total();
    std::vector<const T*> q, k, v;
    std::vector<cudaStream_t> streams;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        q.push_back(ranks_[i].dQ.get());
        k.push_back(ranks_[i].dKV.get());
        v.push_back(ranks_[i].dKV.get() + cpr * fwd_.slot_elems_);
        streams.push_back(fwd_.ranks_[i].comm);
    }
    dQ = gather_slots<T>(fwd_.transport_, fwd_.layout_, heads, fwd_.shape_.D, q, streams);
    dK = gather_slots<T>(fwd_.transport_, fwd_.layout_, heads, fwd_.shape_.D, k, streams);
    dV = gather_slots<T>(fwd_.transport_, fwd_.layout_, heads, fwd_.shape_.D, v, streams);
}

std::size_t backward_bytes_per_rank(const fa::AttnShape& s, int P, int step) {
    const Layout l{s.N, P, sharding_of(step)};
    const std::size_t cpr = std::size_t(l.chunks_per_rank()), rows = s.heads_total() * std::size_t(l.max_chunk_length());
    const std::size_t slot = rows * std::size_t(s.D), e = 2;  // 16-bit elements
    const std::size_t work =
        ch8::workspace_floats(fa::make_shape(s.B, s.H, l.max_chunk_length(), s.D, false, s.scale), ch8::kAtomic);
    // the constructor's buffers: dO, dQ, dKV, dKV_blk, Q_win, dO_win, O_win in T; L_win, work (a
    // workspace per Q slot), work_win, dKV_part, dKV_ring[2] in fp32
    return e * (cpr * slot + cpr * slot + 2 * cpr * slot + 2 * slot + 3 * slot) +
           4 * (rows + cpr * work + work + 2 * cpr * slot + 2 * 2 * cpr * slot);
}

#define FA_CH12_BACKWARD(T)                                                                                     \
    template void compute_backward_part<T>(const BwdCompute&, int, const fa::AttnShape&, const ch8::BwdTensors<T>&, \
                                           const ch8::Workspace&);                                              \
    template class RingBackward<T>;
FA_CH12_BACKWARD(__half)
FA_CH12_BACKWARD(__nv_bfloat16)

}  // namespace ch12
