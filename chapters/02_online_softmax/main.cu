// Chapter 2 program: online softmax on the CPU (the algorithms) and on the GPU (the kernels).
//
//   ./chapter2                      16384 rows x 4096 cols: CPU checks, then kernels 1–3 checked and
//                                   timed, with their GB/s and % of the device's copy bandwidth
//   ./chapter2 --cpu-only           the CPU checks alone (no GPU needed; without one, a plain run
//                                   does them too, then says the kernels did not run and exits 3)
//   ./chapter2 --cols 8192 --rows 8192 --kernel 3
//   ./chapter2 --sweep              the same for row lengths 1 … 65536 at a fixed total size
//   ./chapter2 --save-npy out       writes out/x.npy, out/y.npy, out/lse.npy (online kernel)
//
// GB/s count the bytes a softmax must move at least: x read once and y written once (plus lse).
// The copy bandwidth is a cudaMemcpy of 256 MiB device to device, counted as bytes read + written.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "../../common/attention.h"
#include "../../common/check.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/exit_codes.h"
#include "../../common/gpu_timer.h"
#include "../../common/random.h"
#include "../../common/softmax_rows.h"
#include "../../common/timer.h"
#include "online_softmax.h"

namespace {

struct Args {
    int rows = 16384, cols = 4096, chunks = 8, dim = 64, kernel = 0;
    double scale = 1.0;
    bool sweep = false, cpu_only = false;
    fa::RunArgs run;
};

// Copies `rows` chosen rows of x (rows × cols) into a compact matrix.
std::vector<float> gather_rows(const std::vector<float>& x, const std::vector<int>& rows, int cols) {
    std::vector<float> out(rows.size() * std::size_t(cols));
    for (std::size_t i = 0; i < rows.size(); ++i)
        std::copy_n(x.data() + std::size_t(rows[i]) * cols, cols, out.data() + i * cols);
    return out;
}

// ---- CPU: the algorithms of the README ---------------------------------------------------------

// Alg. 1 on sampled rows, checked against the float64 reference.
bool cpu_online(const std::vector<float>& xs, int n, int cols) {
    std::vector<float> y(xs.size()), lse(static_cast<std::size_t>(n));
    ch2::softmax_online_cpu(xs.data(), y.data(), lse.data(), n, cols);
    std::printf("online softmax, 2 passes (Alg. 1), %d sampled rows\n", n);
    const fa::Validation vy = fa::check_softmax_rows("y", xs.data(), y.data(), n, cols, fa::kFp32Tolerance);
    const fa::Validation vl = fa::check_logsumexp_rows("lse", xs.data(), lse.data(), n, cols, fa::kFp32Tolerance);
    vy.print();
    vl.print();
    return vy.ok() && vl.ok();
}

// Alg. 2: one row cut at random points into `chunks` pieces, their states merged in random order.
bool cpu_merge(const std::vector<float>& xs, int cols, int chunks, std::uint64_t seed) {
    fa::Rng rng(seed);
    chunks = std::min(chunks, cols);
    std::vector<int> positions(std::size_t(cols) - 1), order(static_cast<std::size_t>(chunks));
    std::iota(positions.begin(), positions.end(), 1);
    for (int i = 0; i < chunks - 1; ++i)  // partial Fisher–Yates: chunks − 1 distinct cut points
        std::swap(positions[i], positions[i + int(rng.next() % std::uint64_t(cols - 1 - i))]);
    std::vector<int> cuts(positions.begin(), positions.begin() + (chunks - 1));
    std::sort(cuts.begin(), cuts.end());
    std::iota(order.begin(), order.end(), 0);
    for (int i = chunks - 1; i > 0; --i) std::swap(order[i], order[int(rng.next() % std::uint64_t(i + 1))]);

    const ch2::OnlineState merged = ch2::merge_chunks_cpu(xs.data(), cols, cuts, order);
    const ch2::OnlineState whole = ch2::online_state_cpu(xs.data(), cols);
    std::vector<float> y(static_cast<std::size_t>(cols)), y_whole(static_cast<std::size_t>(cols));
    ch2::normalize_row_cpu(xs.data(), y.data(), cols, merged);
    ch2::normalize_row_cpu(xs.data(), y_whole.data(), cols, whole);
    float diff = 0;
    for (int j = 0; j < cols; ++j) diff = std::fmax(diff, std::fabs(y[j] - y_whole[j]));
    std::printf("merging states (Alg. 2): row 0 cut into %d chunks at random points, merged in the order", chunks);
    for (std::size_t i = 0; i < order.size() && i < 12; ++i) std::printf(" %d", order[i]);
    std::printf("%s\n", order.size() > 12 ? " ..." : "");
    std::printf("  merged (m, d) = (%.7g, %.7g), one pass over the row (m, d) = (%.7g, %.7g); "
                "max |y_merged - y_whole| = %.2e\n", merged.m, merged.d, whole.m, whole.d, diff);
    const fa::Validation v = fa::check_softmax_rows("y", xs.data(), y.data(), 1, cols, fa::kFp32Tolerance);
    v.print();
    return v.ok();
}

// Alg. 3: softmax(x)·V in one pass, against softmax_reference(x) · V in float64.
bool cpu_weighted_sum(const std::vector<float>& xs, int n, int cols, int dim, std::uint64_t seed) {
    if (double(cols) * dim > double(1 << 26)) {
        std::printf("one pass: O = softmax(x)·V (Alg. 3): skipped, V of %d x %d is too large for the CPU "
                    "demonstration (at most 2^26 entries)\n", cols, dim);
        return true;
    }
    const std::vector<float> V = fa::random_normal(std::size_t(cols) * dim, seed + 1, 0.5, 1.0);
    std::vector<float> O(std::size_t(n) * dim);
    ch2::softmax_weighted_sum_cpu(xs.data(), V.data(), O.data(), n, cols, dim);
    std::vector<double> want(O.size()), p(static_cast<std::size_t>(cols));
    for (int r = 0; r < n; ++r) {
        fa::softmax_reference(xs.data() + std::size_t(r) * cols, p.data(), 1, std::size_t(cols));
        for (int j = 0; j < cols; ++j)
            for (int k = 0; k < dim; ++k) want[std::size_t(r) * dim + k] += p[j] * double(V[std::size_t(j) * dim + k]);
    }
    std::printf("one pass: O = softmax(x)·V with a running output (Alg. 3), %d rows, V %d x %d\n", n, cols, dim);
    const fa::Validation v = fa::validate("O", O.data(), want.data(), O.size(), fa::kFp32Tolerance,
                                          fa::contiguous(1, std::size_t(n), std::size_t(dim)));
    v.print();
    return v.ok();
}

// ---- GPU ----------------------------------------------------------------------------------------

// GB/s of a large device-to-device copy, counting bytes read + written.
double copy_bandwidth(fa::GpuTimer& timer, int repeat) {
    const std::size_t bytes = std::size_t(256) << 20;
    fa::DeviceBuffer<char> src(bytes), dst(bytes);
    src.zero();
    const fa::TimingStats t = timer.time(
        [&] { CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice)); }, repeat);
    fa::print_timing("cudaMemcpy 256 MiB, read + write", t, 0, 2.0 * bytes);
    return 2.0 * bytes / (t.median_ms * 1e-3) / 1e9;
}

