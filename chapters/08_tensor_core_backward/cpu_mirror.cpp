// Chapter 8: the CPU mirror of the backward kernels' arithmetic and the 2× rule that judges them.
//
// The mirror computes dQ, dK, dV at the positions the float64 reference samples, with the
// kernels' rounding points, from the O (16-bit) and L (fp32) the forward gave the kernels:
// D_i = rowsum(dO_i ∘ O_i) in fp32, S and dP as fp32 sums of exact products,
// P = exp(S·scale − L) in fp32, dS = P ∘ (dP − D_i) in fp32, then P and dS rounded to T before
// the products that take them (the kernels feed them to the tensor cores as 16-bit), dQ, dK, dV
// accumulated in fp32 and rounded to T at the end. Its error against float64 is what a correct
// 16-bit backward is expected to have; the kernels may have at most twice that (plus a floor).
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <vector>

#include "../../common/parallel.h"
#include "../../common/reference.h"
#include "chapter8.h"
#include "cpu_mirror.h"

namespace ch8 {

namespace {

template <class T>
float round_to_t(float x) {
    return fa::to_float(fa::from_float<T>(x));
}

}  // namespace

void p_ds(const fa::AttnShape& s, const float* Qi, const float* Kj, const float* Vj, const float* dOi, float L,
          float Dsum, float& P, float& dS) {
    float S = 0.0f, dP = 0.0f;
    for (int d = 0; d < s.D; ++d) {
        S += Qi[d] * Kj[d];
        dP += dOi[d] * Vj[d];
    }
    P = std::exp(S * s.scale - L);
    dS = P * (dP - Dsum);
}

std::vector<float> row_sums_dO_O(const fa::AttnShape& s, const std::vector<float>& dO, const std::vector<float>& O) {
    const std::size_t D = std::size_t(s.D);
    std::vector<float> Dsum(s.rows());
    fa::parallel_for(s.rows(), [&](std::size_t r) {
        float acc = 0.0f;
        for (std::size_t d = 0; d < D; ++d) acc += dO[r * D + d] * O[r * D + d];
        Dsum[r] = acc;
    });
    return Dsum;
}

template <class T>
void mirror_sampled(const fa::AttnProblem& p, const std::vector<float>& dO, const std::vector<float>& O,
                    const std::vector<float>& L, const ch6::SampledBackward& ref, std::vector<float>& dQ,
                    std::vector<float>& dK, std::vector<float>& dV) {
    const fa::AttnShape& s = p.shape;
    const std::size_t D = std::size_t(s.D), nr = ref.rows.size(), nk = ref.key_rows.size();
    const std::vector<float> Dsum = row_sums_dO_O(s, dO, O);  // line 4, every row
    dQ.assign(s.heads_total() * nr * D, NAN);
    dK.assign(ref.heads.size() * nk * D, NAN);
    dV.assign(dK.size(), NAN);
    // row i of query head bh (Q, dO), row j of K/V head bkv (K, V), the row statistics of (bh, i)
    auto q_row = [&](const std::vector<float>& x, std::size_t bh, int i) {
        return x.data() + fa::head_offset(s, bh) + std::size_t(i) * D;
    };
    auto kv_row = [&](const std::vector<float>& x, std::size_t bkv, int j) {
        return x.data() + fa::kv_offset(s, bkv) + std::size_t(j) * D;
    };
    auto entry = [&](std::size_t bh, int i, int j, float& P, float& dS) {
        const std::size_t r = bh * std::size_t(s.N) + std::size_t(i), bkv = s.kv_head_of(bh);
        p_ds(s, q_row(p.Q, bh, i), kv_row(p.K, bkv, j), kv_row(p.V, bkv, j), q_row(dO, bh, i), L[r], Dsum[r], P, dS);
    };
    // line 15 at the sampled query rows: dQ_i = scale · Σ_j round(dS_ij) K_j
    fa::parallel_for(s.heads_total() * nr, [&](std::size_t k) {
        const std::size_t bh = k / nr;
        const int i = ref.rows[k % nr];
        std::vector<float> acc(D, 0.0f);
        for (int j = 0; j < s.keys(); ++j) {
            if (!s.visible(i, j)) continue;
            float P, dS;
            entry(bh, i, j, P, dS);
            const float ds = round_to_t<T>(dS);
            for (std::size_t d = 0; d < D; ++d) acc[d] += ds * kv_row(p.K, s.kv_head_of(bh), j)[d];
        }
        for (std::size_t d = 0; d < D; ++d) dQ[k * D + d] = round_to_t<T>(s.scale * acc[d]);
    });
    // lines 12 and 16 at the sampled key rows of the sampled K/V heads, summed over the query
    // heads of the group: dV_j = Σ_h Σ_i round(P_ij) dO_i, dK_j = scale · Σ_h Σ_i round(dS_ij) Q_i
    const std::size_t G = std::size_t(s.group());
    fa::parallel_for(ref.heads.size() * nk, [&](std::size_t k) {
        const std::size_t bkv = std::size_t(ref.heads[k / nk]);
        const std::size_t bh0 = s.first_query_head(bkv);
        const int j = ref.key_rows[k % nk];
        std::vector<float> accK(D, 0.0f), accV(D, 0.0f);
        for (std::size_t bh = bh0; bh < bh0 + G; ++bh)
            for (int i = 0; i < s.N; ++i) {
                if (!s.visible(i, j)) continue;
                float P, dS;
                entry(bh, i, j, P, dS);
                const float pr = round_to_t<T>(P), ds = round_to_t<T>(dS);
                for (std::size_t d = 0; d < D; ++d) {
                    accV[d] += pr * q_row(dO, bh, i)[d];
                    accK[d] += ds * q_row(p.Q, bh, i)[d];
                }
            }
        for (std::size_t d = 0; d < D; ++d) {
            dK[k * D + d] = round_to_t<T>(s.scale * accK[d]);
            dV[k * D + d] = round_to_t<T>(accV[d]);
        }
    });
}

template <class T>
MirrorErrors mirror_errors(const fa::AttnProblem& p, const std::vector<float>& dO, const std::vector<float>& O,
                           const std::vector<float>& L, const ch6::SampledBackward& ref) {
    std::vector<float> dQ, dK, dV;
    mirror_sampled<T>(p, dO, O, L, ref, dQ, dK, dV);
    const fa::Tolerance any{INFINITY, 0.0};  // the mirror's errors are measured, not judged
    MirrorErrors e{{fa::validate("dQ", dQ.data(), ref.dQ.data(), dQ.size(), any),
                    fa::validate("dK", dK.data(), ref.dK.data(), dK.size(), any),
                    fa::validate("dV", dV.data(), ref.dV.data(), dV.size(), any)},
                   {},
                   {}};
    // Floors: the kernels sum S, dP and D_i over d, and the products over keys or queries, in
    // another order than the mirror, in fp32. D terms of a dot product carry up to D · 2⁻²⁴
    // relative round-off each way, so dP − D_i is uncertain by about ε = D · 2⁻²² · max|dO| ·
    // max|V|; dQ_i sums P_ij (dP_ij − D_i) K_j over keys with Σ_j P_ij = 1, so it moves by at most
    // scale · ε · max|K| (dK likewise with max|Q|); dV sums P rounded to T, exact products, so
    // only its own fp32 sums differ: 2⁻²⁰ · its largest value. Negligible against a 16-bit
    // rounding, but the mirror's error itself is 0 where the exact gradient is 0 (N = 1: dQ = dK = 0).
    auto max_abs = [](const std::vector<float>& x) {
        double m = 0;
        for (float v : x) m = std::max(m, double(std::fabs(v)));
        return m;
    };
    auto max_abs_d = [](const std::vector<double>& x) {
        double m = 0;
        for (double v : x) m = std::max(m, std::fabs(v));
        return m;
    };
    const fa::AttnShape& s = p.shape;
    const double eps = s.D * std::ldexp(1.0, -22) * max_abs(dO) * max_abs(p.V);
    e.floor_abs[0] = s.scale * eps * max_abs(p.K);
    e.floor_abs[1] = s.scale * eps * max_abs(p.Q);
    e.floor_abs[2] = std::ldexp(1.0, -20) * max_abs_d(ref.dV);
    const std::vector<double>* refs[3] = {&ref.dQ, &ref.dK, &ref.dV};
    for (int k = 0; k < 3; ++k) {
        // the same floor in the L2 metric: rel_l2 is ‖err‖ / ‖ref‖ (‖err‖ when the reference is 0)
        double n2 = 0;
        for (double v : *refs[k]) n2 += v * v;
        const double norm = n2 > 0 ? std::sqrt(n2) : 1.0;
        e.floor_rel[k] = std::ldexp(1.0, -20) + e.floor_abs[k] * std::sqrt(double(refs[k]->size())) / norm;
    }
    return e;
}

ch7::RuleVerdict low_precision_rule(const ch6::BackwardCheck& kernel, const MirrorErrors& mirror) {
    ch7::RuleVerdict v{true, ""};
    const fa::Validation* k[3] = {&kernel.dQ, &kernel.dK, &kernel.dV};
    const char* names[3] = {"dQ", "dK", "dV"};
    for (int i = 0; i < 3; ++i)
        v.ok &= fa::rule_line(names[i], *k[i], mirror.err[i], mirror.floor_abs[i], mirror.floor_rel[i], v.text);
    return v;
}

fa::Tolerance rule_tolerance(const MirrorErrors& mirror) {
    double atol = 0;
    for (int i = 0; i < 3; ++i) atol = std::max(atol, 2.0 * mirror.err[i].max_abs + mirror.floor_abs[i]);
    return {atol, 0.0};
}

void print_baseline(const ch6::SampledBackward& ref, const MirrorErrors& mirror) {
    std::printf("float64 reference at %zu rows of each head (dK, dV in %zu heads); CPU mirror vs float64:\n"
                "  dQ max_abs %.3e rel_l2 %.3e   dK max_abs %.3e rel_l2 %.3e   dV max_abs %.3e rel_l2 %.3e\n",
                ref.rows.size(), ref.heads.size(), mirror.err[0].max_abs, mirror.err[0].rel_l2, mirror.err[1].max_abs,
                mirror.err[1].rel_l2, mirror.err[2].max_abs, mirror.err[2].rel_l2);
}

GradientVerdict check_gradients(const ch6::SampledBackward& ref, const MirrorErrors& mirror,
                                const std::vector<float>& dQ, const std::vector<float>& dK,
                                const std::vector<float>& dV) {
    const ch6::BackwardCheck c = ch6::check_backward(ref, dQ.data(), dK.data(), dV.data(), rule_tolerance(mirror));
    c.print();
    const ch7::RuleVerdict v = low_precision_rule(c, mirror);
    std::printf("%s", v.text.c_str());
    return {v.ok, std::max({c.dQ.max_abs, c.dK.max_abs, c.dV.max_abs}), std::max({c.dQ.rel_l2, c.dK.rel_l2, c.dV.rel_l2})};
}

#define FA_CH8_MIRROR(T)                                                                                         \
    template void mirror_sampled<T>(const fa::AttnProblem&, const std::vector<float>&, const std::vector<float>&,    \
                                    const std::vector<float>&, const ch6::SampledBackward&, std::vector<float>&,  \
                                    std::vector<float>&, std::vector<float>&);                                    \
    template MirrorErrors mirror_errors<T>(const fa::AttnProblem&, const std::vector<float>&,                    \
                                           const std::vector<float>&, const std::vector<float>&,                  \
                                           const ch6::SampledBackward&);
FA_CH8_MIRROR(__half)
FA_CH8_MIRROR(__nv_bfloat16)

}  // namespace ch8
