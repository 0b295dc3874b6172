// Chapter 3: naive attention on the GPU. The three stages of standard attention (Algorithm 0 of the
// FlashAttention paper), each a separate pass over device memory:
//
//   Alg. 0 line 1: S = scale · Q Kᵀ       (B·H·N·N floats written)
//   Alg. 0 line 2: P = softmax(S), L       (S read, P written)
//   Alg. 0 line 3: O = P V                 (P read)
//
// Variants (./chapter3 --kernel N; the default is ch3::kFastest):
//   1  hand-written: scores_kernel (tiled, shared memory) writes S with the mask applied, chapter 2's
//      online row softmax (ch2::softmax_online_gpu) turns S into P and L, output_kernel (tiled)
//      computes O = P V. With the causal mask both tiled kernels skip the tiles above the diagonal.
//   2  cuBLAS: cublasSgemmStridedBatched for S = scale·Q Kᵀ (the scale rides on alpha), one fused
//      mask + softmax kernel (fused_row_kernel) that reads only the visible part of each row of S
//      and writes P and L, and cublasSgemmStridedBatched for O = P V.
//
// Who owns what:
//   scores_kernel   block (tc, tr, bh): the kTile × kTile tile S_ij of head bh, rows tr·kTile..,
//                   columns tc·kTile..; thread (tx, ty) of 16 × 16 owns the 4 × 4 entries in rows
//                   ty + 16a and columns tx + 16b (a, b = 0..3), accumulated in registers.
//   output_kernel   block (td, tr, bh): rows tr·kTile.. and head-dim columns td·kTile.. of O;
//                   thread (tx, ty) owns the 4 × 4 entries in rows ty + 16a and columns tx + 16b.
//   fused_row_kernel      one block per row of S; thread t holds columns t, t + kThreads, ... of
//                         the row in registers (kPerThread of them).
//   streaming_row_kernel  one block per row; thread t walks the same columns twice through memory.
#include "naive_attention.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "../../common/check.h"
#include "../../common/math.h"
#include "../../common/warp.cuh"
#include "../02_online_softmax/online_softmax.h"

