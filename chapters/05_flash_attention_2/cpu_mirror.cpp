// Chapter 5, CPU mirror: Algorithm 1 of FlashAttention-2 in plain C++ loops, with the same tiles
// as the kernels and float32 arithmetic. It runs in CI (no GPU) and is what the kernels are
// compared with element by element. The outer loop over query blocks is parallel — that is the
// point of FlashAttention-2 — so it runs on all host cores.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../common/math.h"
#include "../../common/parallel.h"
#include "flash2.h"

namespace ch5 {

void forward_cpu_mirror(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                        float* O, float* L, Tiles t) {
    const int N = s.N, D = s.D, Br = t.Br, Bc = t.Bc;
    // Alg. 1 line 1: T_r = ceil(N / B_r) query blocks, T_c = ceil(N / B_c) key blocks
    const int T_r = fa::ceil_div(N, Br), T_c = fa::ceil_div(N, Bc);
    // Alg. 1 line 3: every (head, i) is independent
    fa::parallel_for(s.heads_total() * T_r, [&](std::size_t task) {
        const std::size_t head = (task / T_r) * N * D;
        const int i = int(task % T_r), r0 = i * Br, rows = std::min(Br, N - r0);
        const float *Q_i = Q + head + std::size_t(r0) * D, *Kh = K + head, *Vh = V + head;
        // Alg. 1 line 5: O_i = 0, l_i = 0, m_i = -inf
        std::vector<float> O_i(std::size_t(rows) * D, 0.0f), l(rows, 0.0f), m(rows, -INFINITY), P(Bc);
        const int j_end = s.causal ? std::min(T_c, fa::ceil_div(r0 + rows, Bc)) : T_c;
        for (int j = 0; j < j_end; ++j) {  // Alg. 1 line 6
            const int c0 = j * Bc, cols = std::min(Bc, N - c0);  // line 7: K_j, V_j are rows c0..
            for (int r = 0; r < rows; ++r) {
                // Alg. 1 line 8: S_ij = Q_i K_j^T (scaled; masked keys -inf)
                float rowmax = -INFINITY;
                for (int c = 0; c < cols; ++c) {
                    float dot = 0.0f;
                    for (int d = 0; d < D; ++d) dot += Q_i[r * D + d] * Kh[std::size_t(c0 + c) * D + d];
                    P[c] = s.visible(r0 + r, c0 + c) ? dot * s.scale : -INFINITY;
                    rowmax = std::max(rowmax, P[c]);
                }
                // Alg. 1 line 9: m_new, P_ij = exp(S_ij - m_new), l_new
                const float m_new = std::max(m[r], rowmax);
                const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no -inf - (-inf)
                const float alpha = std::exp(m[r] - m_use);
                float rowsum = 0.0f;
                for (int c = 0; c < cols; ++c) rowsum += (P[c] = std::exp(P[c] - m_use));
                l[r] = alpha * l[r] + rowsum;
                m[r] = m_new;
                // Alg. 1 line 10: O_i = diag(e^{m_old - m_new}) O_i + P_ij V_j
                for (int d = 0; d < D; ++d) {
                    float acc = alpha * O_i[r * D + d];
                    for (int c = 0; c < cols; ++c) acc += P[c] * Vh[std::size_t(c0 + c) * D + d];
                    O_i[r * D + d] = acc;
                }
            }
        }
        // Alg. 1 lines 12-15: O_i = diag(l_i)^-1 O_i and L_i = m_i + log l_i, written once
        for (int r = 0; r < rows; ++r) {
            for (int d = 0; d < D; ++d) O[head + std::size_t(r0 + r) * D + d] = O_i[r * D + d] / l[r];
            L[head / D + r0 + r] = m[r] + std::log(l[r]);
        }
    });
}

}  // namespace ch5
