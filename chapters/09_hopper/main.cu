// Chapter 9 program: the FlashAttention forward on Hopper (wgmma, TMA, warp specialization),
// fp16 or bf16, on a GPU of compute capability 9.0.
//
//   make chapter9 && ./chapter9                                   kernel 6 (tuned), bf16, D = 64
//   ./chapter9 --kernel 1 --dtype fp16 --dim 128 --causal         one step of the ladder (1..6)
//   ./chapter9 --ladder --bench --seq 8192 --batch 4 --heads 8 --dim 128
//                                 every step, chapter 7's kernel 6, the cuBLAS GEMM and wgmma rates
//   ./chapter9 --sweep --seq 8192 --batch 2 --heads 16 --dim 128   time step 6's tile candidates
//   ./chapter9 --kernel 6 --tiles 0                               step 6 with candidate 0
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
#include "../../common/exit_codes.h"
#include "../../common/gpu_timer.h"
#include "../../common/math.h"
#include "../07_tensor_cores/report.h"
#include "chapter9.h"

namespace {

/// What to run, from the command line.
struct Options {
    std::string dtype = "bf16";
    int kernel = ch9::kTuned;
    int tiles = -1;
    bool ladder = false, sweep = false, bench = false;
};

/// One kernel to run: a chapter 9 variant (for step 6, a tile candidate; −1: the default), or
/// chapter 7's tuned kernel 6 for comparison.
struct Job {
    int chapter, variant, candidate;
};

/// The kernels the options ask for, in order.
std::vector<Job> jobs_of(const Options& o, int D) {
    std::vector<Job> jobs;
    if (o.ladder) {
        jobs.push_back({7, ch7::kTuned, -1});
        for (int v = ch9::kFirstVariant; v <= ch9::kLastVariant; ++v) jobs.push_back({9, v, -1});
    }
    if (o.sweep)
        for (int c = 0; c < int(ch9::tuning_candidates(D).size()); ++c) jobs.push_back({9, ch9::kTuned, c});
    if (jobs.empty()) jobs.push_back({9, o.kernel, o.tiles});
    return jobs;
}

template <class T>
int run(fa::AttnProblem& p, const fa::RunArgs& run_args, const Options& o, const fa::DeviceInfo& dev) {
    fa::round_inputs_to<T>(p);
    const fa::AttnShape& s = p.shape;
    const std::vector<Job> jobs = jobs_of(o, s.D);
    std::printf("problem: %s, scale %.5g, %s (inputs rounded to %s; the float64 reference uses the rounded "
                "values)\n",
                s.str().c_str(), s.scale, o.dtype.c_str(), o.dtype.c_str());
    fa::require_free_memory(std::size_t(fa::forward_io_bytes(s, sizeof(T))), "chapter 9 (Q, K, V, O, L)");
    fa::DeviceAttention<T> d(p);
    fa::GpuTimer timer;

    std::map<int, ch7::MirrorErrors> mirrors;  // by B_c
    std::vector<ch7::SummaryRow> rows;
    bool ok = true;
    for (const Job& j : jobs) {
        ch7::SummaryRow row;
        int Bc = 0, Br = 0;
        if (j.chapter == 9) {
            const ch9::Tiles t = ch9::tiles(j.variant, s.D, j.candidate);
            // a candidate's name says what it is ("6-tuned-c2-s3-2wg-free"), so rows of runs made
            // with different candidate lists never mean two things
            row.name = ch9::variant_name(j.variant) +
                       (j.candidate >= 0 ? "-c" + std::to_string(j.candidate) + "-" + t.tag() : "");
            row.tiles = t.str();
            row.res = ch9::kernel_resources<T>(j.variant, s.D, j.candidate);
            Bc = t.Bc, Br = t.Br;
        } else {
            const ch7::TileConfig t = ch7::tiles(j.variant, s.D);
            row.name = "ch7 " + ch7::variant_name(j.variant);
            row.tiles = "B_r x B_c = " + std::to_string(t.Br()) + " x " + std::to_string(t.Bc) + " (mma.sync)";
            row.res = ch7::kernel_resources<T>(j.variant, s.D);
            Bc = t.Bc, Br = t.Br();
        }
        const ch7::MirrorErrors* baseline = run_args.no_check ? nullptr : &ch7::mirror_baseline<T>(mirrors, p, Bc);
        const std::string label = ch7::kernel_label(row, s, fa::ceil_div(s.N, Br), dev.sm_count);
        fa::RunArgs job_args = run_args;
        if (j.chapter != 9) job_args.csv.clear();  // a same-run reference: ./chapter7 writes its rows
        const fa::ForwardOutcome out = fa::run_forward<T>(
            {j.chapter, row.name, o.dtype, "fwd"}, label.c_str(), p, d, job_args, &timer,
            [&] {
                if (j.chapter == 9)
                    ch9::forward<T>(j.variant, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(),
                                    j.candidate);
                else
                    ch7::forward<T>(j.variant, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
            },
            baseline ? ch7::rule_tolerance(*baseline) : fa::kFp32Tolerance);
        ch7::record_forward(row, out, baseline, s.flops_forward());
        ok &= row.passed;
        rows.push_back(row);
    }
    if (!run_args.save_npy.empty()) fa::save_forward_npy(run_args.save_npy, p, d.O_host(), d.L_host());
    // the two ceilings --bench measures: the cuBLAS GEMM and wgmma alone, the instruction every
    // step is built on (TF/s; 0 when not measured)
    double gemm = 0, wgmma = 0;
    if (o.bench && !run_args.no_bench) {
        std::printf("\n");
        gemm = ch7::gemm_tflops<T>(timer, run_args.repeat);
        wgmma = ch9::wgmma_tflops<T>(run_args.repeat);
    }
    if (rows.size() > 1 || gemm > 0) ch7::print_summary(rows, {{"% of GEMM", gemm}, {"% of wgmma", wgmma}}, 33, 66);
    return fa::print_verdict(run_args, ok);
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter9", "FlashAttention forward on Hopper (wgmma, TMA, warp specialization; fp16/bf16 in, "
                            "fp32 math): O and L checked against the float64 reference with the 2x rule, and timed.");
    fa::RunArgs run_args;
    fa::add_run_options(cli, run_args);
    fa::add_npy_options(cli, run_args);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    Options o;
    cli.option("--dtype", &o.dtype, "element type of Q, K, V, O", {"fp16", "bf16"});
    cli.option("--kernel", &o.kernel,
               "1 wgmma, 2 TMA ring, 3 warp-specialized, 4 pingpong, 5 intra-warpgroup overlap, 6 tuned (TMA store)",
               ch9::kFirstVariant, ch9::kLastVariant);
    cli.option("--tiles", &o.tiles, "kernel 6: tile candidate (--sweep lists them); -1 = the default", -1, 63);
    cli.flag("--ladder", &o.ladder, "run chapter 7's kernel 6 and every kernel 1..6 and print a table");
    cli.flag("--sweep", &o.sweep, "run every tile candidate of kernel 6 and print a table");
    cli.flag("--bench", &o.bench,
             "also time a cuBLAS GEMM (8192^3) and wgmma alone, for the % of GEMM and % of wgmma columns");
    for (const char* all : {"--ladder", "--sweep"})
        for (const char* one : {"--kernel", "--tiles"}) cli.conflict(all, one, "it runs its own list of kernels");
    cli.conflict("--bench", "--no-bench", "--bench adds timings");
    cli.conflict("--load-npy", "--seed", "the inputs come from the files");
    cli.parse(argc, argv);
    const fa::AttnShape shape = fa::problem_shape(cli, attn, run_args);
    for (const Job& j : jobs_of(o, shape.D)) {  // bad arguments first, before any input or device
        const std::string why = j.chapter == 9 ? ch9::unsupported_reason(j.variant, shape, j.candidate)
                                               : ch7::unsupported_reason(j.variant, shape);
        if (!why.empty()) cli.fail(why);
    }
    fa::AttnProblem p = fa::problem_from_args(cli, attn, run_args, {5, "Q, K, V, O and its check"});
    const fa::DeviceInfo dev = fa::require_device("chapter9");
    const std::string why = ch9::device_unsupported_reason(dev);
    if (!why.empty()) {
        std::fprintf(stderr, "chapter9: %s\n", why.c_str());
        return fa::kExitNoGpu;
    }
    return o.dtype == "fp16" ? run<__half>(p, run_args, o, dev) : run<__nv_bfloat16>(p, run_args, o, dev);
} catch (...) {
    return fa::exit_status_of_exception("chapter9");
}