// What one kernel did on one input.
struct KernelRun {
    bool ok = true;
    double gbps = 0;
};

// Poisons y and lse, runs the kernel, checks y (and lse) against the float64 reference, times it.
KernelRun run_kernel(ch2::Kernel k, const std::vector<float>& x, const fa::DeviceBuffer<float>& dx,
                     fa::DeviceBuffer<float>& dy, fa::DeviceBuffer<float>& dlse, int rows, int cols,
                     const Args& a, fa::GpuTimer& timer, double copy_gbps, bool verbose) {
    KernelRun out;
    const bool has_lse = k != ch2::Kernel::ThreePass;
    dy.poison();
    dlse.poison();
    auto launch = [&] { ch2::softmax_gpu(k, dx.get(), dy.get(), has_lse ? dlse.get() : nullptr, rows, cols); };
    launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    if (!a.run.no_check) {
        const std::vector<float> y = dy.download();
        fa::Validation vy = fa::check_softmax_rows("y", x.data(), y.data(), rows, cols, fa::kFp32Tolerance);
        out.ok = vy.ok();
        if (verbose || !vy.ok()) vy.print();
        if (has_lse) {
            const std::vector<float> lse = dlse.download();
            const fa::Validation vl = fa::check_logsumexp_rows("lse", x.data(), lse.data(), rows, cols, fa::kFp32Tolerance);
            out.ok = out.ok && vl.ok();
            if (verbose || !vl.ok()) vl.print();
        }
    }
    if (!a.run.no_bench) {
        const double bytes = 8.0 * double(rows) * cols + (has_lse ? 4.0 * rows : 0.0);
        const fa::TimingStats t = timer.time(launch, a.run.repeat);
        out.gbps = bytes / (t.median_ms * 1e-3) / 1e9;
        if (verbose) {
            fa::print_timing("time (x read + y written once)", t, 0, bytes);
            std::printf("  %.1f%% of the copy bandwidth (%.1f GB/s)\n", 100.0 * out.gbps / copy_gbps, copy_gbps);
        }
    }
    return out;
}

