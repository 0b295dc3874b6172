// Chapter 4 program: FlashAttention-1 forward (Algorithm 1) in fp32.
//
//   make chapter4 && ./chapter4                                   variant 2 on the default shape
//   ./chapter4 --kernel 1                                         the readable one-thread-per-row kernel
//   ./chapter4 --kernel 1 --br 32 --bc 16 --seq 100 --causal      your own tiles (B_r ≠ B_c is fine)
//   ./chapter4 --kernel 1 --sram-kb 227                           Algorithm 1 line 1 with a larger M
//   ./chapter4 --batch 2 --heads 16 --seq 4096                    few (batch, head) pairs: idle SMs
//
// Prints the device, the problem, the tiles Algorithm 1 line 1 gives (and M), the grid against
// the SM count, the global-memory traffic the loops request against the ideal, the check of O and
// L against the float64 reference, the time (TF/s, GB/s), and chapter 3's time on the same inputs.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <cublas_v2.h>

#include "../../common/attention_gpu.h"
#include "../../common/check.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/exit_codes.h"
#include "../../common/math.h"
#include "../03_naive_attention/naive_attention.h"
#include "flash1.h"

namespace {

// Device memory chapter 3's comparison run needs beyond its S and P buffers (cuBLAS workspace).
constexpr double kCh3AllowanceBytes = 64.0 * 1024 * 1024;

const char* variant_name(int v) { return v == ch4::kReadable ? "1-readable" : "2-warp-rows"; }

// Algorithm 1 line 1 with this M, and the tiles the chosen variant runs.
void print_tiles(const fa::AttnShape& s, std::size_t m_bytes, bool m_given, ch4::Tiles paper,
                 int kernel, ch4::Tiles used, bool overridden) {
    const std::size_t M = m_bytes / sizeof(float);
    std::printf("Algorithm 1 line 1: M = %zu floats (%zu KB, %s; 4 bytes per float)\n", M, m_bytes / 1024,
                m_given ? "--sram-kb" : "the device's default shared memory per block");
    std::printf("  B_c = ceil(M / 4d) = ceil(%zu / %d) = %d,  B_r = min(ceil(M / 4d), d) = min(%d, %d) = %d\n",
                M, 4 * s.D, paper.Bc, paper.Bc, s.D, paper.Br);
    const char* why = kernel == ch4::kWarpRows ? "variant 2's own tiles (line 1 not used)"
                      : overridden             ? "from --br / --bc"
                                               : "line 1";
    std::printf("tiles: B_r = %d, B_c = %d (%s); T_r = %d query tiles, T_c = %d key tiles per head\n",
                used.Br, used.Bc, why, fa::ceil_div(s.N, used.Br), fa::ceil_div(s.N, used.Bc));
}

// The grid against the SM count: one block per (batch, head), and nothing more.
void print_grid(const ch4::LaunchConfig& c, const fa::DeviceInfo& dev) {
    int max_threads_per_sm = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev.id));
    const int busy = std::min(c.blocks, dev.sm_count);
    std::printf("grid: %d blocks (one per batch x head) x %d threads, %.1f KB shared memory per block\n",
                c.blocks, c.threads, c.smem_bytes / 1024.0);
    std::printf("  %d SMs: %d get a block (%.0f%%)", dev.sm_count, busy, 100.0 * busy / dev.sm_count);
    if (busy < dev.sm_count) std::printf(", %d stay idle for the whole kernel", dev.sm_count - busy);
    std::printf("; a block is %d warps, an SM holds up to %d\n", fa::ceil_div(c.threads, 32),
                max_threads_per_sm / 32);
    std::printf("  (the inner loop carries every query row's softmax state from one key tile to the next, "
                "so a (batch, head) cannot be split over blocks)\n");
}

