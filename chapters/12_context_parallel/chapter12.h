/// @file chapter12.h
/// @brief Chapter 12, attention across GPUs: ring attention (context parallelism). The sequence
/// is sharded over P ranks (schedule.h); K/V travel round the ring (transport.h) while each rank
/// computes its queries against the K/V it holds with a single-GPU kernel (chapter 9 on compute
/// capability 9.0, chapter 7 elsewhere), and merges the partial results (merge.h). The backward
/// travels the same ring (chapter 11's or chapter 8's kernels), with the dK/dV sums behind the
/// K/V. What the program and the tests call.
///
/// Q, K, V, O, dO, dQ, dK, dV 16-bit (T = __half or __nv_bfloat16), L fp32, the layout of shape.h, on every rank
/// for its own chunks only: a chunk's rows are a compact (B, H, length, D) array in a slot of
/// ⌈N/C⌉ rows (schedule.h), so any N works.
#pragma once

#include <string>
#include <vector>

#include "../../common/attention.h"
#include "../../common/device.h"
#include "../../common/shape.h"
#include "../07_tensor_cores/chapter7.h"
#include "../08_tensor_core_backward/chapter8.h"
#include "measure.h"
#include "schedule.h"
#include "transport.h"

namespace ch12 {

/// The steps of the ladder.
enum Step : int {
    kAllGather = 1,  ///< gather every rank's K/V first (P× the memory), then compute
    kRing = 2,       ///< the ring: send/recv K/V, wait, compute; P steps
    kOverlap = 3,    ///< the ring with the next K/V in flight while this one is computed
    kZigzag = 4,     ///< step 3 on zigzag shards: causal work equal on every rank
    kBackward = 5,   ///< step 4's forward, then the backward over the same ring (RingBackward)
};
constexpr int kFirstStep = kAllGather;
constexpr int kLastStep = kBackward;

/// "3-overlap".
std::string step_name(int step);
/// The sharding a step uses: zigzag from step 4 on, contiguous before.
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

template <class T>
class RingBackward;

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
    /// One forward on every local rank, enqueued on the default streams and the comm streams; with
    /// a timeline (steps ≥ P), its events are recorded at every step.
    void run(Timeline* tl = nullptr);
    /// O (B, H, N, D) and L (B, H, N) of the whole sequence, as floats, on every rank (an
    /// all-gather: every rank must call it).
    void gather(std::vector<float>& O, std::vector<float>& L);

private:
    friend class RingBackward<T>;  // runs its backward on this forward's Q, K/V, O, L, streams and events
    void compute_step(RankState<T>& st, int s, const T* kv);
    void mark_comm(Timeline* tl, int s, Timeline::Mark m);
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

/// Every rank's slots of one (B, H, N, width) array (`local`: a pointer per local rank, to its
/// slots in the layout of to_slots, E = T or float) gathered to the whole array on the host, as
/// floats: an all-gather on `streams`, so every rank must call it.
template <class E>
std::vector<float> gather_slots(Transport& t, const Layout& l, std::size_t heads, int width,
                                const std::vector<const E*>& local, const std::vector<cudaStream_t>& streams);

/// Device bytes one rank allocates for the forward of step `step` (RingForward's buffers), and in
/// addition for the backward (RingBackward's): what sets the largest N that fits (--max-seq).
std::size_t forward_bytes_per_rank(const fa::AttnShape& s, int P, int step);
std::size_t backward_bytes_per_rank(const fa::AttnShape& s, int P, int step);

// ---- the backward (backward.cu) ------------------------------------------------------------------

/// The single-GPU backward that computes each block. Both choices add dQ_i into chapter 8's fp32
/// workspace (its "atomic" dQ), which is what lets dQ_i gather over the ring's steps: part 0
/// (D_i, L·log2 e, the workspace zeroed) once per run, part 1 (the dK/dV kernel) once per block,
/// part 2 (dQ = scale · workspace, rounded to T) once at the end.
struct BwdCompute {
    int chapter, variant;
};
/// Chapter 11's step 5 on compute capability 9.0 (for the head dims it has), chapter 8's step 6
/// elsewhere.
BwdCompute backward_compute_for(const fa::DeviceInfo& d, int D);
/// "chapter 11 5-overlap".
std::string compute_name(const BwdCompute& c);
/// Part 0, 1 or 2 of the backward of one equal-length problem, on the default stream.
template <class T>
void compute_backward_part(const BwdCompute& c, int part, const fa::AttnShape& s, const ch8::BwdTensors<T>& t,
                           const ch8::Workspace& w);

/// One rank's buffers for the backward, besides its forward's (RankState).
template <class T>
struct BwdRankState {
    fa::DeviceBuffer<T> dO, dQ, dKV;      ///< its chunks' dO, dQ; dK slots then dV slots
    fa::DeviceBuffer<T> dKV_blk;          ///< one block's dK_j, dV_j as the kernel writes them
    fa::DeviceBuffer<T> Q_win, dO_win, O_win;
    fa::DeviceBuffer<float> L_win;
    std::vector<fa::DeviceBuffer<float>> work;  ///< chapter 8's workspace of each Q slot: its dQ_i sums
    fa::DeviceBuffer<float> work_win;     ///< the same for a window of unequal chunks
    fa::DeviceBuffer<float> dKV_part;     ///< this step's dK_j, dV_j terms from this rank's queries
    fa::DeviceBuffer<float> dKV_ring[2];  ///< the travelling sums: received, this step's terms added, sent on
};

/// The backward over the ring of a forward (step 2 or later): K/V travel as in the forward; each
/// rank adds the dQ_i of its queries into its own workspace, and the dK_j, dV_j sums of each K/V
/// chunk travel one step behind the K/V, each rank adding its queries' terms, until one last hop
/// brings them to the chunk's owner. Uses the forward's O and L, so run() the forward first.
template <class T>
class RingBackward {
public:
    RingBackward(RingForward<T>& forward, BwdCompute c);
    RingBackward(const RingBackward&) = delete;
    RingBackward& operator=(const RingBackward&) = delete;

