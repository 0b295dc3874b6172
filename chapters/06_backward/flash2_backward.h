/// @file flash2_backward.h
/// @brief Chapter 6, FlashAttention-2 backward: dQ, dK, dV from Q, K, V, O, dO and the forward's
/// logsumexp L. What the program, the tests and later chapters call.
///
/// Every tensor uses the layout of common/shape.h: (batch, heads, seq, head_dim) row-major, and
/// (batch, heads, seq) for the row vectors L and D. Functions named without `cpu` take device
/// pointers and run on the default stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "../../common/attention.h"
#include "../../common/shape.h"
#include "../../common/validate.h"

namespace ch6 {

/// How dQ is accumulated (the two ways the chapter compares).
enum DqStrategy : int {
    kAtomic = 1,  ///< the dK/dV kernel also adds dS_ij K_j into dQ_i with fp32 atomics
    kSplit = 2,   ///< a second kernel fixes Q_i and loops over K_j to build dQ_i (no atomics)
};

/// "atomic" or "split".
const char* strategy_name(int strategy);

/// The tile sizes of the kernels: B_r query rows by B_c key rows (the same for every D).
struct Tiles {
    int Br, Bc;
};
/// The GPU kernels' tiles (64 × 64).
Tiles kernel_tiles();

/// Empty when the kernels can run head dimension D (a multiple of 4 from 4 to 128); otherwise
/// why not, in one sentence.
std::string unsupported_reason(int D);

/// The head dimension the kernels are compiled for when the problem has D: 32, 64, 96 or 128.
/// Columns D..padded_dim(D)−1 of every shared-memory tile are zero.
int padded_dim(int D);

/// Dynamic shared memory (bytes) the dK/dV kernel and the dQ kernel need for head dimension D.
std::size_t dkdv_smem_bytes(int D);
std::size_t dq_smem_bytes(int D);

/// The tensors of one backward pass. The GPU functions take device pointers, the CPU mirror
/// host pointers. `Dsum` is workspace for D_i = rowsum(dO_i ∘ O_i): shape.rows() floats.
struct BackwardTensors {
    const float* Q = nullptr;   ///< queries (input of the forward)
    const float* K = nullptr;   ///< keys
    const float* V = nullptr;   ///< values
    const float* O = nullptr;   ///< the forward's output
    const float* dO = nullptr;  ///< upstream gradient dL/dO
    const float* L = nullptr;   ///< the forward's logsumexp, one per query row
    float* dQ = nullptr;        ///< output
    float* dK = nullptr;        ///< output
    float* dV = nullptr;        ///< output
    float* Dsum = nullptr;      ///< workspace (rows floats)
};

/// The whole backward: preprocess(), dkdv() and, for kSplit, dq_split(). Exits with a message if
/// the shape is unsupported or the GPU lacks the shared memory the kernels need.
void backward(int strategy, const fa::AttnShape& s, const BackwardTensors& t);

/// Step 1 (Algorithm 2 line 4): D_i = rowsum(dO_i ∘ O_i) into t.Dsum; for kAtomic also dQ = 0.
void preprocess(int strategy, const fa::AttnShape& s, const BackwardTensors& t);

/// Step 2 (Algorithm 2 lines 5–19): one block per (K_j, V_j) tile loops over the Q_i tiles and
/// writes dK and dV; for kAtomic it also adds every dQ_i contribution with atomics.
void dkdv(int strategy, const fa::AttnShape& s, const BackwardTensors& t);

/// Step 3, kSplit only: one block per Q_i tile loops over the K_j tiles and writes dQ.
void dq_split(const fa::AttnShape& s, const BackwardTensors& t);

/// CPU mirror of the tiled backward, float32 like the kernels, on host arrays: the same tiles
/// (any B_r, B_c), the same loop order, the same causal tile skipping, and dQ accumulated the
/// way `strategy` says. t.Dsum must hold shape.rows() floats.
void backward_cpu_mirror(int strategy, const fa::AttnShape& s, const BackwardTensors& t, Tiles tiles);

// ---- the naive baseline (naive.cu) ---------------------------------------------------------

/// Floats of the one extra B·H·N·N buffer the naive backward needs (dP, overwritten by dS).
std::size_t naive_workspace_floats(const fa::AttnShape& s);

/// Backward from the materialized probabilities P (B·H·N·N floats, 0 where masked, as chapter 3's
/// forward stores them): dV = Pᵀ dO, dP = dO Vᵀ (cuBLAS), dS = P ∘ (dP − rowsum(P ∘ dP)) (a
/// small kernel, in place), dQ = scale·dS K, dK = scale·dSᵀ Q (cuBLAS). Uses t.Q, t.K, t.V,
/// t.dO and writes t.dQ, t.dK, t.dV; O, L and Dsum are not used.
void naive_backward(const fa::AttnShape& s, const BackwardTensors& t, const float* P, float* dP_workspace,
                    cublasHandle_t cublas);

// ---- checking against the float64 reference (check.cpp) ------------------------------------

/// The upstream gradient dO the program and the tests use: normal(0.5, 1), seeded, its own
/// random stream (independent of make_problem's Q, K, V streams).
std::vector<float> make_upstream_gradient(const fa::AttnShape& s, std::uint64_t seed);

/// Float64 reference gradients at sampled positions: dQ at the sampled query rows of every head;
/// dK and dV at the sampled key rows of the sampled heads (a key row needs L_i and D_i of every
/// query row of its head, i.e. a full forward of that head, so only a few heads get them).
/// Computed once, then compared with any number of results.
struct SampledBackward {
    fa::AttnShape shape;
    std::vector<int> rows;      ///< sampled query rows of each head (fa::sample_rows)
    std::vector<int> key_rows;  ///< sampled key rows of each K/V head (the same as rows when N_k = N)
    std::vector<int> heads;     ///< K/V heads (b·H_kv + g) whose dK and dV are checked
    std::vector<double> dQ;     ///< [every head][rows][D]
    std::vector<double> dK;     ///< [heads][key_rows][D]
    std::vector<double> dV;     ///< [heads][key_rows][D]
};

/// Builds the reference: all rows when N ≤ max_rows (else fa::sample_rows; key rows likewise of
/// N_k), dK and dV in all K/V heads when B·H_kv ≤ max(max_heads, 3), otherwise in the first, the
/// last and one seeded middle one.
/// The CPU cost is a full float64 forward of each of those heads plus two rows per sampled row.
SampledBackward sampled_backward_reference(const fa::AttnProblem& p, const float* dO, int max_rows = 128,
                                           int max_heads = 3);

/// Result of checking dQ, dK, dV.
struct BackwardCheck {
    fa::Validation dQ, dK, dV;
    bool ok() const { return dQ.ok() && dK.ok() && dV.ok(); }
    void print() const;
};

/// Compares host copies of dQ (B,H,N,D), dK, dV (B,H_kv,N_k,D) with the reference at its sampled positions
/// and scans all three tensors for NaN/Inf (outputs are poisoned before each run).
BackwardCheck check_backward(const SampledBackward& ref, const float* dQ, const float* dK, const float* dV,
                             fa::Tolerance tol = fa::kFp32Tolerance);

}  // namespace ch6
