// Tests of chapter 8: FlashAttention-2 backward on tensor cores (fp16/bf16).
//
// [cpu]: the CPU mirror against the float64 reference and finite differences, the 2× rule itself,
// the transposed dS fragment addressing, the O(N) workspace, argument checks, and every kernel
// variant run by the CPU emulator (the kernels' own source, lane by lane) with both dQ strategies.
// [gpu]: every variant and both dQ strategies on the course's shape grid in fp16 and bf16 against
// the 2× rule, large inputs, every tile candidate of steps 5 and 6, the vector dQ atomic candidates
// and step 6's candidates on the grid, and the dQ workspace zeroed per run. [gpu][sm90]: sm_90 code
// runs the vector atomics.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../chapters/08_tensor_core_backward/chapter8.h"
#include "../common/attention_gpu.h"
#include "../common/device.h"
#include "../common/dtype.h"
#include "../common/math.h"
#include "../common/reference.h"
#include "../common/tensor_core/layout.h"
#include "support.h"

using namespace ch8;

namespace {

bool have_sm80() { return fa::cuda_device_count() > 0 && ch7::device_unsupported_reason(fa::device_info()).empty(); }

// One backward problem with inputs rounded to T, the O and L chapter 7's forward gives for them
// (on the GPU, or emulated on the CPU), the float64 reference and the mirror's errors.
template <class T>
struct Case {
    fa::AttnProblem p;
    std::vector<float> dO, O, L;
    ch6::SampledBackward ref;
    MirrorErrors mirror;
};

template <class T>
Case<T> make_case(const fa::AttnShape& s, std::uint64_t seed, double magnitude = 1.0, bool gpu = false) {
    Case<T> c;
    c.p = fa::make_problem(s, seed, magnitude);
    fa::round_inputs_to<T>(c.p);
    c.dO = ch6::make_upstream_gradient(s, seed);
    fa::round_to<T>(c.dO);
    const std::vector<T> Q = fa::convert_from_float<T>(c.p.Q), K = fa::convert_from_float<T>(c.p.K),
                         V = fa::convert_from_float<T>(c.p.V);
    std::vector<T> O(s.elements(), fa::from_float<T>(NAN));
    c.L.assign(s.rows(), NAN);
    if (gpu) {
        fa::DeviceBuffer<T> dQ(Q), dK(K), dV(V), dO(s.elements());
        fa::DeviceBuffer<float> dL(s.rows());
        ch7::forward<T>(ch7::kTuned, s, dQ.get(), dK.get(), dV.get(), dO.get(), dL.get());
        O = dO.download();
        c.L = dL.download();
    } else {
        ch7::forward_emulated<T>(ch7::kTuned, s, Q.data(), K.data(), V.data(), O.data(), c.L.data());
    }
    c.O = fa::convert_to_float(O);
    c.ref = ch6::sampled_backward_reference(c.p, c.dO.data());
    c.mirror = mirror_errors<T>(c.p, c.dO, c.O, c.L, c.ref);
    return c;
}

// Host arrays of one emulated run; outputs poisoned (NaN).
template <class T>
struct HostRun {
    std::vector<T> Q, K, V, O, dO, dQ, dK, dV;
    std::vector<float> L, ws;
};

template <class T>
HostRun<T> emulate(int variant, int strategy, const Case<T>& c, int candidate) {
    const fa::AttnShape& s = c.p.shape;
    HostRun<T> h;
    h.Q = fa::convert_from_float<T>(c.p.Q), h.K = fa::convert_from_float<T>(c.p.K),
    h.V = fa::convert_from_float<T>(c.p.V), h.dO = fa::convert_from_float<T>(c.dO), h.O = fa::convert_from_float<T>(c.O);
    h.L = c.L;
    const T nan = fa::from_float<T>(NAN);
    h.dQ.assign(s.elements(), nan), h.dK.assign(s.kv_elements(), nan), h.dV.assign(s.kv_elements(), nan);
    h.ws.assign(workspace_floats(s, strategy), NAN);
    const BwdTensors<T> t{h.Q.data(), h.K.data(), h.V.data(), h.O.data(), h.dO.data(), h.L.data(),
                          h.dQ.data(), h.dK.data(), h.dV.data()};
    backward_emulated<T>(variant, strategy, s, t, split_workspace(h.ws.data(), s, strategy), candidate);
    return h;
}

template <class T>
ch6::BackwardCheck run_emulated(int variant, int strategy, const Case<T>& c, int candidate = -1) {
    const HostRun<T> h = emulate(variant, strategy, c, candidate);
    const std::vector<float> dQ = fa::convert_to_float(h.dQ), dK = fa::convert_to_float(h.dK),
                             dV = fa::convert_to_float(h.dV);
    return ch6::check_backward(c.ref, dQ.data(), dK.data(), dV.data(), rule_tolerance(c.mirror));
}

// The emulator's shapes: tails (17, 113), one key tile (1), several tiles with B_r ≠ B_c (200),
// batch and heads > 1.
std::vector<fa::AttnShape> emulated_shapes(int D) {
    std::vector<fa::AttnShape> out;
    for (bool causal : {false, true}) {
        out.push_back(fa::make_shape(1, 1, 1, D, causal));
        out.push_back(fa::make_shape(2, 1, 17, D, causal));
        out.push_back(fa::make_shape(1, 2, 200, D, causal));
    }
    return out;
}

template <class T>
void check_emulated(int variant, int strategy, int candidate = -1, std::vector<int> dims = {64, 128}) {
    for (int D : dims)
        for (const fa::AttnShape& s : emulated_shapes(D)) {
            const Case<T> c = make_case<T>(s, 11 + std::uint64_t(s.N));
            const ch7::RuleVerdict v = low_precision_rule(run_emulated<T>(variant, strategy, c, candidate), c.mirror);
            INFO("emulated " << fa::dtype_name<T>() << " " << s.str() << " kernel " << variant_name(variant) << " dq "
                             << strategy_name(strategy) << " candidate " << candidate_name(variant, candidate)
                             << "\n" << v.text);
            CHECK(v.ok);
        }
}

// Step 5's candidates with vector dQ atomics (dq_vec 2 or 4) for head dim D.
std::vector<int> vector_dq_candidates(int D) {
    std::vector<int> out;
    const std::vector<BwdTiles> all = tuning_candidates(D);
    for (int k = 0; k < int(all.size()); ++k)
        if (all[std::size_t(k)].dq_vec > 1) out.push_back(k);
    return out;
}

// The candidate with the same tiles as candidate k, scalar dQ atomics and line 15 in one m-tile per
// warp (−1 if none): the same sums in the same order, so the same dQ bit for bit.
int scalar_twin(int D, int k) {
    const std::vector<BwdTiles> all = tuning_candidates(D);
    const BwdTiles& a = all[std::size_t(k)];
    for (int j = 0; j < int(all.size()); ++j) {
        const BwdTiles& b = all[std::size_t(j)];
        if (b.dq_vec == 1 && b.dq_m == 1 && b.warps == a.warps && b.Br == a.Br && b.sub == a.sub &&
            b.stages == a.stages && b.kv_in_regs == a.kv_in_regs && b.dq_warps == a.dq_warps && b.dq_Bc == a.dq_Bc)
            return j;
    }
    return -1;
}

}  // namespace

