// Chapter 6 program: FlashAttention-2 backward in fp32.
//
//   make chapter6 && ./chapter6                                   both dQ strategies, then naive
//   ./chapter6 --dq split --seq 4096 --causal                     one strategy
//   ./chapter6 --batch 4 --heads 16 --seq 8192 --dim 128          the performance target shape
//   ./chapter6 --save-npy out/                                    q k v o l do dq dk dv as .npy files
//
// O and L come from chapter 5's forward (kernel 2; kernel 1 for D < 16), as they would in
// training. Prints the device, the problem, the check of dQ, dK, dV against the float64
// reference, the time (TF/s with backward FLOPs = 2.5 × forward) split into preprocess, dK/dV and
// dQ, and the naive backward's time and memory on the same inputs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "../../common/attention.h"
#include "../../common/check.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/exit_codes.h"
#include "../../common/gpu_timer.h"
#include "../../common/math.h"
#include "../../common/npy.h"
#include "../../common/results.h"
#include "../../common/timer.h"
#include "../03_naive_attention/naive_attention.h"
#include "../05_flash_attention_2/flash2.h"
#include "device_backward.h"
#include "flash2_backward.h"

namespace {

// Device bytes a backward must move at least: Q, K, V, O, dO read, dQ, dK, dV written, L read.
double backward_io_bytes(const fa::AttnShape& s) {
    return 8.0 * double(s.elements()) * sizeof(float) + double(s.rows()) * sizeof(float);
}

// dO: read from DIR/do.npy with --load-npy when the file is there (float32 or float16, the
// inputs' shape, every entry finite: else one line and exit status 2), else generated from --seed.
std::vector<float> upstream_gradient(const fa::Cli& cli, const fa::RunArgs& run, const fa::AttnShape& s) {
    const std::string path = run.load_npy + "/do.npy";
    std::FILE* f = run.load_npy.empty() ? nullptr : std::fopen(path.c_str(), "rb");
    if (f != nullptr) {
        std::fclose(f);
        const std::vector<std::size_t> want = {std::size_t(s.B), std::size_t(s.H), std::size_t(s.N),
                                               std::size_t(s.D)};
        std::vector<float> dO;
        try {
            const std::vector<std::size_t> shape = fa::read_npy_header(path).shape;
            if (shape != want)
                cli.fail(path + " has shape " + fa::npy_shape_text(shape) + ", the inputs have " +
                         fa::npy_shape_text(want));
            dO = fa::read_npy_floats(path, nullptr);
            fa::require_finite(path, dO);
        } catch (const std::exception& e) {
            cli.fail(e.what());
        }
        std::printf("dO loaded from %s\n", path.c_str());
        return dO;
    }
    if (!run.load_npy.empty())
        std::printf("no %s: dO generated from --seed %llu\n", path.c_str(), (unsigned long long)run.seed);
    return ch6::make_upstream_gradient(s, run.seed);
}

// Writes the gradients (and dO) next to save_forward_npy's q, k, v, o, l.
void save_backward_npy(const std::string& dir, const fa::AttnShape& s, const std::vector<float>& dO,
                       const std::vector<float>& dQ, const std::vector<float>& dK,
                       const std::vector<float>& dV) {
    const std::vector<std::size_t> t4 = {std::size_t(s.B), std::size_t(s.H), std::size_t(s.N),
                                         std::size_t(s.D)};
    try {
        fa::write_npy(dir + "/do.npy", dO.data(), t4);
        fa::write_npy(dir + "/dq.npy", dQ.data(), t4);
        fa::write_npy(dir + "/dk.npy", dK.data(), t4);
        fa::write_npy(dir + "/dv.npy", dV.data(), t4);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        std::exit(fa::kExitFailed);
    }
    std::printf("saved do, dq, dk, dv (.npy) to %s\n", dir.c_str());
}

// Prints one part of a split time: its median and its share of the whole.
void print_part(const char* label, const fa::TimingStats& t, double total_ms) {
    std::printf("    %-42s median %9.4f ms  (%4.1f%% of the sum of the parts)\n", label, t.median_ms,
                100.0 * t.median_ms / total_ms);
}

// What a checked and timed run found, for the summary and the results file.
struct Outcome {
    bool checked = false, passed = true, timed = false;
    double max_abs = NAN, rel_l2 = NAN;
    fa::TimingStats time;
};

void record(const fa::RunArgs& run, const std::string& variant, const fa::AttnShape& s, const Outcome& o) {
    if (run.csv.empty() || !o.timed) return;
    fa::append_result_csv(run.csv, {6, variant, "fp32", "bwd"}, s, o.time, s.flops_backward(),
                          backward_io_bytes(s), o.max_abs, o.rel_l2,
                          o.checked ? (o.passed ? "PASS" : "FAIL") : "skipped");
}

// Checks the gradients in `d` against the reference (unless --no-check); returns the host copies.
Outcome check(const fa::RunArgs& run, const ch6::SampledBackward& ref, ch6::DeviceBackward& d,
              std::vector<float>* dQ, std::vector<float>* dK, std::vector<float>* dV) {
    Outcome o;
    CUDA_CHECK(cudaDeviceSynchronize());
    *dQ = d.dQ.download(), *dK = d.dK.download(), *dV = d.dV.download();
    if (run.no_check) return o;
    const ch6::BackwardCheck c = ch6::check_backward(ref, dQ->data(), dK->data(), dV->data());
    c.print();
    o.checked = true;
    o.passed = c.ok();
    o.max_abs = std::max({c.dQ.max_abs, c.dK.max_abs, c.dV.max_abs});
    o.rel_l2 = std::max({c.dQ.rel_l2, c.dK.rel_l2, c.dV.rel_l2});
    return o;
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter6",
                "FlashAttention-2 backward in fp32: dQ, dK, dV from the forward's O and "
                "logsumexp, checked against the float64 reference and timed.");
    fa::RunArgs run;
    fa::add_run_options(cli, run);
    fa::add_npy_options(cli, run);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    std::string dq = "both";
    cli.option("--dq", &dq, "how dQ is accumulated", {"atomic", "split", "both"});
    bool no_naive = false;
    cli.flag("--no-naive", &no_naive, "skip the naive cuBLAS backward (it stores B*H*N*N floats twice)");
    cli.parse(argc, argv);

