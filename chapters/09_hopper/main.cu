// Chapter 9 program: the FlashAttention forward on Hopper (wgmma, TMA, warp specialization).
//
//   make chapter9 && ./chapter9                                  step 6 (the last), bf16, D = 64
//   ./chapter9 --step 1 --dtype fp16 --dim 128 --causal          one step of the ladder
//   ./chapter9 --ladder --seq 8192 --batch 4 --heads 8 --dim 128 every step, checked and timed
//   ./chapter9 --ladder --ch7 --bench                            the same, next to chapter 7's kernel 6,
//                                                                with the cuBLAS GEMM and wgmma-alone rates
//
// Checks O and L against the float64 reference with chapter 7's 2x rule (its CPU mirror), then times.
// Needs a GPU of compute capability 9.0 (H100, H200); on any other it says so and exits 1.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../../common/attention_gpu.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/dtype.h"
#include "../07_tensor_cores/chapter7.h"
#include "chapter9.h"

namespace {

struct Options {
    std::string dtype = "bf16";
    int step = ch9::kLastStep;
    bool ladder = false, ch7 = false, bench = false;
};

struct Row {
    std::string name;
    double tflops = 0;
    bool timed = false, checked = false, passed = true;
    ch9::KernelResources res{};
};

template <class T>
int run(const fa::Cli& cli, fa::AttentionArgs& attn, const fa::RunArgs& run_args, const Options& o) {
    fa::AttnProblem p = fa::problem_from_args(cli, attn, run_args);
    fa::round_to<T>(p.Q);
    fa::round_to<T>(p.K);
    fa::round_to<T>(p.V);
    const fa::AttnShape& s = p.shape;
    std::printf("problem: %s, scale %.5g, %s (inputs rounded to %s)\n", s.str().c_str(), s.scale, o.dtype.c_str(),
                o.dtype.c_str());
    fa::require_free_memory(std::size_t(fa::forward_io_bytes(s, sizeof(T))), "chapter 9 (Q, K, V, O, L)");
    fa::DeviceAttention<T> d(p);
    fa::GpuTimer timer;
    const int Bc = ch9::step_config(ch9::kWgmma).Bc;
    fa::Tolerance tol = fa::kFp32Tolerance;
    ch7::MirrorErrors mirror{};
    if (!run_args.no_check) {
        mirror = ch7::mirror_errors<T>(p, Bc);
        std::printf("CPU mirror, B_c = %d, vs float64 on the sampled rows:\n  O max_abs %.3e rel_l2 %.3e   L "
                    "max_abs %.3e rel_l2 %.3e\n",
                    Bc, mirror.check.O.max_abs, mirror.check.O.rel_l2, mirror.check.L.max_abs, mirror.check.L.rel_l2);
        tol = ch7::rule_tolerance(mirror);
    }
    std::vector<int> steps;
    if (o.ladder)
        for (int k = ch9::kFirstStep; k <= ch9::kLastStep; ++k) steps.push_back(k);
    else steps.push_back(o.step);
    if (o.ch7) steps.insert(steps.begin(), 0);  // 0: chapter 7's kernel 6, the mma.sync baseline

    std::vector<Row> rows;
    bool ok = true;
    for (int k : steps) {
        Row row;
        row.name = k == 0 ? "ch7 " + ch7::variant_name(ch7::kTuned) : ch9::step_name(k);
        if (k > 0) row.res = ch9::kernel_resources<T>(k, s.D);
        char label[256];
        std::snprintf(label, sizeof label, "\nkernel %s: %d threads, %d registers, %zu bytes local memory, %.1f KB "
                      "shared memory", row.name.c_str(), row.res.threads, row.res.registers, row.res.local_bytes,
                      row.res.smem_bytes / 1024.0);
        const fa::ForwardOutcome out = fa::run_forward<T>(
            {9, row.name, o.dtype, "fwd"}, label, p, d, run_args, &timer,
            [&] {
                if (k == 0) ch7::forward<T>(ch7::kTuned, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
                else ch9::forward<T>(k, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
            },
            tol);
        row.checked = out.checked;
        if (out.checked) {
            const ch7::RuleVerdict v = ch7::low_precision_rule(out.check, mirror);
            std::printf("%s", v.text.c_str());
            row.passed = v.ok && out.passed;
        }
        row.timed = out.timed;
        if (out.timed) row.tflops = s.flops_forward() / (out.time.median_ms * 1e-3) / 1e12;
        ok &= row.passed;
        rows.push_back(row);
    }
    if (!run_args.save_npy.empty()) fa::save_forward_npy(run_args.save_npy, p, d.O_host(), d.L_host());
    double gemm = 0, wgmma = 0;  // the two ceilings of --bench (TF/s)
    if (o.bench && !run_args.no_bench) {
        std::printf("\n");
        gemm = ch7::cublas_gemm_tflops<T>(run_args.repeat);
        wgmma = ch9::wgmma_tflops<T>(run_args.repeat);
    }
    if (rows.size() > 1 || gemm > 0) {
        std::printf("\n%-22s %5s %6s %8s %9s", "kernel", "regs", "spill", "smem KB", "TF/s");
        if (gemm > 0) std::printf(" %9s %9s", "% of GEMM", "% of wgmma");
        std::printf("  check\n");
        for (const Row& r : rows) {
            std::printf("%-22s %5d %6zu %8.1f %9.1f", r.name.c_str(), r.res.registers, r.res.local_bytes,
                        r.res.smem_bytes / 1024.0, r.timed ? r.tflops : 0.0);
            if (gemm > 0) std::printf(" %8.1f%% %9.1f%%", 100 * r.tflops / gemm, 100 * r.tflops / wgmma);
            std::printf("  %s\n", !r.checked ? "skipped" : r.passed ? "PASS" : "FAIL");
        }
    }
    std::printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    fa::Cli cli("chapter9", "FlashAttention forward on Hopper (wgmma, TMA, warp specialization), fp16/bf16 in, "
                            "fp32 math: O and L checked with the 2x rule, and timed.");
    fa::RunArgs run_args;
    fa::add_run_options(cli, run_args);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    Options o;
    cli.option("--dtype", &o.dtype, "element type of Q, K, V, O: fp16 or bf16");
    cli.option("--step", &o.step, "1 wgmma, 2 TMA ring, 3 warp-specialized, 4 pingpong, 5 intra-warpgroup overlap, 6 TMA store of O", ch9::kFirstStep, ch9::kLastStep);
    cli.flag("--ladder", &o.ladder, "run every step and print a table");
    cli.flag("--ch7", &o.ch7, "also run chapter 7's kernel 6 (mma.sync) on the same inputs");
    cli.flag("--bench", &o.bench, "also time a cuBLAS GEMM (8192^3) and wgmma alone, for % of GEMM and % of wgmma columns");
    cli.parse(argc, argv);
    if (o.dtype != "fp16" && o.dtype != "bf16") {
        std::fprintf(stderr, "chapter9: error: --dtype must be fp16 or bf16 (got '%s')\n", o.dtype.c_str());
        return 2;
    }
    if (run_args.load_npy.empty()) {
        const std::string bad = ch9::unsupported_reason(o.step, fa::shape_from_args(attn));
        if (!bad.empty()) {
            std::fprintf(stderr, "chapter9: %s\n", bad.c_str());
            return 2;
        }
    }
    const fa::DeviceInfo dev = fa::require_device("chapter9");
    const std::string why = ch9::device_unsupported_reason(dev);
    if (!why.empty()) {
        std::fprintf(stderr, "chapter9: %s\n", why.c_str());
        return 1;
    }
    return o.dtype == "fp16" ? run<__half>(cli, attn, run_args, o) : run<__nv_bfloat16>(cli, attn, run_args, o);
}