// ================================ [cpu] ==========================================================

TEST_CASE("ch8: the dS A fragment read transposed from the dSᵀ tile is dS", "[cpu][chapter8]") {
    // ldmatrix.trans with the K-operand addressing (tc::ldsm_k_offset on a B_c × B_r tile, row =
    // key): register m of lane l must hold dS[query frag_a_row][key frag_a_col] = dSᵀ[key][query].
    for (int Br : {64, 128})
        for (int mt = 0; mt < Br / 16; ++mt)
            for (int kk = 0; kk < 4; ++kk)
                for (int lane = 0; lane < 32; ++lane)
                    for (int m = 0; m < 4; ++m) {
                        for (int e = 0; e < 2; ++e) {
                            // .trans: register m of `lane` holds column lane/4, row 2(lane%4)+e of matrix m
                            const int supplier = 8 * m + 2 * tc::lane_in_group(lane) + e;
                            const int off = tc::ldsm_k_offset(supplier, kk, mt, Br) + tc::lane_group(lane);
                            const int key = off / Br;
                            const int q = (off % Br / 8 ^ key % 8) * 8 + off % 8;
                            INFO("Br " << Br << " mt " << mt << " kk " << kk << " lane " << lane << " reg " << m);
                            CHECK(key == 16 * kk + tc::frag_a_col(lane, m, e));
                            CHECK(q == 16 * mt + tc::frag_a_row(lane, m));
                        }
                    }
}

TEST_CASE("ch8: Pᵀ/dSᵀ stores: every register's offset is a k-step-0 offset stepped as store_a_frags steps it",
          "[cpu][chapter8]") {
    // store_a_frags computes two offsets per lane (register 0 and 2 of k-step 0, m-tile 0) and
    // reaches every other register by tc::swizzled_a_frag_offset: rows by an immediate, k-steps by
    // an XOR. That holds for rows r0 a multiple of 16 and columns c0 a multiple of the pass width
    // (a power of two), which is how the kernels call it.
    for (int Br : {64, 128})
        for (int sub : {16, 32, 64})
            for (int r0 = 0; r0 < 128; r0 += 16)
                for (int c0 = 0; c0 < Br; c0 += sub)
                    for (int lane = 0; lane < 32; ++lane)
                        for (int mt = 0; mt < 2; ++mt)
                            for (int kk = 0; kk < sub / 16; ++kk)
                                for (int r = 0; r < 4; ++r) {
                                    const int half = tc::swizzle(r0 + tc::frag_a_row(lane, 0),
                                                                 c0 + tc::frag_a_col(lane, 2 * (r / 2), 0), Br);
                                    const int want = tc::swizzle(r0 + 16 * mt + tc::frag_a_row(lane, r),
                                                                 c0 + 16 * kk + tc::frag_a_col(lane, r, 0), Br);
                                    INFO("B_r " << Br << " pass " << sub << " r0 " << r0 << " c0 " << c0 << " lane "
                                                << lane << " mt " << mt << " kk " << kk << " reg " << r);
                                    CHECK(tc::swizzled_a_frag_offset(half, mt, kk, r, Br) == want);
                                }
}

TEST_CASE("ch8: the CPU mirror meets the float64 reference within 16-bit rounding", "[cpu][chapter8]") {
    for (bool causal : {false, true}) {
        const fa::AttnShape s = fa::make_shape(1, 2, 97, 64, causal);
        const Case<__nv_bfloat16> b = make_case<__nv_bfloat16>(s, 3);
        const Case<__half> h = make_case<__half>(s, 3);
        for (int k = 0; k < 3; ++k) {
            INFO(s.str() << " output " << k << " bf16 rel_l2 " << b.mirror.err[k].rel_l2 << " fp16 "
                         << h.mirror.err[k].rel_l2);
            CHECK(b.mirror.err[k].nonfinite == 0);
            // a few units of T's rounding, and fp16 (2^-11) well below bf16 (2^-8)
            CHECK(b.mirror.err[k].rel_l2 < 8 * ch7::unit_roundoff<__nv_bfloat16>());
            CHECK(h.mirror.err[k].rel_l2 < 8 * ch7::unit_roundoff<__half>());
            CHECK(h.mirror.err[k].rel_l2 < b.mirror.err[k].rel_l2);
        }
    }
}

