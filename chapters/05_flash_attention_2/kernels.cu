// Chapter 5: FlashAttention-2 forward in fp32 on CUDA cores. This is the file to edit.
//
//   ./chapter5 --kernel 1   readable: one thread per query row, Algorithm 1 of FlashAttention-2 as
//                           written (line numbers in the comments)
//   ./chapter5 --kernel 2   tuned (default): 256 threads share a B_r × B_c tile; every thread owns a
//                           register sub-tile of S_ij and of O_i; row max/sum by warp shuffles;
//                           conflict-free shared-memory rows; 16-byte loads; K_j and V_j loaded with
//                           cp.async while the other one is being used; few instructions besides
//                           the FFMAs (one FFMA + one MUFU.EX2 per probability, lazy O rescale)
//   ./chapter5 --ladder     times every step from a plain register-tiled kernel to variant 2
//
// Both variants: grid (T_r, H, B). blockIdx.x is the query block i, so the blocks of one
// (batch, head), which read the same K_j and V_j, are scheduled together and find those tiles in
// L2. Each block loads its Q_i once, keeps m_i, l_i and O_i on chip for the whole inner loop over
// j, and writes O_i and L_i = m_i + log l_i once at the end. The causal mask stops the inner loop
// at the block holding the diagonal and masks only the tiles the diagonal (or N) cuts.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/dispatch.h"
#include "../../common/fast_math.cuh"
#include "../../common/float4.cuh"
#include "../../common/math.h"
#include "../../common/tensor_core/ptx.cuh"
#include "../../common/warp.cuh"
#include "flash2.h"

