/// @file softmax.h
/// @brief Chapter 1 API: row softmax on the CPU, the naive formula and the safe 3-pass one.
#pragma once

namespace ch1 {

/// Memory traffic of a softmax: how many times it reads each input element and writes each output
/// element (one pass over memory = one read or one write of every element).
struct Passes {
    int reads;   ///< passes reading x
    int writes;  ///< passes writing y
};

/// Naive softmax: pass 1 sums e^{x_j}, pass 2 writes e^{x_j} / sum.
constexpr Passes kNaivePasses{2, 1};
/// Safe softmax: pass 1 finds the max m, pass 2 sums e^{x_j − m}, pass 3 writes e^{x_j − m} / sum.
constexpr Passes kSafePasses{3, 1};

/// y_j = e^{x_j} / Σ_k e^{x_k} for each row of the rows × cols row-major matrix x, in float32.
/// Overflows (inf, then NaN) when an entry exceeds ln(FLT_MAX) ≈ 88.72, and gives 0/0 = NaN when
/// every e^{x_k} underflows (all entries below about −103.97, or all −inf). Shown, never fixed:
/// that is the point of the chapter.
void softmax_naive(const float* x, float* y, int rows, int cols);

/// y_j = e^{x_j − m} / Σ_k e^{x_k − m} with m = max_k x_k, for each row; never overflows. Entries
/// equal to −inf get 0; a row of all −inf gets all zeros (the convention of common/reference.h).
/// y may equal x (in place).
void softmax_safe(const float* x, float* y, int rows, int cols);

}  // namespace ch1