TEST_CASE("ch8: a finite difference of the loss confirms one dK entry in float64", "[cpu][chapter8]") {
    // loss = Σ dO ∘ O, O from the float64 reference; central difference of K[j][d] vs the sampled
    // reference dK (which the mirror and the kernels are judged against).
    const fa::AttnShape s = fa::make_shape(1, 1, 9, 64, true);
    fa::AttnProblem p = fa::make_problem(s, 4);
    const std::vector<float> dO = ch6::make_upstream_gradient(s, 4);
    const ch6::SampledBackward ref = ch6::sampled_backward_reference(p, dO.data());
    const int j = 3, d = 5;
    auto loss = [&](const fa::AttnProblem& q) {
        double sum = 0;
        std::vector<double> o(std::size_t(s.D));
        for (int i = 0; i < s.N; ++i) {
            double L;
            fa::attention_row_reference(s, q.Q.data(), q.K.data(), q.V.data(), 0, i, o.data(), &L);
            for (int c = 0; c < s.D; ++c) sum += o[std::size_t(c)] * dO[std::size_t(i * s.D + c)];
        }
        return sum;
    };
    const float h = 1.0f / 64;  // exact in float: K ± h is exact too
    fa::AttnProblem up = p, down = p;
    up.K[std::size_t(j * s.D + d)] += h;
    down.K[std::size_t(j * s.D + d)] -= h;
    const double fd = (loss(up) - loss(down)) / (double(up.K[std::size_t(j * s.D + d)]) - down.K[std::size_t(j * s.D + d)]);
    const double analytic = ref.dK[std::size_t(j * s.D + d)];
    INFO("finite difference " << fd << ", reference " << analytic);
    CHECK(std::fabs(fd - analytic) <= 1e-4 * std::max(1.0, std::fabs(analytic)));
}

TEST_CASE("ch8 reference: grouped heads' dK, dV are the sums over the group of attention with K/V repeated, and "
          "a row that sees no key adds nothing", "[cpu][chapter8]") {
    for (bool causal : {false, true}) {
        // N > N_k causal: queries 0..3 see no key; H = 4 query heads on H_kv = 2 K/V heads
        const fa::AttnShape gqa = fa::with_kv(fa::make_shape(2, 4, 9, 32, causal), 5, 2);
        const fa::AttnProblem p = fa::make_problem(gqa, 8);
        const std::vector<float> dO = ch6::make_upstream_gradient(gqa, 8);
        fa::AttnProblem rep = p;  // each query head with its own copy of its K/V head
        rep.shape = fa::with_kv(gqa, 5, 0);
        rep.K.clear(), rep.V.clear();
        const std::size_t n = std::size_t(5 * 32);
        for (std::size_t bh = 0; bh < gqa.heads_total(); ++bh) {
            const std::size_t at = fa::kv_offset(gqa, gqa.kv_head_of(bh));
            rep.K.insert(rep.K.end(), p.K.begin() + at, p.K.begin() + at + n);
            rep.V.insert(rep.V.end(), p.V.begin() + at, p.V.begin() + at + n);
        }
        std::vector<double> dQ(gqa.elements()), dK(gqa.kv_elements()), dV(gqa.kv_elements());
        std::vector<double> rQ(gqa.elements()), rK(gqa.elements()), rV(gqa.elements());
        fa::attention_backward_reference(gqa, p.Q.data(), p.K.data(), p.V.data(), dO.data(), dQ.data(), dK.data(), dV.data());
        fa::attention_backward_reference(rep.shape, rep.Q.data(), rep.K.data(), rep.V.data(), dO.data(), rQ.data(),
                                         rK.data(), rV.data());
        INFO((causal ? "causal" : "non-causal"));
        CHECK(dQ == rQ);
        for (std::size_t bkv = 0; bkv < std::size_t(gqa.B * gqa.kv_heads()); ++bkv)
            for (std::size_t e = 0; e < n; ++e) {
                const std::size_t h0 = gqa.first_query_head(bkv);
                CHECK(dK[bkv * n + e] == Approx(rK[h0 * n + e] + rK[(h0 + 1) * n + e]).margin(1e-12));
                CHECK(dV[bkv * n + e] == Approx(rV[h0 * n + e] + rV[(h0 + 1) * n + e]).margin(1e-12));
            }
        for (std::size_t bh = 0; bh < gqa.heads_total(); ++bh)
            for (int i = 0; i < gqa.rows_without_keys(); ++i)
                for (int d = 0; d < 32; ++d) CHECK(dQ[(bh * 9 + std::size_t(i)) * 32 + std::size_t(d)] == 0.0);
        // the sampled reference and the CPU mirror agree with the full one
        const ch6::SampledBackward ref = ch6::sampled_backward_reference(p, dO.data());
        std::vector<float> fQ(dQ.begin(), dQ.end()), fK(dK.begin(), dK.end()), fV(dV.begin(), dV.end());
        CHECK(ch6::check_backward(ref, fQ.data(), fK.data(), fV.data(), {1e-6, 1e-6}).ok());
    }
}

TEST_CASE("ch8 emulated: N != N_k with the diagonal bottom-right, grouped heads, rows that see no key",
          "[cpu][chapter8][v5][v6]") {
    // a few small shapes (the emulator is slow); cross_grid's full list runs on a GPU
    const fa::AttnShape shapes[] = {fa::with_kv(fa::make_shape(1, 2, 97, 64, true), 1, 1),   // 96 rows see no key
                                    fa::with_kv(fa::make_shape(1, 4, 40, 64, true), 150, 2)};  // N < N_k, groups of 2
    for (const fa::AttnShape& s : shapes) {
        const Case<__nv_bfloat16> c = make_case<__nv_bfloat16>(s, 17);
        for (auto [variant, strategy] : {std::pair{kFa2Layout, kAtomic}, std::pair{kFa2Layout, kSplit}, std::pair{kTuned, kAtomic}}) {
            const ch7::RuleVerdict v = low_precision_rule(run_emulated(variant, strategy, c), c.mirror);
            INFO(s.str() << " kernel " << variant_name(variant) << " dq " << strategy_name(strategy) << "\n" << v.text);
            CHECK(v.ok);
        }
    }
}

TEST_CASE("ch8: the 2x rule passes 1.5 times the mirror's error, fails 2.5 times, a NaN and a swapped output",
          "[cpu][chapter8]") {
    const fa::AttnShape s = fa::make_shape(1, 1, 33, 64, false);
    const Case<__nv_bfloat16> c = make_case<__nv_bfloat16>(s, 5);
    std::vector<float> dQ, dK, dV;
    mirror_sampled<__nv_bfloat16>(c.p, c.dO, c.O, c.L, c.ref, dQ, dK, dV);  // N ≤ 128: all rows, all heads sampled
    auto verdict = [&](const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
        return low_precision_rule(ch6::check_backward(c.ref, q.data(), k.data(), v.data()), c.mirror).ok;
    };
    CHECK(verdict(dQ, dK, dV));  // the mirror itself passes
    std::vector<float> bad = dQ;
    bad[5] = NAN;
    CHECK_FALSE(verdict(bad, dK, dV));
    // dK with the mirror's error scaled by f: both measures (max abs, relative L2) scale by f, so
    // the rule's factor 2 lies between 1.5 and 2.5
    auto scaled = [&](double f) {
        std::vector<float> k = dK;
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = float(c.ref.dK[i] + f * (double(dK[i]) - c.ref.dK[i]));
        return k;
    };
    CHECK(verdict(dQ, scaled(1.5), dV));
    CHECK_FALSE(verdict(dQ, scaled(2.5), dV));
    CHECK_FALSE(verdict(dQ, dV, dK));
}

