// Chapter 7: the CPU mirror of the kernels' arithmetic, and the 2× rule that judges the kernels
// against it.
//
// The mirror is Algorithm 1 of FlashAttention-2 in plain loops, with the kernels' precision: inputs
// rounded to T (the caller does it), S = Q Kᵀ and the online softmax in fp32, P̃ rounded to T before
// P̃·V (the kernels feed P̃ to the tensor cores as 16-bit), O accumulated in fp32 and rounded to T
// at the end, L = m + log l in fp32. Its error against the float64 reference is the error a correct
// 16-bit kernel is expected to have; the kernels may have at most twice that (plus a floor).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "../../common/parallel.h"
#include "../../common/reference.h"
#include "chapter7.h"

namespace ch7 {

namespace {

/// x rounded to T and back (identity for float).
template <class T>
float round_to_t(float x) {
    return fa::to_float(fa::from_float<T>(x));
}

}  // namespace

template <class T>
void mirror_rows(const fa::AttnShape& s, const float* Q, const float* K, const float* V, std::size_t bh,
                 int row_begin, int row_end, int Bc, float* O, float* L) {
    const int D = s.D, rows = row_end - row_begin;
    const std::size_t kv = fa::kv_offset(s, s.kv_head_of(bh));
    const float* Qi = Q + fa::head_offset(s, bh) + std::size_t(row_begin) * D;  // Alg. 1 line 4: the block Q_i
    // line 5: O_i = 0, l_i = 0, m_i = −inf
    std::vector<float> Oi(std::size_t(rows) * D, 0.0f), l(rows, 0.0f),
        m(rows, -std::numeric_limits<float>::infinity()), S(std::size_t(rows) * Bc);
    // causal: the last row's last visible key is row_end − 1 + N_k − N (bottom-right)
    const int key_end = s.causal ? std::min(s.keys(), row_end + s.keys() - s.N) : s.keys();
    for (int k0 = 0; k0 < key_end; k0 += Bc) {  // line 6: for each key block j
        const int kn = std::min(Bc, s.keys() - k0);
        const float* Kj = K + kv + std::size_t(k0) * D;  // line 7: K_j, V_j
        const float* Vj = V + kv + std::size_t(k0) * D;
        for (int r = 0; r < rows; ++r) {
            const int i = row_begin + r;
            float* Sr = &S[std::size_t(r) * Bc];
            for (int c = 0; c < kn; ++c) {  // line 8: S_ij = Q_i K_jᵀ (fp32 sums of exact products)
                float dot = 0.0f;
                for (int d = 0; d < D; ++d) dot += Qi[std::size_t(r) * D + d] * Kj[std::size_t(c) * D + d];
                Sr[c] = dot;
            }
            // line 9: m_new = max(m, rowmax(S·scale)); P̃ = exp(S·scale − m_new); l = e^{m − m_new} l + rowsum(P̃)
            float mx = -std::numeric_limits<float>::infinity();
            for (int c = 0; c < kn; ++c)
                if (s.visible(i, k0 + c)) mx = std::max(mx, Sr[c] * s.scale);
            const float m_new = std::max(m[r], mx);
            // a row that sees no key keeps m = −inf: subtract 0 instead, as the kernels do
            const float m_exp = std::isinf(m_new) ? 0.0f : m_new;
            const float alpha = std::exp(m[r] - m_exp);
            float rowsum = 0.0f;
            for (int c = 0; c < kn; ++c) {
                Sr[c] = s.visible(i, k0 + c) ? std::exp(Sr[c] * s.scale - m_exp) : 0.0f;
                rowsum += Sr[c];
            }
            l[r] = alpha * l[r] + rowsum;
            m[r] = m_new;
            // line 10: O_i = e^{m − m_new} O_i + P̃ V_j, with P̃ rounded to T as the kernels feed it
            float* Or = &Oi[std::size_t(r) * D];
            for (int d = 0; d < D; ++d) Or[d] *= alpha;
            for (int c = 0; c < kn; ++c) {
                const float p = round_to_t<T>(Sr[c]);
                for (int d = 0; d < D; ++d) Or[d] += p * Vj[std::size_t(c) * D + d];
            }
        }
    }
    // lines 12–13: O_i = O_i / l_i (rounded to T), L_i = m_i + log l_i; a row that saw no key has
    // l = 0 and gets O = 0, L = −inf (reference.h)
    for (int r = 0; r < rows; ++r) {
        for (int d = 0; d < D; ++d)
            O[std::size_t(r) * D + d] = l[r] > 0.0f ? round_to_t<T>(Oi[std::size_t(r) * D + d] / l[r]) : 0.0f;
        L[r] = m[r] + std::log(l[r]);
    }
}

template <class T>
MirrorErrors mirror_errors(const fa::AttnProblem& p, int Bc) {
    const fa::AttnShape& s = p.shape;
    // the rows fa::check_forward compares (its default sample size), every other row left at 0
    const std::vector<int> rows = fa::sample_rows(s.N, 128);
    std::vector<float> O(s.elements(), 0.0f), L(s.rows(), 0.0f);
    fa::parallel_for(s.heads_total() * rows.size(), [&](std::size_t k) {
        const std::size_t bh = k / rows.size();
        const int i = rows[k % rows.size()];
        const std::size_t r = bh * std::size_t(s.N) + std::size_t(i);
        mirror_rows<T>(s, p.Q.data(), p.K.data(), p.V.data(), bh, i, i + 1, Bc, &O[r * s.D], &L[r]);
    });
    return errors_of_mirror(p, O, L);
}

MirrorErrors errors_of_mirror(const fa::AttnProblem& p, const std::vector<float>& O, const std::vector<float>& L) {
    MirrorErrors e;
    e.check = fa::check_forward(p, O.data(), L.data());
    double max_v = 0, max_l = 1;
    for (float v : p.V) max_v = std::max(max_v, double(std::fabs(v)));
    for (float x : L)  // the −inf of a row that sees no key sets no floor
        if (std::isfinite(x)) max_l = std::max(max_l, double(std::fabs(x)));
    const fa::RuleFloors f = fa::rule_floors(p.shape.D, max_v, max_l);
    e.floor_O = f.O, e.floor_L = f.L, e.floor_rel = f.rel_O, e.floor_rel_L = f.rel_L;
    return e;
}

RuleVerdict low_precision_rule(const fa::ForwardCheck& kernel, const MirrorErrors& mirror) {
    RuleVerdict v{true, ""};
    v.ok &= fa::rule_line("O", kernel.O, mirror.check.O, mirror.floor_O, mirror.floor_rel, v.text);
    v.ok &= fa::rule_line("L", kernel.L, mirror.check.L, mirror.floor_L, mirror.floor_rel_L, v.text);
    return v;
}

fa::Tolerance rule_tolerance(const MirrorErrors& mirror) {
    return {std::max(2.0 * mirror.check.O.max_abs + mirror.floor_O, 2.0 * mirror.check.L.max_abs + mirror.floor_L),
            0.0};
}

template void mirror_rows<float>(const fa::AttnShape&, const float*, const float*, const float*,
                                 std::size_t, int, int, int, float*, float*);
template void mirror_rows<__half>(const fa::AttnShape&, const float*, const float*, const float*,
                                  std::size_t, int, int, int, float*, float*);
template void mirror_rows<__nv_bfloat16>(const fa::AttnShape&, const float*, const float*, const float*,
                                         std::size_t, int, int, int, float*, float*);
template MirrorErrors mirror_errors<float>(const fa::AttnProblem&, int);
template MirrorErrors mirror_errors<__half>(const fa::AttnProblem&, int);
template MirrorErrors mirror_errors<__nv_bfloat16>(const fa::AttnProblem&, int);

}  // namespace ch7
