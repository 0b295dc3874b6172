// Chapter 6: the tiled backward (Algorithm 2 of FlashAttention-2) as plain C++ loops, in float32
// like the kernels. Same tiles, same loop order (key tiles outside, query tiles inside), same
// causal tile skipping, same two ways of accumulating dQ. It runs in CI without a GPU, so the
// algorithm (and every index) is tested there; the kernels only add the thread mapping.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "flash2_backward.h"

#include "../../common/math.h"

namespace ch6 {
namespace {

// One head's pointers and sizes.
struct Head {
    const float *Q, *K, *V, *dO, *L, *Dsum;
    float *dQ, *dK, *dV;
    int N, D;
    float scale;
    bool causal;
};

// P_ij and dS_ij of tile (i0, j0): Alg. 2 lines 10, 11, 13, 14. Entries outside the sequence or
// above the causal diagonal are 0. P and dS are Br × Bc, row-major.
void tile_p_ds(const Head& h, int i0, int j0, Tiles t, std::vector<float>& P, std::vector<float>& dS) {
    for (int r = 0; r < t.Br; ++r)
        for (int c = 0; c < t.Bc; ++c) {
            const int i = i0 + r, j = j0 + c;
            float p = 0.0f, ds = 0.0f;
            if (i < h.N && j < h.N && (!h.causal || j <= i)) {
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < h.D; ++d) {
                    s += h.Q[std::size_t(i) * h.D + d] * h.K[std::size_t(j) * h.D + d];    // line 10
                    dp += h.dO[std::size_t(i) * h.D + d] * h.V[std::size_t(j) * h.D + d];  // line 13
                }
                p = std::exp(s * h.scale - h.L[i]);  // line 11: P_ij = exp(S_ij − L_i)
                ds = p * (dp - h.Dsum[i]);           // line 14: dS_ij = P_ij ∘ (dP_ij − D_i)
            }
            P[std::size_t(r) * t.Bc + c] = p;
            dS[std::size_t(r) * t.Bc + c] = ds;
        }
}

// dQ_i += scale · dS_ij K_j, written back to dQ (Alg. 2 line 15).
void add_dq(const Head& h, int i0, int j0, Tiles t, const std::vector<float>& dS) {
    for (int r = 0; r < t.Br && i0 + r < h.N; ++r)
        for (int d = 0; d < h.D; ++d) {
            float acc = 0.0f;
            for (int c = 0; c < t.Bc && j0 + c < h.N; ++c)
                acc += dS[std::size_t(r) * t.Bc + c] * h.K[std::size_t(j0 + c) * h.D + d];
            h.dQ[std::size_t(i0 + r) * h.D + d] += h.scale * acc;
        }
}

// Lines 5–19 for one head; dQ accumulated in place when `atomic_dq` (the caller zeroed it).
void dkdv_head(const Head& h, Tiles t, bool atomic_dq) {
    const int T_r = fa::ceil_div(h.N, t.Br), T_c = fa::ceil_div(h.N, t.Bc);
    std::vector<float> P(std::size_t(t.Br) * t.Bc), dS(P.size());
    std::vector<float> dK_j(std::size_t(t.Bc) * h.D), dV_j(dK_j.size());
    for (int j = 0; j < T_c; ++j) {  // line 5
        const int j0 = j * t.Bc;
        std::fill(dK_j.begin(), dK_j.end(), 0.0f);  // line 7
        std::fill(dV_j.begin(), dV_j.end(), 0.0f);
        // line 8; causal: query tiles that end before key j0 are skipped
        for (int i = h.causal ? j0 / t.Br : 0; i < T_r; ++i) {
            const int i0 = i * t.Br;
            tile_p_ds(h, i0, j0, t, P, dS);
            for (int c = 0; c < t.Bc && j0 + c < h.N; ++c)
                for (int d = 0; d < h.D; ++d) {
                    float dv = 0.0f, dk = 0.0f;
                    for (int r = 0; r < t.Br && i0 + r < h.N; ++r) {
                        dv += P[std::size_t(r) * t.Bc + c] * h.dO[std::size_t(i0 + r) * h.D + d];  // line 12
                        dk += dS[std::size_t(r) * t.Bc + c] * h.Q[std::size_t(i0 + r) * h.D + d];  // line 16
                    }
                    dV_j[std::size_t(c) * h.D + d] += dv;
                    dK_j[std::size_t(c) * h.D + d] += dk;
                }
            if (atomic_dq) add_dq(h, i0, j0, t, dS);  // line 15
        }
        for (int c = 0; c < t.Bc && j0 + c < h.N; ++c)  // line 18
            for (int d = 0; d < h.D; ++d) {
                h.dK[std::size_t(j0 + c) * h.D + d] = h.scale * dK_j[std::size_t(c) * h.D + d];
                h.dV[std::size_t(j0 + c) * h.D + d] = dV_j[std::size_t(c) * h.D + d];
            }
    }
}

// The split strategy's second pass: Q_i fixed, K_j streamed; S, P, dP, dS recomputed.
void dq_head(const Head& h, Tiles t) {
    const int T_r = fa::ceil_div(h.N, t.Br), T_c = fa::ceil_div(h.N, t.Bc);
    std::vector<float> P(std::size_t(t.Br) * t.Bc), dS(P.size());
    for (int i = 0; i < T_r; ++i) {
        const int i0 = i * t.Br;
        for (int r = 0; r < t.Br && i0 + r < h.N; ++r)
            for (int d = 0; d < h.D; ++d) h.dQ[std::size_t(i0 + r) * h.D + d] = 0.0f;
        // causal: key tiles that start after the tile's last query are skipped
        const int j_end = h.causal ? std::min(T_c, fa::ceil_div(i0 + t.Br, t.Bc)) : T_c;
        for (int j = 0; j < j_end; ++j) {
            tile_p_ds(h, i0, j * t.Bc, t, P, dS);
            add_dq(h, i0, j * t.Bc, t, dS);
        }
    }
}

}  // namespace

void backward_cpu_mirror(int strategy, const fa::AttnShape& s, const BackwardTensors& t, Tiles tiles) {
    const std::size_t D = std::size_t(s.D);
    // line 4: D_i = rowsum(dO_i ∘ O_i); line 3 (atomic strategy): dQ = 0
    for (std::size_t row = 0; row < s.rows(); ++row) {
        float acc = 0.0f;
        for (std::size_t d = 0; d < D; ++d) acc += t.dO[row * D + d] * t.O[row * D + d];
        t.Dsum[row] = acc;
    }
    if (strategy == kAtomic) std::fill(t.dQ, t.dQ + s.elements(), 0.0f);
    for (std::size_t bh = 0; bh < s.heads_total(); ++bh) {
        const std::size_t e = bh * s.N * D, r = bh * s.N;
        const Head h{t.Q + e,  t.K + e,  t.V + e, t.dO + e, t.L + r, t.Dsum + r, t.dQ + e,
                     t.dK + e, t.dV + e, s.N,     s.D,      s.scale, s.causal};
        dkdv_head(h, tiles, strategy == kAtomic);
        if (strategy == kSplit) dq_head(h, tiles);
    }
}

}  // namespace ch6