TEST_CASE("ch8: the workspace is O(N) and unsupported shapes are refused with a reason", "[cpu][chapter8]") {
    for (int N : {1, 1000, 8192}) {
        const fa::AttnShape s = fa::make_shape(2, 3, N, 128, false);
        // L·log2 e and D_i padded to 128 rows, plus the fp32 dQ workspace of the atomic strategy
        CHECK(workspace_floats(s, kSplit) == 2 * 6 * std::size_t(padded_rows(N)));
        CHECK(workspace_floats(s, kAtomic) == workspace_floats(s, kSplit) + s.elements());
        CHECK(workspace_floats(s, kAtomic) <= 2 * 6 * (std::size_t(N) + 128) + s.elements());
    }
    CHECK(unsupported_reason(kTuned, fa::make_shape(1, 1, 100, 64, false)).empty());
    CHECK_FALSE(unsupported_reason(kTuned, fa::make_shape(1, 1, 100, 96, false)).empty());
    CHECK_FALSE(unsupported_reason(kLastVariant + 1, fa::make_shape(1, 1, 100, 64, false)).empty());
    CHECK_FALSE(unsupported_reason(kCpAsync, fa::make_shape(1, 1, 100, 64, false), 0).empty());
    CHECK_FALSE(unsupported_reason(kTuned, fa::make_shape(1, 1, 100, 64, false), 99).empty());
    // step 6: eight candidates per head dim
    CHECK(unsupported_reason(kFa2Layout, fa::make_shape(1, 1, 100, 128, false), 7).empty());
    CHECK_FALSE(unsupported_reason(kFa2Layout, fa::make_shape(1, 1, 100, 64, false), 8).empty());
}

TEST_CASE("ch8: tile candidates are named by their step (t0.. step 5, f0.. step 6), and --tiles reads the names",
          "[cpu][chapter8]") {
    std::map<std::string, std::pair<int, int>> seen;  // name -> (step, index), over both steps and head dims
    for (int D : {64, 128})
        for (int variant : {kTuned, kFa2Layout})
            for (int k = 0; k < int(tuning_candidates(D, variant).size()); ++k) {
                const std::string name = candidate_name(variant, k);
                INFO("D " << D << " kernel " << variant << " candidate " << k << ": " << name);
                CHECK(name == (variant == kTuned ? "t" : "f") + std::to_string(k));
                int v = 0, j = -1;
                REQUIRE(parse_candidate(name, &v, &j));
                CHECK((v == variant && j == k));
                const auto [it, fresh] = seen.emplace(name, std::pair{variant, k});
                CHECK((fresh || it->second == std::pair{variant, k}));  // one name, one candidate
            }
    CHECK(seen.size() == 12u + 8u);  // t0–t11, f0–f7
    int v = 0, k = 0;
    for (const char* bad : {"", "c9", "9", "t", "f", "x1", "t1a", "T9", "f-1", "t1234"})
        CHECK_FALSE(parse_candidate(bad, &v, &k));
    CHECK(candidate_name(kCpAsync, 0).empty());
    CHECK(candidate_name(kTuned, -1).empty());
    // the defaults by name, and a refusal that names the candidates there are
    CHECK(candidate_name(kTuned, tuned_candidate(64)) == "t9");
    CHECK(candidate_name(kTuned, tuned_candidate(128)) == "t9");
    CHECK(candidate_name(kFa2Layout, tuned_candidate(64, kFa2Layout)) == "f5");
    CHECK(candidate_name(kFa2Layout, tuned_candidate(128, kFa2Layout)) == "f6");
    const std::string why = unsupported_reason(kFa2Layout, fa::make_shape(1, 1, 100, 64, false), 8);
    INFO(why);
    CHECK(why.find("f8") != std::string::npos);
    CHECK(why.find("f0..f7") != std::string::npos);
}

TEST_CASE("ch8 emulated: kernel 1 (direct port), both dQ strategies", "[cpu][chapter8][v1]") {
    check_emulated<__nv_bfloat16>(kDirect, kAtomic);
    check_emulated<__half>(kDirect, kSplit);
}
TEST_CASE("ch8 emulated: kernel 2 (ldmatrix, swizzle), both dQ strategies", "[cpu][chapter8][v2]") {
    check_emulated<__half>(kLdmatrix, kAtomic);
    check_emulated<__nv_bfloat16>(kLdmatrix, kSplit);
}
TEST_CASE("ch8 emulated: kernel 3 (cp.async), both dQ strategies", "[cpu][chapter8][v3]") {
    check_emulated<__nv_bfloat16>(kCpAsync, kAtomic);
    check_emulated<__half>(kCpAsync, kSplit);
}
TEST_CASE("ch8 emulated: kernel 4 (P, dS in registers), both dQ strategies", "[cpu][chapter8][v4]") {
    check_emulated<__half>(kRegisters, kAtomic);
    check_emulated<__nv_bfloat16>(kRegisters, kSplit);
}
TEST_CASE("ch8 emulated: kernel 5 (tuned), every candidate", "[cpu][chapter8][v5]") {
    for (int D : {64, 128})
        for (int c = 0; c < int(tuning_candidates(D).size()); ++c) {
            const fa::AttnShape s = fa::make_shape(1, 1, 150, D, c % 2 == 1);
            const Case<__nv_bfloat16> k = make_case<__nv_bfloat16>(s, 13);
            for (int strategy : {kAtomic, kSplit}) {
                const ch7::RuleVerdict v = low_precision_rule(run_emulated(kTuned, strategy, k, c), k.mirror);
                INFO(s.str() << " candidate " << candidate_name(kTuned, c) << " " << tuning_candidates(D)[std::size_t(c)].str() << " dq "
                             << strategy_name(strategy) << "\n" << v.text);
                CHECK(v.ok);
            }
        }
}

