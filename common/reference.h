/// @file reference.h
/// @brief The float64 CPU references: the single oracle every chapter and test is checked against.
///
/// Plain loops, no tiling, no tricks: softmax of a row, the attention forward (S, P, O and the
/// logsumexp L) and backward (dQ, dK, dV). Inputs are float32 (what the kernels read); every
/// intermediate is double. Layout and masking are those of shape.h.
///
/// Conventions: a masked score is −inf and its probability 0. A softmax row whose entries are all
/// −inf has no distribution; the course defines its result as all zeros (the same as a fully
/// masked row in FlashAttention, where l = 0 leaves O = 0) and its logsumexp as −inf, the log of
/// an empty sum. An attention row that sees no key (causal with N > N_k: shape.h) is such a row:
/// O_i = 0, L_i = −inf, and it adds nothing to any gradient (dQ_i = 0).
///
/// Shapes: Q, O, dQ, dO have H heads of N rows, K, V, dK, dV have H_kv heads of N_k rows (shape.h);
/// dK and dV of a K/V head sum over the query heads that read it (grouped-query attention).
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "parallel.h"
#include "shape.h"

namespace fa {

/// log Σ_j e^{x_j} of one row, in float64; −inf when every entry is −inf; NaN when any entry is
/// NaN (so that a result computed from NaN input can never match it).
inline double logsumexp_reference(const float* x, std::size_t cols) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < cols; ++j) {
        if (std::isnan(x[j])) return std::numeric_limits<double>::quiet_NaN();
        m = std::fmax(m, double(x[j]));
    }
    if (std::isinf(m) && m < 0) return m;
    double sum = 0;
    for (std::size_t j = 0; j < cols; ++j) sum += std::exp(double(x[j]) - m);
    return m + std::log(sum);
}

/// Row-wise softmax y = e^{x − m} / Σ e^{x − m} of a rows × cols matrix, in float64.
inline void softmax_reference(const float* x, double* y, std::size_t rows, std::size_t cols) {
    for (std::size_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        double* yr = y + r * cols;
        const double lse = logsumexp_reference(xr, cols);
        for (std::size_t j = 0; j < cols; ++j)
            yr[j] = std::isinf(lse) && lse < 0 ? 0.0 : std::exp(double(xr[j]) - lse);
    }
}

/// Offset of query head `bh` (= b·H + h) in a Q/O array.
inline std::size_t head_offset(const AttnShape& s, std::size_t bh) {
    return bh * std::size_t(s.N) * std::size_t(s.D);
}

/// Offset of K/V head `bkv` (= b·H_kv + g) in a K/V array.
inline std::size_t kv_offset(const AttnShape& s, std::size_t bkv) {
    return bkv * std::size_t(s.keys()) * std::size_t(s.D);
}

/// One query row i of head bh: O_i (D values) and L_i; optionally the score row S_i and the
/// probability row P_i (N_k values each, −inf and 0 where masked). Any output pointer may be null.
inline void attention_row_reference(const AttnShape& s, const float* Q, const float* K,
                                    const float* V, std::size_t bh, int i, double* O_row,
                                    double* L_row, double* S_row = nullptr,
                                    double* P_row = nullptr) {
    const std::size_t D = std::size_t(s.D), kv = kv_offset(s, s.kv_head_of(bh));
    const float* q = Q + head_offset(s, bh) + std::size_t(i) * D;
    std::vector<double> S(std::size_t(s.keys()));
    double m = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < s.keys(); ++j) {
        if (!s.visible(i, j)) {
            S[j] = -std::numeric_limits<double>::infinity();
            continue;
        }
        const float* k = K + kv + std::size_t(j) * D;
        double dot = 0;
        for (std::size_t d = 0; d < D; ++d) dot += double(q[d]) * double(k[d]);
        S[j] = dot * double(s.scale);
        m = std::fmax(m, S[j]);
    }
    double l = 0;
    for (int j = 0; j < s.keys(); ++j) l += s.visible(i, j) ? std::exp(S[j] - m) : 0.0;
    const double L = m + std::log(l);  // no key visible: m = −inf, l = 0, L = −inf
    if (O_row)
        for (std::size_t d = 0; d < D; ++d) O_row[d] = 0;
    for (int j = 0; j < s.keys(); ++j) {
        const double p = s.visible(i, j) ? std::exp(S[j] - L) : 0.0;
        if (S_row) S_row[j] = S[j];
        if (P_row) P_row[j] = p;
        if (O_row && p != 0) {
            const float* v = V + kv + std::size_t(j) * D;
            for (std::size_t d = 0; d < D; ++d) O_row[d] += p * double(v[d]);
        }
    }
    if (L_row) *L_row = L;
}

/// Full forward: O (rows × D) and L (rows), in float64, all rows in parallel.
inline void attention_forward_reference(const AttnShape& s, const float* Q, const float* K,
                                        const float* V, double* O, double* L) {
    parallel_for(s.rows(), [&](std::size_t r) {
        attention_row_reference(s, Q, K, V, r / s.N, int(r % s.N), O + r * s.D, L + r);
    });
}

