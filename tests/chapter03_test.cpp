// Tests of chapter 3, naive attention: both variants against the float64 reference (O, L and the
// N×N intermediates S and P), inputs of magnitude 1e3, the fused softmax on long rows, TF32, head
// dims, the full scan of S and P; on the CPU the mirror of the pipeline and the host-side planning
// (memory estimate, largest N that fits, argument checks, bytes and FLOPs per stage).
#include <catch2/catch.hpp>

#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../chapters/03_naive_attention/naive_attention.h"
#include "../common/attention.h"
#include "../common/check.h"
#include "../common/device.h"
#include "../common/parallel.h"
#include "../common/random.h"
#include "../common/reference.h"
#include "../common/validate.h"
#include "support.h"

using namespace fa;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// P inherits the relative error of e^{S−L} (a few 1e-6). kFp32Tolerance's absolute floor of 5e-5
// would hide a 10% error in every entry of a row of 4097 keys (P ≈ 2.4e-4), so P is compared
// relatively, with an absolute floor only far below the entries that matter.
constexpr Tolerance kProbTolerance{1e-8, 5e-5};

// Sampled query rows of every head: their indices, and the rows of S and P (N values each) in the
// order (head, sampled row).
struct SampledRows {
    std::vector<int> rows;
    std::vector<float> S, P;
};

SampledRows sample_host(const AttnShape& s, const float* S, const float* P, const std::vector<int>& rows) {
    const std::size_t n = std::size_t(s.N), nr = rows.size();
    SampledRows out{rows, std::vector<float>(s.heads_total() * nr * n), std::vector<float>(s.heads_total() * nr * n)};
    for (std::size_t bh = 0; bh < s.heads_total(); ++bh)
        for (std::size_t k = 0; k < nr; ++k) {
            const std::size_t from = (bh * n + std::size_t(rows[k])) * n, to = (bh * nr + k) * n;
            std::copy_n(S + from, n, &out.S[to]);
            std::copy_n(P + from, n, &out.P[to]);
        }
    return out;
}