// Global-memory traffic the loops request, by kind, against the ideal.
void print_traffic(const ch4::Traffic& t, const fa::AttnShape& s, ch4::Tiles tiles) {
    std::printf("global-memory traffic requested by Algorithm 1's loops (before any L2 hit):\n");
    std::printf("  one inner step (lines 8, 12, 13): O_i, l_i, m_i read and written = B_r(2D + 4) floats "
                "= %.1f KB; Q_i read = %.1f KB\n",
                t.olm_step_bytes / 1024, sizeof(float) * double(tiles.Br) * s.D / 1024);
    std::printf("  inner steps: %zu (all heads%s)\n", t.inner_steps,
                s.causal ? "; tiles entirely above the diagonal skipped" : "");
    std::printf("  O, l, m: %.3f GB   Q re-read: %.3f GB   K, V: %.3f GB   L: %.4f GB   total %.3f GB\n",
                t.olm_bytes / 1e9, t.q_bytes / 1e9, t.kv_bytes / 1e9, t.l_out_bytes / 1e9,
                t.total_bytes() / 1e9);
    std::printf("  ideal (Q, K, V read once; O, L written once): %.3f GB -> the loops request %.1fx the ideal\n",
                t.ideal_bytes / 1e9, t.total_bytes() / t.ideal_bytes);
}

