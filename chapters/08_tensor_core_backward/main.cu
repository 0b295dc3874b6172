// Chapter 8 program: FlashAttention-2 backward on tensor cores, fp16 or bf16.
//
//   make chapter8 && ./chapter8                                  kernel 6 (the fastest), bf16, D = 64, both dQ strategies
//   ./chapter8 --kernel 2 --dtype fp16 --dim 128 --causal        one step of the ladder
//   ./chapter8 --tiles f1 --dim 64                               step 6 (FA2's warp layout), its candidate f1
//   ./chapter8 --ladder --bench --seq 8192 --batch 2 --heads 16 --dim 128
//                                                                every step, and the mma.sync rate
//   ./chapter8 --sweep --seq 8192 --batch 2 --heads 16 --dim 128 time the tile candidates of steps 5 and 6
//   ./chapter8 --fp32 --train ...                                also chapter 6's fp32 backward, and
//                                                                forward + backward together
//   ./chapter8 --seq 4096 --seq-k 8192 --kv-heads 2 --causal     N_k != N, grouped-query attention
//
// O and L come from chapter 7's tuned forward, as in training. Prints the device, the problem, the
// CPU mirror's error (the low-precision baseline), then per kernel and dQ strategy: tiles and
// resources, the check of dQ, dK, dV against the float64 reference with the 2× rule, the time
// (TF/s with backward FLOPs = 2.5 × forward) and its split into preprocess, dK/dV kernel and dQ.
#include <cstdio>
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
#include "../../common/npy.h"
#include "../../common/results.h"
#include "../06_backward/device_backward.h"
#include "../07_tensor_cores/report.h"
#include "chapter8.h"