SampledRows sample_device(const AttnShape& s, const float* S, const float* P, const std::vector<int>& rows) {
    const std::size_t n = std::size_t(s.N), nr = rows.size();
    SampledRows out{rows, std::vector<float>(s.heads_total() * nr * n), std::vector<float>(s.heads_total() * nr * n)};
    for (std::size_t bh = 0; bh < s.heads_total(); ++bh)
        for (std::size_t k = 0; k < nr; ++k) {
            const std::size_t from = (bh * n + std::size_t(rows[k])) * n, to = (bh * nr + k) * n;
            CUDA_CHECK(cudaMemcpy(&out.S[to], S + from, n * sizeof(float), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(&out.P[to], P + from, n * sizeof(float), cudaMemcpyDeviceToHost));
        }
    return out;
}

// (batch, head, row, key) of entry e of the sampled rows.
WhereFn sampled_where(const AttnShape& s, const std::vector<int>& rows) {
    return [s, rows](std::size_t e) {
        const std::size_t k = e / std::size_t(s.N), bh = k / rows.size();
        return Where{(long long)(bh / s.H), (long long)(bh % s.H), rows[k % rows.size()],
                     (long long)(e % std::size_t(s.N))};
    };
}

// float64 reference of the sampled rows: S without the mask (scale·q_i·k_j for every key) and P.
struct SampledReference {
    std::vector<double> S_all, P;
};

SampledReference sampled_reference(const AttnProblem& p, const std::vector<int>& rows) {
    const AttnShape& s = p.shape;
    AttnShape unmasked = s;
    unmasked.causal = false;
    const std::size_t n = std::size_t(s.N), nr = rows.size(), total = s.heads_total() * nr;
    SampledReference ref{std::vector<double>(total * n), std::vector<double>(total * n)};
    parallel_for(total, [&](std::size_t k) {
        const std::size_t bh = k / nr;
        attention_row_reference(unmasked, p.Q.data(), p.K.data(), p.V.data(), bh, rows[k % nr], nullptr,
                                nullptr, &ref.S_all[k * n]);
        attention_row_reference(s, p.Q.data(), p.K.data(), p.V.data(), bh, rows[k % nr], nullptr,
                                nullptr, nullptr, &ref.P[k * n]);
    });
    return ref;
}

// Sampled S and P against the reference. Where the mask hides key j, S must be −inf when
// `masked_neg_inf` (variant 1, the CPU mirror) and the unmasked score otherwise (variant 2); such
// −inf entries are compared as 0, anything else there as NaN (which always fails).
std::pair<Validation, Validation> check_sampled(const AttnProblem& p, bool masked_neg_inf,
                                                const SampledRows& got, const SampledReference& ref) {
    const AttnShape& s = p.shape;
    std::vector<float> S = got.S;
    std::vector<double> S_want = ref.S_all;
    for (std::size_t e = 0; e < S.size(); ++e) {
        const int i = got.rows[(e / std::size_t(s.N)) % got.rows.size()], j = int(e % std::size_t(s.N));
        if (masked_neg_inf && !s.visible(i, j)) {
            S[e] = S[e] == kNegInf ? 0.0f : kNaN;
            S_want[e] = 0.0;
        }
    }
    const WhereFn where = sampled_where(s, got.rows);
    return {validate("S", S.data(), S_want.data(), S.size(), kFp32Tolerance, where),
            validate("P", got.P.data(), ref.P.data(), got.P.size(), kProbTolerance, where)};
}

// Inputs of magnitude 1e3 give |S| ~ 1e6: float32 rounding of the dot products alone moves S by
// more than 1, so no float32 pipeline can match P and O of the float64 reference of the inputs.
// What must hold: every score within the worst-case float32 error of a D-term dot product
// ((D + 2)·2⁻²⁴·scale·Σ_d |q_d k_d|, whatever the summation order), and P, L, O equal to the
// softmax and weighted sum of the scores the pipeline itself produced (float64 from its own S),
// finite everywhere. O's absolute floor scales with the inputs (its entries are ~1e3).
void check_large_inputs(const AttnProblem& p, bool masked_neg_inf, const SampledRows& got,
                        const std::vector<float>& O, const std::vector<float>& L, double magnitude) {
    const AttnShape& s = p.shape;
    const std::size_t n = std::size_t(s.N), D = std::size_t(s.D), nr = got.rows.size();
    const std::size_t total = s.heads_total() * nr;
    std::vector<double> P_want(total * n), L_want(total), O_want(total * D);
    std::vector<float> L_got(total), O_got(total * D);
    std::vector<std::size_t> bad_S(total, 0);
    parallel_for(total, [&](std::size_t k) {
        const std::size_t bh = k / nr, r = bh * n + std::size_t(got.rows[k % nr]);
        const int i = got.rows[k % nr];
        const float* q = p.Q.data() + r * D;
        const float* S_i = &got.S[k * n];
        double m = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < n; ++j) {
            const bool visible = s.visible(i, int(j));
            if (!visible && masked_neg_inf) {
                bad_S[k] += S_i[j] != kNegInf;
                continue;
            }
            const float* kj = p.K.data() + (bh * n + j) * D;
            double dot = 0, absdot = 0;
            for (std::size_t d = 0; d < D; ++d) {
                dot += double(q[d]) * double(kj[d]);
                absdot += std::fabs(double(q[d]) * double(kj[d]));
            }
            const double bound = double(D + 2) * std::ldexp(1.0, -24) * double(s.scale) * absdot;
            bad_S[k] += !(std::fabs(double(S_i[j]) - dot * double(s.scale)) <= bound);
            if (visible) m = std::max(m, double(S_i[j]));
        }
        double l = 0;
        for (std::size_t j = 0; j < n; ++j) l += s.visible(i, int(j)) ? std::exp(double(S_i[j]) - m) : 0.0;
        L_want[k] = m + std::log(l);
        L_got[k] = L[r];
        for (std::size_t d = 0; d < D; ++d) O_want[k * D + d] = 0, O_got[k * D + d] = O[r * D + d];
        for (std::size_t j = 0; j < n; ++j) {
            const double P_ij = s.visible(i, int(j)) ? std::exp(double(S_i[j]) - L_want[k]) : 0.0;
            P_want[k * n + j] = P_ij;
            for (std::size_t d = 0; d < D; ++d) O_want[k * D + d] += P_ij * double(p.V[(bh * n + j) * D + d]);
        }
    });
    std::size_t bad = 0;
    for (std::size_t b : bad_S) bad += b;
    INFO(bad << " scores outside the float32 error bound of their dot product");
    CHECK(bad == 0);
    const WhereFn where = sampled_where(s, got.rows);
    auto row_where = [&](std::size_t per_row) {
        return [&, per_row](std::size_t e) {
            const std::size_t k = e / per_row, bh = k / nr;
            return Where{(long long)(bh / s.H), (long long)(bh % s.H), got.rows[k % nr], (long long)(e % per_row)};
        };
    };
    CHECK_VALID(validate("P", got.P.data(), P_want.data(), P_want.size(), kProbTolerance, where));
    CHECK_VALID(validate("L", L_got.data(), L_want.data(), total, kFp32Tolerance, row_where(1)));
    const Tolerance O_tol{kFp32Tolerance.atol * magnitude, kFp32Tolerance.rtol};
    CHECK_VALID(validate("O", O_got.data(), O_want.data(), O_want.size(), O_tol, row_where(D)));
    CHECK_VALID(check_all_finite("O", O.data(), s.elements(), contiguous(s.H, s.N, s.D)));
    CHECK_VALID(check_all_finite("L", L.data(), s.rows(), contiguous(s.H, s.N, 1)));
}