// Times chapter 3's fastest variant on the same inputs when its N x N buffers fit, and prints the
// ratio. Chapter 3 is checked as well (unless --no-check); its row does not go to --csv.
void compare_with_chapter3(const fa::AttnProblem& p, fa::DeviceAttention<float>& d, fa::RunArgs args,
                           fa::GpuTimer& timer, const fa::ForwardOutcome& ch4_out) {
    const fa::AttnShape& s = p.shape;
    const double need = double(ch3::workspace_floats(s)) * sizeof(float) + kCh3AllowanceBytes;
    const double free_b = double(fa::device_free_bytes());
    const std::string why = ch3::unsupported_reason(ch3::kFastest, s);
    if (!why.empty() || need > free_b) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "chapter 3's N x N buffers S and P need %.2f GB, %.2f GB are free",
                      need / 1e9, free_b / 1e9);
        std::printf("\nspeed relative to chapter 3: not measured: %s\n", why.empty() ? buf : why.c_str());
        return;
    }
    fa::DeviceBuffer<float> work(ch3::workspace_floats(s));
    float* S = work.get();
    float* P = work.get() + ch3::workspace_floats(s) / 2;
    cublasHandle_t cublas = nullptr;
    CUBLAS_CHECK(cublasCreate(&cublas));
    std::printf("\n");
    args.csv.clear();
    const fa::ForwardOutcome ch3_out = fa::run_forward<float>(
        {3, "compare", "fp32", "fwd"}, "chapter 3, variant ch3::kFastest (S and P in device memory), same inputs",
        p, d, args, &timer,
        [&] { ch3::forward(ch3::kFastest, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), S, P, cublas); });
    CUBLAS_CHECK(cublasDestroy(cublas));
    if (!ch3_out.timed) return;
    const double ratio = ch3_out.time.median_ms / ch4_out.time.median_ms;
    std::printf("speed relative to chapter 3 (same run, same inputs): %.3fx (%s)\n", ratio,
                ratio >= 1 ? "chapter 4 is faster" : "chapter 4 is slower");
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter4", "FlashAttention-1 forward in fp32 (Algorithm 1: outer loop over K/V tiles, "
                            "O, l, m in global memory), checked against the float64 reference and timed.");
    fa::RunArgs run;
    fa::add_run_options(cli, run);
    fa::add_npy_options(cli, run);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    int kernel = ch4::kWarpRows;
    cli.option("--kernel", &kernel, "1 = readable (one thread per query row), 2 = a warp per query tile", 1, 2);
    int br = 0, bc = 0, sram_kb = 0;
    cli.option("--br", &br, "variant 1: B_r, query rows per tile (0 = Algorithm 1 line 1)", 0, 1024);
    cli.option("--bc", &bc, "variant 1: B_c, keys per tile (0 = Algorithm 1 line 1)", 0, 1 << 16);
    cli.option("--sram-kb", &sram_kb,
               "variant 1: M of Algorithm 1 line 1 in KB (0 = the device's default shared memory per block)", 0, 1024);
    bool no_compare = false;
    cli.flag("--no-compare", &no_compare, "do not time chapter 3 on the same inputs");
    cli.conflict("--load-npy", "--seed", "the inputs come from the files");
    cli.parse(argc, argv);
    const bool tiles_given = cli.given("--br") || cli.given("--bc") || cli.given("--sram-kb");
    if (kernel == ch4::kWarpRows && tiles_given)
        cli.fail("--br, --bc and --sram-kb choose variant 1's tiles; variant 2 runs its own (B_r = 16, B_c = 64). "
                 "Add --kernel 1.");
    const std::string unsupported = ch4::unsupported_reason(kernel, fa::problem_shape(cli, attn, run).D);
    if (!unsupported.empty()) cli.fail(unsupported);
    const fa::AttnProblem p = fa::problem_from_args(cli, attn, run, {5, "Q, K, V, O and its check"});
    const fa::AttnShape& s = p.shape;

    const fa::DeviceInfo dev = fa::require_device("chapter4");
    std::printf("problem: %s, scale %.5g\n", s.str().c_str(), s.scale);

    const std::size_t m_bytes = sram_kb > 0 ? std::size_t(sram_kb) * 1024 : dev.smem_per_block;
    const ch4::Tiles paper = ch4::paper_tiles(s.D, m_bytes);
    const ch4::Tiles requested{br > 0 ? br : paper.Br, bc > 0 ? bc : paper.Bc};
    const ch4::Tiles used = ch4::tiles_used(kernel, requested);
    print_tiles(s, m_bytes, sram_kb > 0, paper, kernel, used, br > 0 || bc > 0);
    const std::string cannot = ch4::launch_problem(kernel, s, requested);
    if (!cannot.empty()) {  // the head dim and B_r are checked above: tiles this GPU cannot hold
        std::fprintf(stderr, "chapter4: %s\n", cannot.c_str());
        return fa::kExitNoGpu;
    }
    print_grid(ch4::launch_config(kernel, s, requested), dev);
    const ch4::Traffic traffic = ch4::traffic(s, used);
    print_traffic(traffic, s, used);
    std::printf("\n");

    fa::require_free_memory(std::size_t(fa::forward_io_bytes(s, sizeof(float))) +
                                ch4::scratch_floats(s) * sizeof(float),
                            "chapter 4 (Q, K, V, O, L and the l, m scratch)");
    fa::DeviceAttention<float> d(p);
    fa::DeviceBuffer<float> scratch(ch4::scratch_floats(s));
    scratch.poison();  // line 2 of Algorithm 1 must initialize l and m; NaN shows if it does not
    fa::GpuTimer timer;
    const std::string label = std::string("chapter 4, variant ") + variant_name(kernel);
    const fa::ForwardOutcome out = fa::run_forward<float>(
        {4, variant_name(kernel), "fp32", "fwd"}, label.c_str(), p, d, run, &timer, [&] {
            ch4::forward(kernel, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), scratch.get(), requested);
        });
    if (!run.save_npy.empty()) fa::save_forward_npy(run.save_npy, p, d.O_host(), d.L_host());
    if (out.timed) {
        const double sec = out.time.median_ms * 1e-3;
        std::printf("  the loops' requested traffic (%.3f GB) at the median time: %.1f GB/s "
                    "(the GB/s above counts only the ideal bytes)\n",
                    traffic.total_bytes() / 1e9, traffic.total_bytes() / sec / 1e9);
        if (!no_compare) compare_with_chapter3(p, d, run, timer, out);
    }
    return fa::print_verdict(run, out.passed);
} catch (...) {
    return fa::exit_status_of_exception("chapter4");
}
