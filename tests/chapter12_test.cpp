// Tests of chapter 12: ring attention (context parallelism).
//
// [cpu]: the sharding maps (chunks tile the sequence, lengths differ by at most one, each chunk
// has one owner), the ring schedule (every Q chunk meets every K chunk exactly once, the causal
// kinds), zigzag's balance of causal work against contiguous sharding's imbalance, the windows
// that run unequal chunks on equal-length kernels (and the backward's disjoint ones), the slots
// of a rank's chunks, the merge of partial (O, L) against float64, the ring's CPU mirror in fp32
// against the float64 reference; for the backward, its schedule (each block once, on the rank of
// its queries, every dK/dV sum home after P hops) and its mirror in fp32 against float64.
// [gpu]: every step of the ladder on P = 1..4 virtual ranks on one GPU (the ring's own code, K/V
// moved by device copies), N not a multiple of P or of the tiles, causal and not, D = 64 and 128,
// with large scores: outputs poisoned before each run, judged by the 2× rule against the ring's
// CPU mirror, and compared element by element with the single-GPU kernel on the whole sequence;
// the backward likewise against its mirror and the single-GPU backward from the same O and L;
// the memory estimate and the timeline. [gpus2][nccl]: forward and backward over NCCL with a rank
// per GPU of the machine (not run with fewer than two GPUs or without NCCL in the build).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../chapters/12_context_parallel/chapter12.h"
#include "../chapters/12_context_parallel/merge.h"
#include "../chapters/12_context_parallel/schedule.h"
#include "../common/attention.h"
#include "../common/attention_gpu.h"
#include "../common/device.h"
#include "../common/dtype.h"
#include "../common/random.h"
#include "../common/reference.h"
#include "gpu_wait.h"
#include "support.h"

using namespace ch12;

namespace {

// The [nccl] cases run only where this build has NCCL; elsewhere they count as not run.
const bool kNcclBuilt = fa::test::not_runnable_here("nccl", nccl_missing_reason());

const std::vector<int> kNs = {1, 2, 5, 7, 64, 113, 1000, 4097};
const std::vector<int> kPs = {1, 2, 3, 4, 8};

std::vector<Layout> layouts() {
    std::vector<Layout> out;
    for (Sharding sh : {Sharding::kContiguous, Sharding::kZigzag})
        for (int P : kPs)
            for (int N : kNs) out.push_back({N, P, sh});
    return out;
}

std::string name_of(const Layout& l) {
    return std::string(sharding_name(l.sharding)) + " N=" + std::to_string(l.N) + " P=" + std::to_string(l.P);
}

}  // namespace

TEST_CASE("sharding: chunks tile the sequence, lengths differ by at most one, one rank each", "[cpu]") {
    for (const Layout& l : layouts()) {
        INFO(name_of(l));
        int next = 0, longest = 0, shortest = l.N;
        for (int k = 0; k < l.chunks(); ++k) {
            CHECK(l.chunk_begin(k) == next);
            next += l.chunk_length(k);
            longest = std::max(longest, l.chunk_length(k));
            shortest = std::min(shortest, l.chunk_length(k));
            for (int i = l.chunk_begin(k); i < l.chunk_begin(k) + l.chunk_length(k); ++i) REQUIRE(l.chunk_of_row(i) == k);
        }
        CHECK(next == l.N);
        CHECK(longest - shortest <= 1);
        CHECK(longest == l.max_chunk_length());
        std::vector<int> held(std::size_t(l.chunks()), 0);
        for (int r = 0; r < l.P; ++r) {
            const std::vector<int> mine = l.chunks_of_rank(r);
            CHECK(int(mine.size()) == l.chunks_per_rank());
            for (int k : mine) {
                ++held[std::size_t(k)];
                CHECK(l.owner_of_chunk(k) == r);
            }
        }
        for (int h : held) CHECK(h == 1);
    }
    const Layout z{16, 4, Sharding::kZigzag};  // rank r holds chunks r and 2P − 1 − r
    CHECK(z.chunks_of_rank(0) == std::vector<int>{0, 7});
    CHECK(z.chunks_of_rank(3) == std::vector<int>{3, 4});
}