std::vector<ch2::Kernel> kernels_for(const Args& a, int cols) {
    std::vector<ch2::Kernel> ks;
    for (int k = 1; k <= 3; ++k)
        if (a.kernel == 0 || a.kernel == k) ks.push_back(ch2::Kernel(k));
    if (cols > ch2::kMaxRegisterCols)
        ks.erase(std::remove(ks.begin(), ks.end(), ch2::Kernel::OnlineRegisters), ks.end());
    return ks;
}

const char* kernel_reads(ch2::Kernel k) {
    switch (k) {
        case ch2::Kernel::ThreePass: return "reads x 3x";
        case ch2::Kernel::OnlineStreaming: return "reads x 2x";
        case ch2::Kernel::OnlineRegisters: return "reads x 1x, row in registers";
    }
    return "";
}

// One input, every chosen kernel, verbose output.
bool gpu_single(const std::vector<float>& x, int rows, int cols, const Args& a, fa::GpuTimer& timer,
                double copy_gbps) {
    fa::DeviceBuffer<float> dx(x), dy(x.size()), dlse(static_cast<std::size_t>(rows));
    bool ok = true;
    for (ch2::Kernel k : kernels_for(a, cols)) {
        std::printf("\nkernel %d %s (%s, writes y 1x)\n", int(k), ch2::kernel_name(k), kernel_reads(k));
        ok = run_kernel(k, x, dx, dy, dlse, rows, cols, a, timer, copy_gbps, true).ok && ok;
    }
    if (cols > ch2::kMaxRegisterCols && (a.kernel == 0 || a.kernel == 3))
        std::printf("\nkernel 3 online-registers: not run, rows longer than %d entries do not fit in "
                    "registers (softmax_online_gpu uses kernel 2 for them)\n", ch2::kMaxRegisterCols);
    if (!a.run.save_npy.empty()) {
        ch2::softmax_online_gpu(dx.get(), dy.get(), dlse.get(), rows, cols);
        const std::vector<float> y = dy.download(), lse = dlse.download();
        std::printf("\n");
        fa::save_rows_npy(a.run.save_npy, "x", x.data(), rows, cols);
        fa::save_rows_npy(a.run.save_npy, "y", y.data(), rows, cols);
        fa::save_rows_npy(a.run.save_npy, "lse", lse.data(), rows, 0);
    }
    return ok;
}

// Row lengths from 1 to 65536, each with about rows × cols entries (at most 2^20 rows): one table
// line per length. Every shape uses the first rows × cols entries of the same random input.
bool gpu_sweep(const std::vector<float>& pool, const Args& a, fa::GpuTimer& timer, double copy_gbps) {
    const double total = double(pool.size());
    std::printf("\nsweep: about %.0f M entries per shape (at most 2^20 rows); GB/s (%% of copy)%s\n", total / 1e6,
                a.run.no_check ? "" : " and the check of y (and lse)");
    std::printf("%8s %9s", "cols", "rows");
    for (ch2::Kernel k : kernels_for(a, 1)) std::printf(" %26s", ch2::kernel_name(k));
    std::printf("\n");
    bool ok = true;
    for (int cols : {1, 2, 31, 32, 33, 128, 1000, 1024, 2048, 4096, 4097, 8192, 16384, 32768, 65536}) {
        // at most 2^20 rows: a block per row makes millions of tiny blocks slow to launch
        const int rows = int(std::min(double(1 << 20), std::floor(total / cols)));
        if (rows < 1) continue;  // a row longer than the whole input
        const std::vector<float> x(pool.begin(), pool.begin() + std::size_t(rows) * cols);
        fa::DeviceBuffer<float> dx(x), dy(x.size()), dlse(static_cast<std::size_t>(rows));
        std::printf("%8d %9d", cols, rows);
        for (ch2::Kernel k : kernels_for(a, 1)) {
            if (k == ch2::Kernel::OnlineRegisters && cols > ch2::kMaxRegisterCols) {
                std::printf(" %26s", "(row too long)");
                continue;
            }
            const KernelRun r = run_kernel(k, x, dx, dy, dlse, rows, cols, a, timer, copy_gbps, false);
            ok = ok && r.ok;
            const std::string check = a.run.no_check ? "" : (r.ok ? " PASS" : " FAIL");
            if (a.run.no_bench) std::printf(" %26s", check.c_str());
            else std::printf(" %11.1f (%5.1f%%)%s", r.gbps, 100.0 * r.gbps / copy_gbps, check.c_str());
            std::fflush(stdout);
        }
        std::printf("\n");
    }
    return ok;
}

