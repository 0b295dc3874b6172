// Chapter 10 on the CPU: the float64 reference of a decoding step, and the mirror of the kernels'
// algorithm in plain loops: the split plan of kernel/split_plan.h, each split's online softmax
// (FlashAttention-2, Alg. 1) over tiles of B_c keys read through the contiguous or paged addressing
// (a paged tile in runs of pool rows), and the splits merged with chapter 2's online state, as
// combine_kernel does.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "../../common/dtype.h"
#include "../../common/parallel.h"
#include "../../common/random.h"
#include "../02_online_softmax/online_softmax.h"
#include "../../common/low_precision_rule.h"
#include "decoding.h"
#include "kernel/split_plan.h"

namespace ch10 {

namespace {
// (b, query head, token) of row `row` of O.
struct RowId {
    int b, h, i;
};
RowId row_id(const DecodeShape& s, std::size_t row) {
    return {int(row / (std::size_t(s.H_q) * s.q_len)), int(row / s.q_len % s.H_q), int(row % s.q_len)};
}

// Where row c of the K/V tile from key k0 (a multiple of B_c) of KV head h of sequence b lives in
// the cache as stored: a paged cache through the tile's runs of pool rows (split_plan.h), as the
// kernels' load_paged_kv finds it.
std::size_t cache_row(const DecodeShape& s, const int* table, int b, int h, int k0, int c) {
    if (!s.paged()) return contiguous_row(b, h, k0 + c, s.H_kv, s.N_max, s.D);
    const int shift = s.page_shift();
    const std::size_t run = tile_run_row(table + std::size_t(b) * s.max_pages(), k0, tile_run(c, shift), shift, h,
                                         s.H_kv, s.D);
    return run + std::size_t(row_in_run(c, shift)) * s.D;
}

template <class T>
float rounded(float x) {
    return fa::to_float(fa::from_float<T>(x));
}
}  // namespace

void decode_reference_rows(const DecodeShape& s, const float* Q, const float* K, const float* V,
                           const std::vector<std::size_t>& rows, double* O, double* L) {
    fa::parallel_for(rows.size(), [&](std::size_t r) {
        const RowId id = row_id(s, rows[r]);
        const int h_kv = id.h / s.g(), keys = key_limit(s.lens[id.b], s.q_len, id.i);
        const float* q = Q + rows[r] * s.D;
        std::vector<double> S(static_cast<std::size_t>(keys), 0.0);
        double m = -INFINITY;
        for (int k = 0; k < keys; ++k) {
            const float* kr = K + contiguous_row(id.b, h_kv, k, s.H_kv, s.N_max, s.D);
            double dot = 0;
            for (int d = 0; d < s.D; ++d) dot += double(q[d]) * double(kr[d]);
            S[k] = dot * double(s.scale);
            m = std::max(m, S[k]);
        }
        double l = 0;
        std::vector<double> o(static_cast<std::size_t>(s.D), 0.0);
        for (int k = 0; k < keys; ++k) {
            const double p = std::exp(S[k] - m);
            l += p;
            const float* vr = V + contiguous_row(id.b, h_kv, k, s.H_kv, s.N_max, s.D);
            for (int d = 0; d < s.D; ++d) o[d] += p * double(vr[d]);
        }
        for (int d = 0; d < s.D; ++d) O[r * s.D + d] = o[d] / l;
        L[r] = m + std::log(l);
    });
}

template <class T, class TP>
void mirror_decode(const DecodeShape& s, const SplitPlan& plan, int Bc, const float* Q, const float* K,
                   const float* V, const int* table, const std::vector<std::size_t>& rows, float* O, float* L) {
    const int D = s.D;
    fa::parallel_for(rows.size(), [&](std::size_t r) {
        const std::size_t row = rows[r];
        const RowId id = row_id(s, row);
        const int len = s.lens[id.b], h_kv = id.h / s.g(), limit = key_limit(len, s.q_len, id.i);
        std::vector<float> q(Q + row * D, Q + (row + 1) * D);  // the products' type TP sees Q rounded to it
        if (!std::is_same<T, TP>::value)
            for (float& x : q) x = rounded<TP>(x);
        const int n = splits_of(len, s.q_len, plan.chunk);
        std::vector<float> O_s(static_cast<std::size_t>(n) * D), L_s(static_cast<std::size_t>(n));
        std::vector<float> Sr(static_cast<std::size_t>(Bc));
        for (int sp = 0; sp < n; ++sp) {  // each split: Alg. 1 over its tiles of B_c keys
            const int k_begin = split_begin(sp, plan.chunk), k_end = std::min(split_end(sp, len, s.q_len, plan.chunk), limit);
            float m = -INFINITY, l = 0.0f;
            float* o = &O_s[std::size_t(sp) * D];
            std::fill(o, o + D, 0.0f);
            for (int k0 = k_begin; k0 < k_end; k0 += Bc) {
                const int kn = std::min(Bc, k_end - k0);
                float mx = -INFINITY;
                for (int c = 0; c < kn; ++c) {  // line 8: S_ij = Q_i K_j^T (scaled)
                    const float* kr = K + cache_row(s, table, id.b, h_kv, k0, c);
                    float dot = 0.0f;
                    for (int d = 0; d < D; ++d) dot += q[d] * kr[d];
                    Sr[c] = dot * s.scale;
                    mx = std::max(mx, Sr[c]);
                }
                const float m_new = std::max(m, mx);  // lines 9-10: m, P~, l, O rescaled
                const float alpha = std::exp(m - m_new);
                l *= alpha;
                for (int d = 0; d < D; ++d) o[d] *= alpha;
                for (int c = 0; c < kn; ++c) {
                    const float p = std::exp(Sr[c] - m_new);
                    l += p;
                    const float pr = rounded<TP>(p);  // P~ is rounded to TP before P~ V
                    const float* vr = V + cache_row(s, table, id.b, h_kv, k0, c);
                    for (int d = 0; d < D; ++d) o[d] += pr * vr[d];
                }
                m = m_new;
            }
            for (int d = 0; d < D; ++d) o[d] /= l;  // lines 12-15: the split's O_s and L_s
            L_s[sp] = m + std::log(l);
        }
        ch2::OnlineState state;  // the combine: the splits' L_s are entries of one softmax
        for (int sp = 0; sp < n; ++sp) {
            ch2::OnlineState one;
            one.push(L_s[sp]);
            state.merge(one);  // chapter 2's merge
        }
        for (int d = 0; d < D; ++d) {
            float acc = 0.0f;
            for (int sp = 0; sp < n; ++sp) acc += state.prob(L_s[sp]) * O_s[std::size_t(sp) * D + d];
            O[r * D + d] = rounded<T>(acc);
        }
        L[r] = state.logsumexp();
    });
}

template void mirror_decode<float, float>(const DecodeShape&, const SplitPlan&, int, const float*, const float*,
                                          const float*, const int*, const std::vector<std::size_t>&, float*, float*);
template void mirror_decode<__half, __half>(const DecodeShape&, const SplitPlan&, int, const float*, const float*,
                                          const float*, const int*, const std::vector<std::size_t>&, float*, float*);
template void mirror_decode<__nv_bfloat16, __nv_bfloat16>(const DecodeShape&, const SplitPlan&, int, const float*, const float*,
                                          const float*, const int*, const std::vector<std::size_t>&, float*, float*);
template void mirror_decode<__nv_bfloat16, __half>(const DecodeShape&, const SplitPlan&, int, const float*, const float*,
                                          const float*, const int*, const std::vector<std::size_t>&, float*, float*);

std::vector<std::size_t> all_rows(const DecodeShape& s) {
    std::vector<std::size_t> rows(s.rows());
    std::iota(rows.begin(), rows.end(), std::size_t(0));
    return rows;
}

RuleCheck low_precision_rule(const DecodeShape& s, std::size_t n, const float* O, const float* L,
                             const double* O_ref, const double* L_ref, const float* O_mirror,
                             const float* L_mirror, double max_abs_V) {
    auto errors = [&](const float* got, const double* want, std::size_t count, double& max_abs, double& rel_l2) {
        double num = 0, den = 0;
        max_abs = 0;
        for (std::size_t i = 0; i < count; ++i) {
            const double e = std::fabs(double(got[i]) - want[i]);
            max_abs = std::isfinite(got[i]) ? std::max(max_abs, e) : INFINITY;
            num += e * e, den += want[i] * want[i];
        }
        rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    };
    double max_L = 1;
    for (std::size_t r = 0; r < n; ++r) max_L = std::max(max_L, std::fabs(L_ref[r]));
    RuleCheck c;
    double rel_O, rel_L, mirror_rel_O, mirror_rel_L;
    errors(O, O_ref, n * s.D, c.err_O, rel_O);
    errors(L, L_ref, n, c.err_L, rel_L);
    errors(O_mirror, O_ref, n * s.D, c.mirror_O, mirror_rel_O);
    errors(L_mirror, L_ref, n, c.mirror_L, mirror_rel_L);
    const fa::RuleFloors f = fa::rule_floors(s.D, max_abs_V, max_L);
    const bool ok_O = c.err_O <= 2 * c.mirror_O + f.O && rel_O <= 2 * mirror_rel_O + f.rel_O;
    const bool ok_L = c.err_L <= 2 * c.mirror_L + f.L && rel_L <= 2 * mirror_rel_L + f.rel_L;
    c.ok = ok_O && ok_L;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "  O %s  max_abs %.3e (mirror %.3e)  rel_l2 %.3e (mirror %.3e)  [%zu rows]\n"
                  "  L %s  max_abs %.3e (mirror %.3e)  rel_l2 %.3e (mirror %.3e)\n",
                  ok_O ? "PASS" : "FAIL", c.err_O, c.mirror_O, rel_O, mirror_rel_O, n, ok_L ? "PASS" : "FAIL",
                  c.err_L, c.mirror_L, rel_L, mirror_rel_L);
    c.text = buf;
    return c;
}

