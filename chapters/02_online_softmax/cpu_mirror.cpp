// Chapter 2 on the CPU: the 2-pass online softmax, merging chunk states, and the one-pass fused
// weighted sum softmax(x)·V. Plain loops in float32, line for line with the README's algorithms
// (Alg. 1: online softmax, Alg. 2: merging, Alg. 3: fused weighted sum).
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "online_softmax.h"

namespace ch2 {

OnlineState online_state_cpu(const float* x, int n) {
    OnlineState s;  // Alg. 1 line 1: m_0 = −inf, d'_0 = 0
    for (int i = 0; i < n; ++i)
        s.push(x[i]);  // Alg. 1 lines 2–4: m_i = max(m_{i−1}, x_i); d'_i = d'_{i−1} e^{m_{i−1}−m_i} + e^{x_i−m_i}
    return s;
}

void normalize_row_cpu(const float* x, float* y, int cols, const OnlineState& s) {
    for (int j = 0; j < cols; ++j) y[j] = s.prob(x[j]);  // Alg. 1 lines 5–6: y_j = e^{x_j − m_N} / d'_N
}

void softmax_online_cpu(const float* x, float* y, float* lse, int rows, int cols) {
    for (int r = 0; r < rows; ++r) {
        const float* x_r = x + std::size_t(r) * cols;
        const OnlineState s = online_state_cpu(x_r, cols);            // pass 1: reads x
        if (lse != nullptr) lse[r] = s.logsumexp();                   // Alg. 1 line 7: L = m_N + log d'_N
        normalize_row_cpu(x_r, y + std::size_t(r) * cols, cols, s);  // pass 2: reads x, writes y
    }
}

OnlineState merge_chunks_cpu(const float* x, int cols, const std::vector<int>& cuts,
                             const std::vector<int>& order) {
    const int chunks = int(cuts.size()) + 1;
    std::vector<int> begin(chunks + 1);
    begin[0] = 0;
    for (int c = 1; c < chunks; ++c) begin[c] = cuts[c - 1];
    begin[chunks] = cols;
    std::vector<bool> used(chunks, false);
    bool valid = int(order.size()) == chunks;
    for (int c = 0; c < chunks && valid; ++c) valid = begin[c] < begin[c + 1];
    for (int c : order) {
        valid = valid && c >= 0 && c < chunks && !used[c];
        if (valid) used[c] = true;
    }
    if (!valid) {
        std::fprintf(stderr, "merge_chunks_cpu: cuts must increase inside (0, %d) and order must be a "
                             "permutation of the %d chunks\n", cols, chunks);
        std::exit(EXIT_FAILURE);
    }
    OnlineState s;  // Alg. 2 line 1: the empty state (−inf, 0)
    for (int c : order) {
        const OnlineState part = online_state_cpu(x + begin[c], begin[c + 1] - begin[c]);  // Alg. 2 line 3
        s.merge(part);  // Alg. 2 line 4: m = max(m_a, m_b); d = d_a e^{m_a−m} + d_b e^{m_b−m}
    }
    return s;
}

void softmax_weighted_sum_cpu(const float* x, const float* V, float* O, int rows, int cols, int dim) {
    std::vector<float> o(static_cast<std::size_t>(dim));
    for (int r = 0; r < rows; ++r) {
        const float* x_r = x + std::size_t(r) * cols;
        float m = -INFINITY, d = 0.0f;                // Alg. 3 line 1: m_0 = −inf, d'_0 = 0
        for (float& v : o) v = 0.0f;                  //                o_0 = 0
        for (int i = 0; i < cols; ++i) {
            const float m_new = fmaxf(m, x_r[i]);     // Alg. 3 line 3: m_i = max(m_{i−1}, x_i)
            if (m_new == -INFINITY) continue;         // only −inf so far: nothing to add
            const float alpha = expf(m - m_new);      // Alg. 3 line 4: e^{m_{i−1} − m_i}
            const float p = expf(x_r[i] - m_new);     //                e^{x_i − m_i}
            d = d * alpha + p;                        // Alg. 3 line 5: d'_i = d'_{i−1} α + p
            const float* V_i = V + std::size_t(i) * dim;
            for (int k = 0; k < dim; ++k)
                o[k] = o[k] * alpha + p * V_i[k];     // Alg. 3 line 6: o_i = o_{i−1} α + p V_i
            m = m_new;
        }
        const float inv_d = d > 0.0f ? 1.0f / d : 0.0f;  // all −inf row: O = 0
        float* O_r = O + std::size_t(r) * dim;
        for (int k = 0; k < dim; ++k) O_r[k] = o[k] * inv_d;  // Alg. 3 line 8: O = o_N / d'_N
    }
}

}  // namespace ch2