TEST_CASE("ring schedule: every Q chunk meets every K chunk once, with the causal kinds", "[cpu]") {
    for (const Layout& l : layouts())
        for (bool causal : {false, true}) {
            INFO(name_of(l) << (causal ? " causal" : ""));
            for (int r = 0; r < l.P; ++r) {  // the owners of a rank's K/V over the steps: every rank once
                std::vector<int> seen(std::size_t(l.P), 0);
                for (int s = 0; s < l.P; ++s) ++seen[std::size_t(kv_owner(l.P, r, s))];
                for (int n : seen) CHECK(n == 1);
                CHECK(kv_owner(l.P, r, 0) == r);
            }
            std::vector<int> met(std::size_t(l.chunks() * l.chunks()), 0);
            for (int r = 0; r < l.P; ++r)
                for (int s = 0; s < l.P; ++s)
                    for (const BlockTask& t : step_blocks(l, causal, r, s)) {
                        CHECK(l.chunks_of_rank(r)[std::size_t(t.q_slot)] == t.q_chunk);
                        CHECK(l.chunks_of_rank(kv_owner(l.P, r, s))[std::size_t(t.k_slot)] == t.k_chunk);
                        ++met[std::size_t(t.q_chunk * l.chunks() + t.k_chunk)];
                        const bool empty = l.chunk_length(t.q_chunk) == 0 || l.chunk_length(t.k_chunk) == 0;
                        const Block want = empty ? Block::kSkip
                                           : !causal || t.k_chunk < t.q_chunk ? Block::kFull
                                           : t.k_chunk == t.q_chunk ? Block::kDiagonal
                                                                    : Block::kSkip;
                        CHECK(t.kind == want);
                    }
            for (int n : met) CHECK(n == 1);
        }
}

TEST_CASE("zigzag gives every rank the same causal work; contiguous sharding does not", "[cpu]") {
    for (int P : {2, 3, 4, 8}) {
        const int c = 64;  // chunk length: N a multiple of 2P
        const Layout z{2 * P * c, P, Sharding::kZigzag}, k{2 * P * c, P, Sharding::kContiguous};
        INFO("P=" << P);
        for (int r = 0; r < P; ++r) CHECK(rank_work(z, true, r) == rank_work(z, true, 0));
        // contiguous: rank r computes r full blocks of (2c)² and one diagonal block
        const double n = 2.0 * c;
        for (int r = 0; r < P; ++r) CHECK(rank_work(k, true, r) == r * n * n + n * (n + 1) / 2);
        // without the mask both give every rank N²/P
        for (int r = 0; r < P; ++r) CHECK(rank_work(k, false, r) == rank_work(z, false, r));
    }
}

TEST_CASE("windows: unequal chunks run as equal-length calls covering every query row", "[cpu]") {
    for (int a = 1; a <= 40; ++a)
        for (int b = 1; b <= 40; ++b) {
            INFO("a=" << a << " b=" << b);
            std::vector<int> covered(std::size_t(a), 0);
            for (const Window& w : windows(a, b)) {
                CHECK(w.n == b);
                CHECK(w.rows == std::min(a, b));
                CHECK(w.q_begin >= 0);
                CHECK(w.q_begin + w.rows <= a);
                for (int i = w.q_begin; i < w.q_begin + w.rows; ++i) ++covered[std::size_t(i)];
            }
            for (int n : covered) CHECK(n >= 1);
            if (a == b) CHECK(windows(a, b).size() == 1);
        }
}