// Kernel 6's every candidate at head dim D (a test case per D: they run side by side).
static void check_kernel6_candidates(int D) {
    check_emulated<__nv_bfloat16>(kFa2Layout, kAtomic, -1, {D});
    check_emulated<__half>(kFa2Layout, kSplit, -1, {D});
    // the candidates after the first
    for (int k = 1; k < int(tuning_candidates(D, kFa2Layout).size()); ++k)
        for (int strategy : {kAtomic, kSplit})
            for (const fa::AttnShape& s : emulated_shapes(D)) {
                const Case<__nv_bfloat16> c = make_case<__nv_bfloat16>(s, 11 + std::uint64_t(s.N));
                const ch7::RuleVerdict v = low_precision_rule(run_emulated(kFa2Layout, strategy, c, k), c.mirror);
                INFO(s.str() << " candidate " << candidate_name(kFa2Layout, k) << " "
                             << tuning_candidates(D, kFa2Layout)[std::size_t(k)].str()
                             << " dq " << strategy_name(strategy) << "\n" << v.text);
                CHECK(v.ok);
            }
}
TEST_CASE("ch8 emulated: kernel 6 (FA2's warp layout) at D = 64, both dQ strategies, every candidate", "[cpu][chapter8][v6]") {
    check_kernel6_candidates(64);
}
TEST_CASE("ch8 emulated: kernel 6 (FA2's warp layout) at D = 128, both dQ strategies, every candidate", "[cpu][chapter8][v6]") {
    check_kernel6_candidates(128);
}

// The tests above run step 5's candidates at N = 150 and step 6's at N ≤ 200. A candidate with
// B_r = 128 (or 3 stages) then has T_r ≤ its stages: no Q_i/dO_i/L_i/D_i stage is ever loaded a
// second time, so the barrier that guards that reuse is never tested on it. Here those candidates
// run at N = 2·128 + 17 = 273: T_r ≥ 3 > 2 stages (5 > 3 for 3 stages), three key blocks adding
// into each dQ row, a whole Q_i tile (line 15 without the row check) and a tail (with it), and
// under the causal mask key blocks whose first query tile is not the first. Returns how many ran.
static int check_refills(int D) {
    int ran = 0;
    for (int variant : {kTuned, kFa2Layout}) {
        const std::vector<BwdTiles> all = tuning_candidates(D, variant);
        const int n_above = variant == kTuned ? 150 : 200;
        for (int k = 0; k < int(all.size()); ++k) {
            const BwdTiles& t = all[std::size_t(k)];
            if (fa::ceil_div(n_above, t.Br) > t.stages) continue;  // refilled above already
            const fa::AttnShape s = fa::make_shape(1, 1, 273, D, k % 2 == 0);
            REQUIRE(fa::ceil_div(s.N, t.Br) > t.stages);
            const Case<__nv_bfloat16> c = make_case<__nv_bfloat16>(s, 31 + std::uint64_t(k));
            for (int strategy : {kAtomic, kSplit}) {
                const ch7::RuleVerdict v = low_precision_rule(run_emulated(variant, strategy, c, k), c.mirror);
                INFO(s.str() << " candidate " << candidate_name(variant, k) << " " << t.str() << " dq "
                             << strategy_name(strategy) << "\n" << v.text);
                CHECK(v.ok);
            }
            ++ran;
        }
    }
    return ran;
}
TEST_CASE("ch8 emulated: candidates whose pipeline the shapes above never refill, at a shape that does, D = 64",
          "[cpu][chapter8][v5][v6]") {
    CHECK(check_refills(64) > 0);
}
TEST_CASE("ch8 emulated: candidates whose pipeline the shapes above never refill, at a shape that does, D = 128",
          "[cpu][chapter8][v5][v6]") {
    CHECK(check_refills(128) > 0);
}

// Step 6 moves work between warps, not arithmetic: every element of Sᵀ and dPᵀ is the same
// mma sum over d, P and dS are rounded to 16 bits at the same point (the mirror's), dK_j and
// dV_j add the queries 16 at a time in ascending order (t9: passes of 32 in tiles of 128; step
// 6: tiles of 64), and line 15 adds each key block's dS K_j once per element. Causal
// blocks that t9 skips step 6 multiplies by zero, which adds +0 exactly. So the emulator's
// dQ, dK, dV of every step 6 candidate equal t9's bit for bit; a misplaced Pᵀ/dSᵀ element, a
// wrong column slice or a missing barrier shows here as a difference.
// (A test case per head dim: they run side by side.)
static void check_bit_for_bit(int D) {
    for (bool causal : {false, true})
        for (int N : {17, 150}) {
            const fa::AttnShape s = fa::make_shape(N == 17 ? 2 : 1, N == 150 ? 2 : 1, N, D, causal);
            const Case<__nv_bfloat16> c = make_case<__nv_bfloat16>(s, 29 + std::uint64_t(N));
            for (int strategy : {kAtomic, kSplit}) {
                const HostRun<__nv_bfloat16> ref = emulate(kTuned, strategy, c, 9);
                for (int k = 0; k < int(tuning_candidates(D, kFa2Layout).size()); ++k) {
                    const HostRun<__nv_bfloat16> h = emulate(kFa2Layout, strategy, c, k);
                    std::size_t differ[3] = {0, 0, 0};
                    for (std::size_t e = 0; e < h.dQ.size(); ++e) {
                        differ[0] += fa::to_float(h.dQ[e]) != fa::to_float(ref.dQ[e]);
                        differ[1] += fa::to_float(h.dK[e]) != fa::to_float(ref.dK[e]);
                        differ[2] += fa::to_float(h.dV[e]) != fa::to_float(ref.dV[e]);
                    }
                    INFO(s.str() << " dq " << strategy_name(strategy) << " candidate " << candidate_name(kFa2Layout, k) << " "
                                 << tuning_candidates(D, kFa2Layout)[std::size_t(k)].str()
                                 << "\nelements unlike t9's: dQ " << differ[0] << ", dK " << differ[1] << ", dV "
                                 << differ[2] << " of " << h.dQ.size());
                    CHECK(differ[0] == 0);
                    CHECK(differ[1] == 0);
                    CHECK(differ[2] == 0);
                }
            }
        }
}
TEST_CASE("ch8 emulated: kernel 6 computes step 5's t9 arithmetic bit for bit, in another warp layout, D = 64",
          "[cpu][chapter8][v6]") {
    check_bit_for_bit(64);
}
TEST_CASE("ch8 emulated: kernel 6 computes step 5's t9 arithmetic bit for bit, in another warp layout, D = 128",
          "[cpu][chapter8][v6]") {
    check_bit_for_bit(128);
}