/// What every backward row needs from the forward: L_i and D_i = rowsum(dO_i ∘ O_i).
struct BackwardStats {
    std::vector<double> L;     ///< logsumexp of each row (rows)
    std::vector<double> Dsum;  ///< D_i = Σ_d dO_id · O_id (rows)
};

/// Computes L and D for every row (in parallel).
inline BackwardStats backward_stats_reference(const AttnShape& s, const float* Q, const float* K,
                                              const float* V, const float* dO) {
    BackwardStats st;
    st.L.resize(s.rows());
    st.Dsum.resize(s.rows());
    parallel_for(s.rows(), [&](std::size_t r) {
        std::vector<double> o(std::size_t(s.D));
        attention_row_reference(s, Q, K, V, r / s.N, int(r % s.N), o.data(), &st.L[r]);
        double acc = 0;
        for (int d = 0; d < s.D; ++d) acc += double(dO[r * s.D + d]) * o[d];
        st.Dsum[r] = acc;
    });
    return st;
}

/// P_ij and dS_ij = P_ij (dP_ij − D_i) with dP_ij = dO_i · V_j, from the stored statistics.
inline void backward_entry_reference(const AttnShape& s, const float* Q, const float* K,
                                     const float* V, const float* dO, const BackwardStats& st,
                                     std::size_t bh, int i, int j, double* P, double* dS) {
    *P = 0;
    *dS = 0;
    if (!s.visible(i, j)) return;
    const std::size_t D = std::size_t(s.D), base = head_offset(s, bh), kv = kv_offset(s, s.kv_head_of(bh));
    const float *q = Q + base + i * D, *k = K + kv + j * D, *v = V + kv + j * D, *g = dO + base + i * D;
    double dot = 0, dP = 0;
    for (std::size_t d = 0; d < D; ++d) {
        dot += double(q[d]) * double(k[d]);
        dP += double(g[d]) * double(v[d]);
    }
    const std::size_t r = bh * std::size_t(s.N) + std::size_t(i);
    *P = std::exp(dot * double(s.scale) - st.L[r]);
    *dS = *P * (dP - st.Dsum[r]);
}

/// dQ_i = scale · Σ_j dS_ij K_j for query row i of head bh (D values).
inline void dq_row_reference(const AttnShape& s, const float* Q, const float* K, const float* V,
                             const float* dO, const BackwardStats& st, std::size_t bh, int i,
                             double* dq) {
    const std::size_t D = std::size_t(s.D), kv = kv_offset(s, s.kv_head_of(bh));
    for (std::size_t d = 0; d < D; ++d) dq[d] = 0;
    for (int j = 0; j < s.keys(); ++j) {
        double P, dS;
        backward_entry_reference(s, Q, K, V, dO, st, bh, i, j, &P, &dS);
        const float* k = K + kv + std::size_t(j) * D;
        for (std::size_t d = 0; d < D; ++d) dq[d] += dS * double(s.scale) * double(k[d]);
    }
}

/// dK_j = scale · Σ_i dS_ij Q_i and dV_j = Σ_i P_ij dO_i for key row j of K/V head bkv
/// (= b·H_kv + g; D values each), the sums running over the rows of every query head that reads it.
inline void dkdv_row_reference(const AttnShape& s, const float* Q, const float* K, const float* V,
                               const float* dO, const BackwardStats& st, std::size_t bkv, int j,
                               double* dk, double* dv) {
    const std::size_t D = std::size_t(s.D), G = std::size_t(s.group()), bh0 = s.first_query_head(bkv);
    for (std::size_t d = 0; d < D; ++d) dk[d] = dv[d] = 0;
    for (std::size_t bh = bh0; bh < bh0 + G; ++bh)
        for (int i = 0; i < s.N; ++i) {
            double P, dS;
            backward_entry_reference(s, Q, K, V, dO, st, bh, i, j, &P, &dS);
            const std::size_t base = head_offset(s, bh) + std::size_t(i) * D;
            for (std::size_t d = 0; d < D; ++d) {
                dk[d] += dS * double(s.scale) * double(Q[base + d]);
                dv[d] += P * double(dO[base + d]);
            }
        }
}

/// Full backward: dQ (rows × D), dK and dV (kv_rows × D) for the upstream gradient dO, in float64.
inline void attention_backward_reference(const AttnShape& s, const float* Q, const float* K,
                                         const float* V, const float* dO, double* dQ, double* dK,
                                         double* dV) {
    const BackwardStats st = backward_stats_reference(s, Q, K, V, dO);
    parallel_for(s.rows(), [&](std::size_t r) {
        dq_row_reference(s, Q, K, V, dO, st, r / s.N, int(r % s.N), dQ + r * s.D);
    });
    parallel_for(s.kv_rows(), [&](std::size_t r) {
        const std::size_t n = std::size_t(s.keys());
        dkdv_row_reference(s, Q, K, V, dO, st, r / n, int(r % n), dK + r * s.D, dV + r * s.D);
    });
}

}  // namespace fa
