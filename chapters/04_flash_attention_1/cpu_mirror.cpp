// CPU mirror of Algorithm 1 (FlashAttention-1 forward): the loops of the kernels in plain C++,
// float32, with the same tiles B_r × B_c, one line of the algorithm at a time. It runs in CI
// without a GPU, so the tiling itself (tails, B_r ≠ B_c, causal skipping, the line-12 update) is
// tested against the float64 reference on every push; the GPU tests then compare the kernels with it.
//
// "HBM" below is the caller's O and L and this file's l, m vectors; "SRAM" is the tile vectors
// K_j, V_j, Q_i, O_i, S_ij, P̃_ij, which hold one tile at a time, as the paper's on-chip memory does.
// The mirror also counts every float it moves between the two, so the tests can check the traffic
// formula that chapter 4's program prints.
#include "flash1.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../../common/attention_gpu.h"
#include "../../common/math.h"
#include "../../common/parallel.h"

namespace ch4 {
namespace {

/// e^{x − m}, and exactly 0 when x = −inf (a masked score, or m_i before the row has seen a key,
/// when m may be −inf too and −inf − (−inf) would be NaN).
float exp_diff(float x, float m) { return x == -INFINITY ? 0.0f : std::exp(x - m); }

/// Floats moved between "HBM" and "SRAM", by kind (fields of Traffic, in floats).
struct Counts {
    std::size_t steps = 0, olm = 0, q = 0, kv = 0, l_out = 0;
};

/// Algorithm 1 on one (batch, head): Q, K, V, O are N × D, L is N.
void mirror_head(const fa::AttnShape& s, const float* Q, const float* K, const float* V, float* O,
                 float* L, Tiles t, Counts& n) {
    const int N = s.N, D = s.D, B_r = t.Br, B_c = t.Bc;
    // Line 1: B_r, B_c are given (paper_tiles computes the paper's choice).
    // Line 2: O = 0, l = 0, m = −inf in HBM.
    std::vector<float> l(N, 0.0f), m(N, -INFINITY);
    std::fill(O, O + std::size_t(N) * D, 0.0f);
    n.olm += std::size_t(N) * (D + 2);
    // Lines 3–4: T_r query tiles of B_r rows, T_c key tiles of B_c keys (the last ones may be short).
    const int T_r = fa::ceil_div(N, B_r), T_c = fa::ceil_div(N, B_c);
    std::vector<float> K_j(std::size_t(B_c) * D), V_j(std::size_t(B_c) * D);
    std::vector<float> Q_i(std::size_t(B_r) * D), O_i(std::size_t(B_r) * D);
    std::vector<float> S_ij(std::size_t(B_r) * B_c), P_ij(std::size_t(B_r) * B_c);
    std::vector<float> l_i(B_r), m_i(B_r), m_tilde(B_r), l_tilde(B_r), m_new(B_r), l_new(B_r);

    for (int j = 0; j < T_c; ++j) {  // line 5
        const int j0 = j * B_c, keys = std::min(B_c, N - j0);
        // Line 6: load K_j, V_j from HBM to SRAM.
        std::copy_n(K + std::size_t(j0) * D, std::size_t(keys) * D, K_j.begin());
        std::copy_n(V + std::size_t(j0) * D, std::size_t(keys) * D, V_j.begin());
        n.kv += 2 * std::size_t(keys) * D;
        for (int i = first_query_tile(j, t, s.causal); i < T_r; ++i) {  // line 7
            const int i0 = i * B_r, rows = std::min(B_r, N - i0);
            // Line 8: load Q_i, O_i, l_i, m_i from HBM to SRAM.
            std::copy_n(Q + std::size_t(i0) * D, std::size_t(rows) * D, Q_i.begin());
            std::copy_n(O + std::size_t(i0) * D, std::size_t(rows) * D, O_i.begin());
            std::copy_n(&l[i0], rows, l_i.begin());
            std::copy_n(&m[i0], rows, m_i.begin());
            n.q += std::size_t(rows) * D;
            n.olm += std::size_t(rows) * (D + 2);
            // Line 9: S_ij = Q_i K_j^T (scaled; a key after the row is masked to −inf when causal).
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < keys; ++c) {
                    float dot = 0.0f;
                    for (int d = 0; d < D; ++d) dot += Q_i[r * D + d] * K_j[c * D + d];
                    const bool visible = !s.causal || j0 + c <= i0 + r;
                    S_ij[r * B_c + c] = visible ? dot * s.scale : -INFINITY;
                }
            // Line 10: m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij), l̃_ij = rowsum(P̃_ij).
            for (int r = 0; r < rows; ++r) {
                m_tilde[r] = -INFINITY;
                for (int c = 0; c < keys; ++c) m_tilde[r] = std::max(m_tilde[r], S_ij[r * B_c + c]);
                l_tilde[r] = 0.0f;
                for (int c = 0; c < keys; ++c) {
                    P_ij[r * B_c + c] = exp_diff(S_ij[r * B_c + c], m_tilde[r]);
                    l_tilde[r] += P_ij[r * B_c + c];
                }
            }
            // Line 11: m_new = max(m_i, m̃_ij), l_new = e^{m_i − m_new} l_i + e^{m̃_ij − m_new} l̃_ij.
            for (int r = 0; r < rows; ++r) {
                m_new[r] = std::max(m_i[r], m_tilde[r]);
                l_new[r] = exp_diff(m_i[r], m_new[r]) * l_i[r] + exp_diff(m_tilde[r], m_new[r]) * l_tilde[r];
            }
            // Line 12: O_i = diag(l_new)^-1 (diag(l_i) e^{m_i − m_new} O_i + e^{m̃_ij − m_new} P̃_ij V_j),
            // written to HBM. (l_new = 0 only while the row has seen no key; O_i stays 0 then.)
            for (int r = 0; r < rows; ++r) {
                const float w_old = exp_diff(m_i[r], m_new[r]), w_new = exp_diff(m_tilde[r], m_new[r]);
                const float inv_l_new = l_new[r] > 0.0f ? 1.0f / l_new[r] : 0.0f;
                for (int d = 0; d < D; ++d) {
                    float PV = 0.0f;
                    for (int c = 0; c < keys; ++c) PV += P_ij[r * B_c + c] * V_j[c * D + d];
                    O_i[r * D + d] = inv_l_new * (l_i[r] * w_old * O_i[r * D + d] + w_new * PV);
                }
            }
            std::copy_n(O_i.begin(), std::size_t(rows) * D, O + std::size_t(i0) * D);
            // Line 13: l_i = l_new, m_i = m_new, to HBM.
            std::copy_n(l_new.begin(), rows, &l[i0]);
            std::copy_n(m_new.begin(), rows, &m[i0]);
            n.olm += std::size_t(rows) * (D + 2);
            ++n.steps;
        }  // line 14
    }  // line 15
    // Line 16 returns O; chapters 5–6 also return L = m + log l.
    for (int r = 0; r < N; ++r) L[r] = m[r] + std::log(l[r]);
    n.olm += 2 * std::size_t(N);
    n.l_out += std::size_t(N);
}

Traffic to_traffic(const fa::AttnShape& s, Tiles t, const Counts& n) {
    Traffic tr;
    tr.inner_steps = n.steps;
    tr.olm_step_bytes = sizeof(float) * double(t.Br) * (2.0 * s.D + 4.0);
    tr.olm_bytes = sizeof(float) * double(n.olm);
    tr.q_bytes = sizeof(float) * double(n.q);
    tr.kv_bytes = sizeof(float) * double(n.kv);
    tr.l_out_bytes = sizeof(float) * double(n.l_out);
    tr.ideal_bytes = fa::forward_io_bytes(s, sizeof(float));
    return tr;
}

}  // namespace