TEST_CASE("ch8: step 6's candidates: the warp grid, B_c, and what the tiles say", "[cpu][chapter8]") {
    for (int D : {64, 128}) {
        const std::vector<BwdTiles> all = tuning_candidates(D, kFa2Layout);
        REQUIRE(all.size() == 8u);
        for (const BwdTiles& t : all) {
            INFO("D " << D << " " << t.str());
            CHECK(t.key_warps == 4);
            CHECK(t.warps == 8);
            CHECK(t.Bc() == 128);
            CHECK(t.dq_m == 2);
            CHECK(t.Br == (D == 64 ? 128 : 64));
            CHECK(t.str().find("8 warps as 4 (keys) x 2 (queries; D for dK, dV)") != std::string::npos);
            CHECK((t.s_sub == 16 || t.s_sub == t.sub));
            CHECK(t.str().find(t.s_sub == t.sub ? "S^T of the whole pass" : "S^T 16 queries at a time") !=
                  std::string::npos);
            CHECK((t.str().find("loads one k-step ahead") != std::string::npos) == t.prefetch);
        }
        // f2 and f4 hold Sᵀ of the whole pass, f3 and f4 load ahead; f5, f6, f7 are f1, f2, f4 with
        // float2 dQ atomics (f0–f4: float4); the defaults are the sweep's fastest
        CHECK((all[2].s_sub == 32 && !all[2].prefetch && all[3].s_sub == 16 && all[3].prefetch &&
               all[4].s_sub == 32 && all[4].prefetch));
        for (int k = 0; k < 5; ++k) CHECK(all[std::size_t(k)].dq_vec == 4);
        for (auto [twin, of] : {std::pair{5, 1}, std::pair{6, 2}, std::pair{7, 4}}) {
            const BwdTiles& t = all[std::size_t(twin)];
            const BwdTiles& o = all[std::size_t(of)];
            INFO(candidate_name(kFa2Layout, twin) << " against " << candidate_name(kFa2Layout, of));
            CHECK(t.dq_vec == 2);
            CHECK((t.sub == o.sub && t.s_sub == o.s_sub && t.prefetch == o.prefetch && t.Br == o.Br &&
                   t.kv_in_regs == o.kv_in_regs));
            CHECK(t.str().find("dQ atomics float2") != std::string::npos);
        }
        CHECK(tuned_candidate(D, kFa2Layout) == (D == 64 ? 5 : 6));
        CHECK(variant_name(kFa2Layout) == "6-fa2-layout");
    }
    // steps 1–5 keep 16 keys per warp
    for (const BwdTiles& t : tuning_candidates(128)) CHECK((t.Bc() == 16 * t.warps && t.s_sub == 0 && !t.prefetch));
}

TEST_CASE("ch8: step 5's vector dQ atomic candidates: widths, scalar twins, and what the tiles say",
          "[cpu][chapter8]") {
    for (int D : {64, 128}) {
        const std::vector<int> vec = vector_dq_candidates(D);
        CHECK(vec.size() == (D == 64 ? 5u : 6u));  // t6–t10 (D = 64), t6–t11 (D = 128)
        for (int k : vec) {
            const BwdTiles t = tuning_candidates(D)[std::size_t(k)];
            INFO("D " << D << " candidate " << candidate_name(kTuned, k) << " " << t.str());
            CHECK((t.dq_vec == 2 || t.dq_vec == 4));
            CHECK(t.dq_vec_run == t.dq_vec);  // as compiled for sm_90 and the emulator
            CHECK(t.str().find("dQ atomics float" + std::to_string(t.dq_vec)) != std::string::npos);
            CHECK(t.str().find("scalar") == std::string::npos);
            CHECK(scalar_twin(D, k) >= 0);  // each one is timed against the same tiles with scalar atomics
            CHECK((t.str().find("m-tiles per warp") != std::string::npos) == (t.dq_m > 1));
        }
        // the defaults are float4 candidates (the fastest in the H200 sweep of 2026-11-26, README step 5)
        CHECK(tuning_candidates(D)[std::size_t(tuned_candidate(D))].dq_vec == 4);
        CHECK(tuning_candidates(D)[std::size_t(tuned_candidate(D))].str().find("dQ atomics float4") != std::string::npos);
    }
    // what a GPU before sm_90 reports: the width asked for and that scalar atomics run
    BwdTiles t = tuning_candidates(128)[std::size_t(vector_dq_candidates(128).back())];
    t.dq_vec_run = 1;
    CHECK(t.str().find("asked, scalar run") != std::string::npos);
}