namespace ch3 {
namespace {

constexpr int kMicro = 4;                  // each thread owns kMicro × kMicro outputs
constexpr int kSide = kTile / kMicro;      // 16 × 16 threads per block
constexpr int kBlock2d = kSide * kSide;    // 256
constexpr int kChunk = 16;                 // head-dim columns (scores) or keys (output) per step

// Alg. 0 line 1: S_ij = scale · Q_i K_jᵀ for one kTile × kTile tile, over D in chunks of kChunk.
// Entries outside N × N are neither computed nor written; staged values outside Q, K are zeros.
__global__ void __launch_bounds__(kBlock2d)
scores_kernel(const float* __restrict__ Q, const float* __restrict__ K, float* __restrict__ S,
              int N, int D, float scale, bool causal) {
    __shared__ float Q_i[kTile][kChunk + 1];  // +1: the rows of a column fall in distinct banks
    __shared__ float K_j[kTile][kChunk + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kSide + tx;
    const int tr = blockIdx.y, tc = blockIdx.x, row0 = tr * kTile, col0 = tc * kTile;
    const std::size_t bh = blockIdx.z, n = std::size_t(N);
    const float* Q_h = Q + bh * n * D;
    const float* K_h = K + bh * n * D;
    float* S_h = S + bh * n * n;

    if (causal && tile_above_diagonal(tr, tc)) {  // every entry masked: write −inf, no dot products
        for (int a = 0; a < kMicro; ++a)
            for (int b = 0; b < kMicro; ++b) {
                const int i = row0 + ty + a * kSide, j = col0 + tx + b * kSide;
                if (i < N && j < N) S_h[std::size_t(i) * n + j] = -INFINITY;
            }
        return;
    }

    float acc[kMicro][kMicro] = {};
    for (int d0 = 0; d0 < D; d0 += kChunk) {
        // Stage Q_i[:, d0 : d0+kChunk] and K_j[:, d0 : d0+kChunk] (zeros past row N or column D).
        for (int e = tid; e < kTile * kChunk; e += kBlock2d) {
            const int r = e / kChunk, c = e % kChunk, d = d0 + c;
            Q_i[r][c] = row0 + r < N && d < D ? Q_h[std::size_t(row0 + r) * D + d] : 0.0f;
            K_j[r][c] = col0 + r < N && d < D ? K_h[std::size_t(col0 + r) * D + d] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
            float q[kMicro], k[kMicro];
#pragma unroll
            for (int a = 0; a < kMicro; ++a) q[a] = Q_i[ty + a * kSide][c];
#pragma unroll
            for (int b = 0; b < kMicro; ++b) k[b] = K_j[tx + b * kSide][c];
#pragma unroll
            for (int a = 0; a < kMicro; ++a)
#pragma unroll
                for (int b = 0; b < kMicro; ++b) acc[a][b] = fmaf(q[a], k[b], acc[a][b]);
        }
        __syncthreads();  // the next chunk overwrites Q_i, K_j
    }
    for (int a = 0; a < kMicro; ++a)
        for (int b = 0; b < kMicro; ++b) {
            const int i = row0 + ty + a * kSide, j = col0 + tx + b * kSide;
            if (i < N && j < N) S_h[std::size_t(i) * n + j] = causal && j > i ? -INFINITY : acc[a][b] * scale;
        }
}

// Alg. 0 line 3: O_i = Σ_j P_ij V_j for kTile rows and kTile head-dim columns, over the keys in
// chunks of kChunk. With the causal mask, P_ij = 0 for every j ≥ causal_key_end(row0), so the
// loop stops there.
__global__ void __launch_bounds__(kBlock2d)
output_kernel(const float* __restrict__ P, const float* __restrict__ V, float* __restrict__ O,
              int N, int D, bool causal) {
    __shared__ float P_i[kTile][kChunk + 1];
    __shared__ float V_j[kChunk][kTile];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kSide + tx;
    const int row0 = blockIdx.y * kTile, d0 = blockIdx.x * kTile;
    const std::size_t bh = blockIdx.z, n = std::size_t(N);
    const float* P_h = P + bh * n * n;
    const float* V_h = V + bh * n * D;
    float* O_h = O + bh * n * D;
    const int key_end = causal ? causal_key_end(row0, N) : N;

    float acc[kMicro][kMicro] = {};
    for (int j0 = 0; j0 < key_end; j0 += kChunk) {
        // Stage P_i[:, j0 : j0+kChunk] and V_j[j0 : j0+kChunk, d0 : d0+kTile] (zeros outside).
        for (int e = tid; e < kTile * kChunk; e += kBlock2d) {
            const int r = e / kChunk, c = e % kChunk, j = j0 + c;
            P_i[r][c] = row0 + r < N && j < key_end ? P_h[std::size_t(row0 + r) * n + j] : 0.0f;
        }
        for (int e = tid; e < kChunk * kTile; e += kBlock2d) {
            const int r = e / kTile, c = e % kTile, j = j0 + r, d = d0 + c;
            V_j[r][c] = j < key_end && d < D ? V_h[std::size_t(j) * D + d] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
            float p[kMicro], v[kMicro];
#pragma unroll
            for (int a = 0; a < kMicro; ++a) p[a] = P_i[ty + a * kSide][c];
#pragma unroll
            for (int b = 0; b < kMicro; ++b) v[b] = V_j[c][tx + b * kSide];
#pragma unroll
            for (int a = 0; a < kMicro; ++a)
#pragma unroll
                for (int b = 0; b < kMicro; ++b) acc[a][b] = fmaf(p[a], v[b], acc[a][b]);
        }
        __syncthreads();
    }
    for (int a = 0; a < kMicro; ++a)
        for (int b = 0; b < kMicro; ++b) {
            const int i = row0 + ty + a * kSide, d = d0 + tx + b * kSide;
            if (i < N && d < D) O_h[std::size_t(i) * D + d] = acc[a][b];
        }
}

// Alg. 0 line 2, fused with the mask: one row of S in registers, so S is read once and P written
// once. Row r is query i = r mod N; it sees keys j < visible (visible ≥ 1, so m is finite and
// e^{−inf − m} = 0 gives the masked entries probability 0 without a special case).
template <int kThreads, int kPerThread>
__global__ void __launch_bounds__(kThreads)
fused_row_kernel(const float* __restrict__ S, float* __restrict__ P, float* __restrict__ L, int N,
                 bool causal) {
    __shared__ float scratch[32];
    const std::size_t r = blockIdx.x;
    const int i = int(r % std::size_t(N)), visible = causal ? i + 1 : N;
    const float* S_i = S + r * std::size_t(N);
    float* P_i = P + r * std::size_t(N);

    float x[kPerThread];
    float m = -INFINITY;  // m_i = max_j S_ij
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int j = threadIdx.x + k * kThreads;
        x[k] = j < visible ? S_i[j] : -INFINITY;
        m = fmaxf(m, x[k]);
    }
    m = fa::block_max(m, scratch);
    float l = 0.0f;  // l_i = Σ_j e^{S_ij − m_i}
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        x[k] = expf(x[k] - m);
        l += x[k];
    }
    l = fa::block_sum(l, scratch);
    const float inv_l = 1.0f / l;  // l ≥ 1: the maximum contributes e⁰
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int j = threadIdx.x + k * kThreads;
        if (j < N) P_i[j] = x[k] * inv_l;  // P_ij = e^{S_ij − m_i} / l_i
    }
    if (threadIdx.x == 0) L[r] = m + logf(l);  // L_i = m_i + log l_i
}