    const int D = fa::problem_shape(cli, attn, run).D;
    // chapter 5's tuned forward provides O and L; its readable kernel covers the head dims below 16
    const int forward_kernel = ch5::unsupported_reason(ch5::kTuned, D).empty() ? ch5::kTuned : ch5::kReadable;
    for (const std::string& why : {ch6::unsupported_reason(D), ch5::unsupported_reason(forward_kernel, D)})
        if (!why.empty()) cli.fail(why);
    const fa::AttnProblem p =
        fa::problem_from_args(cli, attn, run, {9, "Q, K, V, O, dO, dQ, dK, dV and their checks"});
    const fa::AttnShape& s = p.shape;
    const std::vector<float> dO_host = upstream_gradient(cli, run, s);

    const fa::DeviceInfo dev = fa::require_device("chapter6");
    const ch6::Tiles t = ch6::kernel_tiles();
    std::printf("problem: %s, scale %.5g\n", s.str().c_str(), s.scale);
    std::printf(
        "tiles B_r = %d, B_c = %d, head dim padded to %d; dK/dV grid T_c x H x B = %d x %d x %d "
        "blocks on %d SMs; shared memory %.1f KB (dK/dV), %.1f KB (dQ) per block\n",
        t.Br, t.Bc, ch6::padded_dim(s.D), fa::ceil_div(s.N, t.Bc), s.H, s.B, dev.sm_count,
        ch6::dkdv_smem_bytes(s.D) / 1024.0, ch6::dq_smem_bytes(s.D) / 1024.0);

    fa::require_free_memory(std::size_t(10.0 * s.elements() * sizeof(float)),
                            "chapter 6 (Q, K, V, O, dO, dQ, dK, dV)");
    ch6::DeviceBackward d(p, dO_host);
    const ch6::BackwardTensors bt = d.tensors();
    fa::GpuTimer timer;

    // O and L from chapter 5's forward, as training would have them
    std::printf("forward (chapter 5, kernel %d) for O and L\n", forward_kernel);
    auto forward = [&] { ch5::forward(forward_kernel, s, bt.Q, bt.K, bt.V, d.O.get(), d.L.get()); };
    forward();
    CUDA_CHECK(cudaDeviceSynchronize());
    fa::TimingStats forward_time;
    if (!run.no_bench) {
        forward_time = timer.time(forward, run.repeat);
        fa::print_timing("forward time", forward_time, s.flops_forward(), 0);
    }

    ch6::SampledBackward ref;
    if (!run.no_check) {
        fa::WallTimer wall;
        ref = ch6::sampled_backward_reference(p, dO_host.data());
        std::printf(
            "float64 reference: dQ at %zu rows of each of the %zu heads, dK and dV at those rows "
            "of %zu heads (%.1f s on the CPU)\n",
            ref.rows.size(), s.heads_total(), ref.heads.size(), wall.elapsed_ms() / 1e3);
    }