PagedCopy make_paged_copy(const DecodeShape& s, const std::vector<float>& K, const std::vector<float>& V,
                          std::uint64_t seed, float fill) {
    PagedCopy out;
    const int pages = s.pool_pages(), P = s.page_size, D = s.D;
    std::vector<int> perm(static_cast<std::size_t>(pages));
    std::iota(perm.begin(), perm.end(), 0);
    fa::Rng rng(seed);
    for (int i = pages - 1; i > 0; --i) std::swap(perm[std::size_t(i)], perm[std::size_t(rng.next() % std::uint64_t(i + 1))]);
    out.table = perm;  // sequence b's page p is pool page perm[b·max_pages + p]
    out.K.assign(std::size_t(pages) * s.H_kv * P * D, fill);
    out.V.assign(out.K.size(), fill);
    for (int b = 0; b < s.B; ++b)
        for (int h = 0; h < s.H_kv; ++h)
            for (int key = 0; key < s.lens[b]; ++key) {
                const std::size_t from = contiguous_row(b, h, key, s.H_kv, s.N_max, D);
                const std::size_t to = paged_row(&out.table[std::size_t(b) * s.max_pages()], key, s.page_shift(), h, s.H_kv, D);
                if (to + D > out.K.size()) throw std::out_of_range("make_paged_copy: a key's row lies outside the pool");
                std::copy(&K[from], &K[from] + D, &out.K[to]);
                std::copy(&V[from], &V[from] + D, &out.V[to]);
            }
    return out;
}

}  // namespace ch10