    /// Each local rank takes its chunks of dO (B, H, N, D, rounded to T already).
    void load(const std::vector<float>& dO);
    /// Fills every rank's dQ, dK, dV with NaN.
    void poison_outputs();
    /// One backward on every local rank, enqueued on the default and comm streams; with a timeline
    /// (steps ≥ P + 1: the last hop is step P), its events are recorded at every step.
    void run(Timeline* tl = nullptr);
    /// dQ, dK, dV (B, H, N, D) of the whole sequence, as floats (an all-gather: every rank calls it).
    void gather(std::vector<float>& dQ, std::vector<float>& dK, std::vector<float>& dV);

private:
    void per_q_slot(RankState<T>& f, BwdRankState<T>& b, int part);
    void start(RankState<T>& f, BwdRankState<T>& b);
    void compute_step(RankState<T>& f, BwdRankState<T>& b, int s, const T* kv);
    void compute_block(RankState<T>& f, BwdRankState<T>& b, const BlockTask& t, const T* K, const T* V);
    void compute_window(RankState<T>& f, BwdRankState<T>& b, const BlockTask& t, const Window& w, const T* K,
                        const T* V);
    void add_block_terms(BwdRankState<T>& b, const BlockTask& t);
    void finish(RankState<T>& f, BwdRankState<T>& b, int held);
    void exchange_sums(int s);
    fa::AttnShape slot_shape(int chunk, bool causal) const;
    ch8::Workspace workspace(const RankState<T>& f, BwdRankState<T>& b, int q_slot) const;

    RingForward<T>& fwd_;
    BwdCompute compute_;
    std::vector<BwdRankState<T>> ranks_;
};

/// The CPU mirror of the ring's backward at the positions `ref` samples, in its layout (as
/// ch8::mirror_sampled): each block by chapter 8's mirror arithmetic (P and dS rounded to T
/// before their products), dQ_i summed in fp32 over the ring's blocks in their order, and for
/// dK_j, dV_j each kernel call's result rounded to T, added to the step's terms in fp32, and the
/// step's terms to the travelling sum, rank after rank round the ring, rounded to T at the end.
/// With T = float nothing is rounded: the schedule and the sums alone. O (as floats of T) and L
/// are what the backward gets from the forward; dO and the inputs rounded to T already.
template <class T>
void ring_backward_mirror(const fa::AttnProblem& p, const std::vector<float>& dO, const std::vector<float>& O,
                          const std::vector<float>& L, const Layout& l, const ch6::SampledBackward& ref,
                          std::vector<float>& dQ, std::vector<float>& dK, std::vector<float>& dV);

/// The ring mirror's errors against float64 and the floors of chapter 8's 2× rule: the baseline
/// the ring's backward is judged by (ch8::low_precision_rule).
template <class T>
ch8::MirrorErrors ring_backward_mirror_errors(const fa::AttnProblem& p, const std::vector<float>& dO,
                                              const std::vector<float>& O, const std::vector<float>& L,
                                              const Layout& l, const ch6::SampledBackward& ref);

/// The CPU mirror of the ring's arithmetic on the rows fa::check_forward samples: for each row,
/// the blocks its rank computes, in the ring's order, each by chapter 7's mirror at key tile B_c
/// (O rounded to T), merged in fp32 with merge.h, O rounded to T at the end. Its error against
/// float64 is the baseline of the 2× rule for the ring (inputs rounded to T already). With
/// T = float nothing is rounded: the ring's schedule and merge alone, in fp32.
template <class T>
ch7::MirrorErrors ring_mirror_errors(const fa::AttnProblem& p, const Layout& l, int Bc);

/// Largest |a − b| over all elements (the ring against one GPU); inf if any is NaN or inf.
double max_difference(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace ch12
