// Chapter 11 program: the FlashAttention-2 backward on Hopper (wgmma, TMA, warp specialization,
// dQ by TMA reduce-add, overlap), fp16 or bf16.
//
//   make chapter11 && ./chapter11                                step 5 (the fastest), bf16, D = 64
//   ./chapter11 --kernel 2 --dtype fp16 --dim 128 --causal       one step of the ladder
//   ./chapter11 --kernel 6                                       step 6: dQ the same bit for bit in every run
//   ./chapter11 --ladder --seq 8192 --batch 2 --heads 16 --dim 128
//                                                                every step, beside chapter 8's step 6
//   ./chapter11 --train ...                                      also a training step: chapter 9's
//                                                                forward + this backward
//
// O and L come from chapter 9's tuned forward, as in training. --load-npy DIR reads q, k, v from
// .npy files; --save-npy DIR writes q k v o l do and the first kernel's dq dk dv. Prints the device, the problem, the
// CPU mirror's error (chapter 8's: the same rounding points), then per kernel: tiles and
// resources, the check of dQ, dK, dV against the float64 reference with the 2× rule, the time (TF/s
// with backward FLOPs = 2.5 × forward) and its split into preprocess, dK/dV kernel and dQ conversion.
// With the check, each kernel runs twice and the program says whether dQ came out the same bit for
// bit (step 6 fails when not; before it, the order of dQ's adds is the order the blocks arrive in).
#include <algorithm>
#include <cstdio>
#include <cstring>
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
#include "../../common/results.h"
#include "../06_backward/device_backward.h"
#include "../07_tensor_cores/report.h"
#include "../09_hopper/chapter9.h"
#include "chapter11.h"

