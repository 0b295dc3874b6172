// Chapter 6 baseline: the textbook attention backward from the materialized probabilities P
// (B·H·N·N floats, stored by chapter 3's forward), four cuBLAS GEMMs and one row kernel:
//
//   dV = Pᵀ dO          (N × D)   cuBLAS
//   dP = dO Vᵀ          (N × N)   cuBLAS, into the workspace
//   dS = P ∘ (dP − D),  D_i = Σ_j P_ij dP_ij (the softmax Jacobian applied row by row, in place)
//   dQ = scale · dS K   (N × D)   cuBLAS
//   dK = scale · dSᵀ Q  (N × D)   cuBLAS
//
// D_i is summed here from P and dP, as the softmax derivative gives it; the fused kernels use
// the identity D_i = rowsum(dO_i ∘ O_i) instead, so the two agree only if the identity holds.
#include <cuda_runtime.h>

#include "../../common/check.h"
#include "../../common/warp.cuh"
#include "flash2_backward.h"

namespace ch6 {
namespace {

// dS_ij = P_ij (dP_ij − D_i) with D_i = Σ_j P_ij dP_ij, one block per row of one head; dS
// overwrites dP.
__global__ void softmax_backward_rows(const float* P, float* dP, int N) {
    __shared__ float scratch[32];
    const std::size_t base = std::size_t(blockIdx.x) * N;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) acc += P[base + j] * dP[base + j];
    const float D_i = fa::block_sum(acc, scratch);
    for (int j = threadIdx.x; j < N; j += blockDim.x) dP[base + j] = P[base + j] * (dP[base + j] - D_i);
}

// Row-major C (m × n) = alpha · op(A) op(B) for `batch` matrices at fixed strides. cuBLAS is
// column-major, where a row-major matrix reads as its transpose, so it computes Cᵀ = op(B)ᵀ op(A)ᵀ:
// the operands swap places and keep their transpose flags.
void gemm_row_major(cublasHandle_t h, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    const float* A, int lda, long long stride_a, const float* B, int ldb, long long stride_b,
                    float* C, int ldc, long long stride_c, int batch) {
    const float beta = 0.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, B, ldb,
                                           stride_b, A, lda, stride_a, &beta, C, ldc, stride_c, batch));
}

}  // namespace

std::size_t naive_workspace_floats(const fa::AttnShape& s) {
    return s.heads_total() * std::size_t(s.N) * std::size_t(s.N);
}

void naive_backward(const fa::AttnShape& s, const BackwardTensors& t, const float* P, float* dP_workspace,
                    cublasHandle_t cublas) {
    const int N = s.N, D = s.D, batch = int(s.heads_total());
    const long long nn = (long long)N * N, nd = (long long)N * D;
    float* dP = dP_workspace;
    gemm_row_major(cublas, true, false, N, D, N, 1.0f, P, N, nn, t.dO, D, nd, t.dV, D, nd, batch);
    gemm_row_major(cublas, false, true, N, N, D, 1.0f, t.dO, D, nd, t.V, D, nd, dP, N, nn, batch);
    softmax_backward_rows<<<unsigned(s.rows()), 256>>>(P, dP, N);
    CUDA_CHECK_LAUNCH();
    const float* dS = dP;
    gemm_row_major(cublas, false, false, N, D, N, s.scale, dS, N, nn, t.K, D, nd, t.dQ, D, nd, batch);
    gemm_row_major(cublas, true, false, N, D, N, s.scale, dS, N, nn, t.Q, D, nd, t.dK, D, nd, batch);
}

}  // namespace ch6