Tiles paper_tiles(int D, std::size_t smem_bytes_per_block) {
    const std::size_t M = smem_bytes_per_block / sizeof(float), four_d = 4 * std::size_t(D);
    const int B = int(std::max<std::size_t>(1, fa::ceil_div(M, four_d)));  // ⌈M / 4d⌉
    return {std::min(B, D), B};
}

Traffic traffic(const fa::AttnShape& s, Tiles t) {
    // The mirror's loop bounds, with the counting and none of the arithmetic.
    const int N = s.N, D = s.D;
    const int T_r = fa::ceil_div(N, t.Br), T_c = fa::ceil_div(N, t.Bc);
    Counts n;
    n.olm = std::size_t(N) * (D + 2) + 2 * std::size_t(N);  // line 2, and reading l, m for L
    n.l_out = std::size_t(N);
    for (int j = 0; j < T_c; ++j) {
        n.kv += 2 * std::size_t(std::min(t.Bc, N - j * t.Bc)) * D;
        for (int i = first_query_tile(j, t, s.causal); i < T_r; ++i) {
            const std::size_t rows = std::size_t(std::min(t.Br, N - i * t.Br));
            n.q += rows * D;
            n.olm += 2 * rows * (D + 2);
            ++n.steps;
        }
    }
    const std::size_t heads = s.heads_total();
    n.steps *= heads, n.olm *= heads, n.q *= heads, n.kv *= heads, n.l_out *= heads;
    return to_traffic(s, t, n);
}

void forward_cpu_mirror(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                        float* O, float* L, Tiles tiles, Traffic* counted) {
    const std::size_t heads = s.heads_total(), head_elems = std::size_t(s.N) * s.D;
    std::vector<Counts> per_head(heads);
    fa::parallel_for(heads, [&](std::size_t bh) {
        const std::size_t o = bh * head_elems;
        mirror_head(s, Q + o, K + o, V + o, O + o, L + bh * s.N, tiles, per_head[bh]);
    });
    if (counted == nullptr) return;
    Counts total;
    for (const Counts& n : per_head) {
        total.steps += n.steps, total.olm += n.olm, total.q += n.q, total.kv += n.kv;
        total.l_out += n.l_out;
    }
    *counted = to_traffic(s, tiles, total);
}

}  // namespace ch4
