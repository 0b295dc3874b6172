/// @file online_softmax.h
/// @brief Chapter 2 API: the online softmax state (m, d), the CPU online softmax, chunk merging,
/// the one-pass fused weighted sum, and the GPU row-softmax kernels that later chapters call.
///
/// Inputs are rows × cols row-major float32 matrices. Entries may be −inf (probability 0); a row
/// whose entries are all −inf gets all zeros and logsumexp −inf (the convention of
/// common/reference.h). +inf and NaN entries are not supported.
#pragma once

#include <cmath>
#include <vector>

#include "../../common/host_device.h"

namespace ch2 {

/// The online softmax state of the entries x_1 … x_i seen so far: the running max m_i and the
/// surrogate sum d'_i = Σ_{j ≤ i} e^{x_j − m_i}. The empty state is (−inf, 0).
///
/// The two operations never compute −inf − (−inf) (which is NaN): while every entry seen is −inf
/// the state stays (−inf, 0). Compiles for host and device.
struct OnlineState {
    float m = -INFINITY;  ///< m_i = max_{j ≤ i} x_j
    float d = 0.0f;       ///< d'_i = Σ_{j ≤ i} e^{x_j − m_i}

    /// Adds one entry x_i:  m_i = max(m_{i−1}, x_i),  d'_i = d'_{i−1}·e^{m_{i−1} − m_i} + e^{x_i − m_i}.
    FA_HOST_DEVICE void push(float x) {
        const float m_new = fmaxf(m, x);
        if (m_new == -INFINITY) return;  // only −inf so far: stay (−inf, 0)
        d = d * expf(m - m_new) + expf(x - m_new);
        m = m_new;
    }

    /// Adds the entries another state has seen (a disjoint part of the row, in any order):
    /// m = max(m_a, m_b),  d = d_a·e^{m_a − m} + d_b·e^{m_b − m}.
    FA_HOST_DEVICE void merge(const OnlineState& o) {
        const float m_new = fmaxf(m, o.m);
        if (m_new == -INFINITY) return;  // both parts all −inf (or empty)
        d = d * expf(m - m_new) + o.d * expf(o.m - m_new);
        m = m_new;
    }

    /// log Σ_j e^{x_j} = m + log d; −inf for the empty or all −inf state.
    FA_HOST_DEVICE float logsumexp() const { return m == -INFINITY ? -INFINITY : m + logf(d); }

    /// softmax of one entry x_j of the row the state has seen: e^{x_j − m} / d; 0 when all are −inf.
    FA_HOST_DEVICE float prob(float x) const { return m == -INFINITY ? 0.0f : expf(x - m) / d; }
};

// ---- CPU (cpu_mirror.cpp): plain loops, line for line with the README's algorithms ------------

/// Pass 1 of the online softmax over one row of n entries: pushes every entry into a state.
OnlineState online_state_cpu(const float* x, int n);

/// Row softmax with the 2-pass online algorithm: pass 1 builds (m, d) per row, pass 2 writes
/// y_j = e^{x_j − m} / d. When lse is not null, lse[row] = m + log d. y may equal x.
void softmax_online_cpu(const float* x, float* y, float* lse, int rows, int cols);

/// Splits one row of `cols` entries at the positions `cuts` (increasing, each in 1 … cols−1) into
/// cuts.size() + 1 chunks, computes each chunk's state on its own, and merges the chunk states in
/// the order `order` (a permutation of 0 … cuts.size()). Returns the merged state of the row.
OnlineState merge_chunks_cpu(const float* x, int cols, const std::vector<int>& cuts,
                             const std::vector<int>& order);

/// Pass 2 for one row whose state is known: y_j = e^{x_j − m} / d (zeros for an all −inf row).
void normalize_row_cpu(const float* x, float* y, int cols, const OnlineState& s);

/// The one-pass step toward FlashAttention: O = softmax(x)·V for each row of x (rows × cols), with
/// V a cols × dim matrix and O rows × dim, in a single pass over x and V: a running output o is
/// rescaled by e^{m_{i−1} − m_i} whenever the max grows, and divided by d at the end. An all −inf
/// row gives O = 0.
void softmax_weighted_sum_cpu(const float* x, const float* V, float* O, int rows, int cols, int dim);

// ---- GPU (kernels.cu) ------------------------------------------------------------------------

/// The GPU kernels of this chapter; kernels.cu describes each one.
enum class Kernel : int {
    ThreePass = 1,        ///< block per row; max, sum, normalize: reads x 3 times
    OnlineStreaming = 2,  ///< block per row; (m, d) in one pass, normalize in a second: reads x 2 times
    OnlineRegisters = 3,  ///< as 2, with the row kept in registers: reads x once (cols ≤ kMaxRegisterCols)
};

/// Longest row Kernel::OnlineRegisters can hold in registers (a block of 1024 threads × 32 values).
constexpr int kMaxRegisterCols = 32768;

/// Row softmax on the GPU with the online kernel: Kernel::OnlineRegisters when cols ≤
/// kMaxRegisterCols, else Kernel::OnlineStreaming.
///
/// x and y are rows × cols row-major float32 matrices in device memory (any alignment). Each row of
/// y gets softmax(row of x); an entry equal to −inf gets probability 0; a row whose entries are all
/// −inf gets all zeros. When `lse` is not null, lse[row] receives the row's logsumexp m + log d
/// (−inf for an all −inf row). In-place use (y == x) is allowed; any other overlap of x and y is
/// not. Any rows ≥ 0 (0 does nothing) and 1 ≤ cols ≤ 2^30; bad arguments print a message and
/// exit. Runs on the default stream and checks the launch; errors inside the kernel surface at the
/// caller's next synchronizing check.
void softmax_online_gpu(const float* x, float* y, float* lse, int rows, int cols);

/// Row softmax on the GPU with the safe 3-pass kernel (max; sum of e^{x−m}; normalize).
/// Same contract as softmax_online_gpu, without the logsumexp output.
void softmax_three_pass_gpu(const float* x, float* y, int rows, int cols);

/// Runs one named kernel (same contract as softmax_online_gpu; lse is ignored by
/// Kernel::ThreePass). Kernel::OnlineRegisters with cols > kMaxRegisterCols prints an error and exits.
void softmax_gpu(Kernel kernel, const float* x, float* y, float* lse, int rows, int cols);

/// Short name of a kernel for printouts ("three-pass", "online-streaming", "online-registers").
const char* kernel_name(Kernel kernel);

}  // namespace ch2
