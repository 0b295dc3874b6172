// Chapter 6: checking dQ, dK, dV against the float64 reference of common/reference.h, sampled
// the way fa::check_forward samples the forward, so that long sequences are checked in seconds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "../../common/parallel.h"
#include "../../common/random.h"
#include "../../common/reference.h"
#include "flash2_backward.h"

namespace ch6 {

std::vector<float> make_upstream_gradient(const fa::AttnShape& s, std::uint64_t seed) {
    // make_problem draws Q, K, V from streams seed·3 + {0, 1, 2}; 2^40 + seed keeps clear of them.
    return fa::random_normal(s.elements(), (std::uint64_t(1) << 40) + seed, 0.5, 1.0);
}

namespace {

// Heads whose dK and dV get checked: all (when there are at most max(max_heads, 3)), or the
// first, the last and one seeded middle head.
std::vector<int> sample_heads(int heads, int max_heads) {
    std::vector<int> h;
    if (heads <= std::max(max_heads, 3)) {
        for (int k = 0; k < heads; ++k) h.push_back(k);
        return h;
    }
    fa::Rng rng{std::uint64_t(heads)};
    h = {0, 1 + int(rng.next() % std::uint64_t(heads - 2)), heads - 1};
    return h;
}

}  // namespace

SampledBackward sampled_backward_reference(const fa::AttnProblem& p, const float* dO, int max_rows,
                                           int max_heads) {
    const fa::AttnShape& s = p.shape;
    const std::size_t D = std::size_t(s.D), N = std::size_t(s.N), G = std::size_t(s.group());
    SampledBackward ref;
    ref.shape = s;
    ref.rows = fa::sample_rows(s.N, max_rows);
    ref.key_rows = fa::sample_rows(s.keys(), max_rows);
    ref.heads = sample_heads(s.B * s.kv_heads(), max_heads);
    const std::size_t nr = ref.rows.size(), nk = ref.key_rows.size(), nh = ref.heads.size();

    // L_i and D_i: for every row of the query heads that read a sampled K/V head (a key row's
    // gradient sums over all their query rows), and at the sampled rows of the other heads (a
    // query row's dQ needs only its own).
    // Rows not computed stay NaN, so using one by mistake fails the comparison loudly.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    fa::BackwardStats st;
    st.L.assign(s.rows(), nan);
    st.Dsum.assign(s.rows(), nan);
    std::vector<std::size_t> todo;  // global row indices
    std::vector<char> full(s.heads_total(), 0);
    for (int h : ref.heads)
        for (std::size_t g = 0; g < G; ++g) full[s.first_query_head(std::size_t(h)) + g] = 1;
    for (std::size_t bh = 0; bh < s.heads_total(); ++bh) {
        if (full[bh])
            for (std::size_t i = 0; i < N; ++i) todo.push_back(bh * N + i);
        else
            for (int i : ref.rows) todo.push_back(bh * N + std::size_t(i));
    }
    fa::parallel_for(todo.size(), [&](std::size_t k) {
        const std::size_t row = todo[k];
        std::vector<double> o(D);
        fa::attention_row_reference(s, p.Q.data(), p.K.data(), p.V.data(), row / N, int(row % N), o.data(),
                                    &st.L[row]);
        double acc = 0;
        for (std::size_t d = 0; d < D; ++d) acc += double(dO[row * D + d]) * o[d];
        st.Dsum[row] = acc;
    });

    ref.dQ.assign(s.heads_total() * nr * D, nan);
    ref.dK.assign(nh * nk * D, nan);
    ref.dV.assign(nh * nk * D, nan);
    fa::parallel_for(s.heads_total() * nr, [&](std::size_t k) {
        const std::size_t bh = k / nr;
        fa::dq_row_reference(s, p.Q.data(), p.K.data(), p.V.data(), dO, st, bh, ref.rows[k % nr],
                             &ref.dQ[k * D]);
    });
    fa::parallel_for(nh * nk, [&](std::size_t k) {
        const std::size_t bkv = std::size_t(ref.heads[k / nk]);
        fa::dkdv_row_reference(s, p.Q.data(), p.K.data(), p.V.data(), dO, st, bkv, ref.key_rows[k % nk],
                               &ref.dK[k * D], &ref.dV[k * D]);
    });
    return ref;
}

void BackwardCheck::print() const {
    dQ.print();
    dK.print();
    dV.print();
}

BackwardCheck check_backward(const SampledBackward& ref, const float* dQ, const float* dK, const float* dV,
                             fa::Tolerance tol) {
    const fa::AttnShape& s = ref.shape;
    const std::size_t D = std::size_t(s.D);
    // The sampled rows `rows` of `heads` of a tensor of H heads of N rows, and where each lies.
    struct Sample {
        std::vector<int> heads;
        const std::vector<int>& rows;
        int H, N;
        std::vector<float> gather(const float* x, std::size_t D) const {
            const std::size_t nr = rows.size();
            std::vector<float> g(heads.size() * nr * D);
            for (std::size_t k = 0; k < heads.size() * nr; ++k)
                std::copy_n(x + (std::size_t(heads[k / nr]) * N + std::size_t(rows[k % nr])) * D, D, &g[k * D]);
            return g;
        }
        fa::WhereFn where(std::size_t D) const {
            return [this, D](std::size_t i) {
                const std::size_t k = i / D, nr = rows.size();
                const int bh = heads[k / nr];
                return fa::Where{bh / H, bh % H, rows[k % nr], (long long)(i % D)};
            };
        }
    };
    Sample queries{std::vector<int>(s.heads_total()), ref.rows, s.H, s.N};
    for (std::size_t h = 0; h < queries.heads.size(); ++h) queries.heads[h] = int(h);
    const Sample keys{ref.heads, ref.key_rows, s.kv_heads(), s.keys()};

    const std::vector<float> gQ = queries.gather(dQ, D), gK = keys.gather(dK, D), gV = keys.gather(dV, D);
    BackwardCheck c{fa::validate("dQ", gQ.data(), ref.dQ.data(), gQ.size(), tol, queries.where(D)),
                    fa::validate("dK", gK.data(), ref.dK.data(), gK.size(), tol, keys.where(D)),
                    fa::validate("dV", gV.data(), ref.dV.data(), gV.size(), tol, keys.where(D))};
    const fa::WhereFn q_layout = fa::contiguous(std::size_t(s.H), std::size_t(s.N), D),
                      kv_layout = fa::contiguous(std::size_t(s.kv_heads()), std::size_t(s.keys()), D);
    fa::add_finite_scan(c.dQ, fa::check_all_finite("dQ", dQ, s.elements(), q_layout));
    fa::add_finite_scan(c.dK, fa::check_all_finite("dK", dK, s.kv_elements(), kv_layout));
    fa::add_finite_scan(c.dV, fa::check_all_finite("dV", dV, s.kv_elements(), kv_layout));
    return c;
}

}  // namespace ch6
