// CPU mirror of chapter 3: the three stages of standard attention (Algorithm 0 of the
// FlashAttention paper) in plain float32 loops, walking the same kTile × kTile tiles as
// scores_kernel and output_kernel and skipping the same causal tiles, with the row softmax of
// fused_row_kernel. It runs in CI, so the tiling and masking logic is tested without a GPU.
#include <cmath>
#include <cstddef>
#include <limits>

#include "naive_attention.h"

#include "../../common/math.h"

namespace ch3 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Alg. 0 line 1: S = scale · Q Kᵀ for one head, tile (tr, tc) at a time.
void scores_mirror(const fa::AttnShape& s, const float* Q_h, const float* K_h, float* S_h) {
    const int N = s.N, D = s.D, T = fa::ceil_div(N, kTile);
    for (int tr = 0; tr < T; ++tr)
        for (int tc = 0; tc < T; ++tc) {
            const bool skipped = s.causal && tile_above_diagonal(tr, tc);
            for (int i = tr * kTile; i < (tr + 1) * kTile && i < N; ++i)
                for (int j = tc * kTile; j < (tc + 1) * kTile && j < N; ++j) {
                    float S_ij = kNegInf;
                    if (!skipped && s.visible(i, j)) {
                        float dot = 0;
                        for (int d = 0; d < D; ++d) dot += Q_h[std::size_t(i) * D + d] * K_h[std::size_t(j) * D + d];
                        S_ij = dot * s.scale;
                    }
                    S_h[std::size_t(i) * N + j] = S_ij;
                }
        }
}

// Alg. 0 line 2: P_i = e^{S_i − m_i} / l_i and L_i = m_i + log l_i for one row of length N.
void softmax_row_mirror(const float* S_i, float* P_i, float* L_i, int N) {
    float m = kNegInf;
    for (int j = 0; j < N; ++j) m = std::fmax(m, S_i[j]);
    float l = 0;
    for (int j = 0; j < N; ++j) l += std::exp(S_i[j] - m);
    for (int j = 0; j < N; ++j) P_i[j] = std::exp(S_i[j] - m) / l;
    *L_i = m + std::log(l);
}

// Alg. 0 line 3: O = P V for one head, row tile by row tile; causal row tiles stop at
// causal_key_end (P is zero beyond it).
void output_mirror(const fa::AttnShape& s, const float* P_h, const float* V_h, float* O_h) {
    const int N = s.N, D = s.D;
    for (int row0 = 0; row0 < N; row0 += kTile) {
        const int key_end = s.causal ? causal_key_end(row0, N) : N;
        for (int i = row0; i < row0 + kTile && i < N; ++i)
            for (int d = 0; d < D; ++d) {
                float acc = 0;
                for (int j = 0; j < key_end; ++j) acc += P_h[std::size_t(i) * N + j] * V_h[std::size_t(j) * D + d];
                O_h[std::size_t(i) * D + d] = acc;
            }
    }
}

}  // namespace

void forward_cpu_mirror(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                        float* O, float* L, float* S, float* P) {
    const std::size_t n = std::size_t(s.N), nd = n * std::size_t(s.D), nn = n * n;
    for (std::size_t bh = 0; bh < s.heads_total(); ++bh) {
        scores_mirror(s, Q + bh * nd, K + bh * nd, S + bh * nn);
        for (std::size_t i = 0; i < n; ++i)
            softmax_row_mirror(S + bh * nn + i * n, P + bh * nn + i * n, L + bh * n + i, s.N);
        output_mirror(s, P + bh * nn, V + bh * nd, O + bh * nd);
    }
}

}  // namespace ch3
