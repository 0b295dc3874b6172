// Chapter 12: the CPU mirrors of the ring's arithmetic (chapter12.h, ring_mirror_errors and
// ring_backward_mirror): what a correct ring computes, rounded where the ring rounds, at the
// positions the checks sample.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../common/dtype.h"
#include "../../common/parallel.h"
#include "../../common/reference.h"
#include "../08_tensor_core_backward/cpu_mirror.h"
#include "chapter12.h"
#include "merge.h"

namespace ch12 {

namespace {

/// Row i of head bh, as the rank that owns it computes it: the blocks of every step in the ring's
/// order, each by chapter 7's mirror (O rounded to T, as the kernel writes O_blk), merged in fp32
/// (merge.h, as merge_kernel), O rounded to T at the end.
template <class T>
void ring_mirror_row(const fa::AttnProblem& p, const Layout& l, int Bc, std::size_t bh, int i, float* O, float* L) {
    const fa::AttnShape& s = p.shape;
    const std::size_t D = std::size_t(s.D), head = fa::head_offset(s, bh);
    const int q_chunk = l.chunk_of_row(i), r = l.owner_of_chunk(q_chunk);
    std::vector<float> O_acc(D, 0.0f), O_blk(D);
    float L_acc = -std::numeric_limits<float>::infinity(), L_blk = 0;
    for (int step = 0; step < l.P; ++step)
        for (const BlockTask& t : step_blocks(l, s.causal, r, step)) {
            if (t.q_chunk != q_chunk || t.kind == Block::kSkip) continue;
            const int b = l.chunk_length(t.k_chunk);
            const float* K = p.K.data() + head + std::size_t(l.chunk_begin(t.k_chunk)) * D;
            const float* V = p.V.data() + head + std::size_t(l.chunk_begin(t.k_chunk)) * D;
            if (t.kind == Block::kDiagonal) {  // the chunk against itself: row i at its place in the chunk
                const fa::AttnShape blk = fa::make_shape(1, 1, b, s.D, true, s.scale);
                const int at = i - l.chunk_begin(q_chunk);
                const float* Q = p.Q.data() + head + std::size_t(l.chunk_begin(q_chunk)) * D;
                ch7::mirror_rows<T>(blk, Q, K, V, 0, at, at + 1, Bc, O_blk.data(), &L_blk);
            } else {  // every key visible: where the row sits does not matter
                const fa::AttnShape blk = fa::make_shape(1, 1, b, s.D, false, s.scale);
                ch7::mirror_rows<T>(blk, p.Q.data() + head + std::size_t(i) * D, K, V, 0, 0, 1, Bc, O_blk.data(),
                                    &L_blk);
            }
            const MergeWeights w = merge_weights(L_acc, L_blk);
            for (std::size_t d = 0; d < D; ++d) O_acc[d] = merge_output(w, O_acc[d], O_blk[d]);
            L_acc = w.L;
        }
    for (std::size_t d = 0; d < D; ++d) O[d] = fa::to_float(fa::from_float<T>(O_acc[d]));
    *L = L_acc;
}

}  // namespace

template <class T>
ch7::MirrorErrors ring_mirror_errors(const fa::AttnProblem& p, const Layout& l, int Bc) {
    const fa::AttnShape& s = p.shape;
    // the rows fa::check_forward samples (its default sample size), every other row left at 0
    const std::vector<int> rows = fa::sample_rows(s.N, 128);
    std::vector<float> O(s.elements(), 0.0f), L(s.rows(), 0.0f);
    fa::parallel_for(s.heads_total() * rows.size(), [&](std::size_t k) {
        const std::size_t bh = k / rows.size(), r = bh * std::size_t(s.N) + std::size_t(rows[k % rows.size()]);
        ring_mirror_row<T>(p, l, Bc, bh, rows[k % rows.size()], &O[r * std::size_t(s.D)], &L[r]);
    });
    return ch7::errors_of_mirror(p, O, L);
}

namespace {

template <class T>
float round_to(float x) {
    return fa::to_float(fa::from_float<T>(x));
}

/// acc[d] += w · x[d] over D values.
void add_scaled(std::vector<float>& acc, float w, const float* x) {
    for (std::size_t d = 0; d < acc.size(); ++d) acc[d] += w * x[d];
}

}  // namespace

template <class T>
void ring_backward_mirror(const fa::AttnProblem& p, const std::vector<float>& dO, const std::vector<float>& O,
                          const std::vector<float>& L, const Layout& l, const ch6::SampledBackward& ref,
                          std::vector<float>& dQ, std::vector<float>& dK, std::vector<float>& dV) {
    const fa::AttnShape& s = p.shape;
    const std::size_t D = std::size_t(s.D), nr = ref.rows.size();
    const std::vector<float> Dsum = ch8::row_sums_dO_O(s, dO, O);  // line 4, on the rank that holds row i
    dQ.assign(s.heads_total() * nr * D, NAN);
    dK.assign(ref.heads.size() * nr * D, NAN);
    dV.assign(dK.size(), NAN);
    for (std::size_t bh = 0; bh < s.heads_total(); ++bh) {
        const std::size_t base = fa::head_offset(s, bh), row0 = bh * std::size_t(s.N);
        auto row = [&](const std::vector<float>& x, int i) { return x.data() + base + std::size_t(i) * D; };
        auto p_ds = [&](int i, int j, float& P, float& dS) {
            ch8::p_ds(s, row(p.Q, i), row(p.K, j), row(p.V, j), row(dO, i), L[row0 + std::size_t(i)],
                      Dsum[row0 + std::size_t(i)], P, dS);
        };
        // line 15 at the sampled query rows: dQ_i sums round(dS_ij) K_j in one fp32 workspace over the
        // blocks its rank computes, in the ring's order
        fa::parallel_for(nr, [&](std::size_t k) {
            const int i = ref.rows[k], q_chunk = l.chunk_of_row(i), r = l.owner_of_chunk(q_chunk);
            std::vector<float> acc(D, 0.0f);
            for (int step = 0; step < l.P; ++step)
                for (const BlockTask& t : step_blocks(l, s.causal, r, step)) {
                    if (t.q_chunk != q_chunk || t.kind == Block::kSkip) continue;
                    for (int j = l.chunk_begin(t.k_chunk); j < l.chunk_begin(t.k_chunk) + l.chunk_length(t.k_chunk); ++j) {
                        if (!s.visible(i, j)) continue;
                        float P, dS;
                        p_ds(i, j, P, dS);
                        add_scaled(acc, round_to<T>(dS), row(p.K, j));
                    }
                }
            for (std::size_t d = 0; d < D; ++d) dQ[(bh * nr + k) * D + d] = round_to<T>(s.scale * acc[d]);
        });
        const auto found = std::find(ref.heads.begin(), ref.heads.end(), int(bh));
        if (found == ref.heads.end()) continue;
        const std::size_t hk = std::size_t(found - ref.heads.begin());
        // lines 12 and 16 at the sampled key rows: the sum travels from the chunk's owner round the
        // ring; at each step its holder adds the kernel calls' results (each rounded to T, as the
        // kernel writes dK_j, dV_j) into the step's terms, and the terms into the sum
        fa::parallel_for(nr, [&](std::size_t k) {
            const int j = ref.rows[k], k_chunk = l.chunk_of_row(j), owner = l.owner_of_chunk(k_chunk);
            std::vector<float> sumK(D, 0.0f), sumV(D, 0.0f);
            for (int step = 0; step < l.P; ++step) {
                std::vector<float> partK(D, 0.0f), partV(D, 0.0f);
                for (const BlockTask& t : step_blocks(l, s.causal, dkv_holder(l.P, owner, step), step)) {
                    if (t.k_chunk != k_chunk || t.kind == Block::kSkip) continue;
                    const int q0 = l.chunk_begin(t.q_chunk);
                    for (const Window& w : disjoint_windows(l.chunk_length(t.q_chunk), l.chunk_length(k_chunk))) {
                        std::vector<float> blkK(D, 0.0f), blkV(D, 0.0f);
                        for (int i = q0 + w.q_begin; i < q0 + w.q_begin + w.rows; ++i) {
                            if (!s.visible(i, j)) continue;
                            float P, dS;
                            p_ds(i, j, P, dS);
                            add_scaled(blkV, round_to<T>(P), row(dO, i));
                            add_scaled(blkK, round_to<T>(dS), row(p.Q, i));
                        }
                        for (std::size_t d = 0; d < D; ++d) {
                            partK[d] += round_to<T>(s.scale * blkK[d]);
                            partV[d] += round_to<T>(blkV[d]);
                        }
                    }
                }
                for (std::size_t d = 0; d < D; ++d) sumK[d] += partK[d], sumV[d] += partV[d];
            }
            for (std::size_t d = 0; d < D; ++d) {
                dK[(hk * nr + k) * D + d] = round_to<T>(sumK[d]);
                dV[(hk * nr + k) * D + d] = round_to<T>(sumV[d]);
            }
        });
    }
}

template <class T>
ch8::MirrorErrors ring_backward_mirror_errors(const fa::AttnProblem& p, const std::vector<float>& dO,
                                              const std::vector<float>& O, const std::vector<float>& L,
                                              const Layout& l, const ch6::SampledBackward& ref) {
    ch8::MirrorErrors e = ch8::mirror_errors<T>(p, dO, O, L, ref);  // its floors; its errors are replaced
    std::vector<float> dQ, dK, dV;
    ring_backward_mirror<T>(p, dO, O, L, l, ref, dQ, dK, dV);
    const fa::Tolerance any{INFINITY, 0.0};  // measured, not judged
    e.err[0] = fa::validate("dQ", dQ.data(), ref.dQ.data(), dQ.size(), any);
    e.err[1] = fa::validate("dK", dK.data(), ref.dK.data(), dK.size(), any);
    e.err[2] = fa::validate("dV", dV.data(), ref.dV.data(), dV.size(), any);
    return e;
}

#define FA_CH12_BACKWARD_MIRROR(T)                                                                            \
    template void ring_backward_mirror<T>(const fa::AttnProblem&, const std::vector<float>&,                  \
                                          const std::vector<float>&, const std::vector<float>&, const Layout&, \
                                          const ch6::SampledBackward&, std::vector<float>&, std::vector<float>&, \
                                          std::vector<float>&);
FA_CH12_BACKWARD_MIRROR(float)
FA_CH12_BACKWARD_MIRROR(__half)
FA_CH12_BACKWARD_MIRROR(__nv_bfloat16)
template ch8::MirrorErrors ring_backward_mirror_errors<__half>(const fa::AttnProblem&, const std::vector<float>&,
                                                               const std::vector<float>&, const std::vector<float>&,
                                                               const Layout&, const ch6::SampledBackward&);
template ch8::MirrorErrors ring_backward_mirror_errors<__nv_bfloat16>(const fa::AttnProblem&, const std::vector<float>&,
                                                                      const std::vector<float>&,
                                                                      const std::vector<float>&, const Layout&,
                                                                      const ch6::SampledBackward&);

template ch7::MirrorErrors ring_mirror_errors<float>(const fa::AttnProblem&, const Layout&, int);
template ch7::MirrorErrors ring_mirror_errors<__half>(const fa::AttnProblem&, const Layout&, int);
template ch7::MirrorErrors ring_mirror_errors<__nv_bfloat16>(const fa::AttnProblem&, const Layout&, int);

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
    return std::isfinite(m) ? m : INFINITY;
}

}  // namespace ch12