TEST_CASE("ch8 emulated: kernel 5 with float2 and float4 dQ atomics (the vector candidates)",
          "[cpu][chapter8][v5]") {
    // The emulator takes the vector branch (kMaxDqVec = 4), so the lane ^ 1 exchange and the row
    // each lane adds are checked here: the 2x rule against the mirror, and dQ bit for bit equal to
    // the scalar twin's (the emulator adds every element's contributions in the same order).
    for (int D : {64, 128})
        for (bool causal : {false, true})
            for (int N : {17, 150}) {
                const fa::AttnShape s = fa::make_shape(N == 17 ? 2 : 1, N == 17 ? 1 : 2, N, D, causal);
                const Case<__nv_bfloat16> c = make_case<__nv_bfloat16>(s, 17 + std::uint64_t(N));
                std::map<int, std::vector<float>> twin_dQ;  // per scalar twin, emulated once
                for (int k : vector_dq_candidates(D)) {
                    const HostRun<__nv_bfloat16> h = emulate(kTuned, kAtomic, c, k);
                    const std::vector<float> dQ = fa::convert_to_float(h.dQ), dK = fa::convert_to_float(h.dK),
                                             dV = fa::convert_to_float(h.dV);
                    const ch6::BackwardCheck check =
                        ch6::check_backward(c.ref, dQ.data(), dK.data(), dV.data(), rule_tolerance(c.mirror));
                    const ch7::RuleVerdict v = low_precision_rule(check, c.mirror);
                    const int j = scalar_twin(D, k);
                    if (!twin_dQ.count(j)) twin_dQ[j] = fa::convert_to_float(emulate(kTuned, kAtomic, c, j).dQ);
                    const std::vector<float>& twin = twin_dQ[j];
                    std::size_t differ = 0;
                    for (std::size_t e = 0; e < dQ.size(); ++e) differ += dQ[e] != twin[e];
                    INFO(s.str() << " candidate " << candidate_name(kTuned, k) << " " << tuning_candidates(D)[std::size_t(k)].str() << "\n"
                                 << v.text << "dQ elements unlike the scalar twin's: " << differ);
                    CHECK(v.ok);
                    CHECK(differ == 0);
                }
            }
}

// ================================ [gpu] ==========================================================

namespace {

// Device arrays of one problem: inputs, O and L (the case's, from chapter 7's forward), outputs, workspace.
template <class T>
struct DeviceCase {
    fa::AttnShape s;
    fa::DeviceBuffer<T> Q, K, V, dO, O, dQ, dK, dV;
    fa::DeviceBuffer<float> L, ws;
    explicit DeviceCase(const Case<T>& c)
        : s(c.p.shape), Q(fa::convert_from_float<T>(c.p.Q)), K(fa::convert_from_float<T>(c.p.K)),
          V(fa::convert_from_float<T>(c.p.V)), dO(fa::convert_from_float<T>(c.dO)), O(fa::convert_from_float<T>(c.O)),
          dQ(s.elements()), dK(s.kv_elements()), dV(s.kv_elements()), L(c.L), ws(workspace_floats(s, kAtomic)) {}
    // Runs one backward on poisoned outputs and workspace; returns the check of dQ, dK, dV.
    ch6::BackwardCheck run(int variant, int strategy, const Case<T>& c, int candidate = -1) {
        dQ.poison(), dK.poison(), dV.poison(), ws.poison();
        const BwdTensors<T> t{Q.get(), K.get(), V.get(), O.get(), dO.get(), L.get(), dQ.get(), dK.get(), dV.get()};
        backward<T>(variant, strategy, s, t, split_workspace(ws.get(), s, strategy), candidate);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> q = fa::convert_to_float(dQ.download()), k = fa::convert_to_float(dK.download()),
                                 v = fa::convert_to_float(dV.download());
        return ch6::check_backward(c.ref, q.data(), k.data(), v.data(), rule_tolerance(c.mirror));
    }
};

// Kernels (variant, candidate) × both strategies on `shapes` with the 2× rule; each shape's case
// (reference and mirror) made once. magnitude 8: large logits. With every_candidate, kernels 5 and
// 6 run each of their candidates (otherwise their default).
template <class T>
void check_shapes(const std::vector<fa::AttnShape>& shapes, const std::vector<int>& variants, double magnitude = 1.0,
                  bool every_candidate = false) {
    for (const fa::AttnShape& s : shapes) {
        const Case<T> c = make_case<T>(s, 7 + std::uint64_t(s.N), magnitude, true);
        DeviceCase<T> d(c);
        for (int variant : variants) {
            std::vector<int> candidates = {-1};
            if (every_candidate && variant >= kTuned) {
                candidates.clear();
                for (int k = 0; k < int(tuning_candidates(s.D, variant).size()); ++k) candidates.push_back(k);
            }
            for (int k : candidates)
                for (int strategy : {kAtomic, kSplit}) {
                    const ch7::RuleVerdict v = low_precision_rule(d.run(variant, strategy, c, k), c.mirror);
                    INFO(fa::dtype_name<T>() << " " << s.str() << " magnitude " << magnitude << " kernel "
                                             << variant_name(variant) << " candidate " << candidate_name(variant, k) << " dq "
                                             << strategy_name(strategy) << "\n" << v.text);
                    CHECK(v.ok);
                }
        }
    }
}

// check_shapes on the course's grid (D = 64, 128).
template <class T>
void check_grid(const std::vector<int>& variants, double magnitude = 1.0, bool every_candidate = false) {
    check_shapes<T>(fa::test::shape_grid({64, 128}), variants, magnitude, every_candidate);
}

std::vector<int> all_variants() {
    // under the sanitizer (small shapes) the first and the last step; otherwise every step
    if (fa::test::small_shapes()) return {kDirect, kTuned, kFa2Layout};
    return {kDirect, kLdmatrix, kCpAsync, kRegisters, kTuned, kFa2Layout};
}

}  // namespace

TEST_CASE("ch8 GPU: every kernel, both dQ strategies, fp16 and bf16, on the shape grid (2x rule)", "[gpu][chapter8]") {
    REQUIRE(have_sm80());
    check_grid<__nv_bfloat16>(all_variants());
    check_grid<__half>(all_variants());
}

TEST_CASE("ch8 GPU: kernel 1 (direct port) alone on the shape grid (make test-chapter8 VARIANT=1)",
          "[.][gpu][chapter8][v1]") {
    REQUIRE(have_sm80());
    check_grid<__nv_bfloat16>({1});
    check_grid<__half>({1});
}
TEST_CASE("ch8 GPU: kernel 2 (ldmatrix, swizzle) alone on the shape grid (make test-chapter8 VARIANT=2)",
          "[.][gpu][chapter8][v2]") {
    REQUIRE(have_sm80());
    check_grid<__nv_bfloat16>({2});
    check_grid<__half>({2});
}
TEST_CASE("ch8 GPU: kernel 3 (cp.async) alone on the shape grid (make test-chapter8 VARIANT=3)",
          "[.][gpu][chapter8][v3]") {
    REQUIRE(have_sm80());
    check_grid<__nv_bfloat16>({3});
    check_grid<__half>({3});
}
TEST_CASE("ch8 GPU: kernel 4 (P, dS in registers) alone on the shape grid (make test-chapter8 VARIANT=4)",
          "[.][gpu][chapter8][v4]") {
    REQUIRE(have_sm80());
    check_grid<__nv_bfloat16>({4});
    check_grid<__half>({4});
}
TEST_CASE("ch8 GPU: kernel 5 (tuned) alone on the shape grid (make test-chapter8 VARIANT=5)",
          "[.][gpu][chapter8][v5]") {
    REQUIRE(have_sm80());
    check_grid<__nv_bfloat16>({5});
    check_grid<__half>({5});
}