TEST_CASE("merge: two key blocks' (O, L) merged equal the whole row's, large scores included", "[cpu]") {
    const int D = 8;
    for (double magnitude : {1.0, 40.0}) {
        for (int split = 1; split < 12; ++split) {
            const std::vector<float> S = fa::random_normal(12, 7 + std::uint64_t(split), 0.5 * magnitude, magnitude);
            const std::vector<float> V = fa::random_normal(12 * D, 100 + std::uint64_t(split), 0.5, 1.0);
            // float64 attention of one row over keys [k0, k1): O (D) and L
            auto part = [&](int k0, int k1, std::vector<double>& O, double& L) {
                double m = -INFINITY, sum = 0;
                for (int j = k0; j < k1; ++j) m = std::max(m, double(S[std::size_t(j)]));
                O.assign(D, 0.0);
                for (int j = k0; j < k1; ++j) {
                    const double e = std::exp(double(S[std::size_t(j)]) - m);
                    sum += e;
                    for (int d = 0; d < D; ++d) O[std::size_t(d)] += e * V[std::size_t(j * D + d)];
                }
                for (double& o : O) o /= sum;
                L = m + std::log(sum);
            };
            std::vector<double> Oa, Ob, Ow;
            double La, Lb, Lw;
            part(0, split, Oa, La), part(split, 12, Ob, Lb), part(0, 12, Ow, Lw);
            const MergeWeights w = merge_weights(float(La), float(Lb));
            INFO("magnitude " << magnitude << " split " << split);
            CHECK(std::fabs(w.L - Lw) <= 1e-6 * std::max(1.0, std::fabs(Lw)));
            for (int d = 0; d < D; ++d)
                CHECK(std::fabs(merge_output(w, float(Oa[std::size_t(d)]), float(Ob[std::size_t(d)])) - Ow[std::size_t(d)]) <= 1e-5);
        }
    }
    // an empty block (L = −inf) changes nothing; two empty blocks stay empty with weights 0
    const MergeWeights one = merge_weights(-INFINITY, 2.5f);
    CHECK(one.L == 2.5f);
    CHECK(one.w_a == 0.0f);
    CHECK(one.w_b == 1.0f);
    const MergeWeights none = merge_weights(-INFINITY, -INFINITY);
    CHECK(none.L == -INFINITY);
    CHECK(none.w_a == 0.0f);
    CHECK(none.w_b == 0.0f);
}

TEST_CASE("ring mirror in fp32: the schedule and the merge give attention of the whole sequence", "[cpu]") {
    for (Sharding sh : {Sharding::kContiguous, Sharding::kZigzag})
        for (int P : {1, 2, 3, 4})
            for (int N : {1, 5, 37, 100})
                for (bool causal : {false, true}) {
                    const fa::AttnProblem p = fa::make_problem(fa::make_shape(1, 2, N, 32, causal), 5 + std::uint64_t(N));
                    const Layout l{N, P, sh};
                    const ch7::MirrorErrors e = ring_mirror_errors<float>(p, l, 16);
                    INFO(name_of(l) << (causal ? " causal" : ""));
                    CHECK_VALID(e.check.O);
                    CHECK_VALID(e.check.L);
                }
}

TEST_CASE("slots: a rank's chunks of a whole array and back", "[cpu]") {
    for (const Layout& l : layouts())
        for (int width : {1, 3}) {
            INFO(name_of(l) << " width " << width);
            const std::size_t heads = 2;
            std::vector<float> whole(heads * std::size_t(l.N) * std::size_t(width));
            for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = float(i + 1);
            std::vector<float> back(whole.size(), 0.0f);
            for (int r = 0; r < l.P; ++r) {
                const std::vector<float> slots = to_slots(l, heads, width, r, whole);
                CHECK(slots.size() == std::size_t(l.chunks_per_rank()) * heads * std::size_t(l.max_chunk_length() * width));
                from_slots(l, heads, width, r, slots.data(), back);
            }
            CHECK(back == whole);  // every row came back from exactly the rank that holds it
        }
}

TEST_CASE("disjoint windows: every query row of a block in exactly one backward call", "[cpu]") {
    for (int a = 1; a <= 40; ++a)
        for (int b = 1; b <= 40; ++b) {
            INFO("a=" << a << " b=" << b);
            std::vector<int> covered(std::size_t(a), 0);
            for (const Window& w : disjoint_windows(a, b)) {
                CHECK(w.n == b);
                CHECK(w.rows >= 1);
                CHECK(w.rows <= b);
                for (int i = w.q_begin; i < w.q_begin + w.rows; ++i) ++covered[std::size_t(i)];
            }
            for (int n : covered) CHECK(n == 1);
        }
}

