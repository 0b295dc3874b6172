/// @file naive_attention.h
/// @brief Chapter 3, naive attention: S = scale·Q Kᵀ, P = softmax(S) and O = P V as three stages
/// with S and P stored in device memory. What the program, the tests and later chapters call.
///
/// Layout: Q, K, V, O are (B, H, N, D) and L is (B, H, N), as in common/shape.h. S and P are
/// (B, H, N, N) row-major float32 arrays: entry (b, h, i, j) is at ((b·H + h)·N + i)·N + j.
///
/// What each variant leaves in the two N×N buffers:
/// - P: P_ij = e^{S_ij − L_i} where key j is visible from query i, exactly 0 where it is masked.
/// - S, variant 1: scale·q_i·k_j where visible, −inf where masked (the mask is applied here).
/// - S, variant 2: scale·q_i·k_j for every (i, j), masked positions included (cuBLAS computes the
///   whole product; the mask is applied on the fly by the softmax kernel, which reads only the
///   visible part of each row).
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include <cublas_v2.h>

#include "../../common/host_device.h"
#include "../../common/shape.h"
#include "../../common/validate.h"

namespace ch3 {

/// The variants of this chapter (kernels.cu lists what each one runs).
enum Variant : int {
    kHandWritten = 1,  ///< tiled Q Kᵀ kernel, chapter 2's row softmax, tiled P V kernel
    kCublas = 2,       ///< cublasSgemmStridedBatched twice, one fused mask + softmax kernel between
};

/// The variant the program runs by default.
constexpr int kFastest = kCublas;

/// Tile side of the hand-written kernels: a block computes a kTile × kTile tile of S (B_r = B_c),
/// or kTile rows × kTile columns of O.
constexpr int kTile = 64;

/// Longest row the fused softmax keeps in registers (one read of S, one write of P); longer rows
/// take the streaming path, which reads each row twice.
constexpr int kLongestRegisterRow = 32768;

/// Tolerance of the TF32 GEMMs (`--tf32`) against the float64 reference: TF32 keeps 10 mantissa
/// bits (unit round-off 2⁻¹¹ ≈ 4.9e-4, against 2⁻²⁴ for float32), so each product q_d·k_d and
/// P_ij·V_jd carries about 1e-3 relative error; the course's inputs give errors of a few 1e-3 on O
/// and L, and this bound leaves a small margin above that.
constexpr fa::Tolerance kTf32Tolerance{1e-2, 1e-2};

// ---- the forward pass --------------------------------------------------------------------------

/// Floats of the two N×N buffers S and P together: 2·B·H·N².
std::size_t workspace_floats(const fa::AttnShape& s);

/// O = softmax(scale·Q Kᵀ, mask) V and L = rowwise logsumexp, with S and P (B·H·N·N floats each)
/// written as documented at the top of this file. Device pointers, default stream. Variant 1
/// ignores `cublas`; variant 2 runs its GEMMs in the handle's math mode (strict fp32 or TF32),
/// which the caller owns. An unsupported shape or variant prints why and exits with status 2.
void forward(int variant, const fa::AttnShape& s, const float* Q, const float* K, const float* V,
             float* O, float* L, float* S, float* P, cublasHandle_t cublas);

/// Stage 1 of forward (Alg. 0 line 1): S = scale·Q Kᵀ (variant 1 also writes −inf where masked).
void scores_stage(int variant, const fa::AttnShape& s, const float* Q, const float* K, float* S,
                  cublasHandle_t cublas);

/// Stage 2 of forward (Alg. 0 line 2): P = softmax(S) row by row, L = logsumexp of each row.
void softmax_stage(int variant, const fa::AttnShape& s, const float* S, float* P, float* L);

/// Stage 3 of forward (Alg. 0 line 3): O = P V.
void output_stage(int variant, const fa::AttnShape& s, const float* P, const float* V, float* O,
                  cublasHandle_t cublas);

/// How the fused softmax of variant 2 holds a row.
enum class SoftmaxPath {
    kAuto,       ///< registers when N ≤ kLongestRegisterRow, streaming otherwise
    kStreaming,  ///< always streaming (online max and sum, then a second read to write P)
};

/// The fused mask + softmax kernel of variant 2 on `rows` rows of length N: row r is query
/// i = r mod N, sees keys 0..N−1 (or 0..i with `causal`), and gets P (0 where masked) and L.
/// Only the visible part of each row of S is read. rows ≥ 1, N ≥ 1.
void fused_softmax(const float* S, float* P, float* L, int rows, int N, bool causal,
                   SoftmaxPath path = SoftmaxPath::kAuto);

// ---- checking the N×N buffers ------------------------------------------------------------------

/// Entries of S and P that break the contract at the top of this file: P not in [0, 1] where
/// visible or not exactly 0 where masked; S not finite where visible; S not −inf (variant 1) or
/// not finite (variant 2) where masked. NaN always counts.
struct IntermediateScan {
    std::size_t bad_S = 0, bad_P = 0;
    bool ok() const { return bad_S == 0 && bad_P == 0; }
};

/// Scans all of S and P on the device (one pass, a few milliseconds even for gigabytes).
IntermediateScan scan_intermediates(int variant, const fa::AttnShape& s, const float* S,
                                    const float* P);

// ---- host-side planning (CPU only, tested in CI) ----------------------------------------------

/// Empty when `variant` can run shape `s`; otherwise why not (one sentence).
std::string unsupported_reason(int variant, const fa::AttnShape& s);

/// Device memory a forward pass of shape `s` needs, in bytes.
struct MemoryEstimate {
    double qkvo = 0;     ///< Q, K, V, O: 4·B·H·N·D floats
    double lse = 0;      ///< L: B·H·N floats
    double sp = 0;       ///< S and P: 2·B·H·N² floats
    double overhead = 0; ///< what the caller adds (cuBLAS workspace, timer buffers)
    double total() const { return qkvo + lse + sp + overhead; }
};

/// The memory estimate of shape `s` with `overhead_bytes` added.
MemoryEstimate estimate_memory(const fa::AttnShape& s, double overhead_bytes);

/// The largest N ≤ max_seq whose estimate fits in `free_bytes` at this B, H, D (0 if none does).
int largest_seq_that_fits(int B, int H, int D, double overhead_bytes, double free_bytes,
                          int max_seq = 1 << 20);

/// The message printed when the estimate does not fit: what is needed (by part), what is free on
/// `device`, and the largest N that would fit.
std::string memory_shortfall_text(const fa::AttnShape& s, double overhead_bytes, double free_bytes,
                                  const std::string& device);

/// What one stage executes and moves through device memory: floating-point operations actually
/// performed (masked tiles that a kernel skips are not counted) and the bytes it must read and
/// write at least (each operand once).
struct StageCost {
    const char* name;
    double flops;
    double bytes;
};

/// The three stages of `variant` on shape `s`, in order: Q Kᵀ, softmax, P V.
std::array<StageCost, 3> stage_costs(int variant, const fa::AttnShape& s);

/// Tile (T_r index tr, T_c index tc) of S lies entirely above the diagonal: every key in it comes
/// after every query in it, so with the causal mask it is all −inf and needs no dot products.
FA_HOST_DEVICE inline bool tile_above_diagonal(int tr, int tc) { return tc > tr; }

/// With the causal mask, the rows of the row tile starting at row0 see no key at or after this
/// one, so P V stops there.
FA_HOST_DEVICE inline int causal_key_end(int row0, int N) {
    return row0 + kTile < N ? row0 + kTile : N;
}

// ---- CPU mirror --------------------------------------------------------------------------------

/// The three stages in plain float32 C++ loops, tile by tile like the hand-written kernels
/// (variant 1's S, the fused softmax's P and L), on host arrays of the sizes above.
void forward_cpu_mirror(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                        float* O, float* L, float* S, float* P);

// ---- the device's reference rates (for the --bench ratios) ------------------------------------

/// Bandwidth of a device-to-device cudaMemcpy of `bytes`, in GB/s counting bytes read plus
/// written (median of `repeat` runs).
double measure_copy_bandwidth(std::size_t bytes, int repeat);

/// Rate of an n×n×n cublasSgemm in the handle's current math mode, in TF/s (median of `repeat`).
double measure_sgemm_rate(cublasHandle_t cublas, int n, int repeat);

}  // namespace ch3