namespace ch5 {
namespace {

constexpr float kLn2 = 0.6931471805599453f;

// ------------------------------------------------------------------------------------------------
// Variant 1: one thread per query row.
//
// Who owns what: thread r of block i owns query row i·B_r + r: it computes that row of S_ij (kept
// in shared memory, row r of S), its m_i and l_i (registers) and its row of O_i (row r of O_s in
// shared memory). All threads of the block load Q_i, K_j and V_j together.
// Shared memory: Q_s [B_r][D] | O_s [B_r][D] | K_s [B_c][D] | V_s [B_c][D] | S_s [B_r][B_c].
// ------------------------------------------------------------------------------------------------
__global__ void flash2_readable(const float* Q, const float* K, const float* V, float* O, float* L,
                                int N, int D, int Bc, float scale, bool causal) {
    const int Br = blockDim.x, r = threadIdx.x;
    const int i = blockIdx.x, H = gridDim.y, bh = blockIdx.z * H + blockIdx.y;
    const std::size_t head = std::size_t(bh) * N * D;
    const int row = i * Br + r;  // the query row this thread owns

    extern __shared__ float smem_readable[];
    float* Q_s = smem_readable;
    float* O_s = Q_s + Br * D;
    float* K_s = O_s + Br * D;
    float* V_s = K_s + Bc * D;
    float* S_s = V_s + Bc * D;

    // Alg. 1 line 4: load Q_i (rows past N read as 0; their results are never stored)
    for (int e = r; e < Br * D; e += Br) {
        const int q_row = i * Br + e / D;
        Q_s[e] = q_row < N ? Q[head + std::size_t(q_row) * D + e % D] : 0.0f;
    }
    // Alg. 1 line 5: O_i = 0, l_i = 0, m_i = -inf
    for (int d = 0; d < D; ++d) O_s[r * D + d] = 0.0f;
    float m_i = -INFINITY, l_i = 0.0f;

    // Alg. 1 line 6, causal: key blocks after the one holding the block's last row are all masked
    const int T_c = fa::ceil_div(N, Bc);
    const int j_end = causal ? min(T_c, fa::ceil_div((i + 1) * Br, Bc)) : T_c;
    for (int j = 0; j < j_end; ++j) {
        __syncthreads();  // everyone is done with the previous K_j, V_j
        // Alg. 1 line 7: load K_j, V_j (rows past N read as 0, and are masked below)
        for (int e = r; e < Bc * D; e += Br) {
            const int k_row = j * Bc + e / D;
            const std::size_t g = head + std::size_t(k_row) * D + e % D;
            K_s[e] = k_row < N ? K[g] : 0.0f;
            V_s[e] = k_row < N ? V[g] : 0.0f;
        }
        __syncthreads();

        // Alg. 1 line 8: S_ij = Q_i K_j^T (scaled); masked keys get -inf
        float* S_r = S_s + r * Bc;
        float rowmax = -INFINITY;
        for (int c = 0; c < Bc; ++c) {
            const int key = j * Bc + c;
            float s = -INFINITY;
            if (key < N && (!causal || key <= row)) {
                float dot = 0.0f;
                for (int d = 0; d < D; ++d) dot += Q_s[r * D + d] * K_s[c * D + d];
                s = dot * scale;
            }
            S_r[c] = s;
            rowmax = fmaxf(rowmax, s);
        }
        // Alg. 1 line 9: m_new = max(m_i, rowmax(S_ij)), P_ij = exp(S_ij - m_new),
        //                l_new = e^{m_i - m_new} l_i + rowsum(P_ij)
        const float m_new = fmaxf(m_i, rowmax);
        // a row that has seen only masked keys keeps m = -inf: use 0 so no -inf - (-inf) = NaN
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = expf(m_i - m_use);
        float rowsum = 0.0f;
        for (int c = 0; c < Bc; ++c) {
            S_r[c] = expf(S_r[c] - m_use);
            rowsum += S_r[c];
        }
        l_i = alpha * l_i + rowsum;
        m_i = m_new;
        // Alg. 1 line 10: O_i = diag(e^{m_i - m_new}) O_i + P_ij V_j (no division in the loop)
        for (int d = 0; d < D; ++d) {
            float acc = alpha * O_s[r * D + d];
            for (int c = 0; c < Bc; ++c) acc += S_r[c] * V_s[c * D + d];
            O_s[r * D + d] = acc;
        }
    }
    if (row >= N) return;
    // Alg. 1 lines 12-15: O_i = diag(l_i)^-1 O_i, L_i = m_i + log(l_i), written once
    for (int d = 0; d < D; ++d) O[head + std::size_t(row) * D + d] = O_s[r * D + d] / l_i;
    L[std::size_t(bh) * N + row] = m_i + logf(l_i);
}

std::size_t readable_smem_bytes(Tiles t, int D) {
    return sizeof(float) * (2 * std::size_t(t.Br) * D + 2 * std::size_t(t.Bc) * D + std::size_t(t.Br) * t.Bc);
}

void launch_readable(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                     float* O, float* L) {
    const Tiles t = tiles(kReadable, s.D, fa::smem_per_block_optin());
    const std::size_t smem = readable_smem_bytes(t, s.D);
    fa::allow_dynamic_smem_once(flash2_readable, smem, "chapter 5 kernel 1");
    const dim3 grid(fa::ceil_div(s.N, t.Br), s.H, s.B);
    flash2_readable<<<grid, t.Br, smem>>>(Q, K, V, O, L, s.N, s.D, t.Bc, s.scale, s.causal);
    CUDA_CHECK_LAUNCH();
}

// ------------------------------------------------------------------------------------------------
// Variant 2: tuned.
//
// Who owns what (256 threads = 8 warps, B_r × B_c tile, head dim padded to D_PAD ∈ {64, 128}):
//   lane = threadIdx.x % 32, cg = lane % 16 (column group), rg = 2·warp + lane / 16 (row group).
//   Thread (rg, cg) owns query rows rg + 16·a (a < TM = B_r/16), the S_ij columns cg + 16·b
//   (b < TN = B_c/16), and the O_i columns 4(cg + 16·q) .. +3 (q < D_PAD/64, float4 chunks).
//   The 16 threads of a row group are the 16 lanes of one half-warp, so row max and row sum are
//   shuffles within the half-warp, and P_ij, written to shared memory by those 16 lanes, is read
//   back only by them.
// Interleaved ownership (cg + 16·b rather than 4 consecutive columns) makes the 8 lanes of each
// 16-byte shared-memory request read 8 different rows of K_j; with rows padded to D_PAD + 4
// floats those 8 rows start in 8 different bank groups: no conflicts (see ladder step 2).
// Shared memory: Q_s [B_r][QS] | K_s [B_c][QS] | V_s [B_c][QS] | P_s [B_r][PS].
//
// One template for kernel 2 and every ladder step: `Step` (1..7) switches the optimizations on
// cumulatively, so each step's change is the `if constexpr` arms labelled `// step N:` (grep -n
// "step 4" shows what step 4 adds). Step 5 changes the tiles only (LadderStep below).
// ------------------------------------------------------------------------------------------------
constexpr int kLastStep = 7;  // the last ladder step is kernel 2

template <int Step, int D_PAD_, int BR, int BC>
struct Cfg {
    static constexpr int D_PAD = D_PAD_, Br = BR, Bc = BC;
    static constexpr int kThreads = 256;
    static constexpr int TM = Br / 16, TN = Bc / 16, TO = D_PAD / 64;
    // step 1: register tiles of S_ij and O_i, row max and row sum by shuffles
    static constexpr bool kPad = Step >= 2;    // step 2: padded rows, no bank conflicts
    static constexpr bool kVec = Step >= 3;    // step 3: 16-byte loads and stores
    static constexpr bool kAsync = Step >= 4;  // step 4: cp.async, K_j and V_j load during compute
    // step 6: fewer instructions that are not multiply-adds (fixed-count tile loads, one FFMA and
    // one MUFU per probability, masks only on cut tiles, O rescaled only when a row max moved)
    static constexpr bool kSlim = Step >= 6;
    // step 7: the loop over head dims of S_ij = Q_i K_j^T fully unrolled (before: 4 steps of 4),
    // so the compiler can issue the shared-memory loads of later steps ahead of the FFMAs
    static constexpr bool kUnrollS = Step >= 7;
    static constexpr int QS = D_PAD + (kPad ? 4 : 0);  // step 2: row stride of Q_s, K_s, V_s (floats)
    static constexpr int PS = Bc + (kPad ? 16 : 0);    // step 2: row stride of P_s: two half-warps
                                                       // write rows 16 banks apart
    static constexpr std::size_t kSmemFloats =
        std::size_t(Br) * QS + 2 * std::size_t(Bc) * QS + std::size_t(Br) * PS;
    static_assert(Step >= 1 && Step <= kLastStep, "ladder steps 1..7");
    static_assert(Br % 16 == 0 && Bc % 16 == 0 && D_PAD % 64 == 0, "tile shape");
};

// The cp.async of common/tensor_core/ptx.cuh (sm_80+), with the fallback chapter 5 keeps for older
// GPUs: there the 16 bytes are copied at once and there is nothing to commit or wait for.
// copy16_async: when `valid` is false nothing is read and the 16 bytes become zeros.
__device__ __forceinline__ void copy16_async(float* dst, const float* src, bool valid) {
#if FA_TC_SM80
    tc::cp_async_16_zfill(dst, src, valid);
#else
    *reinterpret_cast<float4*>(dst) = valid ? *reinterpret_cast<const float4*>(src) : make_float4(0, 0, 0, 0);
#endif
}
__device__ __forceinline__ void async_commit() {
#if FA_TC_SM80
    tc::cp_async_commit();
#endif
}
template <int Pending>
__device__ __forceinline__ void async_wait() {
#if FA_TC_SM80
    tc::cp_async_wait<Pending>();
#endif
}

// Copies ROWS rows, starting at row0, of a head's (N × D) matrix into shared memory (row stride
// C::QS, D_PAD columns). Rows at or past N and columns at or past D become 0, so padded keys
// and padded head dims add nothing to dot products.
template <class C, int ROWS>
__device__ __forceinline__ void load_tile(float* dst, const float* head, int row0, int N, int D) {
    constexpr int kPerRow = C::D_PAD / 4;  // 16-byte chunks per row
    if constexpr (C::kSlim) {
        // step 6: each thread copies the same column chunk of every kRowStep-th row: a fixed trip
        // count, no division, the column test done once
        static_assert(C::kVec && C::kThreads % kPerRow == 0 && ROWS * kPerRow % C::kThreads == 0,
                      "16-byte chunks, an equal share for every thread");
        constexpr int kRowStep = C::kThreads / kPerRow;
        const int d = 4 * (int(threadIdx.x) % kPerRow), r0 = int(threadIdx.x) / kPerRow;
        const bool d_valid = d < D;
#pragma unroll
        for (int r = r0; r < ROWS; r += kRowStep) {
            const bool valid = d_valid && row0 + r < N;
            copy16_async(dst + r * C::QS + d, valid ? head + std::size_t(row0 + r) * D + d : head, valid);
        }
    } else if constexpr (C::kVec) {  // step 3: 16-byte chunks
        constexpr int kChunks = ROWS * kPerRow;
        for (int e = threadIdx.x; e < kChunks; e += C::kThreads) {
            const int r = e / kPerRow, d = 4 * (e % kPerRow);
            const bool valid = row0 + r < N && d < D;
            const float* src = valid ? head + std::size_t(row0 + r) * D + d : head;
            float* out = dst + r * C::QS + d;
            if constexpr (C::kAsync)  // step 4: cp.async
                copy16_async(out, src, valid);
            else
                *reinterpret_cast<float4*>(out) =
                    valid ? *reinterpret_cast<const float4*>(src) : make_float4(0, 0, 0, 0);
        }
    } else {  // before step 3: one float at a time
        for (int e = threadIdx.x; e < ROWS * C::D_PAD; e += C::kThreads) {
            const int r = e / C::D_PAD, d = e % C::D_PAD;
            dst[r * C::QS + d] = row0 + r < N && d < D ? head[std::size_t(row0 + r) * D + d] : 0.0f;
        }
    }
}

// The operands of one 4-wide step of S_ij = Q_i K_j^T: head dims d..d+3 of this thread's TM query
// rows and TN keys.
template <class C>
struct ScoreFrags {
    float4 q[C::TM], k[C::TN];
};
template <class C>
__device__ __forceinline__ void load_score_frags(ScoreFrags<C>& f, const float* Q_s, const float* K_s,
                                                 int rg, int cg, int d) {
#pragma unroll
    for (int a = 0; a < C::TM; ++a)
        f.q[a] = *reinterpret_cast<const float4*>(Q_s + (rg + 16 * a) * C::QS + d);
#pragma unroll
    for (int b = 0; b < C::TN; ++b)
        f.k[b] = *reinterpret_cast<const float4*>(K_s + (cg + 16 * b) * C::QS + d);
}
template <class C>
__device__ __forceinline__ void score_step(float (&S)[C::TM][C::TN], const ScoreFrags<C>& f) {
#pragma unroll
    for (int a = 0; a < C::TM; ++a)
#pragma unroll
        for (int b = 0; b < C::TN; ++b) {
            // four fused multiply-adds into the accumulator: writing the sum of four products
            // first would cost a multiply and an add more per four terms
            S[a][b] = fmaf(f.q[a].x, f.k[b].x, S[a][b]);
            S[a][b] = fmaf(f.q[a].y, f.k[b].y, S[a][b]);
            S[a][b] = fmaf(f.q[a].z, f.k[b].z, S[a][b]);
            S[a][b] = fmaf(f.q[a].w, f.k[b].w, S[a][b]);
        }
}

// Alg. 1 line 8: this thread's sub-tile of S_ij = Q_i K_j^T (unscaled), 4 head dims per step.
template <class C>
__device__ __forceinline__ void tile_scores(const float* Q_s, const float* K_s, int rg, int cg,
                                            float (&S)[C::TM][C::TN]) {
#pragma unroll
    for (int a = 0; a < C::TM; ++a)
#pragma unroll
        for (int b = 0; b < C::TN; ++b) S[a][b] = 0.0f;
    constexpr int kUnroll = C::kUnrollS ? C::D_PAD / 4 : 4;  // step 7: fully unrolled
#pragma unroll kUnroll
    for (int d = 0; d < C::D_PAD; d += 4) {
        ScoreFrags<C> f;
        load_score_frags<C>(f, Q_s, K_s, rg, cg, d);
        score_step<C>(S, f);
    }
}

// Alg. 1 line 9 for this thread's rows, in base 2 (e^x = 2^(x·log2 e)): m_new = max(m, rowmax S),
// P = 2^(S - m_new) (kept in S), the partial l over this thread's columns rescaled and extended,
// and line 10's rescale of O_i by 2^(m - m_new). Before step 6, S and m are already scaled by
// c = scale·log2 e. From step 6 they are raw scores: 2^((S - m)·c) is one FFMA and one MUFU, and
// O_i is rescaled only if some row max of the warp moved (else every factor is exactly 1).
template <class C>
__device__ __forceinline__ void online_softmax(float (&S)[C::TM][C::TN], float (&m)[C::TM],
                                               float (&l)[C::TM], float4 (&O)[C::TM][C::TO], float c) {
    float alpha[C::TM];
    bool moved = false;
#pragma unroll
    for (int a = 0; a < C::TM; ++a) {
        float rowmax = -INFINITY;
#pragma unroll
        for (int b = 0; b < C::TN; ++b) rowmax = fmaxf(rowmax, S[a][b]);
        rowmax = fa::group_max<16>(rowmax);  // the 16 lanes of the half-warp share these rows
        const float m_new = fmaxf(m[a], rowmax);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no -inf - (-inf)
        float rowsum = 0.0f;
        if constexpr (C::kSlim) {  // step 6: the scale folded into one FFMA, then MUFU.EX2
            alpha[a] = fa::fast_exp2((m[a] - m_use) * c);  // exactly 1 when m did not move
            const float mc = m_use * c;
#pragma unroll
            for (int b = 0; b < C::TN; ++b) {
                S[a][b] = fa::fast_exp2(fmaf(S[a][b], c, -mc));
                rowsum += S[a][b];
            }
            moved |= m_new != m[a];
        } else {
            alpha[a] = exp2f(m[a] - m_use);
#pragma unroll
            for (int b = 0; b < C::TN; ++b) {
                S[a][b] = exp2f(S[a][b] - m_use);
                rowsum += S[a][b];
            }
        }
        // alpha is the same in all 16 lanes, so the partial sums can be added up once, at the end
        l[a] = alpha[a] * l[a] + rowsum;
        m[a] = m_new;
    }
    if (C::kSlim && !__any_sync(0xffffffffu, moved)) return;  // step 6: lazy rescale
#pragma unroll
    for (int a = 0; a < C::TM; ++a)
#pragma unroll
        for (int q = 0; q < C::TO; ++q) {
            O[a][q].x *= alpha[a], O[a][q].y *= alpha[a], O[a][q].z *= alpha[a], O[a][q].w *= alpha[a];
        }
}

// The masks of Alg. 1 line 8 on this thread's scores (rows row + 16a, keys key + 16b): keys at or
// past N, and with `causal` keys after the row, get -inf; only tiles that N or the diagonal cut
// need it. Before step 6 the scores are also scaled here.
template <class C>
__device__ __forceinline__ void mask_scores(float (&S)[C::TM][C::TN], int row, int key, int N,
                                            bool causal, bool cut, float scale_log2) {
#pragma unroll
    for (int a = 0; a < C::TM; ++a)
#pragma unroll
        for (int b = 0; b < C::TN; ++b) {
            if (!C::kSlim) S[a][b] *= scale_log2;  // before step 6: scaled here
            const int r = row + 16 * a, k = key + 16 * b;
            if (cut && (k >= N || (causal && k > r))) S[a][b] = -INFINITY;
        }
}

// P_ij entries c..c+3 of this thread's TM rows.
template <class C>
__device__ __forceinline__ void load_p(float4 (&p)[C::TM], const float* P_s, int rg, int c) {
#pragma unroll
    for (int a = 0; a < C::TM; ++a) p[a] = *reinterpret_cast<const float4*>(P_s + (rg + 16 * a) * C::PS + c);
}
// This thread's float4 column chunks of row `key` of V_j.
template <class C>
__device__ __forceinline__ void load_v(float4 (&v)[C::TO], const float* V_s, int cg, int key) {
#pragma unroll
    for (int q = 0; q < C::TO; ++q) v[q] = *reinterpret_cast<const float4*>(V_s + key * C::QS + 4 * (cg + 16 * q));
}
// O_i += P_ij[:, key] V_j[key, :] for this thread's rows and chunks; p holds P's key as component k.
template <class C>
__device__ __forceinline__ void pv_key(float4 (&O)[C::TM][C::TO], const float4 (&p)[C::TM], int k,
                                       const float4 (&v)[C::TO]) {
#pragma unroll
    for (int a = 0; a < C::TM; ++a) {
        const float pa = fa::component(p[a], k);
#pragma unroll
        for (int q = 0; q < C::TO; ++q) {
            O[a][q].x = fmaf(pa, v[q].x, O[a][q].x), O[a][q].y = fmaf(pa, v[q].y, O[a][q].y);
            O[a][q].z = fmaf(pa, v[q].z, O[a][q].z), O[a][q].w = fmaf(pa, v[q].w, O[a][q].w);
        }
    }
}

// Alg. 1 line 10: O_i += P_ij V_j for this thread's rows and float4 column chunks.
template <class C>
__device__ __forceinline__ void tile_pv(const float* P_s, const float* V_s, int rg, int cg,
                                        float4 (&O)[C::TM][C::TO]) {
#pragma unroll 2
    for (int c = 0; c < C::Bc; c += 4) {
        float4 p[C::TM];
        load_p<C>(p, P_s, rg, c);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float4 v[C::TO];
            load_v<C>(v, V_s, cg, c + k);
            pv_key<C>(O, p, k, v);
        }
    }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    flash2_tuned(const float* Q, const float* K, const float* V, float* O, float* L, int N, int D,
                 float scale_log2, bool causal) {
    const int T_r = fa::ceil_div(N, C::Br), T_c = fa::ceil_div(N, C::Bc);
    // causal blocks near the end of the sequence have the most work: start them first
    const int i = causal ? T_r - 1 - int(blockIdx.x) : int(blockIdx.x);
    const int bh = blockIdx.z * gridDim.y + blockIdx.y;
    const std::size_t head = std::size_t(bh) * N * D;
    const int lane = threadIdx.x % 32, cg = lane % 16, rg = 2 * (threadIdx.x / 32) + lane / 16;
    const int row0 = i * C::Br;

    extern __shared__ __align__(16) float smem_tuned[];
    float* Q_s = smem_tuned;
    float* K_s = Q_s + C::Br * C::QS;
    float* V_s = K_s + C::Bc * C::QS;
    float* P_s = V_s + C::Bc * C::QS;

    // Alg. 1 line 5: O_i = 0, l_i = 0, m_i = -inf (in registers for the whole loop)
    float4 O_acc[C::TM][C::TO];
    float m[C::TM], l[C::TM];
#pragma unroll
    for (int a = 0; a < C::TM; ++a) {
        m[a] = -INFINITY, l[a] = 0.0f;
#pragma unroll
        for (int q = 0; q < C::TO; ++q) O_acc[a][q] = make_float4(0, 0, 0, 0);
    }

    // Alg. 1 line 4: load Q_i; with cp.async also start K_0 (one copy group)
    load_tile<C, C::Br>(Q_s, Q + head, row0, N, D);
    if constexpr (C::kAsync) {  // step 4: K_0 in flight before the loop
        load_tile<C, C::Bc>(K_s, K + head, 0, N, D);
        async_commit();
    }

    const int j_end = causal ? min(T_c, fa::ceil_div(row0 + C::Br, C::Bc)) : T_c;
    for (int j = 0; j < j_end; ++j) {
        const int key0 = j * C::Bc;
        // Alg. 1 line 7: load K_j, V_j
        if constexpr (C::kAsync) {  // step 4: V_j in flight while S_ij is computed
            if (j > 0) __syncthreads();  // everyone is done with V_{j-1} and P of step j-1
            load_tile<C, C::Bc>(V_s, V + head, key0, N, D);  // V_j arrives while S_ij is computed
            async_commit();
            async_wait<1>();  // all but the newest group (V_j) have landed: Q_i and K_j
            __syncthreads();
        } else {  // before step 4: both loaded, then used
            __syncthreads();
            load_tile<C, C::Bc>(K_s, K + head, key0, N, D);
            load_tile<C, C::Bc>(V_s, V + head, key0, N, D);
            __syncthreads();
        }

        // Alg. 1 line 8: S_ij = Q_i K_j^T (before step 6 scaled here by scale·log2 e, for exp2)
        float S[C::TM][C::TN];
        tile_scores<C>(Q_s, K_s, rg, cg, S);
        const bool cut = key0 + C::Bc > N || (causal && key0 + C::Bc - 1 > row0);
        if (!C::kSlim || cut)  // step 6: only the tiles that N or the diagonal cut
            mask_scores<C>(S, row0 + rg, key0 + cg, N, causal, cut, scale_log2);
        // Alg. 1 lines 9-10: online softmax, rescale O_i
        online_softmax<C>(S, m, l, O_acc, scale_log2);
#pragma unroll
        for (int a = 0; a < C::TM; ++a)
#pragma unroll
            for (int b = 0; b < C::TN; ++b) P_s[(rg + 16 * a) * C::PS + cg + 16 * b] = S[a][b];

        if constexpr (C::kAsync) {  // step 4: K_{j+1} in flight during P V_j
            __syncthreads();  // everyone is done reading K_j: the buffer can take K_{j+1}
            if (j + 1 < j_end) {
                load_tile<C, C::Bc>(K_s, K + head, key0 + C::Bc, N, D);  // arrives during P V_j
                async_commit();
                async_wait<1>();  // V_j has landed
            } else {
                async_wait<0>();
            }
            __syncthreads();
        } else {
            __syncwarp();  // P_s rows are written and read by the same half-warp
        }
        // Alg. 1 line 10: O_i += P_ij V_j
        tile_pv<C>(P_s, V_s, rg, cg, O_acc);
    }

    // Alg. 1 lines 12-15: l_i = sum of the 16 partial sums; O_i / l_i; L_i = m_i + log l_i
#pragma unroll
    for (int a = 0; a < C::TM; ++a) {
        const float l_row = fa::group_sum<16>(l[a]);
        const int row = row0 + rg + 16 * a;
        if (row >= N) continue;
        const float inv_l = 1.0f / l_row;
        float* out = O + head + std::size_t(row) * D;
#pragma unroll
        for (int q = 0; q < C::TO; ++q) {
            const int d = 4 * (cg + 16 * q);
            if (d < D) {
                const float4 o = O_acc[a][q];
                *reinterpret_cast<float4*>(out + d) =
                    make_float4(o.x * inv_l, o.y * inv_l, o.z * inv_l, o.w * inv_l);
            }
        }
        const float m_log2 = C::kSlim ? m[a] * scale_log2 : m[a];  // the row max in base 2 (step 6)
        if (cg == 0) L[std::size_t(bh) * N + row] = m_log2 * kLn2 + logf(l_row);
    }
}

template <class C>
void launch_tuned(const fa::AttnShape& s, const float* Q, const float* K, const float* V, float* O,
                  float* L, const char* what) {
    const std::size_t smem = C::kSmemFloats * sizeof(float);
    fa::allow_dynamic_smem_once(flash2_tuned<C>, smem, what);
    const dim3 grid(fa::ceil_div(s.N, C::Br), s.H, s.B);
    flash2_tuned<C><<<grid, C::kThreads, smem>>>(Q, K, V, O, L, s.N, s.D, s.scale * fa::kLog2e, s.causal);
    CUDA_CHECK_LAUNCH();
}

// Variant 2's tiles, largest first: the first that fits the device's shared memory is used.
// Big's tiles are the tile search's choice (README.md); to repeat the search, rebuild with other
// values, e.g. make chapter5 EXTRA_NVCCFLAGS="-DCH5_BR=64 -DCH5_BC=32".
#ifndef CH5_BR
#define CH5_BR 128
#endif
#ifndef CH5_BC
#define CH5_BC 64
#endif
template <int D_PAD>
using Big = Cfg<kLastStep, D_PAD, CH5_BR, CH5_BC>;
// The fallbacks for GPUs with less shared memory keep ladder step 4's code: steps 6 and 7 were
// checked only on a GPU where Big fits (README.md), so they are not applied untested here.
template <int D_PAD>
using Mid = Cfg<4, D_PAD, 64, 64>;
template <int D_PAD>
using Small = Cfg<4, D_PAD, 32, 32>;

template <class C>
bool fits(std::size_t smem_optin_bytes) {
    return C::kSmemFloats * sizeof(float) <= smem_optin_bytes;
}

template <int D_PAD>
Tiles tiles_variant2(std::size_t smem_optin_bytes) {
    if (fits<Big<D_PAD>>(smem_optin_bytes)) return {Big<D_PAD>::Br, Big<D_PAD>::Bc};
    if (fits<Mid<D_PAD>>(smem_optin_bytes)) return {Mid<D_PAD>::Br, Mid<D_PAD>::Bc};
    return {Small<D_PAD>::Br, Small<D_PAD>::Bc};
}

template <int D_PAD>
void launch_variant2(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                     float* O, float* L) {
    const Tiles t = tiles_variant2<D_PAD>(fa::smem_per_block_optin());
    if (t.Br == Big<D_PAD>::Br && t.Bc == Big<D_PAD>::Bc)
        launch_tuned<Big<D_PAD>>(s, Q, K, V, O, L, "chapter 5 kernel 2");
    else if (t.Br == Mid<D_PAD>::Br && t.Bc == Mid<D_PAD>::Bc)
        launch_tuned<Mid<D_PAD>>(s, Q, K, V, O, L, "chapter 5 kernel 2");
    else
        launch_tuned<Small<D_PAD>>(s, Q, K, V, O, L, "chapter 5 kernel 2");
}

// The ladder (head dims up to 128): each step adds one optimization to the one before. Steps 1-4
// use 64 × 64 tiles; step 5: 128 × 64 tiles, 8 query rows per thread; step 7 is kernel 2.
template <int Step>
using LadderStep =
    std::conditional_t<Step == kLastStep, Big<128>, Cfg<Step, 128, Step >= 5 ? 128 : 64, 64>>;
static_assert(std::is_same_v<LadderStep<4>, Mid<128>>, "the fallback tiles keep step 4's code");

const char* const kStepNames[] = {
    "register tiles 64x64 + shuffles", "+ padded rows (no bank conflicts)", "+ 16-byte loads",
    "+ cp.async K/V overlap", "+ 128x64 tiles, 8 rows per thread",
    "+ fewer non-FMA instructions", "+ S loop fully unrolled (= kernel 2)"};

// f(std::integral_constant<int, D_PAD>{}) for the head dim kernel 2 is compiled for: 64 or 128.
template <class F>
decltype(auto) with_padded_dim(int D, F&& f) {
    return fa::with_head_dim<64, 128>(D, f, fa::DimMatch::kPadded, "chapter 5 kernel 2");
}

void require_supported(int variant, int D) {
    const std::string why = unsupported_reason(variant, D);
    if (!why.empty()) {
        std::fprintf(stderr, "chapter 5: %s\n", why.c_str());
        std::exit(fa::kExitBadInput);
    }
}

}  // namespace

std::string unsupported_reason(int variant, int D) {
    if (variant != kReadable && variant != kTuned)
        return "kernel " + std::to_string(variant) + " does not exist (1 = readable, 2 = tuned)";
    if (D < 1 || D > 128) return "head dim " + std::to_string(D) + " is not supported (1 to 128)";
    if (variant == kTuned && (D < 16 || D % 4 != 0))
        return "kernel 2 needs a head dim that is a multiple of 4 from 16 to 128 (16-byte rows), not " +
               std::to_string(D);
    return "";
}

Tiles tiles(int variant, int D, std::size_t smem_optin_bytes) {
    if (variant == kReadable) return {32, D > 64 ? 16 : 32};
    return with_padded_dim(D, [&](auto D_PAD) { return tiles_variant2<D_PAD>(smem_optin_bytes); });
}

void forward(int variant, const fa::AttnShape& s, const float* Q, const float* K, const float* V,
             float* O, float* L) {
    require_supported(variant, s.D);
    if (variant == kReadable)
        launch_readable(s, Q, K, V, O, L);
    else
        with_padded_dim(s.D, [&](auto D_PAD) { launch_variant2<D_PAD>(s, Q, K, V, O, L); });
}

int ladder_steps() { return kLastStep; }

const char* ladder_step_name(int step) { return kStepNames[step - 1]; }

void forward_ladder_step(int step, const fa::AttnShape& s, const float* Q, const float* K,
                         const float* V, float* O, float* L) {
    require_supported(kTuned, s.D);
    switch (step) {
        case 1: launch_tuned<LadderStep<1>>(s, Q, K, V, O, L, "ladder step 1"); break;
        case 2: launch_tuned<LadderStep<2>>(s, Q, K, V, O, L, "ladder step 2"); break;
        case 3: launch_tuned<LadderStep<3>>(s, Q, K, V, O, L, "ladder step 3"); break;
        case 4: launch_tuned<LadderStep<4>>(s, Q, K, V, O, L, "ladder step 4"); break;
        case 5: launch_tuned<LadderStep<5>>(s, Q, K, V, O, L, "ladder step 5"); break;
        case 6: launch_tuned<LadderStep<6>>(s, Q, K, V, O, L, "ladder step 6"); break;
        default: launch_tuned<LadderStep<7>>(s, Q, K, V, O, L, "ladder step 7"); break;
    }
}

}  // namespace ch5
