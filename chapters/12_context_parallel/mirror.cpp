// Chapter 12: the CPU mirror of the ring's arithmetic (chapter12.h, ring_mirror_errors): what a
// correct ring computes, rounded where the ring rounds, on the rows the check samples.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../common/dtype.h"
#include "../../common/low_precision_rule.h"
#include "../../common/parallel.h"
#include "../../common/reference.h"
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
    ch7::MirrorErrors e;
    e.check = fa::check_forward(p, O.data(), L.data());
    double max_v = 0, max_l = 1;
    for (float v : p.V) max_v = std::max(max_v, double(std::fabs(v)));
    for (float x : L) max_l = std::max(max_l, double(std::fabs(x)));
    const fa::RuleFloors f = fa::rule_floors(s.D, max_v, max_l);
    e.floor_O = f.O, e.floor_L = f.L, e.floor_rel = f.rel_O, e.floor_rel_L = f.rel_L;
    return e;
}

template ch7::MirrorErrors ring_mirror_errors<float>(const fa::AttnProblem&, const Layout&, int);
template ch7::MirrorErrors ring_mirror_errors<__half>(const fa::AttnProblem&, const Layout&, int);
template ch7::MirrorErrors ring_mirror_errors<__nv_bfloat16>(const fa::AttnProblem&, const Layout&, int);

}  // namespace ch12
