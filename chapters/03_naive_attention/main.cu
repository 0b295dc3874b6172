// Chapter 3 program: naive attention with S and P in device memory.
//
//   ./chapter3                               variant 2 (the fastest), B=4 H=8 N=1024 D=64
//   ./chapter3 --kernel 1 --causal           the hand-written pipeline with the causal mask
//   ./chapter3 --bench --seq 4096            + per-stage breakdown against the device's ceilings
//   ./chapter3 --tf32                        strict fp32 and TF32 GEMMs side by side
//   ./chapter3 --seq 131072 --batch 1 --heads 1 --dim 128   too big: says what it needs, exits 3
//
// Parse arguments → check the shape → make inputs → find the device, check its free memory → run,
// check O and L against the float64 reference and scan S and P → time → (with --bench) time each
// stage.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <cublas_v2.h>

#include "../../common/attention.h"
#include "../../common/attention_gpu.h"
#include "../../common/check.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/exit_codes.h"
#include "../../common/gpu_timer.h"
#include "naive_attention.h"

namespace {

// Device memory the program needs beyond the problem's arrays: cuBLAS's workspace and the code
// of the kernels it loads. The timer's L2 flush buffer is allocated before the check.
constexpr double kAllowanceBytes = 64.0 * 1024 * 1024;

const char* variant_title(int v) {
    return v == ch3::kHandWritten ? "variant 1 (tiled kernels + chapter 2 softmax)"
                                  : "variant 2 (cuBLAS + fused softmax)";
}

// Not enough free device memory for the problem and its N x N buffers: say why and exit
// kExitNoGpu, before any allocation or output of the problem.
void require_device_memory(const fa::AttnShape& s, const fa::DeviceInfo& dev) {
    const double free_b = double(fa::device_free_bytes());
    if (ch3::estimate_memory(s, kAllowanceBytes).total() > free_b) {
        std::fprintf(stderr, "chapter3: %s",
                     ch3::memory_shortfall_text(s, kAllowanceBytes, free_b, dev.name).c_str());
        std::exit(fa::kExitNoGpu);
    }
}

void print_memory(const fa::AttnShape& s, const fa::DeviceInfo& dev) {
    const ch3::MemoryEstimate m = ch3::estimate_memory(s, kAllowanceBytes);
    const double free_b = double(fa::device_free_bytes());
    std::printf("N×N buffers: S and P, %zu floats each = %.3f GB each, %.3f GB together\n",
                ch3::workspace_floats(s) / 2, m.sp / 2e9, m.sp / 1e9);
    std::printf("device memory: this problem needs %.3f GB, %.3f GB are free; largest N that fits "
                "on %s at B=%d H=%d D=%d: %d\n",
                m.total() / 1e9, free_b / 1e9, dev.name.c_str(), s.B, s.H, s.D,
                ch3::largest_seq_that_fits(s.B, s.H, s.D, kAllowanceBytes, free_b));
}

const char* math_name(bool tf32) { return tf32 ? "TF32" : "strict fp32"; }

void set_math(cublasHandle_t cublas, bool tf32) {
    CUBLAS_CHECK(cublasSetMathMode(cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

// What a memory-bound and a compute-bound stage can reach on this device, measured here.
struct Ceilings {
    double copy_gbps = 0, sgemm_tflops = 0;
};

Ceilings measure_ceilings(cublasHandle_t cublas, bool tf32, int repeat) {
    const double free_b = double(fa::device_free_bytes());
    std::size_t copy_bytes = std::size_t(512) << 20;
    while (copy_bytes > (std::size_t(16) << 20) && 2.0 * double(copy_bytes) > free_b / 2) copy_bytes /= 2;
    int n = 8192;
    while (n > 512 && 12.0 * double(n) * double(n) > free_b / 2) n /= 2;
    set_math(cublas, tf32);
    Ceilings c;
    c.copy_gbps = ch3::measure_copy_bandwidth(copy_bytes, repeat);
    c.sgemm_tflops = ch3::measure_sgemm_rate(cublas, n, repeat);
    std::printf("device ceilings: cudaMemcpy device-to-device %.1f GB/s (%zu MiB, read + written); "
                "cublasSgemm %d³ %.2f TF/s (%s)\n",
                c.copy_gbps, copy_bytes >> 20, n, c.sgemm_tflops, math_name(tf32));
    return c;
}

// Times each stage alone (L2 flushed before each run) and prints time, share, bytes, rates and
// the ratio to the device's ceiling.
void print_breakdown(int kernel, const fa::AttnShape& s, fa::DeviceAttention<float>& d, float* S,
                     float* P, cublasHandle_t cublas, fa::GpuTimer& timer, int repeat,
                     const Ceilings& c, bool tf32) {
    const std::array<ch3::StageCost, 3> cost = ch3::stage_costs(kernel, s);
    const fa::TimingStats t[3] = {
        timer.time([&] { ch3::scores_stage(kernel, s, d.Q.get(), d.K.get(), S, cublas); }, repeat),
        timer.time([&] { ch3::softmax_stage(kernel, s, S, P, d.L.get()); }, repeat),
        timer.time([&] { ch3::output_stage(kernel, s, P, d.V.get(), d.O.get(), cublas); }, repeat),
    };
    const double total = t[0].median_ms + t[1].median_ms + t[2].median_ms;
    std::printf("per-stage breakdown, %s, %s GEMMs (median of %d, L2 flushed before each run):\n",
                variant_title(kernel), math_name(tf32), repeat);
    std::printf("  %-16s %10s %7s %10s %9s %8s  %s\n", "stage", "median ms", "share", "moved GB",
                "GB/s", "TF/s", "vs. ceiling");
    for (int k = 0; k < 3; ++k) {
        const double sec = t[k].median_ms * 1e-3, gbps = cost[k].bytes / sec / 1e9;
        const double tflops = cost[k].flops / sec / 1e12;
        std::printf("  %-16s %10.4f %6.1f%% %10.3f %9.1f ", cost[k].name, t[k].median_ms,
                    100 * t[k].median_ms / total, cost[k].bytes / 1e9, gbps);
        if (cost[k].flops > 0)
            std::printf("%8.2f  %.0f%% of SGEMM\n", tflops, 100 * tflops / c.sgemm_tflops);
        else
            std::printf("%8s  %.0f%% of copy bandwidth\n", "-", 100 * gbps / c.copy_gbps);
    }
    std::printf("  %-16s %10.4f\n", "sum of stages", total);
}

// Scans all of S and P; prints the verdict.
bool scan_and_print(int kernel, const fa::AttnShape& s, const float* S, const float* P) {
    const ch3::IntermediateScan scan = ch3::scan_intermediates(kernel, s, S, P);
    std::printf("  S, P %s  full scan of %zu entries each: %zu of S and %zu of P break the contract\n",
                scan.ok() ? "PASS" : "FAIL", ch3::workspace_floats(s) / 2, scan.bad_S, scan.bad_P);
    return scan.ok();
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter3", "Chapter 3: naive attention, S = scale·QKᵀ, P = softmax(S), O = PV, "
                            "with S and P in device memory");
    fa::RunArgs run;
    fa::add_run_options(cli, run);
    fa::add_npy_options(cli, run);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    int kernel = ch3::kFastest;
    bool bench = false, tf32 = false;
    cli.option("--kernel", &kernel, "1 = tiled kernels + chapter 2 softmax, 2 = cuBLAS + fused softmax", 1, 2);
    cli.flag("--bench", &bench, "time each stage; compare with the device's copy bandwidth and SGEMM rate");
    cli.flag("--tf32", &tf32, "also run variant 2's GEMMs in TF32, next to strict fp32");
    cli.conflict("--bench", "--no-bench", "--bench adds timings");
    cli.conflict("--load-npy", "--seed", "the inputs come from the files");
    cli.parse(argc, argv);
    if (tf32 && kernel != ch3::kCublas)
        cli.fail("--tf32 changes the cuBLAS GEMMs of variant 2; variant " + std::to_string(kernel) +
                 " has none (use --kernel 2)");
    const std::string why = ch3::unsupported_reason(kernel, fa::problem_shape(cli, attn, run));
    if (!why.empty()) cli.fail(why);
    const fa::AttnProblem p = fa::problem_from_args(cli, attn, run, {5, "Q, K, V, O and its check"});
    const fa::AttnShape& s = p.shape;

    const fa::DeviceInfo dev = fa::require_device("chapter3");
    require_device_memory(s, dev);
    cublasHandle_t cublas;
    CUBLAS_CHECK(cublasCreate(&cublas));
    fa::GpuTimer timer;
    print_memory(s, dev);
    Ceilings ceilings;
    if (bench && !run.no_bench) ceilings = measure_ceilings(cublas, tf32, run.repeat);

    fa::DeviceAttention<float> d(p);
    fa::DeviceBuffer<float> S(ch3::workspace_floats(s) / 2), P(ch3::workspace_floats(s) / 2);
    bool ok = true;
    auto run_variant = [&](bool use_tf32) {
        set_math(cublas, use_tf32);
        S.poison();
        P.poison();
        const fa::ResultTag tag{3, std::string(kernel == ch3::kHandWritten ? "1-handwritten" : "2-cublas"),
                                use_tf32 ? "tf32" : "fp32", "fwd"};
        const std::string label = std::string(variant_title(kernel)) + ", " + math_name(use_tf32) +
                                  ", " + s.str();
        const fa::ForwardOutcome out = fa::run_forward(
            tag, label.c_str(), p, d, run, &timer,
            [&] { ch3::forward(kernel, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(),
                               S.get(), P.get(), cublas); },
            use_tf32 ? ch3::kTf32Tolerance : fa::kFp32Tolerance);
        const bool scan_ok = run.no_check || scan_and_print(kernel, s, S.get(), P.get());
        ok = ok && out.passed && scan_ok;
        return out;
    };

    const fa::ForwardOutcome strict = run_variant(false);
    if (!run.save_npy.empty()) fa::save_forward_npy(run.save_npy, p, d.O_host(), d.L_host());
    if (tf32) {
        const fa::ForwardOutcome fast = run_variant(true);
        if (strict.timed && fast.timed)
            std::printf("TF32 vs strict fp32: %.2fx the speed", strict.time.median_ms / fast.time.median_ms);
        else
            std::printf("TF32 vs strict fp32:");
        if (strict.checked && fast.checked)
            std::printf(", O error rel_l2 %.2e vs %.2e, max_abs %.2e vs %.2e", fast.check.O.rel_l2,
                        strict.check.O.rel_l2, fast.check.O.max_abs, strict.check.O.max_abs);
        std::printf("\n");
    }
    if (bench && !run.no_bench) print_breakdown(kernel, s, d, S.get(), P.get(), cublas, timer, run.repeat, ceilings, tf32);
    CUBLAS_CHECK(cublasDestroy(cublas));
    return ok ? fa::kExitOk : fa::kExitFailed;
} catch (...) {
    return fa::exit_status_of_exception("chapter3");
}
