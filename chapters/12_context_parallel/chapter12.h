/// @file chapter12.h
/// @brief Chapter 12, attention across GPUs: ring attention (context parallelism). The sequence
/// is sharded over P ranks (schedule.h); K/V travel round the ring (transport.h) while each rank
/// computes its queries against the K/V it holds with a single-GPU kernel (chapter 9 on compute
/// capability 9.0, chapter 7 elsewhere), and merges the partial results (merge.h). What the
/// program and the tests call.
///
/// Q, K, V, O 16-bit (T = __half or __nv_bfloat16), L fp32, the layout of shape.h, on every rank
/// for its own chunks only: a chunk's rows are a compact (B, H, length, D) array in a slot of
/// ⌈N/C⌉ rows (schedule.h), so any N works.
#pragma once

#include <string>
#include <vector>

#include "../../common/attention.h"
#include "../../common/device.h"
#include "../../common/shape.h"
#include "../07_tensor_cores/chapter7.h"
#include "schedule.h"
#include "transport.h"

namespace ch12 {

/// The steps of the forward ladder.
enum Step : int {
    kAllGather = 1,  ///< gather every rank's K/V first (P× the memory), then compute
    kRing = 2,       ///< the ring: send/recv K/V, wait, compute; P steps
    kOverlap = 3,    ///< the ring with the next K/V in flight while this one is computed
    kZigzag = 4,     ///< step 3 on zigzag shards: causal work equal on every rank
};
constexpr int kFirstStep = kAllGather;
constexpr int kLastStep = kZigzag;

/// "3-overlap".
std::string step_name(int step);
/// The sharding a step uses: zigzag for step 4, contiguous before.
Sharding sharding_of(int step);

/// The single-GPU kernel that computes each block: chapter 9's step 6 or chapter 7's kernel 6.
struct Compute {
    int chapter, variant;
};
/// Chapter 9's tuned kernel on compute capability 9.0 (for the head dims it has), chapter 7's
/// elsewhere.
Compute compute_for(const fa::DeviceInfo& d, int D);
/// "chapter 9 6-tuned".
std::string compute_name(const Compute& c);
/// The kernel's key tile B_c at head dim D (the CPU mirror sums in the same tiles).
int compute_Bc(const Compute& c, int D);
/// O and L of one equal-length problem by the kernel, on the current device's default stream.
template <class T>
void compute_forward(const Compute& c, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L);

/// One rank's buffers: its chunks' Q, K, V, the K/V it receives, the partial results, staging.
template <class T>
struct RankState {
    int rank = 0, device = 0;
    fa::DeviceBuffer<T> Q, kv_own, kv_ring[2], kv_all, O, O_blk, Q_win, O_win;
    fa::DeviceBuffer<float> L, O_acc, L_acc, L_blk, L_win;
    cudaStream_t comm = nullptr;        ///< non-blocking: the default stream computes beside it
    cudaEvent_t computed = nullptr;     ///< compute is done with the K/V it read
    cudaEvent_t received[2] = {};       ///< a step's K/V have arrived (alternating steps)
};

/// The ring forward of one problem over the ranks of `transport`: buffers on every local rank,
/// run() enqueues one forward on each. Exits with a message for a shape or device it cannot run.
template <class T>
class RingForward {
public:
    RingForward(Transport& transport, const fa::AttnShape& s, int step, Compute c);
    ~RingForward();
    RingForward(const RingForward&) = delete;
    RingForward& operator=(const RingForward&) = delete;

    const Layout& layout() const { return layout_; }
    /// Each local rank takes its chunks of Q, K, V (rounded to T already) from the whole problem.
    void load(const fa::AttnProblem& p);
    /// Fills every rank's O and L with NaN, so rows a run does not write fail the check.
    void poison_outputs();
    /// One forward on every local rank, enqueued on the default streams and the comm streams.
    void run();
    /// O (B, H, N, D) and L (B, H, N) of the whole sequence, as floats, on every rank (an
    /// all-gather: every rank must call it).
    void gather(std::vector<float>& O, std::vector<float>& L);

private:
    void compute_step(RankState<T>& st, int s, const T* kv);
    void compute_block(RankState<T>& st, const BlockTask& t, const T* K, const T* V);
    const T* kv_at(const RankState<T>& st, int s) const;
    std::vector<const T*> kv_ptrs(int s) const;

    Transport& transport_;
    fa::AttnShape shape_;
    int step_;
    Compute compute_;
    Layout layout_;
    std::size_t slot_elems_, slot_rows_;  ///< elements (rows) of one chunk slot: B·H·⌈N/C⌉·D (·1)
    std::vector<RankState<T>> ranks_;
};

/// The CPU mirror of the ring's arithmetic on the rows fa::check_forward samples: for each row,
/// the blocks its rank computes, in the ring's order, each by chapter 7's mirror at key tile B_c
/// (O rounded to T), merged in fp32 with merge.h, O rounded to T at the end. Its error against
/// float64 is the baseline of the 2× rule for the ring (inputs rounded to T already). With
/// T = float nothing is rounded: the ring's schedule and merge alone, in fp32.
template <class T>
ch7::MirrorErrors ring_mirror_errors(const fa::AttnProblem& p, const Layout& l, int Bc);

}  // namespace ch12