TEST_CASE("backward schedule: each block once, where Q_i lives, and every dK/dV sum ends where its chunk lives", "[cpu]") {
    for (const Layout& l : layouts())
        for (bool causal : {false, true}) {
            INFO(name_of(l) << (causal ? " causal" : ""));
            const int C = l.chunks();
            // the sums of each K chunk, travelling: which (Q chunk, K chunk) terms each has collected
            std::vector<int> added(std::size_t(C * C), 0);
            for (int owner = 0; owner < l.P; ++owner) {
                CHECK(dkv_holder(l.P, owner, 0) == owner);
                CHECK(dkv_holder(l.P, owner, l.P) == owner);  // the last hop brings them home
                for (int s = 0; s < l.P; ++s) {
                    const int h = dkv_holder(l.P, owner, s);
                    CHECK(kv_owner(l.P, h, s) == owner);  // the sums sit where the K/V are
                    for (const BlockTask& t : step_blocks(l, causal, h, s)) {
                        CHECK(l.owner_of_chunk(t.q_chunk) == h);  // dQ_i's terms stay on Q_i's rank
                        if (t.kind != Block::kSkip) ++added[std::size_t(t.q_chunk * C + t.k_chunk)];
                    }
                }
            }
            for (int q = 0; q < C; ++q)
                for (int k = 0; k < C; ++k)
                    CHECK(added[std::size_t(q * C + k)] == (block_kind(l, causal, q, k) == Block::kSkip ? 0 : 1));
        }
}

TEST_CASE("ring backward mirror in fp32: the schedule and the travelling sums give the whole-sequence backward", "[cpu]") {
    for (Sharding sh : {Sharding::kContiguous, Sharding::kZigzag})
        for (int P : {1, 2, 3, 4})
            for (int N : {1, 5, 37, 100})
                for (bool causal : {false, true}) {
                    const fa::AttnShape s = fa::make_shape(1, 2, N, 32, causal);
                    const fa::AttnProblem p = fa::make_problem(s, 9 + std::uint64_t(N));
                    const std::vector<float> dO = ch6::make_upstream_gradient(s, 11 + std::uint64_t(N));
                    std::vector<double> O64(s.elements()), L64(s.rows());
                    fa::attention_forward_reference(s, p.Q.data(), p.K.data(), p.V.data(), O64.data(), L64.data());
                    const std::vector<float> O(O64.begin(), O64.end()), L(L64.begin(), L64.end());
                    const ch6::SampledBackward ref = ch6::sampled_backward_reference(p, dO.data());
                    const Layout l{N, P, sh};
                    std::vector<float> dQ, dK, dV;
                    ring_backward_mirror<float>(p, dO, O, L, l, ref, dQ, dK, dV);
                    INFO(name_of(l) << (causal ? " causal" : ""));
                    const fa::Tolerance tol{2e-4, 2e-4};  // fp32 sums of up to 100 terms
                    CHECK_VALID(fa::validate("dQ", dQ.data(), ref.dQ.data(), dQ.size(), tol));
                    CHECK_VALID(fa::validate("dK", dK.data(), ref.dK.data(), dK.size(), tol));
                    CHECK_VALID(fa::validate("dV", dV.data(), ref.dV.data(), dV.size(), tol));
                }
}

// ---- on the GPU: virtual ranks ------------------------------------------------------------------