    const double flops = s.flops_backward(), bytes = backward_io_bytes(s);
    std::vector<int> strategies;
    if (dq != "split") strategies.push_back(ch6::kAtomic);
    if (dq != "atomic") strategies.push_back(ch6::kSplit);
    bool ok = true, saved = false;
    std::vector<double> total_ms;
    for (int strategy : strategies) {
        std::printf("\nbackward, dQ %s\n", strategy == ch6::kAtomic
                                               ? "by fp32 atomics from the dK/dV kernel (--dq atomic)"
                                               : "by a second kernel over K_j (--dq split)");
        d.poison_outputs();
        ch6::backward(strategy, s, bt);
        std::vector<float> dQ, dK, dV;
        Outcome o = check(run, ref, d, &dQ, &dK, &dV);
        ok &= o.passed;
        if (!run.save_npy.empty() && !saved) {
            fa::save_forward_npy(run.save_npy, p, d.O.download(), d.L.download());
            save_backward_npy(run.save_npy, s, dO_host, dQ, dK, dV);
            saved = true;
        }
        if (run.no_bench) continue;
        o.time = timer.time([&] { ch6::backward(strategy, s, bt); }, run.repeat);
        o.timed = true;
        fa::print_timing("time", o.time, flops, bytes);
        const fa::TimingStats pre = timer.time([&] { ch6::preprocess(strategy, s, bt); }, run.repeat);
        const fa::TimingStats kv = timer.time([&] { ch6::dkdv(strategy, s, bt); }, run.repeat);
        fa::TimingStats q;
        if (strategy == ch6::kSplit) q = timer.time([&] { ch6::dq_split(s, bt); }, run.repeat);
        const double parts = pre.median_ms + kv.median_ms + q.median_ms;
        std::printf("  time split (each part timed on its own):\n");
        print_part(strategy == ch6::kAtomic ? "1 preprocess: D = rowsum(dO o O), dQ = 0"
                                            : "1 preprocess: D = rowsum(dO o O)",
                   pre, parts);
        print_part(strategy == ch6::kAtomic ? "2 dK, dV kernel, dQ by atomics" : "2 dK, dV kernel", kv,
                   parts);
        if (strategy == ch6::kSplit) print_part("3 dQ kernel", q, parts);
        if (forward_time.median_ms > 0)
            std::printf("  backward / forward time: %.2f\n", o.time.median_ms / forward_time.median_ms);
        total_ms.push_back(o.time.median_ms);
        record(run, strategy == ch6::kAtomic ? "atomic" : "split", s, o);
    }
    if (total_ms.size() == 2)
        std::printf("\natomic vs split: split takes %.2f x the time of atomic\n", total_ms[1] / total_ms[0]);

    const double flash_mb = (8.0 * s.elements() + 2.0 * s.rows()) * sizeof(float) / 1e6;
    const double naive_gb = double(ch3::workspace_floats(s)) * sizeof(float) / 1e9;
    std::printf("\ndevice memory of the fused backward: %.1f MB (Q, K, V, O, dO, dQ, dK, dV, L, D): O(N)\n",
                flash_mb);
    if (no_naive) {
        return fa::print_verdict(run, ok);
    }
    std::printf(
        "\nnaive backward (P from chapter 3's stages; cuBLAS dV = P^T dO, dP = dO V^T, dS, dQ = dS K, dK = "
        "dS^T Q)\n");
    const std::string why_naive = ch3::unsupported_reason(ch3::kFastest, s);
    if (!why_naive.empty() || double(fa::device_free_bytes()) < 1.05e9 * naive_gb) {
        std::printf("  skipped: %s\n", !why_naive.empty()
                                           ? why_naive.c_str()
                                           : "its N x N buffers do not fit in free device memory");
    } else {
        fa::DeviceBuffer<float> ws(ch3::workspace_floats(s));
        float* S = ws.get();
        float* P = ws.get() + ch6::naive_workspace_floats(s);
        cublasHandle_t cublas;
        CUBLAS_CHECK(cublasCreate(&cublas));
        CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));  // strict fp32, no TF32
        // chapter 3's first two stages: S = scale Q K^T, then P = softmax(S) (and L)
        auto materialize_P = [&] {
            ch3::scores_stage(ch3::kFastest, s, bt.Q, bt.K, S, cublas);
            ch3::softmax_stage(ch3::kFastest, s, S, P, d.L.get());
        };
        materialize_P();
        // S is not needed after the forward: the backward reuses it for dP, then dS
        d.poison_outputs();
        ch6::naive_backward(s, bt, P, S, cublas);
        std::vector<float> dQ, dK, dV;
        Outcome o = check(run, ref, d, &dQ, &dK, &dV);
        ok &= o.passed;
        if (!run.no_bench) {
            o.time = timer.time([&] { ch6::naive_backward(s, bt, P, S, cublas); }, run.repeat);
            o.timed = true;
            fa::print_timing("time (P stored by the forward)", o.time, flops, bytes);
            const fa::TimingStats f = timer.time(materialize_P, run.repeat);
            fa::print_timing("time to recompute P (S, softmax)", f, 0, 0);
            for (std::size_t k = 0; k < total_ms.size(); ++k)
                std::printf(
                    "  naive time / fused (%s) time: %.2f with P stored by the forward, %.2f with P "
                    "recomputed the naive way (above 1: the fused backward is faster)\n",
                    ch6::strategy_name(strategies[k]), o.time.median_ms / total_ms[k],
                    (o.time.median_ms + f.median_ms) / total_ms[k]);
            record(run, "naive-cublas", s, o);
        }
        std::printf(
            "  device memory: %.2f GB more than the fused backward (P and dP/dS, B*H*N*N floats each)\n",
            naive_gb);
        CUBLAS_CHECK(cublasDestroy(cublas));
    }
    return fa::print_verdict(run, ok);
} catch (...) {
    return fa::exit_status_of_exception("chapter6");
}