TEST_CASE("ch8 GPU: kernel 6 (FA2's warp layout), every candidate, on the shape grid (2x rule)", "[gpu][chapter8][v6]") {
    REQUIRE(have_sm80());
    check_grid<__nv_bfloat16>({kFa2Layout}, 1.0, true);
    check_grid<__half>({kFa2Layout}, 1.0, true);
}

TEST_CASE("ch8 GPU: large logits (inputs of magnitude 8), kernel 6's candidates", "[gpu][chapter8][v6]") {
    REQUIRE(have_sm80());
    check_grid<__nv_bfloat16>({kFa2Layout}, 8.0, true);
    check_grid<__half>({kFa2Layout}, 8.0, true);
}

TEST_CASE("ch8 GPU: large logits (inputs of magnitude 8), tuned kernel", "[gpu][chapter8]") {
    REQUIRE(have_sm80());
    check_grid<__nv_bfloat16>({kTuned}, 8.0);
    check_grid<__half>({kTuned}, 8.0);
}

TEST_CASE("ch8 GPU: every tile candidate of steps 5 and 6", "[gpu][chapter8]") {
    REQUIRE(have_sm80());
    for (int D : {64, 128})
        for (bool causal : {false, true}) {
            // every candidate refills its Q_i/dO_i stages (T_r > stages for B_r = 128 and for 3 stages),
            // several key blocks add into each dQ row, and the last tiles are partial: small (the
            // sanitizer's runs) N = 273, otherwise N = 1023 with batch and heads > 1
            const fa::AttnShape s = fa::test::small_shapes() ? fa::make_shape(1, 1, 273, D, causal)
                                                             : fa::make_shape(2, 3, 1023, D, causal);
            const Case<__half> c = make_case<__half>(s, 9, 1.0, true);
            DeviceCase<__half> d(c);
            for (int variant : {kTuned, kFa2Layout})
                for (int k = 0; k < int(tuning_candidates(D, variant).size()); ++k)
                    for (int strategy : {kAtomic, kSplit}) {
                        const ch7::RuleVerdict v = low_precision_rule(d.run(variant, strategy, c, k), c.mirror);
                        INFO(s.str() << " kernel " << variant << " candidate " << candidate_name(variant, k) << " "
                                     << tuning_candidates(D, variant)[std::size_t(k)].str() << " dq "
                                     << strategy_name(strategy) << "\n" << v.text);
                        CHECK(v.ok);
                    }
        }
}

TEST_CASE("ch8 GPU: the float2 and float4 dQ atomic candidates on the shape grid (atomic dQ, 2x rule)",
          "[gpu][chapter8]") {
    REQUIRE(have_sm80());
    for (const fa::AttnShape& s : fa::test::shape_grid({64, 128})) {
        const Case<__nv_bfloat16> c = make_case<__nv_bfloat16>(s, 23 + std::uint64_t(s.N), 1.0, true);
        DeviceCase<__nv_bfloat16> d(c);
        for (int k : vector_dq_candidates(s.D)) {
            const ch7::RuleVerdict v = low_precision_rule(d.run(kTuned, kAtomic, c, k), c.mirror);
            INFO(s.str() << " candidate " << candidate_name(kTuned, k) << " " << tiles(kTuned, s.D, k).str() << "\n" << v.text);
            CHECK(v.ok);
        }
    }
}

TEST_CASE("ch8 GPU: on compute capability 9.0 the vector dQ candidates run vector atomics", "[gpu][sm90][chapter8]") {
    REQUIRE(have_sm80());
    for (int D : {64, 128})
        for (int k : vector_dq_candidates(D)) {
            const BwdTiles t = tiles(kTuned, D, k);
            INFO("D " << D << " candidate " << candidate_name(kTuned, k) << " " << t.str());
            CHECK(t.dq_vec_run == t.dq_vec);
        }
}

TEST_CASE("ch8 GPU: the atomic strategy's workspace starts from zero on every run", "[gpu][chapter8]") {
    REQUIRE(have_sm80());
    const fa::AttnShape s = fa::make_shape(1, 2, 300, 64, false);
    const Case<__nv_bfloat16> c = make_case<__nv_bfloat16>(s, 21, 1.0, true);
    DeviceCase<__nv_bfloat16> d(c);
    const BwdTensors<__nv_bfloat16> t{d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.dO.get(), d.L.get(),
                                      d.dQ.get(), d.dK.get(), d.dV.get()};
    // three runs back to back on the same workspace, poisoned (NaN) before the first and the outputs
    // too: the preprocess must zero it, and a missing reset would triple dQ
    d.dQ.poison(), d.dK.poison(), d.dV.poison(), d.ws.poison();
    for (int k = 0; k < 3; ++k) backward<__nv_bfloat16>(kTuned, kAtomic, s, t, split_workspace(d.ws.get(), s, kAtomic));
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> q = fa::convert_to_float(d.dQ.download()), k = fa::convert_to_float(d.dK.download()),
                             v = fa::convert_to_float(d.dV.download());
    const ch7::RuleVerdict verdict =
        low_precision_rule(ch6::check_backward(c.ref, q.data(), k.data(), v.data(), rule_tolerance(c.mirror)), c.mirror);
    INFO(verdict.text);
    CHECK(verdict.ok);
}

TEST_CASE("ch8 GPU: N != N_k and grouped heads on FlashAttention-2's shapes, both dQ strategies (2x rule)",
          "[gpu][chapter8]") {
    REQUIRE(have_sm80());
    check_shapes<__nv_bfloat16>(fa::test::cross_grid(), {kFa2Layout});
    check_shapes<__half>(fa::test::cross_grid({64}), {kDirect, kTuned});
}
