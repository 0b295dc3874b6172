/// @file shape.h
/// @brief The attention problem's shape, and the one tensor layout every chapter uses.
///
/// Q, K, V, O (and dQ, dK, dV, dO) are (batch, heads, seq, head_dim) arrays, row-major: element
/// (b, h, n, d) lives at ((b·H + h)·N + n)·D + d. Per-row vectors (L, m, l) are (batch, heads, seq).
/// Query row i sees key j when the mask is off, or when j ≤ i with the causal mask on.
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
    int N = 1;            ///< sequence length (queries = keys)
    int D = 64;           ///< head dimension
    bool causal = false;  ///< query i sees keys 0..i only
    float scale = 0.125f; ///< softmax scale (1/sqrt(D) unless chosen)

    /// Number of (batch, head) pairs: the independent attention problems.
    std::size_t heads_total() const { return std::size_t(B) * H; }
    /// Rows of Q (and entries of L).
    std::size_t rows() const { return heads_total() * N; }
    /// Elements of Q, K, V or O.
    std::size_t elements() const { return rows() * D; }
    /// Forward FLOPs as FlashAttention counts them: 4·B·H·N²·D, half of it with the causal mask.
    double flops_forward() const {
        const double f = 4.0 * double(heads_total()) * double(N) * double(N) * double(D);
        return causal ? f / 2 : f;
    }
    /// Backward FLOPs: 2.5 times the forward.
    double flops_backward() const { return 2.5 * flops_forward(); }
    /// Key j is visible from query i.
    bool visible(int i, int j) const { return !causal || j <= i; }
    /// "B=2 H=3 N=113 D=64 causal".
    std::string str() const {
        char buf[96];
        std::snprintf(buf, sizeof buf, "B=%d H=%d N=%d D=%d %s", B, H, N, D,
                      causal ? "causal" : "non-causal");
        return buf;
    }
};

/// Makes a shape with the default scale 1/sqrt(D) unless `scale` > 0.
inline AttnShape make_shape(int B, int H, int N, int D, bool causal, double scale = 0.0) {
    AttnShape s;
    s.B = B, s.H = H, s.N = N, s.D = D, s.causal = causal;
    s.scale = float(scale > 0 ? scale : 1.0 / std::sqrt(double(D)));
    return s;
}

}  // namespace fa
