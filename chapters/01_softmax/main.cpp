// Chapter 1 program: the naive and the safe softmax on the same rows, on the CPU.
//
//   ./chapter1                     4096 rows x 1000 cols, entries 40·N(0.5, 1): the naive one overflows
//   ./chapter1 --scale 1           small entries: both agree with the float64 reference
//   ./chapter1 --save-npy out      writes out/x.npy, out/y.npy (safe) and out/y_naive.npy
//
// Prints, for each version: its check against the float64 reference, how many rows came out with
// inf/NaN, its passes over memory, and its time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "../../common/attention.h"
#include "../../common/cli.h"
#include "../../common/exit_codes.h"
#include "../../common/softmax_rows.h"
#include "../../common/timer.h"
#include "softmax.h"

namespace {

// Rows of y (rows × cols) holding at least one inf or NaN.
int nonfinite_rows(const std::vector<float>& y, int rows, int cols) {
    int bad = 0;
    for (int r = 0; r < rows; ++r) {
        const float* yr = y.data() + std::size_t(r) * cols;
        bad += std::any_of(yr, yr + cols, [](float v) { return !std::isfinite(v); }) ? 1 : 0;
    }
    return bad;
}

// Runs one version once, checks it, says how many rows overflowed, then times it.
template <class Softmax>
bool run_version(const char* label, ch1::Passes passes, Softmax softmax, const std::vector<float>& x,
                 std::vector<float>& y, int rows, int cols, const fa::RunArgs& args) {
    std::printf("\n%s\n", label);
    std::printf("  passes over memory: reads x %dx, writes y %dx per element (%d bytes per element)\n",
                passes.reads, passes.writes, 4 * (passes.reads + passes.writes));
    softmax(x.data(), y.data(), rows, cols);
    bool ok = true;
    if (!args.no_check) {
        const fa::Validation v =
            fa::check_softmax_rows("y", x.data(), y.data(), rows, cols, fa::kFp32Tolerance);
        v.print();
        ok = v.ok();
    }
    const int bad = nonfinite_rows(y, rows, cols);
    std::printf("  rows with inf/NaN in y: %d of %d\n", bad, rows);
    if (!args.no_bench) {
        const fa::TimingStats t = fa::time_cpu([&] { softmax(x.data(), y.data(), rows, cols); }, args.repeat);
        const double elements = double(rows) * double(cols);
        fa::print_timing("time (GB/s counts every pass)", t, 0,
                         4.0 * (passes.reads + passes.writes) * elements);
    }
    return ok;
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter1", "Row softmax on the CPU: the naive formula overflows, the safe 3-pass one does not.");
    int rows = 4096, cols = 1000;
    double scale = 40.0;
    cli.option("--rows", &rows, "rows of the input matrix", 1, 1 << 24);
    cli.option("--cols", &cols, "entries per row (the softmax runs along a row)", 1, 1 << 24);
    cli.option("--scale", &scale, "input magnitude: entries are scale·N(0.5, 1)", 0.0, 1e6);
    fa::RunArgs args;
    fa::add_run_options(cli, args);
    fa::add_npy_options(cli, args);
    cli.conflict("--load-npy", "--seed", "the input comes from the file");
    cli.conflict("--load-npy", "--scale", "the input comes from the file");
    cli.parse(argc, argv);
    if (!args.csv.empty())
        std::printf("note: --csv records attention kernels; chapter 1 writes no rows to %s\n", args.csv.c_str());
    if (args.load_npy.empty() && double(rows) * double(cols) > double(1 << 28))
        cli.fail("--rows x --cols must be at most 2^28 elements (three arrays of that size are held in host memory)");

    const std::vector<float> x = fa::rows_from_args(cli, args, rows, cols, scale, 3, "x, y naive and y safe");
    float lo = INFINITY, hi = -INFINITY;
    for (float v : x) lo = std::fmin(lo, v), hi = std::fmax(hi, v);
    std::printf("entries in [%g, %g]; in float32, e^x overflows for x > %.2f and underflows to 0 "
                "for x < %.2f\n", lo, hi, std::log(std::numeric_limits<float>::max()), std::log(0x1p-150));

    std::vector<float> y_naive(x.size()), y_safe(x.size());
    run_version("naive softmax: y_j = e^{x_j} / sum_k e^{x_k}", ch1::kNaivePasses, ch1::softmax_naive,
                x, y_naive, rows, cols, args);
    const bool safe_ok =
        run_version("safe softmax: m = max_k x_k, y_j = e^{x_j - m} / sum_k e^{x_k - m}",
                    ch1::kSafePasses, ch1::softmax_safe, x, y_safe, rows, cols, args);

    if (!args.save_npy.empty()) {
        std::printf("\n");
        fa::save_rows_npy(args.save_npy, "x", x.data(), rows, cols);
        fa::save_rows_npy(args.save_npy, "y", y_safe.data(), rows, cols);
        fa::save_rows_npy(args.save_npy, "y_naive", y_naive.data(), rows, cols);
    }
    if (args.no_check) return fa::kExitOk;
    std::printf("\nsafe softmax %s the float64 reference\n", safe_ok ? "matches" : "DOES NOT match");
    return safe_ok ? fa::kExitOk : fa::kExitFailed;
} catch (...) {
    return fa::exit_status_of_exception("chapter1");
}
