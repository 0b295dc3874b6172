// Chapter 9 program: the FlashAttention forward on Hopper (wgmma, TMA, warp specialization),
// fp16 or bf16, on a GPU of compute capability 9.0.
//
//   make chapter9 && ./chapter9                                   kernel 3 (warp-specialized), bf16, D = 64
//   ./chapter9 --kernel 1 --dtype fp16 --dim 128 --causal         one step of the ladder
//   ./chapter9 --ladder --bench --seq 8192 --batch 4 --heads 8 --dim 128
//                                 every step, chapter 7's kernel 6 and the cuBLAS GEMM, in one run
//
// Prints the device, the problem, the CPU mirror's error (chapter 7's low-precision baseline),
// then per kernel its tiles and resources, the check of O and L against the float64 reference,
// the 2× rule, and the time (TF/s).
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../../common/attention_gpu.h"
#include "../../common/check.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/dtype.h"
#include "../../common/gpu_timer.h"
#include "../../common/math.h"
#include "chapter9.h"

namespace {

/// What to run, from the command line.
struct Options {
    std::string dtype = "bf16";
    int kernel = ch9::kSpecialized;
    bool ladder = false, bench = false;
};

/// One kernel to run: a chapter 9 variant, or chapter 7's tuned kernel 6 for comparison.
struct Job {
    int chapter, variant;
};

/// One line of the summary table.
struct Row {
    std::string name, tiles;
    ch7::KernelResources res;
    double tflops = 0, median_ms = 0;
    bool timed = false, checked = false, passed = true;
};

std::vector<Job> jobs_of(const Options& o) {
    std::vector<Job> jobs;
    if (o.ladder) {
        jobs.push_back({7, ch7::kTuned});
        for (int v = ch9::kFirstVariant; v <= ch9::kLastVariant; ++v) jobs.push_back({9, v});
    } else {
        jobs.push_back({9, o.kernel});
    }
    return jobs;
}

void print_summary(const std::vector<Row>& rows, double gemm) {
    std::printf("\n%-24s %-48s %5s %6s %7s %4s %10s %9s", "kernel", "tiles", "regs", "spill", "smem KB", "blk",
                "median ms", "TF/s");
    if (gemm > 0) std::printf(" %9s", "% of GEMM");
    std::printf("  check\n");
    for (const Row& r : rows) {
        std::printf("%-24s %-48s %5d %6zu %7.1f %4d", r.name.c_str(), r.tiles.c_str(), r.res.registers,
                    r.res.local_bytes, r.res.smem_bytes / 1024.0, r.res.blocks_per_sm);
        if (r.timed) std::printf(" %10.4f %9.2f", r.median_ms, r.tflops);
        else std::printf(" %10s %9s", "-", "-");
        if (gemm > 0) {
            if (r.timed) std::printf(" %8.1f%%", 100.0 * r.tflops / gemm);
            else std::printf(" %9s", "-");
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
    const std::vector<Job> jobs = jobs_of(o);
    for (const Job& j : jobs) {
        const std::string why =
            j.chapter == 9 ? ch9::unsupported_reason(j.variant, s) : ch7::unsupported_reason(j.variant, s);
        if (!why.empty()) {
            std::fprintf(stderr, "chapter9: %s\n", why.c_str());
            return 2;
        }
    }
    std::printf("problem: %s, scale %.5g, %s (inputs rounded to %s; the float64 reference uses the rounded "
                "values)\n",
                s.str().c_str(), s.scale, o.dtype.c_str(), o.dtype.c_str());
    fa::require_free_memory(std::size_t(fa::forward_io_bytes(s, sizeof(T))), "chapter 9 (Q, K, V, O, L)");
    fa::DeviceAttention<T> d(p);
    fa::GpuTimer timer;

    std::map<int, ch7::MirrorErrors> mirrors;  // by B_c
    std::vector<Row> rows;
    bool ok = true;
    for (const Job& j : jobs) {
        Row row;
        int Bc = 0, Br = 0;
        if (j.chapter == 9) {
            const ch9::Tiles t = ch9::tiles(j.variant, s.D);
            row.name = ch9::variant_name(j.variant);
            row.tiles = t.str();
            row.res = ch9::kernel_resources<T>(j.variant, s.D);
            Bc = t.Bc, Br = t.Br;
        } else {
            const ch7::TileConfig t = ch7::tiles(j.variant, s.D);
            row.name = "ch7 " + ch7::variant_name(j.variant);
            row.tiles = "B_r x B_c = " + std::to_string(t.Br()) + " x " + std::to_string(t.Bc) + " (mma.sync)";
            row.res = ch7::kernel_resources<T>(j.variant, s.D);
            Bc = t.Bc, Br = t.Br();
        }
        fa::Tolerance tol = fa::kFp32Tolerance;
        if (!run_args.no_check) {
            if (!mirrors.count(Bc)) {
                const ch7::MirrorErrors& m = mirrors[Bc] = ch7::mirror_errors<T>(p, Bc);
                std::printf("\nCPU mirror, B_c = %d (the same 16-bit roundings, fp32 math) vs float64 on the "
                            "sampled rows:\n  O max_abs %.3e rel_l2 %.3e   L max_abs %.3e rel_l2 %.3e\n",
                            Bc, m.check.O.max_abs, m.check.O.rel_l2, m.check.L.max_abs, m.check.L.rel_l2);
            }
            tol = ch7::rule_tolerance(mirrors[Bc]);
        }
        char label[512];
        std::snprintf(label, sizeof label,
                      "\nkernel %s: %s\n  %d threads, %d registers, %zu bytes local memory (spills), %.1f KB "
                      "shared memory, %d blocks/SM; grid %d x %d x %d on %d SMs",
                      row.name.c_str(), row.tiles.c_str(), row.res.threads, row.res.registers, row.res.local_bytes,
                      row.res.smem_bytes / 1024.0, row.res.blocks_per_sm, fa::ceil_div(s.N, Br), s.H, s.B,
                      dev.sm_count);
        const fa::ForwardOutcome out = fa::run_forward<T>(
            {j.chapter, row.name, o.dtype, "fwd"}, label, p, d, run_args, &timer,
            [&] {
                if (j.chapter == 9)
                    ch9::forward<T>(j.variant, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
                else
                    ch7::forward<T>(j.variant, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
            },
            tol);
        row.checked = out.checked;
        if (out.checked) {
            const ch7::RuleVerdict v = ch7::low_precision_rule(out.check, mirrors[Bc]);
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
    double gemm = 0;
    if (o.bench && !run_args.no_bench) {
        std::printf("\n");
        gemm = ch7::gemm_tflops<T>(timer, run_args.repeat);
    }
    if (rows.size() > 1 || gemm > 0) print_summary(rows, gemm);
    std::printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    fa::Cli cli("chapter9", "FlashAttention forward on Hopper (wgmma, TMA, warp specialization; fp16/bf16 in, "
                            "fp32 math): O and L checked against the float64 reference with the 2x rule, and timed.");
    fa::RunArgs run_args;
    fa::add_run_options(cli, run_args);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    Options o;
    cli.option("--dtype", &o.dtype, "element type of Q, K, V, O: fp16 or bf16");
    cli.option("--kernel", &o.kernel, "1 wgmma, 2 TMA ring, 3 warp-specialized", ch9::kFirstVariant,
               ch9::kLastVariant);
    cli.flag("--ladder", &o.ladder, "run chapter 7's kernel 6 and every kernel 1..3 and print a table");
    cli.flag("--bench", &o.bench, "also time a cuBLAS GEMM (8192^3), for the % of GEMM column");
    cli.parse(argc, argv);
    if (o.dtype != "fp16" && o.dtype != "bf16") {
        std::fprintf(stderr, "chapter9: error: --dtype must be fp16 or bf16 (got '%s')\n", o.dtype.c_str());
        return 2;
    }
    if (run_args.load_npy.empty()) {  // bad arguments first, before looking for a device
        const std::string bad = ch9::unsupported_reason(o.kernel, fa::shape_from_args(attn));
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
    return o.dtype == "fp16" ? run<__half>(cli, attn, run_args, o, dev)
                             : run<__nv_bfloat16>(cli, attn, run_args, o, dev);
}