// Alg. 1–3 on the CPU (section "CPU, float32"); true when every check passed.
bool cpu_algorithms(const std::vector<float>& x, const Args& a) {
    std::printf("\n-- CPU, float32: the algorithms --\n");
    const std::vector<int> sample = fa::sample_rows(a.rows, 32);
    const std::vector<float> xs = gather_rows(x, sample, a.cols);
    const int n = int(sample.size());
    bool ok = cpu_online(xs, n, a.cols);
    ok = cpu_merge(xs, a.cols, a.chunks, a.run.seed) && ok;
    return cpu_weighted_sum(xs, std::min(n, 8), a.cols, a.dim, a.run.seed) && ok;
}

// The kernels on the GPU (section "GPU"); true when every check passed.
bool gpu_kernels(const std::vector<float>& x, const Args& a) {
    std::printf("\n-- GPU --\n");
    fa::print_device_info(fa::device_info());
    const double matrix_bytes = 4.0 * double(a.rows) * a.cols;
    fa::require_free_memory(std::size_t(2 * matrix_bytes + (600u << 20)), "chapter2 (x, y, copy and L2-flush buffers)");
    fa::GpuTimer timer;
    const double copy_gbps = a.run.no_bench ? 0.0 : copy_bandwidth(timer, a.run.repeat);
    return a.sweep ? gpu_sweep(x, a, timer, copy_gbps) : gpu_single(x, a.rows, a.cols, a, timer, copy_gbps);
}

void add_options(fa::Cli& cli, Args& a) {
    cli.option("--rows", &a.rows, "rows of the input matrix", 1, 1 << 24);
    cli.option("--cols", &a.cols, "entries per row (the softmax runs along a row)", 1, 1 << 24);
    cli.option("--scale", &a.scale, "input magnitude: entries are scale·N(0.5, 1)", 0.0, 1e6);
    cli.option("--kernel", &a.kernel, "GPU kernel: 1 three-pass, 2 online-streaming, 3 online-registers, 0 all", 0, 3);
    cli.option("--chunks", &a.chunks, "chunks of the state-merging demonstration", 1, 1 << 20);
    cli.option("--dim", &a.dim, "columns of V in the one-pass softmax(x)·V demonstration", 1, 1024);
    cli.flag("--sweep", &a.sweep, "time every kernel for row lengths 1 … 65536 at about rows x cols entries each");
    cli.flag("--cpu-only", &a.cpu_only, "run the CPU algorithms only (no GPU needed)");
    fa::add_run_options(cli, a.run);
    fa::add_npy_options(cli, a.run);
    cli.conflict("--sweep", "--load-npy", "--sweep makes its own inputs");
    cli.conflict("--sweep", "--save-npy", "--sweep saves nothing");
    cli.conflict("--load-npy", "--scale", "the input comes from the file");
    for (const char* gpu_only : {"--kernel", "--sweep", "--save-npy", "--repeat", "--no-bench", "--csv"})
        cli.conflict("--cpu-only", gpu_only, "it applies to the GPU kernels");
    for (const char* cpu_part : {"--chunks", "--dim", "--cpu-only"})
        cli.conflict("--no-check", cpu_part, "it applies to the CPU checks, which --no-check skips");
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter2", "Online softmax: CPU algorithms, then GPU kernels checked and timed against the copy "
                            "bandwidth. Without a GPU the CPU algorithms run, then the program says the kernels "
                            "did not and exits 3.");
    Args a;
    add_options(cli, a);
    cli.parse(argc, argv);
    if (!a.run.csv.empty())
        std::printf("note: --csv records attention kernels; chapter 2 writes no rows to %s\n", a.run.csv.c_str());

    const std::vector<float> x =
        fa::rows_from_args(cli, a.run, a.rows, a.cols, a.scale, 3, "x, y and a slice of x for the sweep");
    const bool cpu_ok = a.run.no_check || cpu_algorithms(x, a);
    if (a.cpu_only) {
        std::printf("\n%s\n", cpu_ok ? "CPU checks passed" : "SOME CPU CHECKS FAILED");
        return cpu_ok ? fa::kExitOk : fa::kExitFailed;
    }
    if (fa::cuda_device_count() == 0) {
        std::printf("\n-- GPU --\n");
        std::fprintf(stderr, "chapter2: no CUDA device found: the GPU kernels were not run (--cpu-only runs the "
                             "CPU algorithms alone)\n");
        std::printf("\n%s; the GPU kernels were not run\n", a.run.no_check ? "nothing checked"
                                                            : cpu_ok          ? "CPU checks passed"
                                                                              : "SOME CPU CHECKS FAILED");
        return cpu_ok ? fa::kExitNoGpu : fa::kExitFailed;
    }
    const bool ok = gpu_kernels(x, a) && cpu_ok;
    if (a.run.no_check) return fa::kExitOk;
    std::printf("\n%s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
    return ok ? fa::kExitOk : fa::kExitFailed;
} catch (...) {
    return fa::exit_status_of_exception("chapter2");
}
