// Chapter 5 program: FlashAttention-2 forward in fp32.
//
//   make chapter5 && ./chapter5                                  kernel 2 on the default shape
//   ./chapter5 --kernel 1 --seq 4096 --causal                    the readable kernel
//   ./chapter5 --ladder                                          every optimization step, timed
//   ./chapter5 --seq 131072 --batch 1 --heads 1 --dim 128        a length chapter 3 cannot store
//
// Prints the device, the problem and tiles, the check of O and L against the float64 reference,
// the time (TF/s, GB/s), the device memory used, and the time of chapters 3 and 4 on the same
// inputs for comparison.
#include <algorithm>
#include <cstdio>
#include <string>

#include "../../common/attention_gpu.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/exit_codes.h"
#include "../../common/math.h"
#include "../03_naive_attention/naive_attention.h"
#include "../04_flash_attention_1/flash1.h"
#include "flash2.h"

namespace {

// Device memory in use right now (all processes): total minus free.
std::size_t device_used_bytes() {
    std::size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

// Global-memory traffic as the loops request it, chapter 4's loop order against this chapter's.
void print_traffic(const fa::AttnShape& s, ch5::Tiles t) {
    const ch4::Traffic fa1 = ch4::traffic(s, ch4::tiles_used(ch4::kWarpRows, {}));
    const int T_r = fa::ceil_div(s.N, t.Br);
    const double floats = double(s.elements()) * sizeof(float);
    std::printf("global-memory traffic requested by the loops (before L2 hits):\n");
    std::printf("  chapter 4 (FlashAttention-1): O, l, m %.3f GB over %zu inner steps\n",
                fa1.olm_bytes / 1e9, fa1.inner_steps);
    std::printf("  chapter 5: O and L written once %.3f GB; Q read once %.3f GB; K and V read by each of the "
                "T_r = %d query blocks %.3f GB (shared through L2)\n",
                (floats + s.rows() * 4.0) / 1e9, floats / 1e9, T_r,
                (s.causal ? 0.5 : 1.0) * 2.0 * floats * T_r / 1e9);
}

// Times chapter 3's fastest variant and chapter 4's kernel 2 on the same inputs (fewer repeats:
// they are slower), and prints how much faster this chapter's kernel is.
void compare_with_earlier_chapters(const fa::AttnShape& s, fa::DeviceAttention<float>& d,
                                   fa::GpuTimer& timer, const fa::RunArgs& run, double ms5,
                                   const fa::DeviceInfo& dev) {
    const int repeat = std::min(run.repeat, 5);
    std::printf("\nthe same inputs through earlier chapters (%d repeats)\n", repeat);
    const double sp_bytes = ch3::workspace_floats(s) * double(sizeof(float));
    if (!ch3::unsupported_reason(ch3::kFastest, s).empty() || sp_bytes + 256e6 > fa::device_free_bytes()) {
        std::printf("  chapter 3: cannot run (S and P need %.2f GB, %.2f GB free)\n", sp_bytes / 1e9,
                    fa::device_free_bytes() / 1e9);
    } else {
        fa::DeviceBuffer<float> SP(ch3::workspace_floats(s));
        float* S = SP.get();
        float* P = S + SP.size() / 2;
        cublasHandle_t cublas;
        CUBLAS_CHECK(cublasCreate(&cublas));
        const fa::TimingStats t3 = timer.time(
            [&] { ch3::forward(ch3::kFastest, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), S, P, cublas); },
            repeat);
        CUBLAS_CHECK(cublasDestroy(cublas));
        fa::print_timing("chapter 3 (cuBLAS)", t3, s.flops_forward(), 0);
        std::printf("  chapter 5 is %.2fx faster than chapter 3\n", t3.median_ms / ms5);
    }
    // chapter 4 runs one block per (batch, head): long sequences take minutes, so they are skipped
    const double work = double(s.heads_total()) * s.N * double(s.N);
    if (!ch4::unsupported_reason(ch4::kWarpRows, s.D).empty() || work > 4.0e9) {
        std::printf("  chapter 4: skipped (B*H*N^2 = %.2g > 4e9 would take minutes; run ./chapter4 yourself)\n", work);
        return;
    }
    fa::DeviceBuffer<float> scratch(ch4::scratch_floats(s));
    const ch4::Tiles tiles = ch4::paper_tiles(s.D, dev.smem_per_block);
    const fa::TimingStats t4 = timer.time(
        [&] { ch4::forward(ch4::kWarpRows, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), scratch.get(), tiles); },
        repeat);
    fa::print_timing("chapter 4 (kernel 2)", t4, s.flops_forward(), 0);
    std::printf("  chapter 5 is %.2fx faster than chapter 4\n", t4.median_ms / ms5);
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter5", "FlashAttention-2 forward in fp32: O and the logsumexp L, checked against "
                            "the float64 reference and timed.");
    fa::RunArgs run;
    fa::add_run_options(cli, run);
    fa::add_npy_options(cli, run);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    int kernel = ch5::kTuned;
    cli.option("--kernel", &kernel, "1 = readable (one thread per row), 2 = tuned", 1, 2);
    bool ladder = false;
    cli.flag("--ladder", &ladder, "also check and time every optimization step leading to kernel 2");
    bool no_compare = false;
    cli.flag("--no-compare", &no_compare, "do not time chapters 3 and 4 on the same inputs");
    cli.conflict("--load-npy", "--seed", "the inputs come from the files");
    cli.parse(argc, argv);
    const int D = fa::problem_shape(cli, attn, run).D;
    for (int k : {kernel, ladder ? int(ch5::kTuned) : kernel}) {  // --ladder also runs kernel 2's steps
        const std::string why = ch5::unsupported_reason(k, D);
        if (!why.empty()) cli.fail(why);
    }
    const fa::AttnProblem p = fa::problem_from_args(cli, attn, run, {5, "Q, K, V, O and its check"});
    const fa::AttnShape& s = p.shape;

    const fa::DeviceInfo dev = fa::require_device("chapter5");
    const std::size_t baseline = device_used_bytes();
    const ch5::Tiles t = ch5::tiles(kernel, s.D, dev.smem_per_block_optin);
    std::printf("problem: %s, scale %.5g\n", s.str().c_str(), s.scale);
    std::printf("kernel %d: tiles B_r = %d, B_c = %d; grid T_r x H x B = %d x %d x %d blocks on %d SMs\n",
                kernel, t.Br, t.Bc, fa::ceil_div(s.N, t.Br), s.H, s.B, dev.sm_count);

    fa::require_free_memory(std::size_t(fa::forward_io_bytes(s, sizeof(float))), "chapter 5 (Q, K, V, O, L)");
    fa::DeviceAttention<float> d(p);
    const double io_mb = (device_used_bytes() - baseline) / 1e6;
    fa::GpuTimer timer;
    const double peak_mb = (device_used_bytes() - baseline) / 1e6;

    const std::string name = kernel == ch5::kReadable ? "1-readable" : "2-tuned";
    const fa::ForwardOutcome out = fa::run_forward<float>(
        {5, name, "fp32", "fwd"}, ("kernel " + name).c_str(), p, d, run, &timer,
        [&] { ch5::forward(kernel, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get()); });
    if (!run.save_npy.empty()) fa::save_forward_npy(run.save_npy, p, d.O_host(), d.L_host());

    bool ok = out.passed;
    if (ladder) {
        std::printf("\nthe ladder to kernel 2 (each step adds one change to the one before)\n");
        for (int step = 1; step <= ch5::ladder_steps(); ++step) {
            const std::string label = "step " + std::to_string(step) + ": " + ch5::ladder_step_name(step);
            ok &= fa::run_forward<float>(
                      {5, "2-step" + std::to_string(step), "fp32", "fwd"}, label.c_str(), p, d, run, &timer,
                      [&] { ch5::forward_ladder_step(step, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get()); })
                      .passed;
        }
    }

    if (!no_compare && out.timed) compare_with_earlier_chapters(s, d, timer, run, out.time.median_ms, dev);
    std::printf("\n");
    print_traffic(s, t);
    std::printf("device memory: %.1f MB for Q, K, V, O, L (it grows with N, not N^2); peak of this "
                "program %.1f MB with the timer's L2-flush buffer (measured with cudaMemGetInfo)\n",
                io_mb, peak_mb);
    std::printf("chapter 3 would also need %.2f GB for the N x N matrices S and P\n",
                2.0 * double(s.heads_total()) * s.N * double(s.N) * sizeof(float) / 1e9);
    return fa::print_verdict(run, ok);
} catch (...) {
    return fa::exit_status_of_exception("chapter5");
}