namespace {

struct Options {
    std::string dtype = "bf16", dq = "both", tiles;
    int kernel = ch8::kFa2Layout, candidate = -1;  // candidate: --tiles as an index of kernel 5's or 6's list
    bool ladder = false, sweep = false, bench = false, fp32 = false, train = false;
};

struct Job {
    int variant, candidate, strategy;
};

std::vector<Job> jobs_of(const Options& o, int D) {
    std::vector<int> strategies;
    if (o.dq != "split") strategies.push_back(ch8::kAtomic);
    if (o.dq != "atomic") strategies.push_back(ch8::kSplit);
    std::vector<Job> jobs;
    for (int st : strategies) {
        if (o.ladder)
            for (int v = ch8::kFirstVariant; v <= ch8::kLastVariant; ++v) jobs.push_back({v, -1, st});
        if (o.sweep)
            for (int v : {ch8::kTuned, ch8::kFa2Layout})
                for (int c = 0; c < int(ch8::tuning_candidates(D, v).size()); ++c) jobs.push_back({v, c, st});
        if (!o.ladder && !o.sweep) jobs.push_back({o.kernel, o.candidate, st});
    }
    return jobs;
}

// Device bytes a backward must move at least: Q, K, V, O, dO read, dQ, dK, dV written (T), L read.
double backward_io_bytes(const fa::AttnShape& s, std::size_t elem) {
    return (4.0 * double(s.elements()) + 4.0 * double(s.kv_elements())) * double(elem) + double(s.rows()) * sizeof(float);
}

template <class T>
int run(fa::AttnProblem& p, const fa::RunArgs& ra, const Options& o, const fa::DeviceInfo& dev) {
    fa::round_inputs_to<T>(p);
    const fa::AttnShape& s = p.shape;
    const std::vector<Job> jobs = jobs_of(o, s.D);
    std::vector<float> dO = ch6::make_upstream_gradient(s, ra.seed);
    fa::round_to<T>(dO);
    std::printf("problem: %s, scale %.5g, %s (Q, K, V, dO rounded to %s; the float64 reference uses the rounded "
                "values); dO from --seed\n",
                s.str().c_str(), s.scale, o.dtype.c_str(), o.dtype.c_str());
    const std::size_t ws_atomic = ch8::workspace_floats(s, ch8::kAtomic) * sizeof(float),
                      ws_split = ch8::workspace_floats(s, ch8::kSplit) * sizeof(float);
    fa::require_free_memory(std::size_t((5.0 * s.elements() + 4.0 * s.kv_elements()) * sizeof(T)) + ws_atomic,
                            "chapter 8 (Q, K, V, O, dO, dQ, dK, dV, L and the workspace)");
    fa::DeviceBuffer<T> Q(fa::convert_from_float<T>(p.Q)), K(fa::convert_from_float<T>(p.K)),
        V(fa::convert_from_float<T>(p.V)), dOd(fa::convert_from_float<T>(dO)), O(s.elements()), dQ(s.elements()),
        dK(s.kv_elements()), dV(s.kv_elements());
    fa::DeviceBuffer<float> L(s.rows()), ws(ch8::workspace_floats(s, ch8::kAtomic));
    std::printf("extra memory of the backward: %.2f MB with --dq atomic (L*log2e, D_i, fp32 dQ workspace), "
                "%.2f MB with --dq split (L*log2e, D_i): O(N), no N x N buffer\n",
                ws_atomic / 1e6, ws_split / 1e6);
    const ch8::BwdTensors<T> t{Q.get(), K.get(), V.get(), O.get(), dOd.get(), L.get(), dQ.get(), dK.get(), dV.get()};
    fa::GpuTimer timer;

    auto forward = [&] { ch7::forward<T>(ch7::kTuned, s, Q.get(), K.get(), V.get(), O.get(), L.get()); };
    forward();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("forward (chapter 7, kernel 6) for O and L\n");
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
    for (const Job& j : jobs) {
        const ch8::Workspace w = ch8::split_workspace(ws.get(), s, j.strategy);
        const ch8::BwdTiles tl = ch8::tiles(j.variant, s.D, j.candidate);
        ch7::SummaryRow row;
        // kernels 5 and 6 name their candidate, the default one too ("6-fa2-layout-f5 atomic")
        const int shown = j.candidate >= 0 || j.variant < ch8::kTuned ? j.candidate : ch8::tuned_candidate(s.D, j.variant);
        row.name = ch8::variant_name(j.variant) + (shown >= 0 ? "-" + ch8::candidate_name(j.variant, shown) : "") + " " +
                   ch8::strategy_name(j.strategy);
        row.tiles = tl.str();
        row.res = ch8::kernel_resources<T>(j.variant, s.D, j.candidate);
        std::printf("\nkernel %s: %s\n  dK/dV kernel: %d threads, %d registers, %zu bytes local memory (spills), "
                    "%.1f KB shared memory, %d blocks/SM; grid %d x %d x %d on %d SMs\n",
                    row.name.c_str(), row.tiles.c_str(), row.res.threads, row.res.registers, row.res.local_bytes,
                    row.res.smem_bytes / 1024.0, row.res.blocks_per_sm, fa::ceil_div(s.keys(), tl.Bc()), s.kv_heads(), s.B,
                    dev.sm_count);
        auto launch = [&] { ch8::backward<T>(j.variant, j.strategy, s, t, w, j.candidate); };
        dQ.poison(), dK.poison(), dV.poison(), ws.poison();
        launch();
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> hQ = fa::convert_to_float(dQ.download()), hK = fa::convert_to_float(dK.download()),
                                 hV = fa::convert_to_float(dV.download());
        double max_abs = NAN, rel = NAN;
        if (!ra.no_check) {
            const ch8::GradientVerdict v = ch8::check_gradients(ref, mirror, hQ, hK, hV);
            row.checked = true;
            row.passed = v.ok;
            max_abs = v.max_abs;
            rel = v.rel_l2;
        }
        if (!ra.save_npy.empty() && !saved) {
            fa::save_backward_npy(ra.save_npy, p, fa::convert_to_float(O.download()), L.download(), dO, hQ, hK, hV);
            saved = true;
        }
        ok &= row.passed;
        if (!ra.no_bench) {
            const fa::TimingStats tm = timer.time(launch, ra.repeat);
            fa::print_timing("time", tm, flops, bytes);
            row.timed = true;
            row.median_ms = tm.median_ms;
            row.tflops = flops / (tm.median_ms * 1e-3) / 1e12;
            const char* labels[3] = {j.strategy == ch8::kAtomic ? "preprocess: D_i, L*log2e, dQ workspace = 0"
                                                                : "preprocess: D_i, L*log2e",
                                     j.strategy == ch8::kAtomic ? "dK/dV kernel, dQ by atomics" : "dK/dV kernel",
                                     j.strategy == ch8::kAtomic ? "dQ = scale * workspace, to 16 bits"
                                                                : "dQ kernel"};
            for (int part = 0; part < 3; ++part) {
                const fa::TimingStats pt =
                    timer.time([&] { ch8::backward_part<T>(part, j.variant, j.strategy, s, t, w, j.candidate); }, ra.repeat);
                std::printf("    %-44s median %9.4f ms\n", labels[part], pt.median_ms);
            }
            if (fwd_time.median_ms > 0) std::printf("  backward / forward time: %.2f\n", tm.median_ms / fwd_time.median_ms);
            if (!ra.csv.empty())
                fa::append_result_csv(ra.csv, {8, ch8::variant_name(j.variant) + "-" + ch8::strategy_name(j.strategy),
                                               o.dtype, "bwd"},
                                      s, tm, flops, bytes, max_abs, rel,
                                      row.checked ? (row.passed ? "PASS" : "FAIL") : "skipped");
            if (o.train) {
                const fa::TimingStats tt = timer.time([&] { forward(), launch(); }, ra.repeat);
                fa::print_timing("training step (fwd + bwd)", tt, s.flops_forward() + flops, 0);
            }
        }
        rows.push_back(row);
    }

    double mma = 0;
    if (o.bench && !ra.no_bench) {
        mma = ch7::mma_sync_tflops<T>(ra.repeat);
        std::printf("\nmma.sync.m16n8k16 alone (%s): %.1f TF/s\n", o.dtype.c_str(), mma);
    }
    if (o.fp32 && !ra.no_bench && !rows.empty() && rows[0].timed) {
        // chapter 6's fp32 backward (dQ by atomics) on the same inputs, as floats
        std::printf("\nchapter 6 fp32 backward (atomic dQ) on the same inputs\n");
        ch6::DeviceBackward d6(p, dO);
        d6.O.upload(fa::convert_to_float(O.download()));
        d6.L.upload(L.download());
        const fa::TimingStats t6 = timer.time([&] { ch6::backward(ch6::kAtomic, s, d6.tensors()); }, ra.repeat);
        fa::print_timing("chapter 6 time", t6, flops, 0);
        for (const ch7::SummaryRow& r : rows)
            if (r.timed) std::printf("  %s: %.2f x chapter 6's speed\n", r.name.c_str(), t6.median_ms / r.median_ms);
    }
    if (rows.size() > 1 || mma > 0) ch7::print_summary(rows, {{"% of mma", mma}}, 26, 80);
    return fa::print_verdict(ra, ok);
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter8", "FlashAttention-2 backward on tensor cores (fp16/bf16 in, fp32 math): dQ, dK, dV "
                            "checked against the float64 reference with the 2x rule, and timed.");
    fa::RunArgs ra;
    fa::add_run_options(cli, ra);
    fa::add_npy_options(cli, ra);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    fa::add_cross_attention_options(cli, attn);
    Options o;
    cli.option("--dtype", &o.dtype, "element type of Q, K, V, O, dO and the gradients", {"fp16", "bf16"});
    cli.option("--kernel", &o.kernel,
               "1 direct port, 2 ldmatrix+swizzle, 3 cp.async, 4 P/dS in registers, 5 tuned, 6 FA2's warp layout "
               "(the default: the fastest)",
               ch8::kFirstVariant, ch8::kLastVariant);
    cli.option("--tiles", &o.tiles,
               "a tile candidate of kernel 5 (t0, t1, ...) or 6 (f0, f1, ...), which it also selects; --sweep lists "
               "them; without it kernels 5 and 6 run their default");
    cli.option("--dq", &o.dq, "how dQ is accumulated", {"atomic", "split", "both"});
    cli.flag("--ladder", &o.ladder, "run every kernel 1..6 (default tiles) and print a table");
    cli.flag("--sweep", &o.sweep, "run every tile candidate of kernels 5 and 6 and print a table");
    cli.flag("--bench", &o.bench, "also time mma.sync alone, for the % of mma column");
    cli.flag("--fp32", &o.fp32, "also time chapter 6's fp32 backward on the same inputs");
    cli.flag("--train", &o.train, "also time a training step: chapter 7's forward + this backward");
    for (const char* all : {"--ladder", "--sweep"})
        for (const char* one : {"--kernel", "--tiles"}) cli.conflict(all, one, "it runs its own list of kernels");
    for (const char* timed : {"--bench", "--fp32", "--train"}) cli.conflict(timed, "--no-bench", "it adds timings");
    for (const char* kv : {"--seq-k", "--kv-heads"}) {
        cli.conflict("--load-npy", kv, "q, k, v files have one shape");
        cli.conflict("--fp32", kv, "chapter 6's backward has N_k = N and H_kv = H");
    }
    cli.parse(argc, argv);
    if (!o.tiles.empty()) {
        int variant = 0;
        if (!ch8::parse_candidate(o.tiles, &variant, &o.candidate))
            cli.fail("--tiles takes a candidate name, t0, t1, ... (kernel 5) or f0, f1, ... (kernel 6) (got '" +
                     o.tiles + "')");
        if (cli.given("--kernel") && o.kernel != variant)
            cli.fail("--tiles " + o.tiles + " is a candidate of kernel " + std::to_string(variant) +
                     ", not of --kernel " + std::to_string(o.kernel));
        o.kernel = variant;
    }
    const fa::AttnShape shape = fa::problem_shape(cli, attn, ra);
    for (const Job& j : jobs_of(o, shape.D)) {  // bad arguments first, before any input or device
        const std::string why = ch8::unsupported_reason(j.variant, shape, j.candidate);
        if (!why.empty()) cli.fail(why);
    }
    fa::AttnProblem p = fa::problem_from_args(cli, attn, ra, {10, "Q, K, V, O, dO, dQ, dK, dV and their checks"});
    const fa::DeviceInfo dev = fa::require_device("chapter8");
    const std::string why = ch7::device_unsupported_reason(dev);
    if (!why.empty()) {
        std::fprintf(stderr, "chapter8: %s\n", why.c_str());
        return fa::kExitNoGpu;
    }
    return o.dtype == "fp16" ? run<__half>(p, ra, o, dev) : run<__nv_bfloat16>(p, ra, o, dev);
} catch (...) {
    return fa::exit_status_of_exception("chapter8");
}
