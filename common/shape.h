/// @file shape.h
/// @brief The attention problem's shape, and the one tensor layout every chapter uses.
///
/// Q, K, V, O (and dQ, dK, dV, dO) are (batch, heads, seq, head_dim) arrays, row-major: element
/// (b, h, n, d) lives at ((b·H + h)·N + n)·D + d. Per-row vectors (L, m, l) are (batch, heads, seq).
/// Q, O, dQ, dO have H heads of N query rows; K, V, dK, dV have H_kv heads of N_k key rows (both
/// default to H and N). Query head h reads K/V head h / (H / H_kv) (grouped-query attention).
/// Query row i sees key j when the mask is off, or when j ≤ i + N_k − N with the causal mask on:
/// the diagonal ends at the last query and the last key (bottom-right, as in FlashAttention-2), so
/// with N > N_k the first N − N_k rows see no key at all (reference.h says what they return).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>

namespace fa {

/// Shape and options of one attention problem.
struct AttnShape {
    int B = 1;            ///< batch
    int H = 1;            ///< heads
    int N = 1;            ///< query rows per head (N_q)
    int D = 64;           ///< head dimension
    bool causal = false;  ///< query i sees keys 0..i + N_k − N only (bottom-right)
    float scale = 0.125f; ///< softmax scale (1/sqrt(D) unless chosen)
    int N_k = 0;          ///< key (and value) rows per head; 0: N (self-attention)
    int H_kv = 0;         ///< K/V heads, dividing H; 0: H (one K/V head per query head)

    /// Key rows per head: N_k, or N when left at 0.
    int keys() const { return N_k > 0 ? N_k : N; }
    /// K/V heads: H_kv, or H when left at 0.
    int kv_heads() const { return H_kv > 0 ? H_kv : H; }
    /// Query heads per K/V head (1 without grouped-query attention).
    int group() const { return H / kv_heads(); }
    /// Number of (batch, head) pairs: the independent attention problems.
    std::size_t heads_total() const { return std::size_t(B) * H; }
    /// Rows of Q (and entries of L).
    std::size_t rows() const { return heads_total() * N; }
    /// Elements of Q or O.
    std::size_t elements() const { return rows() * D; }
    /// Rows of K or V: B · H_kv · N_k.
    std::size_t kv_rows() const { return std::size_t(B) * kv_heads() * keys(); }
    /// Elements of K or V.
    std::size_t kv_elements() const { return kv_rows() * D; }
    /// The K/V head (b·H_kv + h / group) that query head bh = b·H + h reads.
    std::size_t kv_head_of(std::size_t bh) const {
        return bh / H * kv_heads() + bh % H / group();
    }
    /// The first of the group() query heads (b·H + h) that read K/V head bkv = b·H_kv + g.
    std::size_t first_query_head(std::size_t bkv) const {
        return bkv / kv_heads() * H + bkv % kv_heads() * group();
    }
    /// (Query, key) pairs the FLOP count charges: N·N_k; with the causal mask, the area of the
    /// visible part of the N × N_k score matrix, c·(2N_k − c)/2 with c = min(N, N_k) rows that see
    /// a key, the diagonal's cells counting half (N²/2 for N = N_k, as FlashAttention counts).
    double pairs() const {
        const double c = double(N < keys() ? N : keys());
        return causal ? c * (2.0 * keys() - c) / 2 : double(N) * keys();
    }
    /// Forward FLOPs as FlashAttention counts them: 4·B·H·D per pair (two products of 2·D each).
    double flops_forward() const { return 4.0 * double(heads_total()) * pairs() * double(D); }
    /// Backward FLOPs: 2.5 times the forward.
    double flops_backward() const { return 2.5 * flops_forward(); }
    /// Key j is visible from query i (the causal diagonal bottom-right: j ≤ i + N_k − N).
    bool visible(int i, int j) const { return !causal || j <= i + keys() - N; }
    /// The first query rows of each head that see no key: N − N_k of them when causal with N > N_k.
    int rows_without_keys() const { return causal && N > keys() ? N - keys() : 0; }
    /// "B=2 H=3 N=113 D=64 causal", with " N_k=203 H_kv=1" when those differ from N and H.
    std::string str() const {
        char buf[128];
        int n = std::snprintf(buf, sizeof buf, "B=%d H=%d N=%d D=%d %s", B, H, N, D,
                              causal ? "causal" : "non-causal");
        if (keys() != N) n += std::snprintf(buf + n, sizeof buf - std::size_t(n), " N_k=%d", keys());
        if (kv_heads() != H) std::snprintf(buf + n, sizeof buf - std::size_t(n), " H_kv=%d", kv_heads());
        return buf;
    }
};

/// Empty when the shape's K/V heads are valid (H_kv ≥ 0 dividing H, N_k ≥ 0; 0 means H, N);
/// otherwise why not, in one line for an error message.
inline std::string kv_shape_error(const AttnShape& s) {
    if (s.H_kv < 0 || s.H_kv > s.H || (s.H_kv > 0 && s.H % s.H_kv != 0))
        return "--kv-heads " + std::to_string(s.H_kv) + " does not divide --heads " + std::to_string(s.H) +
               ": each K/V head serves H / H_kv query heads";
    if (s.N_k < 0) return "--seq-k " + std::to_string(s.N_k) + ": keys per head must be >= 1 (0: as many as queries)";
    return "";
}

/// Makes a shape with the default scale 1/sqrt(D) unless `scale` > 0.
inline AttnShape make_shape(int B, int H, int N, int D, bool causal, double scale = 0.0) {
    AttnShape s;
    s.B = B, s.H = H, s.N = N, s.D = D, s.causal = causal;
    s.scale = float(scale > 0 ? scale : 1.0 / std::sqrt(double(D)));
    return s;
}

/// `s` with N_k keys per head and H_kv K/V heads (queries and keys of different lengths, grouped
/// heads; 0 keeps N, H).
inline AttnShape with_kv(AttnShape s, int N_k, int H_kv) {
    s.N_k = N_k, s.H_kv = H_kv;
    return s;
}

}  // namespace fa
