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
    const std::size_t D = std::size_t(s.D), N = std::size_t(s.N);
    SampledBackward ref;
    ref.shape = s;
    ref.rows = fa::sample_rows(s.N, max_rows);
    ref.heads = sample_heads(int(s.heads_total()), max_heads);
    const std::size_t nr = ref.rows.size(), nh = ref.heads.size();

    // L_i and D_i: for every row of the sampled heads (a key row's gradient sums over all query
    // rows), and at the sampled rows of the other heads (a query row's dQ needs only its own).
    // Rows not computed stay NaN, so using one by mistake fails the comparison loudly.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    fa::BackwardStats st;
    st.L.assign(s.rows(), nan);
    st.Dsum.assign(s.rows(), nan);
    std::vector<std::size_t> todo;  // global row indices
    std::vector<char> full(s.heads_total(), 0);
    for (int h : ref.heads) full[std::size_t(h)] = 1;
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
    ref.dK.assign(nh * nr * D, nan);
    ref.dV.assign(nh * nr * D, nan);
    fa::parallel_for(s.heads_total() * nr, [&](std::size_t k) {
        const std::size_t bh = k / nr;
        fa::dq_row_reference(s, p.Q.data(), p.K.data(), p.V.data(), dO, st, bh, ref.rows[k % nr],
                             &ref.dQ[k * D]);
    });
    fa::parallel_for(nh * nr, [&](std::size_t k) {
        const std::size_t bh = std::size_t(ref.heads[k / nr]);
        fa::dkdv_row_reference(s, p.Q.data(), p.K.data(), p.V.data(), dO, st, bh, ref.rows[k % nr],
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
    const std::size_t D = std::size_t(s.D), N = std::size_t(s.N), nr = ref.rows.size();
    // Gathers the sampled rows of `heads` from a (B,H,N,D) tensor; `where` names them in reports.
    auto gather = [&](const float* x, const std::vector<int>& heads) {
        std::vector<float> g(heads.size() * nr * D);
        for (std::size_t k = 0; k < heads.size() * nr; ++k)
            std::copy_n(x + (std::size_t(heads[k / nr]) * N + std::size_t(ref.rows[k % nr])) * D, D,
                        &g[k * D]);
        return g;
    };
    auto where = [&](const std::vector<int>& heads) {
        return [&, heads](std::size_t i) {
            const std::size_t k = i / D;
            const int bh = heads[k / nr];
            return fa::Where{bh / s.H, bh % s.H, ref.rows[k % nr], (long long)(i % D)};
        };
    };
    std::vector<int> all_heads(s.heads_total());
    for (std::size_t h = 0; h < all_heads.size(); ++h) all_heads[h] = int(h);

    const std::vector<float> gQ = gather(dQ, all_heads), gK = gather(dK, ref.heads),
                             gV = gather(dV, ref.heads);
    BackwardCheck c{fa::validate("dQ", gQ.data(), ref.dQ.data(), gQ.size(), tol, where(all_heads)),
                    fa::validate("dK", gK.data(), ref.dK.data(), gK.size(), tol, where(ref.heads)),
                    fa::validate("dV", gV.data(), ref.dV.data(), gV.size(), tol, where(ref.heads))};
    const fa::WhereFn layout = fa::contiguous(std::size_t(s.H), N, D);
    fa::add_finite_scan(c.dQ, fa::check_all_finite("dQ", dQ, s.elements(), layout));
    fa::add_finite_scan(c.dK, fa::check_all_finite("dK", dK, s.elements(), layout));
    fa::add_finite_scan(c.dV, fa::check_all_finite("dV", dV, s.elements(), layout));
    return c;
}

}  // namespace ch6