namespace {

struct Options {
    std::string dtype = "bf16";
    int kernel = ch11::kOverlap, candidate = -1;
    bool ladder = false, sweep = false, train = false;
};

/// A kernel of the run: a step of this chapter (with its step 5 candidate), or chapter 8's step 6
/// (the baseline, --ladder).
struct Job {
    int chapter, variant, candidate;
};

std::vector<Job> jobs_of(const Options& o, int D) {
    std::vector<Job> jobs;
    if (o.ladder) {
        jobs.push_back({8, ch8::kFa2Layout, -1});
        for (int v = ch11::kFirstVariant; v < ch11::kOverlap; ++v) jobs.push_back({11, v, -1});
    }
    if (o.sweep)  // step 5 as its candidates
        for (int k = 0; k < int(ch11::tuning_candidates(D).size()); ++k) jobs.push_back({11, ch11::kOverlap, k});
    if (o.ladder) {
        if (!o.sweep) jobs.push_back({11, ch11::kOverlap, -1});
        jobs.push_back({11, ch11::kDeterministic, -1});
    }
    if (!o.ladder && !o.sweep) jobs.push_back({11, o.kernel, o.candidate});
    return jobs;
}

/// Runs the backward again and says whether dQ came out the same bit for bit as `first`.
template <class T, class Launch>
bool same_dq_again(const Launch& launch, fa::DeviceBuffer<T>& dQ, const std::vector<float>& first) {
    dQ.poison();
    launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> again = fa::convert_to_float(dQ.download());
    std::size_t differ = 0;
    for (std::size_t k = 0; k < first.size(); ++k)
        differ += std::memcmp(&first[k], &again[k], sizeof(float)) != 0;
    if (differ == 0)
        std::printf("  dQ of a second run: the same bit for bit\n");
    else
        std::printf("  dQ of a second run: %zu of %zu elements differ (the order of dQ's adds changed)\n", differ,
                    first.size());
    return differ == 0;
}

// Device bytes a backward must move at least: Q, K, V, O, dO read, dQ, dK, dV written (T), L read.
double backward_io_bytes(const fa::AttnShape& s, std::size_t elem) {
    return 8.0 * double(s.elements()) * double(elem) + double(s.rows()) * sizeof(float);
}

template <class T>
int run(fa::AttnProblem& p, const fa::RunArgs& ra, const Options& o, const fa::DeviceInfo& dev) {
    fa::round_inputs_to<T>(p);
    const fa::AttnShape& s = p.shape;
    std::vector<float> dO = ch6::make_upstream_gradient(s, ra.seed);
    fa::round_to<T>(dO);
    std::printf("problem: %s, scale %.5g, %s (Q, K, V, dO rounded to %s; the float64 reference uses the rounded "
                "values); dO from --seed\n",
                s.str().c_str(), s.scale, o.dtype.c_str(), o.dtype.c_str());
    const std::size_t ws_bytes = ch8::workspace_floats(s, ch8::kAtomic) * sizeof(float),
                      counter_bytes = ch11::dq_counter_ints(s) * sizeof(int);
    fa::require_free_memory(std::size_t(9.0 * s.elements() * sizeof(T)) + ws_bytes + counter_bytes,
                            "chapter 11 (Q, K, V, O, dO, dQ, dK, dV, L and the workspace)");
    fa::DeviceBuffer<T> Q(fa::convert_from_float<T>(p.Q)), K(fa::convert_from_float<T>(p.K)),
        V(fa::convert_from_float<T>(p.V)), dOd(fa::convert_from_float<T>(dO)), O(s.elements()), dQ(s.elements()),
        dK(s.elements()), dV(s.elements());
    fa::DeviceBuffer<float> L(s.rows()), ws(ch8::workspace_floats(s, ch8::kAtomic));
    fa::DeviceBuffer<int> counters(ch11::dq_counter_ints(s));
    std::printf("extra memory of the backward: %.2f MB (L*log2e, D_i, fp32 dQ workspace; step 6: %.3f MB of turn "
                "counters): O(N), no N x N buffer\n",
                (ws_bytes + counter_bytes) / 1e6, counter_bytes / 1e6);
    const ch8::BwdTensors<T> t{Q.get(), K.get(), V.get(), O.get(), dOd.get(), L.get(), dQ.get(), dK.get(), dV.get()};
    const ch8::Workspace w = ch8::split_workspace(ws.get(), s, ch8::kAtomic);
    fa::GpuTimer timer;

    auto forward = [&] { ch9::forward<T>(ch9::kTuned, s, Q.get(), K.get(), V.get(), O.get(), L.get()); };
    forward();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("forward (chapter 9, kernel 6) for O and L\n");
    fa::TimingStats fwd_time;
    if (!ra.no_bench) {
        fwd_time = timer.time(forward, ra.repeat);
        fa::print_timing("forward time", fwd_time, s.flops_forward(), 0);
    }

    ch6::SampledBackward ref;
    ch8::MirrorErrors mirror{};
    if (!ra.no_check) {
        ref = ch6::sampled_backward_reference(p, dO.data());
        mirror = ch8::mirror_errors<T>(p, dO, fa::convert_to_float(O.download()), L.download(), ref);
        ch8::print_baseline(ref, mirror);
    }

    const double flops = s.flops_backward(), bytes = backward_io_bytes(s, sizeof(T));
    std::vector<ch7::SummaryRow> rows;
    bool ok = true, saved = false;
    for (const Job& j : jobs_of(o, s.D)) {
        const bool mine = j.chapter == 11;
        ch7::SummaryRow row;
        // kernel 5 names its candidate, the default one too ("5-overlap-c1")
        const int shown = j.candidate >= 0 || j.variant != ch11::kOverlap ? j.candidate : ch11::tuned_candidate(s.D);
        const std::string name = mine ? ch11::variant_name(j.variant) + (shown >= 0 ? "-c" + std::to_string(shown) : "")
                                      : ch8::variant_name(j.variant) + "-atomic";
        row.name = mine ? name : "chapter 8 " + name;
        row.tiles = mine ? ch11::tiles(j.variant, s.D, j.candidate).str() : ch8::tiles(j.variant, s.D).str();
        row.res = mine ? ch11::kernel_resources<T>(j.variant, s.D, j.candidate)
                       : ch8::kernel_resources<T>(j.variant, s.D);
        std::printf("\nkernel %s: %s\n  dK/dV kernel: %d threads, %d registers, %zu bytes local memory (spills), "
                    "%.1f KB shared memory, %d blocks/SM; grid %d x %d x %d on %d SMs\n",
                    row.name.c_str(), row.tiles.c_str(), row.res.threads, row.res.registers, row.res.local_bytes,
                    row.res.smem_bytes / 1024.0, row.res.blocks_per_sm, fa::ceil_div(s.N, 128), s.H, s.B,
                    dev.sm_count);
        auto part = [&](int k) {
            if (mine) ch11::backward_part<T>(k, j.variant, s, t, w, j.candidate, counters.get());
            else ch8::backward_part<T>(k, j.variant, ch8::kAtomic, s, t, w);
        };
        auto launch = [&] { part(0), part(1), part(2); };
        dQ.poison(), dK.poison(), dV.poison(), ws.poison();
        launch();
        CUDA_CHECK(cudaDeviceSynchronize());
        double max_abs = NAN, rel = NAN;
        const std::vector<float> hQ = fa::convert_to_float(dQ.download()), hK = fa::convert_to_float(dK.download()),
                                 hV = fa::convert_to_float(dV.download());
        if (!ra.save_npy.empty() && !saved) {
            fa::save_backward_npy(ra.save_npy, p, fa::convert_to_float(O.download()), L.download(), dO, hQ, hK, hV);
            saved = true;
        }
        if (!ra.no_check) {
            const ch8::GradientVerdict v = ch8::check_gradients(ref, mirror, hQ, hK, hV);
            const bool same = same_dq_again(launch, dQ, hQ);
            row.checked = true;
            row.passed = v.ok && (same || j.variant != ch11::kDeterministic || !mine);
            max_abs = v.max_abs;
            rel = v.rel_l2;
        }
        ok &= row.passed;
        if (!ra.no_bench) {
            const fa::TimingStats tm = timer.time(launch, ra.repeat);
            fa::print_timing("time", tm, flops, bytes);
            row.timed = true;
            row.median_ms = tm.median_ms;
            row.tflops = flops / (tm.median_ms * 1e-3) / 1e12;
            const char* labels[3] = {"preprocess: D_i, L*log2e, dQ workspace = 0", "dK/dV kernel, dQ added",
                                     "dQ = scale * workspace, to 16 bits"};
            for (int k = 0; k < 3; ++k)
                std::printf("    %-44s median %9.4f ms\n", labels[k], timer.time([&] { part(k); }, ra.repeat).median_ms);
            if (fwd_time.median_ms > 0) std::printf("  backward / forward time: %.2f\n", tm.median_ms / fwd_time.median_ms);
            if (!ra.csv.empty())
                fa::append_result_csv(ra.csv, {j.chapter, name, o.dtype, "bwd"},
                                      s, tm, flops, bytes, max_abs, rel,
                                      row.checked ? (row.passed ? "PASS" : "FAIL") : "skipped");
            if (o.train) {
                const fa::TimingStats tt = timer.time([&] { forward(), launch(); }, ra.repeat);
                fa::print_timing("training step (fwd + bwd)", tt, s.flops_forward() + flops, 0);
            }
        }
        rows.push_back(row);
    }
    if (rows.size() > 1) ch7::print_summary(rows, {}, 30, 80);
    return fa::print_verdict(ra, ok);
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter11", "FlashAttention-2 backward on Hopper (wgmma, TMA, warp specialization; fp16/bf16 in, fp32 "
                             "math): dQ, dK, dV checked against the float64 reference with the 2x rule, and timed.");
    fa::RunArgs ra;
    fa::add_run_options(cli, ra);
    fa::add_npy_options(cli, ra);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    Options o;
    cli.option("--dtype", &o.dtype, "element type of Q, K, V, O, dO and the gradients", {"fp16", "bf16"});
    cli.option("--kernel", &o.kernel,
               "1 wgmma, 2 TMA ring, 3 warp specialization, 4 dQ by TMA reduce-add, 5 overlap (the default: the "
               "fastest), 6 deterministic (dQ's adds in a fixed order)",
               ch11::kFirstVariant, ch11::kLastVariant);
    cli.option("--tiles", &o.candidate, "a tile candidate of kernel 5 (--sweep lists them), which it also selects",
               0, 99);
    cli.flag("--ladder", &o.ladder, "run every kernel 1..6 beside chapter 8's step 6, and print a table");
    cli.flag("--sweep", &o.sweep, "run every tile candidate of kernel 5 and print a table");
    cli.flag("--train", &o.train, "also time a training step: chapter 9's forward + this backward");
    for (const char* all : {"--ladder", "--sweep"})
        for (const char* one : {"--kernel", "--tiles"}) cli.conflict(all, one, "it runs its own list of kernels");
    cli.conflict("--train", "--no-bench", "it adds timings");
    cli.parse(argc, argv);
    if (cli.given("--tiles")) {
        if (cli.given("--kernel") && o.kernel != ch11::kOverlap)
            cli.fail("--tiles is a candidate of kernel 5, not of --kernel " + std::to_string(o.kernel));
        o.kernel = ch11::kOverlap;
    }
    const fa::AttnShape shape = fa::problem_shape(cli, attn, ra);
    for (const Job& j : jobs_of(o, shape.D)) {  // bad arguments first, before any input or device
        const std::string why = j.chapter == 11 ? ch11::unsupported_reason(j.variant, shape, j.candidate)
                                                : ch8::unsupported_reason(j.variant, shape);
        if (!why.empty()) cli.fail(why);
    }
    fa::AttnProblem p = fa::problem_from_args(cli, attn, ra, {10, "Q, K, V, O, dO, dQ, dK, dV and their checks"});
    const fa::DeviceInfo dev = fa::require_device("chapter11");
    const std::string why = ch11::device_unsupported_reason(dev);
    if (!why.empty()) {
        std::fprintf(stderr, "chapter11: %s\n", why.c_str());
        return fa::kExitNoGpu;
    }
    return o.dtype == "fp16" ? run<__half>(p, ra, o, dev) : run<__nv_bfloat16>(p, ra, o, dev);
} catch (...) {
    return fa::exit_status_of_exception("chapter11");
}