namespace {

template <class T>
fa::AttnProblem rounded_problem(const fa::AttnShape& s, std::uint64_t seed, double magnitude) {
    fa::AttnProblem p = fa::make_problem(s, seed, magnitude);
    fa::round_inputs_to<T>(p);
    return p;
}

/// Largest |a − b| less one unit in the last place of T at the larger |a|, |b|: the ring rounds each
/// block's dK_j, dV_j to T (the kernel writes T), adds them in fp32 and rounds the sum, so its result
/// may land a rounding step from the single GPU's, which rounds once.
template <class T>
double max_difference_past_one_ulp(const std::vector<float>& a, const std::vector<float>& b) {
    const int mantissa_bits = std::is_same<T, __half>::value ? 10 : 7;
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double x = std::max(std::fabs(double(a[i])), std::fabs(double(b[i])));
        const double ulp = x > 0 ? std::ldexp(1.0, std::ilogb(x) - mantissa_bits) : 0.0;
        m = std::max(m, std::fabs(double(a[i]) - double(b[i])) - ulp);
    }
    return std::isfinite(m) ? m : INFINITY;
}

/// A step on P virtual ranks for each shape: the 2× rule against the ring's mirror, and every
/// element of O and L within the two results' rule bounds of the single-GPU kernel's.
template <class T>
void check_step(int step, const std::vector<int>& Ps, const std::vector<fa::AttnShape>& shapes, double magnitude) {
    for (const fa::AttnShape& s : shapes) {
        const Compute c = compute_for(fa::device_info(), s.D);
        const fa::AttnProblem p = rounded_problem<T>(s, 21 + std::uint64_t(s.N), magnitude);
        const int Bc = compute_Bc(c, s.D);
        const ch7::MirrorErrors single_mirror = ch7::mirror_errors<T>(p, Bc);
        fa::DeviceAttention<T> d(p);
        d.poison_outputs();
        compute_forward<T>(c, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
        fa::test::finish_or_stop("chapter12_test", "single-GPU " + s.str());
        const std::vector<float> O1 = d.O_host(), L1 = d.L_host();
        for (int P : Ps) {
            std::unique_ptr<Transport> t = make_virtual_transport(P);
            RingForward<T> ring(*t, s, step, c);
            ring.load(p);
            ring.poison_outputs();
            ring.run();
            const std::string what = step_name(step) + " P=" + std::to_string(P) + " " + fa::dtype_name<T>() + " " +
                                     s.str() + " magnitude " + std::to_string(magnitude) + " on " + compute_name(c);
            fa::test::finish_or_stop("chapter12_test", what);
            std::vector<float> O, L;
            ring.gather(O, L);
            const ch7::MirrorErrors mirror = ring_mirror_errors<T>(p, ring.layout(), Bc);
            const ch7::RuleVerdict verdict = ch7::low_precision_rule(fa::check_forward(p, O.data(), L.data()), mirror);
            const double bound_O = 2 * (mirror.check.O.max_abs + single_mirror.check.O.max_abs) + mirror.floor_O +
                                   single_mirror.floor_O;
            const double bound_L = 2 * (mirror.check.L.max_abs + single_mirror.check.L.max_abs) + mirror.floor_L +
                                   single_mirror.floor_L;
            const double dO = max_difference(O, O1), dL = max_difference(L, L1);
            INFO(what << "\n" << verdict.text << "  vs single GPU: max |dO| " << dO << " <= " << bound_O
                      << ", max |dL| " << dL << " <= " << bound_L);
            CHECK(verdict.ok);
            CHECK(dO <= bound_O);
            CHECK(dL <= bound_L);
        }
    }
}

/// The grid: N not a multiple of P, 2P or the tiles (1 and 5: fewer rows than chunks), causal and
/// not, D = 64 and 128, B·H > 1.
std::vector<fa::AttnShape> step_shapes() {
    const std::vector<int> Ns = fa::test::small_shapes() ? std::vector<int>{1, 5, 113} : std::vector<int>{1, 5, 113, 1000};
    std::vector<fa::AttnShape> shapes;
    for (bool causal : {false, true})
        for (int D : {64, 128})
            for (int N : Ns) shapes.push_back(fa::make_shape(2, 3, N, D, causal));
    return shapes;
}

void gpu_step(int step) {
    check_step<__nv_bfloat16>(step, {1, 2, 3, 4}, step_shapes(), 1.0);
    std::vector<fa::AttnShape> large;  // scores of several hundred: e^S alone overflows fp32
    for (bool causal : {false, true}) large.push_back(fa::make_shape(1, 2, 257, 64, causal));
    check_step<__half>(step, {3}, large, 4.0);
    check_step<__nv_bfloat16>(step, {4}, large, 4.0);
}

}  // namespace