// Device buffers sized for the largest shape of a test (reused by every shape) and a cuBLAS handle
// in strict fp32 mode.
class Gpu {
public:
    explicit Gpu(const std::vector<AttnShape>& shapes) {
        std::size_t elements = 1, rows = 1, nn = 1;
        for (const AttnShape& s : shapes) {
            elements = std::max(elements, s.elements());
            rows = std::max(rows, s.rows());
            nn = std::max(nn, ch3::workspace_floats(s) / 2);
        }
        Q = DeviceBuffer<float>(elements), K = DeviceBuffer<float>(elements);
        V = DeviceBuffer<float>(elements), O = DeviceBuffer<float>(elements);
        L = DeviceBuffer<float>(rows), S = DeviceBuffer<float>(nn), P = DeviceBuffer<float>(nn);
        CUBLAS_CHECK(cublasCreate(&cublas));
    }
    ~Gpu() { cublasDestroy(cublas); }
    Gpu(const Gpu&) = delete;
    Gpu& operator=(const Gpu&) = delete;

    /// Uploads the inputs, poisons O, L, S and P (NaN), runs `variant` and waits for it.
    void forward(int variant, const AttnProblem& p) {
        const AttnShape& s = p.shape;
        upload(Q.get(), p.Q);
        upload(K.get(), p.K);
        upload(V.get(), p.V);
        poison(O.get(), s.elements());
        poison(L.get(), s.rows());
        poison(S.get(), ch3::workspace_floats(s) / 2);
        poison(P.get(), ch3::workspace_floats(s) / 2);
        ch3::forward(variant, s, Q.get(), K.get(), V.get(), O.get(), L.get(), S.get(), P.get(), cublas);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    std::vector<float> O_host(const AttnShape& s) const { return download(O.get(), s.elements()); }
    std::vector<float> L_host(const AttnShape& s) const { return download(L.get(), s.rows()); }

    DeviceBuffer<float> Q, K, V, O, L, S, P;
    cublasHandle_t cublas = nullptr;

private:
    static void upload(float* to, const std::vector<float>& from) {
        CUDA_CHECK(cudaMemcpy(to, from.data(), from.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    static void poison(float* x, std::size_t n) { CUDA_CHECK(cudaMemset(x, 0xFF, n * sizeof(float))); }
    static std::vector<float> download(const float* x, std::size_t n) {
        std::vector<float> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
        return h;
    }
};

// Runs `variant` on p and checks O, L (sampled rows + NaN scan), S and P (sampled rows against
// `ref`, and the full scan of both on the device).
void check_variant(Gpu& gpu, int variant, const AttnProblem& p, const std::vector<int>& rows,
                   const SampledReference& ref) {
    const AttnShape& s = p.shape;
    gpu.forward(variant, p);
    const std::vector<float> O = gpu.O_host(s), L = gpu.L_host(s);
    const ForwardCheck c = check_forward(p, O.data(), L.data());
    CHECK_VALID(c.O);
    CHECK_VALID(c.L);
    const auto sp = check_sampled(p, variant == ch3::kHandWritten,
                                  sample_device(s, gpu.S.get(), gpu.P.get(), rows), ref);
    CHECK_VALID(sp.first);
    CHECK_VALID(sp.second);
    const ch3::IntermediateScan scan = ch3::scan_intermediates(variant, s, gpu.S.get(), gpu.P.get());
    INFO("full scan: " << scan.bad_S << " entries of S and " << scan.bad_P << " of P break the contract");
    CHECK(scan.ok());
}

std::vector<float> mirror_buffer(std::size_t n) { return std::vector<float>(n, kNaN); }

}  // namespace

// ---- CPU: planning ------------------------------------------------------------------------------

TEST_CASE("memory estimate: Q, K, V, O, L and the two N×N buffers", "[cpu][chapter3]") {
    const AttnShape s = make_shape(2, 3, 1000, 64, false);
    const ch3::MemoryEstimate m = ch3::estimate_memory(s, 5.0);
    CHECK(m.qkvo == 4.0 * 6 * 1000 * 64 * 4);
    CHECK(m.lse == 6.0 * 1000 * 4);
    CHECK(m.sp == 2.0 * 6 * 1000 * 1000 * 4);
    CHECK(m.total() == m.qkvo + m.lse + m.sp + 5.0);
    CHECK(ch3::workspace_floats(s) == std::size_t(2) * 6 * 1000 * 1000);
    // N = 131072 with one head: S and P alone take 137 GB, more than an H100 or H200 has.
    const ch3::MemoryEstimate big = ch3::estimate_memory(make_shape(1, 1, 131072, 128, false), 0);
    CHECK(big.sp == 2.0 * 131072.0 * 131072.0 * 4);
    CHECK(big.total() > 137e9);
}

TEST_CASE("largest N that fits: the exact boundary of the estimate", "[cpu][chapter3]") {
    // One head, D = 128, no overhead: 4·(4·128·N + N + 2N²) = 8N² + 2052N bytes ≤ 80e9 ⇔ N ≤ 99871.
    CHECK(ch3::largest_seq_that_fits(1, 1, 128, 0, 80e9) == 99871);
    struct Case { int B, H, D; double overhead, free_b; };
    for (const Case c : {Case{1, 1, 128, 64e6, 80e9}, Case{4, 8, 64, 64e6, 141e9}, Case{2, 3, 16, 0, 24e9},
                         Case{1, 1, 1, 0, 1e6}, Case{16, 16, 128, 64e6, 80e9}}) {
        const int n = ch3::largest_seq_that_fits(c.B, c.H, c.D, c.overhead, c.free_b);
        INFO("B=" << c.B << " H=" << c.H << " D=" << c.D << " free " << c.free_b << ": N = " << n);
        REQUIRE(n > 0);
        CHECK(ch3::estimate_memory(make_shape(c.B, c.H, n, c.D, false), c.overhead).total() <= c.free_b);
        CHECK(ch3::estimate_memory(make_shape(c.B, c.H, n + 1, c.D, false), c.overhead).total() > c.free_b);
    }
    CHECK(ch3::largest_seq_that_fits(1, 1, 64, 100.0, 50.0) == 0);         // not even N = 1
    CHECK(ch3::largest_seq_that_fits(1, 1, 64, 0, 1e30, 5000) == 5000);    // capped at max_seq
}

TEST_CASE("memory shortfall message: needed by part, free, largest N", "[cpu][chapter3]") {
    const AttnShape s = make_shape(1, 1, 131072, 128, false);
    const std::string t = ch3::memory_shortfall_text(s, 64e6, 79.1e9, "Test GPU");
    CHECK_THAT(t, Catch::Contains("N=131072"));
    CHECK_THAT(t, Catch::Contains("needs 137.77 GB"));   // 137.44 (S, P) + 0.27 (Q, K, V, O) + 0.06
    CHECK_THAT(t, Catch::Contains("137.44 GB"));
    CHECK_THAT(t, Catch::Contains("only 79.10 GB are free on Test GPU"));
    const int fit = ch3::largest_seq_that_fits(1, 1, 128, 64e6, 79.1e9);
    CHECK_THAT(t, Catch::Contains("largest N that fits at B=1 H=1 D=128 is N = " + std::to_string(fit)));
    CHECK_THAT(ch3::memory_shortfall_text(s, 100, 50, "Tiny"), Catch::Contains("Not even N = 1 fits"));
}

TEST_CASE("argument checks: variants and grid limits", "[cpu][chapter3]") {
    const AttnShape s = make_shape(2, 3, 113, 64, true);
    CHECK(ch3::unsupported_reason(1, s).empty());
    CHECK(ch3::unsupported_reason(2, s).empty());
    CHECK_THAT(ch3::unsupported_reason(0, s), Catch::Contains("does not exist"));
    CHECK_THAT(ch3::unsupported_reason(3, s), Catch::Contains("does not exist"));
    const AttnShape many_heads = make_shape(256, 256, 1, 16, false);  // B·H = 65536
    CHECK_THAT(ch3::unsupported_reason(1, many_heads), Catch::Contains("65535"));
    CHECK(ch3::unsupported_reason(2, many_heads).empty());
    const AttnShape many_rows = make_shape(4096, 4096, 128, 16, false);  // B·H·N = 2^31
    CHECK_THAT(ch3::unsupported_reason(2, many_rows), Catch::Contains("rows exceed"));
    CHECK(ch3::unsupported_reason(2, make_shape(4096, 4096, 127, 16, false)).empty());
}

TEST_CASE("stage costs: the bytes and FLOPs of the doc's traffic table", "[cpu][chapter3]") {
    const double bh = 6, n = 1000, d = 64, f = 4;
    const auto full = ch3::stage_costs(2, make_shape(2, 3, 1000, 64, false));
    CHECK(full[0].bytes == f * (2 * bh * n * d + bh * n * n));   // read Q, K; write S
    CHECK(full[1].bytes == f * (2 * bh * n * n + bh * n));       // read S; write P and L
    CHECK(full[2].bytes == f * (bh * n * n + 2 * bh * n * d));   // read P, V; write O
    CHECK(full[0].flops == 2 * bh * n * n * d);
    CHECK(full[2].flops == 2 * bh * n * n * d);
    CHECK(full[1].flops == 0);
    CHECK(ch3::stage_costs(1, make_shape(2, 3, 1000, 64, false))[2].bytes == full[2].bytes);

    // Causal, variant 2: cuBLAS computes every entry; the softmax reads only the visible half.
    const auto c2 = ch3::stage_costs(2, make_shape(2, 3, 1000, 64, true));
    CHECK(c2[0].flops == full[0].flops);
    CHECK(c2[1].bytes == f * (bh * n * (n + 1) / 2 + bh * n * n + bh * n));
    CHECK(c2[2].bytes == full[2].bytes);

    // Causal, variant 1: the kernels skip tiles above the diagonal. Count the kept entries by brute
    // force: (i, j) is kept when its tile column is not past its tile row.
    double kept = 0;
    for (int i = 0; i < 1000; ++i)
        for (int j = 0; j < 1000; ++j) kept += j / ch3::kTile <= i / ch3::kTile;
    const auto c1 = ch3::stage_costs(1, make_shape(2, 3, 1000, 64, true));
    CHECK(c1[0].flops == 2 * bh * kept * d);
    CHECK(c1[0].bytes == full[0].bytes);  // S is still written everywhere (−inf in skipped tiles)
    CHECK(c1[1].bytes == full[1].bytes);  // chapter 2's softmax reads every entry
    CHECK(c1[2].bytes == f * (bh * kept + 2 * bh * n * d));
    CHECK(kept > n * (n + 1) / 2);
    CHECK(kept < n * (n + 1) / 2 + n * ch3::kTile);
}

// ---- CPU: the mirror ------------------------------------------------------------------------------

TEST_CASE("CPU mirror matches the fp64 reference: S, P, O, L", "[cpu][chapter3]") {
    int seed = 0;
    for (bool causal : {false, true})
        for (int D : {4, 16, 20, 64})
            for (int N : {1, 17, 64, 65, 130})
                for (auto bh : {std::pair<int, int>{1, 1}, std::pair<int, int>{2, 3}}) {
                    const AttnShape s = make_shape(bh.first, bh.second, N, D, causal);
                    INFO(s.str());
                    const AttnProblem p = make_problem(s, 1000 + seed++);
                    std::vector<float> O = mirror_buffer(s.elements()), L = mirror_buffer(s.rows());
                    std::vector<float> S = mirror_buffer(ch3::workspace_floats(s) / 2), P = S;
                    ch3::forward_cpu_mirror(s, p.Q.data(), p.K.data(), p.V.data(), O.data(), L.data(), S.data(), P.data());
                    const ForwardCheck c = check_forward(p, O.data(), L.data());
                    CHECK_VALID(c.O);
                    CHECK_VALID(c.L);
                    const std::vector<int> rows = sample_rows(N, N);
                    const auto sp = check_sampled(p, true, sample_host(s, S.data(), P.data(), rows),
                                                  sampled_reference(p, rows));
                    CHECK_VALID(sp.first);
                    CHECK_VALID(sp.second);
                }
}

TEST_CASE("CPU mirror: inputs of magnitude 1e3 do not overflow", "[cpu][chapter3]") {
    for (bool causal : {false, true}) {
        const AttnShape s = make_shape(1, 2, 130, 32, causal);
        INFO(s.str());
        const AttnProblem p = make_problem(s, 77, 1e3);
        std::vector<float> O = mirror_buffer(s.elements()), L = mirror_buffer(s.rows());
        std::vector<float> S = mirror_buffer(ch3::workspace_floats(s) / 2), P = S;
        ch3::forward_cpu_mirror(s, p.Q.data(), p.K.data(), p.V.data(), O.data(), L.data(), S.data(), P.data());
        check_large_inputs(p, true, sample_host(s, S.data(), P.data(), sample_rows(s.N, s.N)), O, L, 1e3);
    }
}

// ---- GPU ------------------------------------------------------------------------------------------

TEST_CASE("both variants match the fp64 reference on the shape grid: O, L, S, P", "[gpu][chapter3]") {
    const std::vector<AttnShape> grid = test::shape_grid();
    Gpu gpu(grid);
    for (std::size_t g = 0; g < grid.size(); ++g) {
        const AttnProblem p = make_problem(grid[g], 300 + g);
        const std::vector<int> rows = sample_rows(p.shape.N, 128);
        const SampledReference ref = sampled_reference(p, rows);
        for (int variant : {ch3::kHandWritten, ch3::kCublas}) {
            INFO("variant " << variant << ", " << p.shape.str());
            check_variant(gpu, variant, p, rows, ref);
        }
    }
}

TEST_CASE("head dims: every multiple of 4 up to 128, odd ones and larger ones", "[gpu][chapter3]") {
    std::vector<int> dims = {1, 3, 59, 111, 160, 256};
    for (int D = 4; D <= 128; D += 4) dims.push_back(D);
    if (test::small_shapes()) dims = {4, 20, 59, 128};
    std::vector<AttnShape> shapes;
    for (int D : dims)
        for (bool causal : {false, true}) shapes.push_back(make_shape(1, 2, 70, D, causal));
    Gpu gpu(shapes);
    for (std::size_t g = 0; g < shapes.size(); ++g) {
        const AttnProblem p = make_problem(shapes[g], 500 + g);
        const std::vector<int> rows = sample_rows(p.shape.N, p.shape.N);
        const SampledReference ref = sampled_reference(p, rows);
        for (int variant : {ch3::kHandWritten, ch3::kCublas}) {
            INFO("variant " << variant << ", " << p.shape.str());
            check_variant(gpu, variant, p, rows, ref);
        }
    }
}

TEST_CASE("inputs of magnitude 1e3 do not overflow", "[gpu][chapter3]") {
    std::vector<AttnShape> shapes;
    for (bool causal : {false, true}) {
        shapes.push_back(make_shape(1, 2, 113, 16, causal));
        if (!test::small_shapes()) {
            shapes.push_back(make_shape(2, 1, 1023, 128, causal));
            shapes.push_back(make_shape(1, 1, 4097, 64, causal));
        }
    }
    Gpu gpu(shapes);
    for (std::size_t g = 0; g < shapes.size(); ++g) {
        const AttnProblem p = make_problem(shapes[g], 700 + g, 1e3);
        const std::vector<int> rows = sample_rows(p.shape.N, 64);
        for (int variant : {ch3::kHandWritten, ch3::kCublas}) {
            INFO("variant " << variant << ", " << p.shape.str() << ", magnitude 1e3");
            gpu.forward(variant, p);
            check_large_inputs(p, variant == ch3::kHandWritten,
                               sample_device(p.shape, gpu.S.get(), gpu.P.get(), rows),
                               gpu.O_host(p.shape), gpu.L_host(p.shape), 1e3);
            CHECK(ch3::scan_intermediates(variant, p.shape, gpu.S.get(), gpu.P.get()).ok());
        }
    }
}

TEST_CASE("fused softmax: register and streaming paths, short and long rows", "[gpu][chapter3]") {
    const std::vector<int> Ns = test::small_shapes()
                                    ? std::vector<int>{1, 33, 1025}
                                    : std::vector<int>{1, 33, 1024, 1025, 4096, 4097, 16384, 16385, 32768, 32769, 70001};
    for (int N : Ns)
        for (bool causal : {false, true})
            for (double magnitude : {1.0, 1e3}) {
                // Causal rows are queries i = row mod N: all of them while N is small.
                const int rows = causal && N <= 4097 ? N : 8;
                const std::size_t n = std::size_t(N), nrows = std::size_t(rows), total = nrows * n;
                const std::vector<float> S = random_normal(total, std::uint64_t(N) * 4 + causal, 0.5 * magnitude, magnitude);
                // Masked entries of S hold ordinary numbers: the kernel must not read them into P.
                std::vector<float> masked = S;
                for (std::size_t e = 0; e < total; ++e)
                    if (causal && e % n > (e / n) % n) masked[e] = kNegInf;
                std::vector<double> P_want(total), L_want(nrows);
                softmax_reference(masked.data(), P_want.data(), nrows, n);
                for (std::size_t r = 0; r < nrows; ++r) L_want[r] = logsumexp_reference(&masked[r * n], n);
                DeviceBuffer<float> S_d(S), P_d(total), L_d(nrows);
                for (ch3::SoftmaxPath path : {ch3::SoftmaxPath::kAuto, ch3::SoftmaxPath::kStreaming}) {
                    INFO("N=" << N << " rows=" << rows << (causal ? " causal" : "") << " magnitude " << magnitude
                              << (path == ch3::SoftmaxPath::kStreaming ? " streaming" : " auto"));
                    P_d.poison();
                    L_d.poison();
                    ch3::fused_softmax(S_d.get(), P_d.get(), L_d.get(), rows, N, causal, path);
                    const std::vector<float> P = P_d.download(), L = L_d.download();
                    CHECK_VALID(validate("P", P.data(), P_want.data(), total, kProbTolerance, contiguous(1, rows, N)));
                    CHECK_VALID(validate("L", L.data(), L_want.data(), L.size(), kFp32Tolerance));
                    std::size_t masked_nonzero = 0;
                    for (std::size_t e = 0; e < total; ++e) masked_nonzero += masked[e] == kNegInf && P[e] != 0.0f;
                    CHECK(masked_nonzero == 0);
                }
            }
}

TEST_CASE("TF32 GEMMs stay within the TF32 tolerance", "[gpu][chapter3]") {
    const std::vector<AttnShape> shapes = test::small_shapes()
                                              ? std::vector<AttnShape>{make_shape(1, 3, 113, 64, true)}
                                              : std::vector<AttnShape>{make_shape(1, 3, 1023, 128, false),
                                                                       make_shape(1, 3, 1023, 128, true),
                                                                       make_shape(2, 1, 1, 64, false)};
    Gpu gpu(shapes);
    CUBLAS_CHECK(cublasSetMathMode(gpu.cublas, CUBLAS_TF32_TENSOR_OP_MATH));
    for (std::size_t g = 0; g < shapes.size(); ++g) {
        const AttnProblem p = make_problem(shapes[g], 900 + g);
        INFO(p.shape.str() << ", TF32");
        gpu.forward(ch3::kCublas, p);
        const ForwardCheck c = check_forward(p, gpu.O_host(p.shape).data(), gpu.L_host(p.shape).data(), ch3::kTf32Tolerance);
        CHECK_VALID(c.O);
        CHECK_VALID(c.L);
        CHECK(ch3::scan_intermediates(ch3::kCublas, p.shape, gpu.S.get(), gpu.P.get()).ok());
    }
}

TEST_CASE("full scan of S and P finds a NaN, a wrong masked score, a non-zero masked probability", "[gpu][chapter3]") {
    const AttnShape s = make_shape(1, 2, 70, 16, true);
    Gpu gpu({s});
    const AttnProblem p = make_problem(s, 11);
    const std::size_t n = std::size_t(s.N), head1 = n * n;
    auto set = [&](float* x, std::size_t e, float v) {
        CUDA_CHECK(cudaMemcpy(x + e, &v, sizeof v, cudaMemcpyHostToDevice));
    };
    for (int variant : {ch3::kHandWritten, ch3::kCublas}) {
        INFO("variant " << variant);
        gpu.forward(variant, p);
        REQUIRE(ch3::scan_intermediates(variant, s, gpu.S.get(), gpu.P.get()).ok());
        set(gpu.P.get(), head1 + 5 * n + 2, kNaN);  // visible (row 5, key 2) of head 1
        set(gpu.P.get(), 3 * n + 9, 1e-7f);         // masked (row 3, key 9) of head 0
        set(gpu.S.get(), head1 + 69 * n + 69, kNaN);
        const ch3::IntermediateScan scan = ch3::scan_intermediates(variant, s, gpu.S.get(), gpu.P.get());
        CHECK(scan.bad_P == 2);
        CHECK(scan.bad_S == 1);
    }
    // Variant 1 must leave −inf where the mask hides a key; a finite score there is a break.
    gpu.forward(ch3::kHandWritten, p);
    set(gpu.S.get(), 3 * n + 9, 0.0f);
    CHECK(ch3::scan_intermediates(ch3::kHandWritten, s, gpu.S.get(), gpu.P.get()).bad_S == 1);
}
