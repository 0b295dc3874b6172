// Chapter 7 program: FlashAttention-2 forward on tensor cores, fp16 or bf16.
//
//   make chapter7 && ./chapter7                                   kernel 6 (tuned), bf16, D = 64
//   ./chapter7 --kernel 3 --dtype fp16 --dim 128 --causal         one step of the ladder
//   ./chapter7 --ladder --bench --seq 8192 --batch 4 --heads 8 --dim 128
//                                                                 every step, the cuBLAS GEMM and mma.sync rates
//   ./chapter7 --sweep --seq 8192 --batch 4 --heads 8 --dim 128   time variant 6's tile candidates
//   ./chapter7 --kernel 6 --tiles 2                               variant 6 with candidate 2
//
// Prints the device, the problem, the CPU mirror's error (the low-precision baseline), then per
// kernel: its tiles and resources (registers, spills, shared memory, blocks per SM), the check of
// O and L against the float64 reference, the 2× rule, and the time (TF/s, GB/s).
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "../../common/attention_gpu.h"
#include "../../common/check.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/dtype.h"
#include "../../common/gpu_timer.h"
#include "../../common/math.h"
#include "chapter7.h"

namespace {

/// What to run, from the command line.
struct Options {
    std::string dtype = "bf16";
    int kernel = ch7::kTuned;
    int tiles = -1;
    bool ladder = false, sweep = false, bench = false;
};

/// One kernel to run: a variant, and for variant 6 a tile candidate (−1: the default).
struct Job {
    int variant, candidate;
};

/// One line of the summary table.
struct Row {
    std::string name, tiles;
    ch7::KernelResources res;
    double median_ms = 0, tflops = 0;
    bool timed = false, checked = false, passed = true;
};

/// The kernels the options ask for, in order.
std::vector<Job> jobs_of(const Options& o, int D) {
    std::vector<Job> jobs;
    if (o.ladder)
        for (int v = ch7::kFirstVariant; v <= ch7::kLastVariant; ++v) jobs.push_back({v, -1});
    if (o.sweep)
        for (int c = 0; c < int(ch7::tuning_candidates(D).size()); ++c) jobs.push_back({ch7::kTuned, c});
    if (jobs.empty()) jobs.push_back({o.kernel, o.tiles});
    return jobs;
}

/// The two ceilings --bench measures (TF/s; 0 when not measured).
struct Ceilings {
    double gemm = 0;  ///< cuBLAS GEMM (wgmma on Hopper)
    double mma = 0;   ///< mma.sync alone, the instruction variants 2–6 are built on
};

void print_summary(const std::vector<Row>& rows, const Ceilings& c) {
    std::printf("\n%-22s %-66s %5s %6s %7s %4s %10s %9s", "kernel", "tiles", "regs", "spill", "smem KB",
                "blk", "median ms", "TF/s");
    if (c.gemm > 0) std::printf(" %9s %9s", "% of GEMM", "% of mma");
    std::printf("  check\n");
    for (const Row& r : rows) {
        std::printf("%-22s %-66s %5d %6zu %7.1f %4d", r.name.c_str(), r.tiles.c_str(), r.res.registers,
                    r.res.local_bytes, r.res.smem_bytes / 1024.0, r.res.blocks_per_sm);
        if (r.timed) std::printf(" %10.4f %9.2f", r.median_ms, r.tflops);
        else std::printf(" %10s %9s", "-", "-");
        if (c.gemm > 0) {
            if (r.timed) std::printf(" %8.1f%% %8.1f%%", 100.0 * r.tflops / c.gemm, 100.0 * r.tflops / c.mma);
            else std::printf(" %9s %9s", "-", "-");
        }
        std::printf("  %s\n", !r.checked ? "skipped" : r.passed ? "PASS" : "FAIL");
    }
}

template <class T>
int run(const fa::Cli& cli, fa::AttentionArgs& attn, const fa::RunArgs& run_args, const Options& o,
        const fa::DeviceInfo& dev) {
    fa::AttnProblem p = fa::problem_from_args(cli, attn, run_args);
    fa::round_to<T>(p.Q);
    fa::round_to<T>(p.K);
    fa::round_to<T>(p.V);
    const fa::AttnShape& s = p.shape;
    const std::vector<Job> jobs = jobs_of(o, s.D);
    for (const Job& j : jobs) {
        const std::string why = ch7::unsupported_reason(j.variant, s, j.candidate);
        if (!why.empty()) {
            std::fprintf(stderr, "chapter7: %s\n", why.c_str());
            return 2;
        }
    }
    std::printf("problem: %s, scale %.5g, %s (inputs rounded to %s; the float64 reference uses the "
                "rounded values)\n",
                s.str().c_str(), s.scale, o.dtype.c_str(), o.dtype.c_str());
    fa::require_free_memory(std::size_t(fa::forward_io_bytes(s, sizeof(T))), "chapter 7 (Q, K, V, O, L)");
    fa::DeviceAttention<T> d(p);
    fa::GpuTimer timer;

    std::map<int, ch7::MirrorErrors> mirrors;  // by B_c: the mirror's tiling follows the kernel's
    std::vector<Row> rows;
    bool ok = true;
    for (const Job& j : jobs) {
        const ch7::TileConfig t = ch7::tiles(j.variant, s.D, j.candidate);
        Row row;
        row.name = ch7::variant_name(j.variant) + (j.candidate >= 0 ? "-c" + std::to_string(j.candidate) : "");
        row.tiles = t.str();
        row.res = ch7::kernel_resources<T>(j.variant, s.D, j.candidate);
        fa::Tolerance tol = fa::kFp32Tolerance;
        if (!run_args.no_check) {
            if (!mirrors.count(t.Bc)) {
                const ch7::MirrorErrors& m = mirrors[t.Bc] = ch7::mirror_errors<T>(p, t.Bc);
                std::printf("\nCPU mirror, B_c = %d (the same 16-bit roundings, fp32 math) vs float64 on the "
                            "sampled rows:\n  O max_abs %.3e rel_l2 %.3e   L max_abs %.3e rel_l2 %.3e\n",
                            t.Bc, m.check.O.max_abs, m.check.O.rel_l2, m.check.L.max_abs, m.check.L.rel_l2);
            }
            tol = ch7::rule_tolerance(mirrors[t.Bc]);
        }
        char label[512];
        std::snprintf(label, sizeof label,
                      "\nkernel %s: %s\n  %d threads, %d registers, %zu bytes local memory (spills), %.1f KB "
                      "shared memory, %d blocks/SM; grid %d x %d x %d on %d SMs",
                      row.name.c_str(), row.tiles.c_str(), row.res.threads, row.res.registers,
                      row.res.local_bytes, row.res.smem_bytes / 1024.0, row.res.blocks_per_sm,
                      fa::ceil_div(s.N, t.Br()), s.H, s.B, dev.sm_count);
        const fa::ForwardOutcome out = fa::run_forward<T>(
            {7, row.name, o.dtype, "fwd"}, label, p, d, run_args, &timer,
            [&] { ch7::forward<T>(j.variant, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), j.candidate); },
            tol);
        row.checked = out.checked;
        if (out.checked) {
            const ch7::RuleVerdict v = ch7::low_precision_rule(out.check, mirrors[t.Bc]);
            std::printf("%s", v.text.c_str());
            row.passed = v.ok && out.passed;
        }
        row.timed = out.timed;
        if (out.timed) {
            row.median_ms = out.time.median_ms;
            row.tflops = s.flops_forward() / (out.time.median_ms * 1e-3) / 1e12;
        }
        ok &= row.passed;
        rows.push_back(row);
    }
    if (!run_args.save_npy.empty()) fa::save_forward_npy(run_args.save_npy, p, d.O_host(), d.L_host());