TEST_CASE("step 1 (all-gather, then compute) on 1-4 virtual ranks: 2x rule and the single-GPU result", "[gpu][v1]") {
    gpu_step(kAllGather);
}

TEST_CASE("step 2 (ring, exchange then compute) on 1-4 virtual ranks: 2x rule and the single-GPU result", "[gpu][v2]") {
    gpu_step(kRing);
}

TEST_CASE("step 3 (overlapped ring) on 1-4 virtual ranks: 2x rule and the single-GPU result", "[gpu][v3]") {
    gpu_step(kOverlap);
}

TEST_CASE("step 4 (zigzag ring) on 1-4 virtual ranks: 2x rule and the single-GPU result", "[gpu][v4]") {
    gpu_step(kZigzag);
}

namespace {

/// The single-GPU backward (the kernels that compute the ring's blocks) on the whole sequence,
/// from the same O and L: dQ, dK, dV as floats.
template <class T>
void single_gpu_backward(const BwdCompute& c, const fa::AttnProblem& p, const std::vector<float>& dO,
                         const std::vector<float>& O, const std::vector<float>& L, std::vector<float>& dQ,
                         std::vector<float>& dK, std::vector<float>& dV) {
    const fa::AttnShape& s = p.shape;
    fa::DeviceBuffer<T> Q(fa::convert_from_float<T>(p.Q)), K(fa::convert_from_float<T>(p.K)),
        V(fa::convert_from_float<T>(p.V)), O_d(fa::convert_from_float<T>(O)), dO_d(fa::convert_from_float<T>(dO)),
        dQ_d(s.elements()), dK_d(s.elements()), dV_d(s.elements());
    fa::DeviceBuffer<float> L_d(L), work(ch8::workspace_floats(s, ch8::kAtomic));
    for (fa::DeviceBuffer<T>* x : {&dQ_d, &dK_d, &dV_d}) x->poison();
    const ch8::BwdTensors<T> t{Q.get(), K.get(), V.get(), O_d.get(), dO_d.get(), L_d.get(), dQ_d.get(), dK_d.get(), dV_d.get()};
    for (int part = 0; part < 3; ++part)
        compute_backward_part<T>(c, part, s, t, ch8::split_workspace(work.get(), s, ch8::kAtomic));
    fa::test::finish_or_stop("chapter12_test", "single-GPU backward " + s.str());
    dQ = fa::convert_to_float(dQ_d.download()), dK = fa::convert_to_float(dK_d.download()),
    dV = fa::convert_to_float(dV_d.download());
}

/// The backward on P virtual ranks after a forward of step `fwd_step`: dQ, dK, dV poisoned, the 2×
/// rule against the ring's backward mirror, and every element within the two results' rule bounds
/// (and one rounding step of T) of the single-GPU backward's from the same O and L.
template <class T>
void check_backward_step(Transport& t, int fwd_step, const fa::AttnShape& s, double magnitude) {
    const Compute c = compute_for(fa::device_info(), s.D);
    const BwdCompute bc = backward_compute_for(fa::device_info(), s.D);
    const fa::AttnProblem p = rounded_problem<T>(s, 31 + std::uint64_t(s.N), magnitude);
    std::vector<float> dO = ch6::make_upstream_gradient(s, 41 + std::uint64_t(s.N));
    fa::round_to<T>(dO);
    RingForward<T> fwd(t, s, fwd_step, c);
    fwd.load(p);
    fwd.run();
    std::vector<float> O, L;
    fwd.gather(O, L);
    RingBackward<T> bwd(fwd, bc);
    bwd.load(dO);
    bwd.poison_outputs();
    bwd.run();
    const std::string what = step_name(fwd_step) + " + backward P=" + std::to_string(t.world_size()) + " " +
                             fa::dtype_name<T>() + " " + s.str() + " magnitude " + std::to_string(magnitude) + " on " +
                             compute_name(bc) + " (" + t.name() + ")";
    fa::test::finish_or_stop("chapter12_test", what);
    std::vector<float> dQ, dK, dV, dQ1, dK1, dV1;
    bwd.gather(dQ, dK, dV);
    single_gpu_backward<T>(bc, p, dO, O, L, dQ1, dK1, dV1);
    const ch6::SampledBackward ref = ch6::sampled_backward_reference(p, dO.data());
    const ch8::MirrorErrors ring = ring_backward_mirror_errors<T>(p, dO, O, L, fwd.layout(), ref);
    const ch8::MirrorErrors single = ch8::mirror_errors<T>(p, dO, O, L, ref);
    const ch7::RuleVerdict verdict =
        ch8::low_precision_rule(ch6::check_backward(ref, dQ.data(), dK.data(), dV.data(), ch8::rule_tolerance(ring)), ring);
    INFO(what << "\n" << verdict.text);
    CHECK(verdict.ok);
    const std::vector<float>* got[3] = {&dQ, &dK, &dV};
    const std::vector<float>* one[3] = {&dQ1, &dK1, &dV1};
    for (int k = 0; k < 3; ++k) {
        const double bound = 2 * (ring.err[k].max_abs + single.err[k].max_abs) + ring.floor_abs[k] + single.floor_abs[k];
        const double d = max_difference_past_one_ulp<T>(*got[k], *one[k]);
        INFO("d" << "QKV"[k] << " vs single GPU: max difference beyond one " << fa::dtype_name<T>() << " ulp " << d
                 << " <= " << bound);
        CHECK(d <= bound);
    }
}

}  // namespace