// The same for rows too long for registers: pass 1 keeps each thread's running (m, l) as in
// chapter 2's online softmax, the block merges them; pass 2 reads the row again and writes P.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
streaming_row_kernel(const float* __restrict__ S, float* __restrict__ P, float* __restrict__ L,
                     int N, bool causal) {
    __shared__ float scratch[32];
    const std::size_t r = blockIdx.x;
    const int i = int(r % std::size_t(N)), visible = causal ? i + 1 : N;
    const float* S_i = S + r * std::size_t(N);
    float* P_i = P + r * std::size_t(N);

    float m = -INFINITY, l = 0.0f;
    for (int j = threadIdx.x; j < visible; j += kThreads) {
        const float s = S_i[j], m_new = fmaxf(m, s);
        l = l * expf(m - m_new) + expf(s - m_new);  // m_new is finite: no −inf − (−inf)
        m = m_new;
    }
    const float m_row = fa::block_max(m, scratch);
    // A thread that saw no key has m = −inf and l = 0: e^{−inf − m_row} = 0 keeps it out.
    const float l_row = fa::block_sum(l * expf(m - m_row), scratch);
    const float inv_l = 1.0f / l_row;
    for (int j = threadIdx.x; j < N; j += kThreads)
        P_i[j] = j < visible ? expf(S_i[j] - m_row) * inv_l : 0.0f;
    if (threadIdx.x == 0) L[r] = m_row + logf(l_row);
}

template <int kThreads, int kPerThread>
void launch_fused_rows(const float* S, float* P, float* L, int rows, int N, bool causal) {
    static_assert(kThreads * kPerThread <= kLongestRegisterRow, "row cache larger than documented");
    fused_row_kernel<kThreads, kPerThread><<<rows, kThreads>>>(S, P, L, N, causal);
    CUDA_CHECK_LAUNCH();
}

void require_supported(int variant, const fa::AttnShape& s) {
    const std::string why = unsupported_reason(variant, s);
    if (why.empty()) return;
    std::fprintf(stderr, "chapter 3: %s\n", why.c_str());
    std::exit(fa::kExitBadInput);
}

}  // namespace

std::size_t workspace_floats(const fa::AttnShape& s) {
    return 2 * s.heads_total() * std::size_t(s.N) * std::size_t(s.N);
}