    Ceilings ceilings;
    if (o.bench && !run_args.no_bench) {
        std::printf("\n");
        ceilings.gemm = ch7::cublas_gemm_tflops<T>(run_args.repeat);
        ceilings.mma = ch7::mma_sync_tflops<T>(run_args.repeat);
    }
    if (rows.size() > 1 || ceilings.gemm > 0) print_summary(rows, ceilings);
    std::printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    fa::Cli cli("chapter7", "FlashAttention-2 forward on tensor cores (fp16/bf16 in, fp32 math): O and "
                            "L checked against the float64 reference with the 2x rule, and timed.");
    fa::RunArgs run_args;
    fa::add_run_options(cli, run_args);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    Options o;
    cli.option("--dtype", &o.dtype, "element type of Q, K, V, O: fp16 or bf16");
    cli.option("--kernel", &o.kernel,
               "1 wmma, 2 mma.sync, 3 ldmatrix+swizzle, 4 cp.async pipeline, 5 exp2, 6 tuned",
               ch7::kFirstVariant, ch7::kLastVariant);
    cli.option("--tiles", &o.tiles, "kernel 6: tile candidate (--sweep lists them); -1 = the tuned default",
               -1, 63);
    cli.flag("--ladder", &o.ladder, "run every kernel 1..6 (default tiles) and print a table");
    cli.flag("--sweep", &o.sweep, "run every tile candidate of kernel 6 and print a table");
    cli.flag("--bench", &o.bench, "also time a cuBLAS GEMM (8192^3) and mma.sync alone, for the % of GEMM and % of mma columns");
    cli.parse(argc, argv);
    if (o.dtype != "fp16" && o.dtype != "bf16") {
        std::fprintf(stderr, "chapter7: error: --dtype must be fp16 or bf16 (got '%s')\n", o.dtype.c_str());
        return 2;
    }
    if (run_args.load_npy.empty()) {  // bad arguments first, before looking for a device
        const std::string bad = ch7::unsupported_reason(o.kernel, fa::shape_from_args(attn), o.tiles);
        if (!bad.empty()) {
            std::fprintf(stderr, "chapter7: %s\n", bad.c_str());
            return 2;
        }
    }
    const fa::DeviceInfo dev = fa::require_device("chapter7");
    const std::string why = ch7::device_unsupported_reason(dev);
    if (!why.empty()) {
        std::fprintf(stderr, "chapter7: %s\n", why.c_str());
        return 1;
    }
    return o.dtype == "fp16" ? run<__half>(cli, attn, run_args, o, dev)
                             : run<__nv_bfloat16>(cli, attn, run_args, o, dev);
}