TEST_CASE("step 5 (backward over the ring) on 1-4 virtual ranks: 2x rule and the single-GPU backward", "[gpu][v5]") {
    for (const fa::AttnShape& s : step_shapes())
        for (int P : {1, 2, 3, 4}) {
            std::unique_ptr<Transport> t = make_virtual_transport(P);
            check_backward_step<__nv_bfloat16>(*t, kBackward, s, 1.0);
        }
    for (bool causal : {false, true}) {  // contiguous chunks (step 3's forward), and large scores in fp16
        std::unique_ptr<Transport> t3 = make_virtual_transport(3);
        check_backward_step<__nv_bfloat16>(*t3, kOverlap, fa::make_shape(2, 3, 113, 64, causal), 1.0);
        check_backward_step<__half>(*t3, kBackward, fa::make_shape(1, 2, 257, 64, causal), 4.0);
    }
}

TEST_CASE("forward and backward over NCCL, a rank per GPU of this machine, match the float64 reference", "[gpu][gpus2][nccl]") {
    const int gpus = std::min(fa::cuda_device_count(), 4);
    std::unique_ptr<Transport> t = make_nccl_transport_all(gpus);
    for (bool causal : {false, true})
        for (int N : {113, 1000}) {
            const fa::AttnShape s = fa::make_shape(2, 3, N, 128, causal);
            check_backward_step<__nv_bfloat16>(*t, kBackward, s, 1.0);
        }
}

TEST_CASE("the memory estimate of --max-seq is what the forward and backward allocate", "[gpu][v5]") {
    const fa::AttnShape s = fa::make_shape(2, 4, 4099, 128, true);
    for (int P : {1, 2, 3})
        for (int step : {kAllGather, kBackward}) {  // step 1 gathers K/V and has no backward
            std::unique_ptr<Transport> t = make_virtual_transport(P);
            const std::size_t before = fa::device_buffer_bytes();
            RingForward<__nv_bfloat16> fwd(*t, s, step, compute_for(fa::device_info(), s.D));
            const std::size_t forward = fa::device_buffer_bytes() - before;
            INFO("P=" << P << ", step " << step_name(step) << ": the forward allocated " << forward << " bytes");
            CHECK(forward == std::size_t(P) * forward_bytes_per_rank(s, P, step));
            if (step == kAllGather) continue;
            RingBackward<__nv_bfloat16> bwd(fwd, backward_compute_for(fa::device_info(), s.D));
            const std::size_t backward = fa::device_buffer_bytes() - before - forward;
            INFO("the backward allocated " << backward << " bytes");
            CHECK(backward == std::size_t(P) * backward_bytes_per_rank(s, P, step));
        }
}