void fused_softmax(const float* S, float* P, float* L, int rows, int N, bool causal,
                   SoftmaxPath path) {
    if (path == SoftmaxPath::kStreaming || N > kLongestRegisterRow) {
        streaming_row_kernel<1024><<<rows, 1024>>>(S, P, L, N, causal);
        CUDA_CHECK_LAUNCH();
    } else if (N <= 1024) {
        launch_fused_rows<128, 8>(S, P, L, rows, N, causal);
    } else if (N <= 4096) {
        launch_fused_rows<256, 16>(S, P, L, rows, N, causal);
    } else if (N <= 16384) {
        launch_fused_rows<1024, 16>(S, P, L, rows, N, causal);
    } else {
        launch_fused_rows<1024, 32>(S, P, L, rows, N, causal);
    }
}

void scores_stage(int variant, const fa::AttnShape& s, const float* Q, const float* K, float* S,
                  cublasHandle_t cublas) {
    require_supported(variant, s);
    if (variant == kHandWritten) {
        const int T = fa::ceil_div(s.N, kTile);
        scores_kernel<<<dim3(T, T, unsigned(s.heads_total())), dim3(kSide, kSide)>>>(
            Q, K, S, s.N, s.D, s.scale, s.causal);
        CUDA_CHECK_LAUNCH();
        return;
    }
    // cuBLAS is column-major: it reads the row-major N×D buffers K and Q as D×N matrices Kᵀ and
    // Qᵀ (ld D), and writes C = Sᵀ (N×N, ld N), which is row-major S. Sᵀ = K Qᵀ, so
    // op(A) = (Kᵀ)ᵀ = K (CUBLAS_OP_T) and op(B) = Qᵀ as stored (CUBLAS_OP_N); m = n = N, k = D.
    // C(j, i) = Σ_d K[j][d]·Q[i][d] lands at j + i·N: row-major S[i][j].
    const long long nd = (long long)s.N * s.D, nn = (long long)s.N * s.N;
    const float alpha = s.scale, beta = 0.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(cublas, CUBLAS_OP_T, CUBLAS_OP_N, s.N, s.N, s.D, &alpha,
                                           K, s.D, nd, Q, s.D, nd, &beta, S, s.N, nn,
                                           int(s.heads_total())));
}

void softmax_stage(int variant, const fa::AttnShape& s, const float* S, float* P, float* L) {
    require_supported(variant, s);
    if (variant == kHandWritten)
        ch2::softmax_online_gpu(S, P, L, int(s.rows()), s.N);  // S already holds −inf where masked
    else
        fused_softmax(S, P, L, int(s.rows()), s.N, s.causal);
}

void output_stage(int variant, const fa::AttnShape& s, const float* P, const float* V, float* O,
                  cublasHandle_t cublas) {
    require_supported(variant, s);
    if (variant == kHandWritten) {
        const dim3 grid(fa::ceil_div(s.D, kTile), fa::ceil_div(s.N, kTile), unsigned(s.heads_total()));
        output_kernel<<<grid, dim3(kSide, kSide)>>>(P, V, O, s.N, s.D, s.causal);
        CUDA_CHECK_LAUNCH();
        return;
    }
    // Row-major O (N×D) is column-major Oᵀ = Vᵀ Pᵀ (D×N, ld D), and the row-major buffers V and P
    // already are the column-major Vᵀ (D×N, ld D) and Pᵀ (N×N, ld N): neither operand is
    // transposed; m = D, n = N, k = N. C(d, i) = Σ_j V[j][d]·P[i][j] lands at d + i·D: O[i][d].
    const long long nd = (long long)s.N * s.D, nn = (long long)s.N * s.N;
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(cublas, CUBLAS_OP_N, CUBLAS_OP_N, s.D, s.N, s.N, &alpha,
                                           V, s.D, nd, P, s.N, nn, &beta, O, s.D, nd,
                                           int(s.heads_total())));
}

void forward(int variant, const fa::AttnShape& s, const float* Q, const float* K, const float* V,
             float* O, float* L, float* S, float* P, cublasHandle_t cublas) {
    scores_stage(variant, s, Q, K, S, cublas);   // Alg. 0 line 1
    softmax_stage(variant, s, S, P, L);          // Alg. 0 line 2
    output_stage(variant, s, P, V, O, cublas);   // Alg. 0 line 3
}

}  // namespace ch3
