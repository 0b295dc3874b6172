// Chapter 7 program: FlashAttention-2 forward on tensor cores, fp16 or bf16.
//
//   make chapter7 && ./chapter7                                   kernel 6 (tuned), bf16, D = 64
//   ./chapter7 --kernel 3 --dtype fp16 --dim 128 --causal         one step of the ladder
//   ./chapter7 --ladder --bench --seq 8192 --batch 4 --heads 8 --dim 128
//                                                                 every step, the cuBLAS GEMM and mma.sync rates
//   ./chapter7 --sweep --seq 8192 --batch 4 --heads 8 --dim 128   time variant 6's tile candidates
//   ./chapter7 --kernel 6 --tiles 2                               variant 6 with candidate 2
//   ./chapter7 --seq 4096 --seq-k 8192 --kv-heads 2 --causal      N_k != N, grouped-query attention
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
#include "../../common/exit_codes.h"
#include "../../common/gpu_timer.h"
#include "../../common/math.h"
#include "chapter7.h"
#include "report.h"

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

template <class T>
int run(fa::AttnProblem& p, const fa::RunArgs& run_args, const Options& o, const fa::DeviceInfo& dev) {
    fa::round_inputs_to<T>(p);
    const fa::AttnShape& s = p.shape;
    const std::vector<Job> jobs = jobs_of(o, s.D);
    std::printf("problem: %s, scale %.5g, %s (inputs rounded to %s; the float64 reference uses the "
                "rounded values)\n",
                s.str().c_str(), s.scale, o.dtype.c_str(), o.dtype.c_str());
    fa::require_free_memory(std::size_t(fa::forward_io_bytes(s, sizeof(T))), "chapter 7 (Q, K, V, O, L)");
    fa::DeviceAttention<T> d(p);
    fa::GpuTimer timer;

    std::map<int, ch7::MirrorErrors> mirrors;  // by B_c: the mirror's tiling follows the kernel's
    std::vector<ch7::SummaryRow> rows;
    bool ok = true;
    for (const Job& j : jobs) {
        const ch7::TileConfig t = ch7::tiles(j.variant, s.D, j.candidate);
        ch7::SummaryRow row;
        row.name = ch7::variant_name(j.variant) + (j.candidate >= 0 ? "-c" + std::to_string(j.candidate) : "");
        row.tiles = t.str();
        row.res = ch7::kernel_resources<T>(j.variant, s.D, j.candidate);
        const ch7::MirrorErrors* baseline =
            run_args.no_check ? nullptr : &ch7::mirror_baseline<T>(mirrors, p, t.Bc);
        const std::string label = ch7::kernel_label(row, s, fa::ceil_div(s.N, t.Br()), dev.sm_count);
        const fa::ForwardOutcome out = fa::run_forward<T>(
            {7, row.name, o.dtype, "fwd"}, label.c_str(), p, d, run_args, &timer,
            [&] { ch7::forward<T>(j.variant, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), j.candidate); },
            baseline ? ch7::rule_tolerance(*baseline) : fa::kFp32Tolerance);
        ch7::record_forward(row, out, baseline, s.flops_forward());
        ok &= row.passed;
        rows.push_back(row);
    }
    if (!run_args.save_npy.empty()) fa::save_forward_npy(run_args.save_npy, p, d.O_host(), d.L_host());

    // the two ceilings --bench measures: the cuBLAS GEMM (wgmma on Hopper) and mma.sync alone, the
    // instruction variants 2–6 are built on (TF/s; 0 when not measured)
    double gemm = 0, mma = 0;
    if (o.bench && !run_args.no_bench) {
        std::printf("\n");
        gemm = ch7::gemm_tflops<T>(timer, run_args.repeat);
        mma = ch7::mma_sync_tflops<T>(run_args.repeat);
    }
    if (rows.size() > 1 || gemm > 0) ch7::print_summary(rows, {{"% of GEMM", gemm}, {"% of mma", mma}}, 22, 66);
    return fa::print_verdict(run_args, ok);
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter7", "FlashAttention-2 forward on tensor cores (fp16/bf16 in, fp32 math): O and "
                            "L checked against the float64 reference with the 2x rule, and timed.");
    fa::RunArgs run_args;
    fa::add_run_options(cli, run_args);
    fa::add_npy_options(cli, run_args);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    fa::add_cross_attention_options(cli, attn);
    Options o;
    cli.option("--dtype", &o.dtype, "element type of Q, K, V, O", {"fp16", "bf16"});
    cli.option("--kernel", &o.kernel,
               "1 wmma, 2 mma.sync, 3 ldmatrix+swizzle, 4 cp.async pipeline, 5 exp2, 6 tuned",
               ch7::kFirstVariant, ch7::kLastVariant);
    cli.option("--tiles", &o.tiles, "kernel 6: tile candidate (--sweep lists them); -1 = the tuned default",
               -1, 63);
    cli.flag("--ladder", &o.ladder, "run every kernel 1..6 (default tiles) and print a table");
    cli.flag("--sweep", &o.sweep, "run every tile candidate of kernel 6 and print a table");
    cli.flag("--bench", &o.bench, "also time a cuBLAS GEMM (8192^3) and mma.sync alone, for the % of GEMM and % of mma columns");
    for (const char* all : {"--ladder", "--sweep"})
        for (const char* one : {"--kernel", "--tiles"}) cli.conflict(all, one, "it runs its own list of kernels");
    cli.conflict("--bench", "--no-bench", "--bench adds timings");
    cli.conflict("--load-npy", "--seed", "the inputs come from the files");
    for (const char* kv : {"--seq-k", "--kv-heads"}) cli.conflict("--load-npy", kv, "q, k, v files have one shape");
    cli.parse(argc, argv);
    const fa::AttnShape shape = fa::problem_shape(cli, attn, run_args);
    for (const Job& j : jobs_of(o, shape.D)) {  // bad arguments first, before any input or device
        const std::string why = ch7::unsupported_reason(j.variant, shape, j.candidate);
        if (!why.empty()) cli.fail(why);
    }
    fa::AttnProblem p = fa::problem_from_args(cli, attn, run_args, {5, "Q, K, V, O and its check"});
    const fa::DeviceInfo dev = fa::require_device("chapter7");
    const std::string why = ch7::device_unsupported_reason(dev);
    if (!why.empty()) {
        std::fprintf(stderr, "chapter7: %s\n", why.c_str());
        return fa::kExitNoGpu;
    }
    return o.dtype == "fp16" ? run<__half>(p, run_args, o, dev) : run<__nv_bfloat16>(p, run_args, o, dev);
} catch (...) {
    return fa::exit_status_of_exception("chapter7");
}
