// Chapter 2 tests: the online state (push, merge, −inf), the CPU online softmax, chunk merging in
// any order, the one-pass softmax(x)·V, and the three GPU kernels against the float64 reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "../chapters/02_online_softmax/online_softmax.h"
#include "../common/attention.h"
#include "../common/device.h"
#include "../common/random.h"
#include "../common/softmax_rows.h"
#include "support.h"

namespace {

const std::vector<int> kLengths = {1, 2, 31, 32, 33, 1000, 4097};
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows that exercise every case: random entries of magnitude up to `amplitude`, then (when there
// are enough rows) an all −inf row, a constant row, a row whose only finite entry is the last one
// (−200: most threads of a GPU block see only −inf), a row with every third entry −inf, and an
// increasing row (the max grows at every entry, so every step must rescale).
std::vector<float> test_rows(int rows, int cols, std::uint64_t seed, double amplitude) {
    std::vector<float> x = fa::random_uniform(std::size_t(rows) * cols, seed, -amplitude, amplitude);
    auto row = [&](int r) { return x.data() + std::size_t(r) * cols; };
    if (rows > 1) std::fill_n(row(1), cols, kNegInf);
    if (rows > 2) std::fill_n(row(2), cols, 3.5f);
    if (rows > 3) {
        std::fill_n(row(3), cols, kNegInf);
        row(3)[cols - 1] = -200.0f;
    }
    if (rows > 4)
        for (int j = 0; j < cols; j += 3) row(4)[j] = kNegInf;
    if (rows > 5)
        for (int j = 0; j < cols; ++j) row(5)[j] = float(j) * float(amplitude) / float(cols);
    return x;
}

// y and lse of every row against the float64 reference.
void check_rows(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>* lse,
                int rows, int cols) {
    CHECK_ACCURATE(fa::check_softmax_rows("y", x.data(), y.data(), rows, cols, fa::kFp32Tolerance, rows), 1e-5);
    if (lse != nullptr)
        CHECK_VALID(fa::check_logsumexp_rows("lse", x.data(), lse->data(), rows, cols, fa::kFp32Tolerance, rows));
}

// Cuts increasing in 1 … cols−1 (count of them random, at most max_cuts) and a random order of the chunks.
void random_split(fa::Rng& rng, int cols, int max_cuts, std::vector<int>& cuts, std::vector<int>& order) {
    cuts.clear();
    const int want = cols > 1 ? int(rng.next() % std::uint64_t(std::min(max_cuts, cols - 1) + 1)) : 0;
    std::vector<int> pos(std::size_t(std::max(cols - 1, 0)));
    std::iota(pos.begin(), pos.end(), 1);
    for (int i = 0; i < want; ++i) {
        std::swap(pos[i], pos[i + int(rng.next() % std::uint64_t(pos.size() - i))]);
        cuts.push_back(pos[i]);
    }
    std::sort(cuts.begin(), cuts.end());
    order.resize(cuts.size() + 1);
    std::iota(order.begin(), order.end(), 0);
    for (int i = int(order.size()) - 1; i > 0; --i) std::swap(order[i], order[int(rng.next() % std::uint64_t(i + 1))]);
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// ---- the state ---------------------------------------------------------------------------------

TEST_CASE("online state: push follows the recurrence, −inf never makes NaN", "[cpu][chapter2]") {
    ch2::OnlineState s;
    CHECK(s.m == kNegInf);
    CHECK(s.d == 0.0f);
    CHECK(s.logsumexp() == kNegInf);
    s.push(kNegInf);  // −inf − (−inf) must not be evaluated
    CHECK(s.m == kNegInf);
    CHECK(s.d == 0.0f);
    s.push(1.0f);
    CHECK(s.m == 1.0f);
    CHECK(s.d == 1.0f);
    s.push(3.0f);  // d = 1·e^{1−3} + 1
    CHECK(s.m == 3.0f);
    CHECK(s.d == Approx(1.0 + std::exp(-2.0)).epsilon(1e-6));
    s.push(kNegInf);
    CHECK(s.d == Approx(1.0 + std::exp(-2.0)).epsilon(1e-6));
    CHECK(s.logsumexp() == Approx(std::log(std::exp(1.0) + std::exp(3.0))).epsilon(1e-6));
    CHECK(s.prob(1.0f) == Approx(std::exp(1.0) / (std::exp(1.0) + std::exp(3.0))).epsilon(1e-6));
}

TEST_CASE("online state: merging empty and all −inf states gives (−inf, 0), never NaN", "[cpu][chapter2]") {
    ch2::OnlineState empty, minus_inf, finite;
    minus_inf.push(kNegInf);
    finite.push(2.0f);
    ch2::OnlineState a = empty;
    a.merge(minus_inf);
    CHECK(a.m == kNegInf);
    CHECK(a.d == 0.0f);
    CHECK(a.prob(kNegInf) == 0.0f);
    a.merge(finite);
    CHECK(a.m == 2.0f);
    CHECK(a.d == 1.0f);
    ch2::OnlineState b = finite;
    b.merge(empty);
    CHECK(b.m == 2.0f);
    CHECK(b.d == 1.0f);
    CHECK(b.prob(kNegInf) == 0.0f);
}

// ---- CPU online softmax -----------------------------------------------------------------------

TEST_CASE("CPU online softmax matches the reference (lengths, ±1e4, −inf, constant, increasing)", "[cpu][chapter2]") {
    for (int cols : kLengths)
        for (double amplitude : {1.0, 30.0, 1e4}) {
            INFO("cols " << cols << ", amplitude " << amplitude);
            const int rows = 8;
            const std::vector<float> x = test_rows(rows, cols, 200 + cols, amplitude);
            std::vector<float> y(x.size(), std::nanf("")), lse(rows, std::nanf(""));
            ch2::softmax_online_cpu(x.data(), y.data(), lse.data(), rows, cols);
            check_rows(x, y, &lse, rows, cols);
            for (int j = 0; j < cols && rows > 1; ++j) CHECK(y[std::size_t(cols) + j] == 0.0f);
            CHECK(lse[1] == kNegInf);
        }
}

TEST_CASE("CPU online softmax in place equals out of place", "[cpu][chapter2]") {
    const int rows = 8, cols = 1000;
    std::vector<float> x = test_rows(rows, cols, 9, 100.0), y(x.size());
    ch2::softmax_online_cpu(x.data(), y.data(), nullptr, rows, cols);
    ch2::softmax_online_cpu(x.data(), x.data(), nullptr, rows, cols);
    CHECK(bit_equal(x, y));
}

TEST_CASE("chunk states merge exactly: random cuts, random order, same softmax", "[cpu][chapter2]") {
    fa::Rng rng(2024);
    std::vector<int> cuts, order;
    for (int cols : kLengths)
        for (int trial = 0; trial < 20; ++trial) {
            const int rows = 8;
            const std::vector<float> x = test_rows(rows, cols, 300 + cols * 31 + trial, trial % 2 ? 1e4 : 10.0);
            for (int r = 0; r < rows; ++r) {
                const float* x_r = x.data() + std::size_t(r) * cols;
                random_split(rng, cols, trial < 10 ? 4 : cols, cuts, order);
                INFO("cols " << cols << ", row " << r << ", " << order.size() << " chunks");
                const ch2::OnlineState merged = ch2::merge_chunks_cpu(x_r, cols, cuts, order);
                const ch2::OnlineState whole = ch2::online_state_cpu(x_r, cols);
                CHECK(merged.m == whole.m);  // a max is exact in any order
                if (whole.m == kNegInf) CHECK(merged.d == 0.0f);
                else CHECK(merged.d == Approx(whole.d).epsilon(fa::kFp32Tolerance.rtol));  // float sums in another order
                std::vector<float> y(std::size_t(cols), std::nanf(""));
                ch2::normalize_row_cpu(x_r, y.data(), cols, merged);
                CHECK_VALID(fa::check_softmax_rows("y", x_r, y.data(), 1, cols, fa::kFp32Tolerance));
            }
        }
}

TEST_CASE("one-pass softmax(x)·V equals the reference softmax times V", "[cpu][chapter2]") {
    for (int cols : kLengths)
        for (int dim : {1, 16, 64}) {
            INFO("cols " << cols << ", dim " << dim);
            const int rows = 8;
            const std::vector<float> x = test_rows(rows, cols, 400 + cols + dim, 20.0);
            const std::vector<float> V = fa::random_normal(std::size_t(cols) * dim, 17 + dim, 0.5, 1.0);
            std::vector<float> O(std::size_t(rows) * dim, std::nanf(""));
            ch2::softmax_weighted_sum_cpu(x.data(), V.data(), O.data(), rows, cols, dim);
            std::vector<double> P(x.size()), want(O.size(), 0.0);
            fa::softmax_reference(x.data(), P.data(), rows, cols);
            for (int r = 0; r < rows; ++r)
                for (int j = 0; j < cols; ++j)
                    for (int k = 0; k < dim; ++k)
                        want[std::size_t(r) * dim + k] += P[std::size_t(r) * cols + j] * double(V[std::size_t(j) * dim + k]);
            CHECK_ACCURATE(fa::validate("O", O.data(), want.data(), O.size(), fa::kFp32Tolerance,
                                        fa::contiguous(1, rows, dim)), 1e-5);
            for (int k = 0; k < dim; ++k) CHECK(O[std::size_t(dim) + k] == 0.0f);  // all −inf row
        }
}

TEST_CASE("CPU online softmax is deterministic for a fixed seed (bit-identical twice)", "[cpu][chapter2]") {
    const int rows = 8, cols = 4097;
    const std::vector<float> x1 = test_rows(rows, cols, 77, 50.0), x2 = test_rows(rows, cols, 77, 50.0);
    REQUIRE(bit_equal(x1, x2));
    std::vector<float> a(x1.size()), b(x1.size()), la(rows), lb(rows);
    ch2::softmax_online_cpu(x1.data(), a.data(), la.data(), rows, cols);
    ch2::softmax_online_cpu(x2.data(), b.data(), lb.data(), rows, cols);
    CHECK(bit_equal(a, b));
    CHECK(bit_equal(la, lb));
}

// ---- GPU kernels --------------------------------------------------------------------------------

namespace {

const std::vector<ch2::Kernel> kKernels = {ch2::Kernel::ThreePass, ch2::Kernel::OnlineStreaming,
                                           ch2::Kernel::OnlineRegisters};

// Row lengths for the GPU: the course's list, both sides of every block-size and chunk boundary,
// and (not under the sanitizer) the longest rows kernel 3 holds and longer ones.
std::vector<int> gpu_lengths() {
    std::vector<int> n = {1, 2, 3, 4, 5, 31, 32, 33, 127, 128, 129, 1000, 1024, 1025, 4096, 4097};
    if (!fa::test::small_shapes())
        for (int c : {2048, 2049, 8192, 8193, 16384, 16385, 32767, 32768, 32769, 40000}) n.push_back(c);
    return n;
}

// Runs `kernel` (or the API call for it) on device copies of x; returns y and lse.
struct GpuResult {
    std::vector<float> y, lse;
};
GpuResult run_gpu(ch2::Kernel kernel, const std::vector<float>& x, int rows, int cols) {
    fa::DeviceBuffer<float> dx(x), dy(x.size()), dlse(static_cast<std::size_t>(rows));
    dy.poison();
    dlse.poison();
    ch2::softmax_gpu(kernel, dx.get(), dy.get(), dlse.get(), rows, cols);
    CUDA_CHECK(cudaDeviceSynchronize());
    return {dy.download(), dlse.download()};
}

bool kernel_fits(ch2::Kernel k, int cols) {
    return k != ch2::Kernel::OnlineRegisters || cols <= ch2::kMaxRegisterCols;
}

}  // namespace

TEST_CASE("GPU kernels match the reference: every length, ±1e4, −inf, all −inf rows", "[gpu][chapter2]") {
    for (int cols : gpu_lengths())
        for (ch2::Kernel k : kKernels) {
            if (!kernel_fits(k, cols)) continue;
            for (double amplitude : {1.0, 1e4}) {
                INFO("kernel " << ch2::kernel_name(k) << ", cols " << cols << ", amplitude " << amplitude);
                const int rows = 7;
                const std::vector<float> x = test_rows(rows, cols, 500 + cols, amplitude);
                const GpuResult r = run_gpu(k, x, rows, cols);
                check_rows(x, r.y, k == ch2::Kernel::ThreePass ? nullptr : &r.lse, rows, cols);
                for (int j = 0; j < cols; ++j) CHECK(r.y[std::size_t(cols) + j] == 0.0f);
                if (k != ch2::Kernel::ThreePass) CHECK(r.lse[1] == kNegInf);
            }
        }
}

TEST_CASE("GPU API: softmax_online_gpu and softmax_three_pass_gpu, lse optional", "[gpu][chapter2]") {
    std::vector<int> lengths = {1, 33, 4097};
    if (!fa::test::small_shapes()) lengths.push_back(65537);  // past kMaxRegisterCols: kernel 2
    for (int cols : lengths) {
        INFO("cols " << cols);
        const int rows = 6;
        const std::vector<float> x = test_rows(rows, cols, 600 + cols, 100.0);
        fa::DeviceBuffer<float> dx(x), dy(x.size()), dlse(static_cast<std::size_t>(rows));
        dy.poison();
        dlse.poison();
        ch2::softmax_online_gpu(dx.get(), dy.get(), dlse.get(), rows, cols);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> lse = dlse.download();
        check_rows(x, dy.download(), &lse, rows, cols);
        dy.poison();
        ch2::softmax_online_gpu(dx.get(), dy.get(), nullptr, rows, cols);
        CUDA_CHECK(cudaDeviceSynchronize());
        check_rows(x, dy.download(), nullptr, rows, cols);
        dy.poison();
        ch2::softmax_three_pass_gpu(dx.get(), dy.get(), rows, cols);
        CUDA_CHECK(cudaDeviceSynchronize());
        check_rows(x, dy.download(), nullptr, rows, cols);
    }
    ch2::softmax_online_gpu(nullptr, nullptr, nullptr, 0, 5);  // no rows: nothing to do
    CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_CASE("GPU kernels: rows not 16-byte aligned take the scalar path", "[gpu][chapter2]") {
    for (int cols : {4, 32, 1024, 4096})
        for (ch2::Kernel k : kKernels) {
            INFO("kernel " << ch2::kernel_name(k) << ", cols " << cols << ", x and y offset by one float");
            const int rows = 6;
            const std::vector<float> x = test_rows(rows, cols, 700 + cols, 50.0);
            std::vector<float> padded(x.size() + 1, 0.0f);
            std::copy(x.begin(), x.end(), padded.begin() + 1);
            fa::DeviceBuffer<float> dx(padded), dy(padded.size()), dlse(static_cast<std::size_t>(rows));
            dy.poison();
            dlse.poison();
            ch2::softmax_gpu(k, dx.get() + 1, dy.get() + 1, dlse.get(), rows, cols);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> y_padded = dy.download(), lse = dlse.download();
            const std::vector<float> y(y_padded.begin() + 1, y_padded.end());
            check_rows(x, y, k == ch2::Kernel::ThreePass ? nullptr : &lse, rows, cols);
            CHECK(std::isnan(y_padded[0]));  // the float before the matrix is not written
        }
}

TEST_CASE("GPU kernels work in place (y == x)", "[gpu][chapter2]") {
    for (int cols : {3, 1000, 4096})
        for (ch2::Kernel k : kKernels) {
            INFO("kernel " << ch2::kernel_name(k) << ", cols " << cols);
            const int rows = 7;
            const std::vector<float> x = test_rows(rows, cols, 800 + cols, 30.0);
            fa::DeviceBuffer<float> d(x), dlse(static_cast<std::size_t>(rows));
            dlse.poison();
            ch2::softmax_gpu(k, d.get(), d.get(), dlse.get(), rows, cols);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> lse = dlse.download();
            check_rows(x, d.download(), k == ch2::Kernel::ThreePass ? nullptr : &lse, rows, cols);
        }
}

TEST_CASE("GPU kernels: many rows (grid larger than 65535 blocks)", "[gpu][chapter2]") {
    const int rows = fa::test::small_shapes() ? 70000 : (1 << 21);
    for (int cols : {1, 3})
        for (ch2::Kernel k : kKernels) {
            INFO("kernel " << ch2::kernel_name(k) << ", rows " << rows << ", cols " << cols);
            const std::vector<float> x = fa::random_rows(std::size_t(rows), std::size_t(cols), 900 + cols, 5.0);
            const GpuResult r = run_gpu(k, x, rows, cols);
            CHECK_VALID(fa::check_softmax_rows("y", x.data(), r.y.data(), rows, cols, fa::kFp32Tolerance));
            if (k != ch2::Kernel::ThreePass)
                CHECK_VALID(fa::check_logsumexp_rows("lse", x.data(), r.lse.data(), rows, cols, fa::kFp32Tolerance));
        }
}

TEST_CASE("GPU kernels are deterministic (bit-identical twice)", "[gpu][chapter2]") {
    for (int cols : {33, 4097})
        for (ch2::Kernel k : kKernels) {
            INFO("kernel " << ch2::kernel_name(k) << ", cols " << cols);
            const int rows = 16;
            const std::vector<float> x = test_rows(rows, cols, 1000 + cols, 20.0);
            const GpuResult a = run_gpu(k, x, rows, cols), b = run_gpu(k, x, rows, cols);
            CHECK(bit_equal(a.y, b.y));
            if (k != ch2::Kernel::ThreePass) CHECK(bit_equal(a.lse, b.lse));
        }
}
