// Chapter 1 tests: the safe softmax against the float64 reference on every row length the course
// cares about, on huge and tiny values, −inf entries and all −inf rows; the naive one shown to
// overflow where the safe one does not.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../chapters/01_softmax/softmax.h"
#include "../common/attention.h"
#include "../common/random.h"
#include "../common/softmax_rows.h"
#include "support.h"

namespace {

const std::vector<int> kLengths = {1, 2, 31, 32, 33, 1000, 4097};
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Every entry uniform in [-amplitude, amplitude].
std::vector<float> uniform_rows(int rows, int cols, std::uint64_t seed, double amplitude) {
    return fa::random_uniform(std::size_t(rows) * cols, seed, -amplitude, amplitude);
}

fa::Validation check_safe(const std::vector<float>& x, int rows, int cols) {
    std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
    ch1::softmax_safe(x.data(), y.data(), rows, cols);
    return fa::check_softmax_rows("y", x.data(), y.data(), rows, cols, fa::kFp32Tolerance, rows);
}

bool any_nonfinite(const std::vector<float>& y) {
    for (float v : y)
        if (!std::isfinite(v)) return true;
    return false;
}

}  // namespace

TEST_CASE("safe softmax matches the reference for every row length and magnitude", "[cpu][chapter1]") {
    for (int cols : kLengths)
        for (double amplitude : {1.0, 30.0, 1e4}) {
            INFO("cols " << cols << ", entries in [-" << amplitude << ", " << amplitude << "]");
            const int rows = 5;
            const std::vector<float> x = uniform_rows(rows, cols, 100 + cols, amplitude);
            CHECK_ACCURATE(check_safe(x, rows, cols), 1e-5);
        }
}

TEST_CASE("naive softmax overflows on large entries; the safe one does not", "[cpu][chapter1]") {
    for (int cols : kLengths) {
        INFO("cols " << cols);
        const int rows = 3;
        std::vector<float> x = uniform_rows(rows, cols, 7 + cols, 1e4);
        x[0] = 1e4f;  // at least one entry of row 0 above ln(FLT_MAX) ≈ 88.72
        std::vector<float> y(x.size());
        ch1::softmax_naive(x.data(), y.data(), rows, cols);
        CHECK(any_nonfinite(y));  // shown, not hidden: e^{1e4} = inf, inf/inf = NaN
        CHECK_VALID(check_safe(x, rows, cols));
    }
}

TEST_CASE("naive softmax gives 0/0 when every e^x underflows; the safe one does not", "[cpu][chapter1]") {
    const int cols = 33;
    const std::vector<float> x(cols, -200.0f);  // e^{-200} is 0 in float32
    std::vector<float> y(cols);
    ch1::softmax_naive(x.data(), y.data(), 1, cols);
    CHECK(std::isnan(y[0]));
    ch1::softmax_safe(x.data(), y.data(), 1, cols);
    for (float v : y) CHECK(v == Approx(1.0 / cols).epsilon(1e-6));
}

TEST_CASE("naive softmax is right on small entries (where it does not overflow)", "[cpu][chapter1]") {
    for (int cols : kLengths) {
        INFO("cols " << cols);
        const int rows = 4;
        const std::vector<float> x = uniform_rows(rows, cols, 11 + cols, 5.0);
        std::vector<float> y(x.size());
        ch1::softmax_naive(x.data(), y.data(), rows, cols);
        CHECK_VALID(fa::check_softmax_rows("y", x.data(), y.data(), rows, cols, fa::kFp32Tolerance, rows));
    }
}

TEST_CASE("safe softmax: −inf entries get 0, an all −inf row gives zeros (no NaN)", "[cpu][chapter1]") {
    for (int cols : kLengths) {
        INFO("cols " << cols);
        const int rows = 3;
        std::vector<float> x = uniform_rows(rows, cols, 3 + cols, 50.0);
        for (int j = 0; j < cols; j += 3) x[j] = kNegInf;           // row 0: every third entry −inf
        for (int j = 0; j < cols; ++j) x[std::size_t(cols) + j] = kNegInf;  // row 1: all −inf
        x[2 * std::size_t(cols) + cols - 1] = kNegInf;               // row 2: last entry −inf
        std::vector<float> y(x.size(), 123.0f);
        ch1::softmax_safe(x.data(), y.data(), rows, cols);
        CHECK_VALID(fa::check_softmax_rows("y", x.data(), y.data(), rows, cols, fa::kFp32Tolerance, rows));
        for (int j = 0; j < cols; ++j) CHECK(y[std::size_t(cols) + j] == 0.0f);
        for (int j = 0; j < cols; j += 3) CHECK(y[j] == 0.0f);
    }
}

TEST_CASE("safe softmax of a constant row is uniform, whatever the constant", "[cpu][chapter1]") {
    for (int cols : kLengths)
        for (float c : {-1e4f, -200.0f, 0.0f, 88.0f, 1e4f}) {
            INFO("cols " << cols << ", every entry " << c);
            const std::vector<float> x(std::size_t(cols), c);
            std::vector<float> y(x.size());
            ch1::softmax_safe(x.data(), y.data(), 1, cols);
            for (float v : y) CHECK(v == Approx(1.0 / cols).epsilon(1e-6));
        }
}

TEST_CASE("safe softmax in place equals out of place", "[cpu][chapter1]") {
    const int rows = 4, cols = 1000;
    std::vector<float> x = uniform_rows(rows, cols, 5, 100.0), y(x.size());
    ch1::softmax_safe(x.data(), y.data(), rows, cols);
    ch1::softmax_safe(x.data(), x.data(), rows, cols);
    CHECK(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

TEST_CASE("both softmaxes are deterministic for a fixed seed (bit-identical twice)", "[cpu][chapter1]") {
    const int rows = 8, cols = 4097;
    const std::vector<float> x1 = uniform_rows(rows, cols, 42, 10.0), x2 = uniform_rows(rows, cols, 42, 10.0);
    REQUIRE(std::memcmp(x1.data(), x2.data(), x1.size() * sizeof(float)) == 0);
    std::vector<float> a(x1.size()), b(x1.size());
    ch1::softmax_safe(x1.data(), a.data(), rows, cols);
    ch1::softmax_safe(x2.data(), b.data(), rows, cols);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    ch1::softmax_naive(x1.data(), a.data(), rows, cols);
    ch1::softmax_naive(x2.data(), b.data(), rows, cols);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