TEST_CASE("timeline: every step's compute and exchange recorded, hidden never more than the exchange", "[gpu][v5]") {
    const fa::AttnShape s = fa::make_shape(1, 4, 2000, 64, true);
    const fa::AttnProblem p = rounded_problem<__nv_bfloat16>(s, 5, 1.0);
    const int P = 3;
    std::unique_ptr<Transport> t = make_virtual_transport(P);
    RingForward<__nv_bfloat16> fwd(*t, s, kBackward, compute_for(fa::device_info(), s.D));
    fwd.load(p);
    Timeline tf(*t, P);
    fwd.run(&tf);
    RingBackward<__nv_bfloat16> bwd(fwd, backward_compute_for(fa::device_info(), s.D));
    std::vector<float> dO = ch6::make_upstream_gradient(s, 6);
    fa::round_to<__nv_bfloat16>(dO);
    bwd.load(dO);
    Timeline tb(*t, P + 1);
    bwd.run(&tb);
    fa::test::finish_or_stop("chapter12_test", "timeline runs");
    const std::vector<std::vector<StepTimes>> f = gather_times(*t, tf.times()), b = gather_times(*t, tb.times());
    REQUIRE(f.size() == std::size_t(P));
    REQUIRE(b.size() == std::size_t(P));
    for (int r = 0; r < P; ++r) {
        INFO("rank " << r);
        for (int k = 0; k <= P; ++k) {
            INFO("step " << k);
            if (k < P) {
                CHECK(f[std::size_t(r)][std::size_t(k)].compute_ms > 0);
                CHECK(b[std::size_t(r)][std::size_t(k)].compute_ms > 0);
                CHECK((f[std::size_t(r)][std::size_t(k)].comm_ms > 0) == (k + 1 < P));  // no exchange after the last step
                CHECK(f[std::size_t(r)][std::size_t(k)].hidden_ms <= f[std::size_t(r)][std::size_t(k)].comm_ms + 1e-3f);
            }
            CHECK((b[std::size_t(r)][std::size_t(k)].comm_ms > 0) == (k + 1 < P || k >= 1));  // K/V ahead, sums behind, the last hop
            CHECK(b[std::size_t(r)][std::size_t(k)].hidden_ms <= b[std::size_t(r)][std::size_t(k)].comm_ms + 1e-3f);
        }
    }
}

TEST_CASE("a ring run twice gives the same O and L (buffers reused, nothing left over)", "[gpu][v3][v4]") {
    for (int step : {kOverlap, kZigzag}) {
        const fa::AttnShape s = fa::make_shape(1, 2, 300, 64, true);
        const Compute c = compute_for(fa::device_info(), s.D);
        const fa::AttnProblem p = rounded_problem<__nv_bfloat16>(s, 3, 1.0);
        std::unique_ptr<Transport> t = make_virtual_transport(3);
        RingForward<__nv_bfloat16> ring(*t, s, step, c);
        ring.load(p);
        std::vector<float> O1, L1, O2, L2;
        ring.run();
        ring.gather(O1, L1);
        ring.poison_outputs();
        for (int i = 0; i < 3; ++i) ring.run();  // back to back: each run's first receive waits for the last compute
        fa::test::finish_or_stop("chapter12_test", step_name(step) + " run again");
        ring.gather(O2, L2);
        INFO(step_name(step));
        CHECK(O1 == O2);
        CHECK(L1 == L2);
    }
}
