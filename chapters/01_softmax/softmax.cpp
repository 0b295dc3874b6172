// Chapter 1: row softmax on the CPU, naive and safe. Plain loops, one per pass over memory, so the
// passes counted in softmax.h can be read off the code.
#include "softmax.h"

#include <cmath>
#include <cstddef>

namespace ch1 {
namespace {

// The naive formula on one row of n entries.
void naive_row(const float* x, float* y, int n) {
    // pass 1 (reads x): d = Σ_j e^{x_j}; e^{x_j} = inf as soon as x_j > 88.72
    float d = 0.0f;
    for (int j = 0; j < n; ++j) d += std::exp(x[j]);
    // pass 2 (reads x, writes y): y_j = e^{x_j} / d; inf / inf = NaN, 0 / 0 = NaN
    for (int j = 0; j < n; ++j) y[j] = std::exp(x[j]) / d;
}

// The safe 3-pass softmax on one row (eq. 1–3 of the README).
void safe_row(const float* x, float* y, int n) {
    // pass 1 (reads x), eq. 1: m = max_j x_j
    float m = -INFINITY;
    for (int j = 0; j < n; ++j) m = std::fmax(m, x[j]);
    if (m == -INFINITY) {  // every entry −inf: no distribution; the course's result is all zeros
        for (int j = 0; j < n; ++j) y[j] = 0.0f;
        return;
    }
    // pass 2 (reads x), eq. 2: d = Σ_j e^{x_j − m}; every term is ≤ 1 and the max gives 1: 1 ≤ d ≤ n
    float d = 0.0f;
    for (int j = 0; j < n; ++j) d += std::exp(x[j] - m);
    // pass 3 (reads x, writes y), eq. 3: y_j = e^{x_j − m} / d
    for (int j = 0; j < n; ++j) y[j] = std::exp(x[j] - m) / d;
}

}  // namespace

void softmax_naive(const float* x, float* y, int rows, int cols) {
    for (int r = 0; r < rows; ++r)
        naive_row(x + std::size_t(r) * cols, y + std::size_t(r) * cols, cols);
}

void softmax_safe(const float* x, float* y, int rows, int cols) {
    for (int r = 0; r < rows; ++r)
        safe_row(x + std::size_t(r) * cols, y + std::size_t(r) * cols, cols);
}

}  // namespace ch1
