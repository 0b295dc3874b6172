// Chapter 12 program: ring attention (context parallelism), one process per GPU over NCCL, or P
// virtual ranks in one process on one GPU.
//
//   make chapter12 && ./chapter12 --virtual 4 --causal          4 virtual ranks, step 4 (zigzag)
//   ./chapter12 --virtual 2 --ladder --seq 4096                 every step of the ladder
//   ./chapter12 --virtual 2 --step 5 --causal --timeline        forward and backward, per-step times
//   tools/launch.sh 2 ./chapter12 --bandwidth                   the link: one ring exchange timed
//   ./chapter12 --max-seq --dim 128 --heads 16 --virtual 4      the largest N for 1 and 4 GPUs
//   tools/launch.sh 2 ./chapter12 --ladder --causal --seq 16384 --dim 128 --heads 16
//                                 2 GPUs, one process each (RANK, WORLD_SIZE, LOCAL_RANK as
//                                 torchrun sets them; the NCCL id through --rendezvous)
//
// Every rank makes the same seeded inputs and takes its chunks. Rank 0 gathers O and L, checks
// them against the float64 reference with the 2× rule (the ring's CPU mirror) and against the
// single-GPU kernel on the whole sequence, and prints the times: T_P of the ring, T_1 of the same
// kernel on one GPU over the whole sequence, and the efficiency T_1 / (P · T_P). Step 5 adds the
// backward (dQ, dK, dV checked the same way, and the efficiency of forward + backward).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../../common/attention_gpu.h"
#include "../../common/check.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/dtype.h"
#include "../../common/exit_codes.h"
#include "../../common/gpu_timer.h"
#include "../06_backward/flash2_backward.h"
#include "chapter12.h"

namespace {

struct Options {
    std::string dtype = "bf16";
    int step = ch12::kZigzag;
    bool ladder = false;
    int virtual_ranks = 0;
    std::string rendezvous;
    int timeout_s = 120;
    bool timeline = false, bandwidth = false, max_seq = false;
};

/// The ranks as torchrun (or tools/launch.sh) sets them; WORLD_SIZE unset: one rank.
struct Env {
    int rank = 0, world = 1, local_rank = 0;
};

int env_int(const fa::Cli& cli, const char* name, int fallback, int lo, int hi) {
    const char* v = std::getenv(name);
    if (v == nullptr) return fallback;
    long long x = 0;
    const std::string why = fa::parse_whole_number(v, lo, hi, &x);
    if (!why.empty()) cli.fail(std::string("environment variable ") + name + "='" + v + "': " + why);
    return int(x);
}

Env env_of(const fa::Cli& cli) {
    Env e;
    e.world = env_int(cli, "WORLD_SIZE", 1, 1, 4096);
    e.rank = env_int(cli, "RANK", 0, 0, e.world - 1);
    e.local_rank = env_int(cli, "LOCAL_RANK", e.rank, 0, 4095);
    return e;
}

/// The result row of a run of the ring (its variant names the step, P and the engine).
fa::ResultTag tag_of(const std::string& what, const Options& o, int P, const char* pass) {
    return {12, what + "-P" + std::to_string(P) + (o.virtual_ranks > 0 ? "-virtual" : ""), o.dtype, pass};
}

/// --timeline: one more run with events at every step; every rank's compute, exchange, hidden
/// and idle milliseconds printed by rank 0 and appended as rows (pass "fwd-compute", ...).
template <class Run>
void print_timeline(ch12::Transport& t, const fa::AttnShape& s, const Options& o, const fa::RunArgs& args,
                    bool lead, const std::string& step, const char* pass, int steps, Run run) {
    ch12::Timeline tl(t, steps);
    run(&tl);
    const std::vector<std::vector<ch12::StepTimes>> all = ch12::gather_times(t, tl.times());
    if (!lead) return;
    std::printf("  timeline (%s; ms per ring step, each rank):\n    rank step  compute    comm  hidden    idle\n", pass);
    for (std::size_t r = 0; r < all.size(); ++r)
        for (std::size_t k = 0; k < all[r].size(); ++k) {
            const ch12::StepTimes& x = all[r][k];
            std::printf("    %4zu %4zu %8.3f %7.3f %7.3f %7.3f\n", r, k, x.compute_ms, x.comm_ms, x.hidden_ms, x.idle_ms);
            if (args.csv.empty()) continue;
            const float values[4] = {x.compute_ms, x.comm_ms, x.hidden_ms, x.idle_ms};
            const char* kinds[4] = {"compute", "comm", "hidden", "idle"};
            for (int v = 0; v < 4; ++v) {
                const fa::TimingStats one{values[v], values[v]};
                fa::append_result_csv(args.csv,
                                      tag_of(step + "-rank" + std::to_string(r) + "-step" + std::to_string(k), o,
                                             t.world_size(), (std::string(pass) + "-" + kinds[v]).c_str()),
                                      s, one, 0, 0, NAN, NAN, "timeline");
            }
        }
}

/// --bandwidth: one ring exchange timed alone at sizes from 1 MiB to 1 GiB and at the ring's own
/// step sizes (K/V of the forward, and the backward's K/V plus its fp32 dK/dV sums).
void print_bandwidth(ch12::Transport& t, const fa::AttnShape& s, const Options& o, const fa::RunArgs& args, bool lead) {
    const ch12::Layout l{s.N, t.world_size(), ch12::sharding_of(o.step)};
    const std::size_t slot = s.heads_total() * std::size_t(l.max_chunk_length()) * std::size_t(s.D) *
                             std::size_t(l.chunks_per_rank());
    std::vector<std::pair<std::string, std::size_t>> sizes = {{"kv-step", 2 * slot * 2}, {"dkv-sums", 2 * slot * 4}};
    for (std::size_t mib = 1; mib <= 1024; mib *= 4) sizes.push_back({std::to_string(mib) + "MiB", mib << 20});
    if (lead) std::printf("ring exchange over %s, %d ranks (each sends to its successor and receives from its predecessor):\n",
                          t.name().c_str(), t.world_size());
    for (const auto& [name, bytes] : sizes) {
        const float ms = ch12::exchange_ms(t, bytes, args.repeat);
        if (!lead) continue;
        std::printf("  %-9s %12zu bytes  %9.3f ms  %8.2f GB/s each way\n", name.c_str(), bytes, ms, bytes / (ms * 1e6));
        if (!args.csv.empty())
            fa::append_result_csv(args.csv, tag_of("sendrecv-" + name, o, t.world_size(), "comm"), s,
                                  fa::TimingStats{ms, ms}, 0, double(bytes), NAN, NAN, "bandwidth");
    }
}

/// The backward's kernels launch on arrays of at most 2·10⁹ elements (B·H·N·D, chapter 8's limit):
/// the largest N whose arrays stay under it (per rank: its ~N/P rows; every row for step 1's gather).
int largest_launchable_n(const fa::AttnShape& s, int ranks) {
    return int(std::min<double>(double(ranks) * 2e9 / (double(s.heads_total()) * s.D), 2147483647.0));
}

/// The largest N ≤ n_max (B, H, D of s) whose bytes(N) fit in `free` bytes, by bisection (bytes grows
/// with N).
template <class Bytes>
int largest_n(const fa::AttnShape& s, std::size_t free, int n_max, Bytes bytes) {
    int lo = 0, hi = n_max;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (bytes(fa::make_shape(s.B, s.H, mid, s.D, s.causal, s.scale)) <= free) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/// --max-seq: from the buffers the runs allocate (an estimate: no run), the largest N that one GPU
/// fits for the forward and backward of the whole sequence, and that P ranks fit for the ring; and
/// which limit binds, the memory or the kernels' largest array.
void print_max_seq(const fa::AttnShape& s, const Options& o, const fa::RunArgs& args, int P) {
    const std::size_t free = fa::device_free_bytes();
    auto one_gpu = [](const fa::AttnShape& x) {  // Q, K, V, O, dO, dQ, dK, dV, L and chapter 8's workspace
        return std::size_t(8 * x.elements() * 2 + x.rows() * 4 + ch8::workspace_floats(x, ch8::kAtomic) * 4);
    };
    auto ring = [&](const fa::AttnShape& x) {
        return ch12::forward_bytes_per_rank(x, P, o.step) + ch12::backward_bytes_per_rank(x, P, o.step);
    };
    const int cap1 = largest_launchable_n(s, 1), capP = largest_launchable_n(s, o.step == ch12::kAllGather ? 1 : P);
    const int n1 = largest_n(s, free, cap1, one_gpu), nP = largest_n(s, free, capP, ring);
    auto limit = [](int n, int cap) { return n == cap ? "the kernels' 2e9 elements per array" : "memory"; };
    std::printf("largest N (an estimate from the buffers, %.2f GiB free on this GPU; B = %d, H = %d, D = %d):\n"
                "  one GPU, forward and backward of the whole sequence: N = %d (limit: %s)\n"
                "  %d ranks, step %s and its backward, a GPU each:      N = %d (limit: %s)\n",
                free / 1073741824.0, s.B, s.H, s.D, n1, limit(n1, cap1), P, ch12::step_name(o.step).c_str(), nP,
                limit(nP, capP));
    if (args.csv.empty()) return;
    const fa::TimingStats none{NAN, NAN};
    fa::append_result_csv(args.csv, {12, "max-seq-one-gpu", o.dtype, "memory"},
                          fa::make_shape(s.B, s.H, n1, s.D, s.causal, s.scale), none, 0, 0, NAN, NAN, "estimate");
    fa::append_result_csv(args.csv, tag_of("max-seq-" + ch12::step_name(o.step), o, P, "memory"),
                          fa::make_shape(s.B, s.H, nP, s.D, s.causal, s.scale), none, 0, 0, NAN, NAN, "estimate");
}

/// The single-GPU backward on the whole sequence from the ring forward's O and L: dQ, dK, dV (as
/// floats) for the comparison, and its time.
template <class T>
struct SingleBackward {
    std::vector<float> dQ, dK, dV;
    fa::TimingStats time{};
};
template <class T>
SingleBackward<T> single_backward(const ch12::BwdCompute& c, const fa::AttnProblem& p, const std::vector<float>& dO,
                                  const std::vector<float>& O, const std::vector<float>& L, const fa::RunArgs& args,
                                  fa::GpuTimer& timer) {
    const fa::AttnShape& s = p.shape;
    fa::DeviceAttention<T> d(p);
    d.O.upload(fa::convert_from_float<T>(O));
    d.L.upload(L);
    fa::DeviceBuffer<T> dO_d(fa::convert_from_float<T>(dO)), dQ(s.elements()), dK(s.elements()), dV(s.elements());
    fa::DeviceBuffer<float> work(ch8::workspace_floats(s, ch8::kAtomic));
    for (fa::DeviceBuffer<T>* x : {&dQ, &dK, &dV}) x->poison();
    const ch8::BwdTensors<T> t{d.Q.get(), d.K.get(), d.V.get(), d.O.get(), dO_d.get(), d.L.get(), dQ.get(), dK.get(), dV.get()};
    auto launch = [&] {
        for (int part = 0; part < 3; ++part)
            ch12::compute_backward_part<T>(c, part, s, t, ch8::split_workspace(work.get(), s, ch8::kAtomic));
    };
    launch();
    SingleBackward<T> out;
    out.dQ = fa::convert_to_float(dQ.download()), out.dK = fa::convert_to_float(dK.download()),
    out.dV = fa::convert_to_float(dV.download());
    if (!args.no_bench) out.time = timer.time(launch, args.repeat);
    return out;
}

/// Step 5 after its forward: the ring's backward checked (2× rule against the ring's backward
/// mirror, and against one GPU's backward from the same O and L) and timed.
template <class T>
bool run_backward(ch12::RingForward<T>& ring, const fa::AttnProblem& p, const fa::RunArgs& args, const Options& o,
                  ch12::Transport& t, const fa::DeviceInfo& dev, bool lead, const fa::TimingStats& t1_fwd,
                  const fa::TimingStats& tp_fwd, fa::GpuTimer& timer) {
    const fa::AttnShape& s = p.shape;
    const int P = t.world_size();
    const ch12::BwdCompute bc = ch12::backward_compute_for(dev, s.D);
    std::vector<float> dO = ch6::make_upstream_gradient(s, args.seed + 1);
    fa::round_to<T>(dO);
    std::vector<float> O, L;
    ring.gather(O, L);
    ch12::RingBackward<T> bwd(ring, bc);
    bwd.load(dO);
    bwd.poison_outputs();
    bwd.run();
    std::vector<float> dQ, dK, dV;
    bwd.gather(dQ, dK, dV);
    if (lead) std::printf("step %s: backward by %s\n", ch12::step_name(ch12::kBackward).c_str(), ch12::compute_name(bc).c_str());
    bool ok = true;
    SingleBackward<T> one;
    if (lead && (!args.no_check || !args.no_bench)) one = single_backward<T>(bc, p, dO, O, L, args, timer);
    if (lead && !args.no_check) {
        const ch6::SampledBackward ref = ch6::sampled_backward_reference(p, dO.data());
        const ch8::MirrorErrors mirror = ch12::ring_backward_mirror_errors<T>(p, dO, O, L, ring.layout(), ref);
        const ch7::RuleVerdict v = ch8::low_precision_rule(
            ch6::check_backward(ref, dQ.data(), dK.data(), dV.data(), ch8::rule_tolerance(mirror)), mirror);
        std::printf("%s  vs one GPU: max |dQ - dQ_1| %.3e, |dK - dK_1| %.3e, |dV - dV_1| %.3e\n", v.text.c_str(),
                    ch12::max_difference(dQ, one.dQ), ch12::max_difference(dK, one.dK),
                    ch12::max_difference(dV, one.dV));
        ok = v.ok;
    }
    if (args.no_bench) return ok;
    const fa::TimingStats tp = timer.time([&] { bwd.run(); }, args.repeat);
    if (lead) {
        fa::print_timing("T_1 backward (one GPU, whole sequence)", one.time, s.flops_backward(), 0);
        fa::print_timing("T_P backward (the ring)", tp, s.flops_backward(), 0);
        if (o.virtual_ranks <= 1)
            std::printf("  efficiency, forward + backward: (T_1 fwd + T_1 bwd) / (P (T_P fwd + T_P bwd)) = %.1f%%\n",
                        100.0 * (t1_fwd.median_ms + one.time.median_ms) / (P * (tp_fwd.median_ms + tp.median_ms)));
        if (!args.csv.empty()) {
            fa::append_result_csv(args.csv, {12, "one-gpu-" + ch12::compute_name(bc), o.dtype, "bwd"}, s, one.time,
                                  s.flops_backward(), 0, NAN, NAN, args.no_check ? "skipped" : "PASS");
            fa::append_result_csv(args.csv, tag_of(ch12::step_name(ch12::kBackward), o, P, "bwd"), s, tp,
                                  s.flops_backward(), 0, NAN, NAN, args.no_check ? "skipped" : (ok ? "PASS" : "FAIL"));
        }
    }
    if (o.timeline)
        print_timeline(t, s, o, args, lead, ch12::step_name(ch12::kBackward), "bwd", P + 1,
                       [&](ch12::Timeline* tl) { bwd.run(tl); });
    return ok;
}

template <class T>
int run(fa::AttnProblem& p, const fa::RunArgs& args, const Options& o, const Env& env, ch12::Transport& t,
        const fa::DeviceInfo& dev) {
    fa::round_inputs_to<T>(p);
    const fa::AttnShape& s = p.shape;
    const bool lead = env.rank == 0 || o.virtual_ranks > 0;  // prints and checks
    const int P = t.world_size();
    if (o.max_seq) {
        if (lead) print_max_seq(s, o, args, P);
        return fa::kExitOk;
    }
    if (o.bandwidth) {
        print_bandwidth(t, s, o, args, lead);
        return fa::kExitOk;
    }
    const ch12::Compute c = ch12::compute_for(dev, s.D);
    if (lead)
        std::printf("problem: %s, %s, P = %d ranks (%s), blocks by %s\n", s.str().c_str(), o.dtype.c_str(), P,
                    t.name().c_str(), ch12::compute_name(c).c_str());
    fa::GpuTimer timer;
    // the single-GPU result and time on the whole sequence (rank 0's GPU)
    std::vector<float> O1, L1;
    fa::TimingStats t1{};
    const bool single = lead && (!args.no_check || !args.no_bench);
    if (single) {
        fa::require_free_memory(std::size_t(fa::forward_io_bytes(s, sizeof(T))), "the single-GPU run (Q, K, V, O, L)");
        fa::DeviceAttention<T> d(p);
        auto launch = [&] { ch12::compute_forward<T>(c, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get()); };
        d.poison_outputs();
        launch();
        CUDA_CHECK(cudaDeviceSynchronize());
        O1 = d.O_host(), L1 = d.L_host();
        if (!args.no_bench) {
            t1 = timer.time(launch, args.repeat);
            fa::print_timing("T_1 (one GPU, whole sequence)", t1, s.flops_forward(), 0);
            if (!args.csv.empty())  // written now, so that a run stopped later keeps T_1 beside its T_P rows
                fa::append_result_csv(args.csv, {12, "one-gpu-" + ch12::compute_name(c), o.dtype, "fwd"}, s, t1,
                                      s.flops_forward(), 0, NAN, NAN, args.no_check ? "skipped" : "PASS");
        }
    }
    std::map<int, ch7::MirrorErrors> mirrors;  // by sharding
    bool ok = true;
    for (int step = o.ladder ? ch12::kFirstStep : o.step; step <= (o.ladder ? ch12::kLastStep : o.step); ++step) {
        ch12::RingForward<T> ring(t, s, step, c);
        ring.load(p);
        ring.poison_outputs();
        ring.run();
        std::vector<float> O, L;
        ring.gather(O, L);
        if (lead) std::printf("step %s (%s sharding)\n", ch12::step_name(step).c_str(),
                              ch12::sharding_name(ring.layout().sharding));
        if (lead && !args.no_check) {
            const int key = int(ring.layout().sharding);
            if (!mirrors.count(key))
                mirrors.emplace(key, ch12::ring_mirror_errors<T>(p, ring.layout(), ch12::compute_Bc(c, s.D)));
            const ch7::RuleVerdict v = ch7::low_precision_rule(fa::check_forward(p, O.data(), L.data()), mirrors.at(key));
            std::printf("%s  vs one GPU: max |O - O_1| %.3e, max |L - L_1| %.3e\n", v.text.c_str(),
                        ch12::max_difference(O, O1), ch12::max_difference(L, L1));
            ok &= v.ok && std::isfinite(ch12::max_difference(O, O1)) && std::isfinite(ch12::max_difference(L, L1));
        }
        fa::TimingStats tp{};
        if (!args.no_bench) {
            tp = timer.time([&] { ring.run(); }, args.repeat);
            if (lead) {
                fa::print_timing("T_P (the ring)", tp, s.flops_forward(), 0);
                if (o.virtual_ranks > 1)
                    std::printf("  (virtual ranks share one GPU: T_P is every rank's work in turn, not a parallel time)\n");
                else
                    std::printf("  efficiency T_1 / (P T_P) = %.1f%%\n", 100.0 * t1.median_ms / (P * tp.median_ms));
                if (!args.csv.empty())
                    fa::append_result_csv(args.csv, tag_of(ch12::step_name(step), o, P, "fwd"), s, tp,
                                          s.flops_forward(), 0, NAN, NAN, args.no_check ? "skipped" : (ok ? "PASS" : "FAIL"));
            }
        }
        if (o.timeline)
            print_timeline(t, s, o, args, lead, ch12::step_name(step), "fwd", P, [&](ch12::Timeline* tl) { ring.run(tl); });
        if (step == ch12::kBackward) ok &= run_backward<T>(ring, p, args, o, t, dev, lead, t1, tp, timer);
    }
    if (!lead) return fa::kExitOk;
    return fa::print_verdict(args, ok);
}

}  // namespace

int main(int argc, char** argv) try {
    fa::Cli cli("chapter12", "Ring attention (context parallelism): the sequence sharded over P GPUs (one process "
                             "each, NCCL) or P virtual ranks on one GPU; O and L checked against the float64 "
                             "reference with the 2x rule and against one GPU, and timed.");
    fa::RunArgs args;
    fa::add_run_options(cli, args);
    fa::AttentionArgs attn;
    fa::add_attention_options(cli, attn);
    Options o;
    cli.option("--dtype", &o.dtype, "element type of Q, K, V, O", {"fp16", "bf16"});
    cli.option("--step", &o.step, "1 all-gather, 2 ring, 3 overlapped ring, 4 zigzag (overlapped), 5 step 4 and the backward",
               ch12::kFirstStep, ch12::kLastStep);
    cli.flag("--ladder", &o.ladder, "run every step 1..5");
    cli.flag("--timeline", &o.timeline, "one more run of each step with events: compute, exchange, hidden and idle ms per ring step and rank");
    cli.flag("--bandwidth", &o.bandwidth, "only time one ring exchange, 1 MiB to 1 GiB and the ring's step sizes");
    cli.flag("--max-seq", &o.max_seq, "only print the largest N that fits one GPU and P ranks (an estimate from the buffers)");
    cli.option("--virtual", &o.virtual_ranks, "run P virtual ranks in this process on one GPU", 1, 64);
    cli.option("--rendezvous", &o.rendezvous, "file through which rank 0 hands the NCCL id to the others");
    cli.option("--rendezvous-timeout", &o.timeout_s, "seconds the other ranks wait for the NCCL id", 1, 3600);
    cli.conflict("--ladder", "--step", "it runs every step");
    cli.conflict("--virtual", "--rendezvous", "virtual ranks need no NCCL");
    cli.conflict("--bandwidth", "--max-seq", "each is a run of its own");
    cli.conflict("--bandwidth", "--ladder", "it times the exchange alone");
    cli.conflict("--max-seq", "--ladder", "it estimates for one step");
    cli.conflict("--timeline", "--no-bench", "the timeline is a timed run");
    cli.parse(argc, argv);
    const Env env = env_of(cli);
    if (o.virtual_ranks > 0 && env.world > 1) cli.fail("--virtual runs every rank in one process: unset WORLD_SIZE");
    if (env.world > 1 && o.rendezvous.empty())
        cli.fail("WORLD_SIZE=" + std::to_string(env.world) + " needs --rendezvous PATH (tools/launch.sh gives one)");
    if (o.virtual_ranks == 0 && env.world == 1) o.virtual_ranks = 1;
    const fa::AttnShape shape = fa::problem_shape(cli, attn, args);
    const std::string why = ch7::unsupported_reason(ch7::kTuned, shape);
    if (!why.empty()) cli.fail(why);
    const bool backward = o.ladder || o.step == ch12::kBackward || o.max_seq;
    const std::string bwd_why = ch8::unsupported_reason(ch8::kFa2Layout, shape);  // the backward's kernels (chapter 11's: the same dims)
    if (backward && !bwd_why.empty()) cli.fail("the backward (step 5): " + bwd_why);
    fa::AttnProblem p = fa::problem_from_args(cli, attn, args, {9, "Q, K, V, the gathered O and the checks"});

    if (fa::cuda_device_count() <= env.local_rank) {
        std::fprintf(stderr, "chapter12: rank %d needs CUDA device %d, and this machine has %d%s\n", env.rank,
                     env.local_rank, fa::cuda_device_count(), fa::cuda_device_count() == 0 ? " (no CUDA device)" : "");
        return fa::kExitNoGpu;
    }
    CUDA_CHECK(cudaSetDevice(env.local_rank));
    const fa::DeviceInfo dev = fa::require_device("chapter12", env.rank == 0);
    const std::string dev_why = ch7::device_unsupported_reason(dev);
    if (!dev_why.empty()) {
        std::fprintf(stderr, "chapter12: %s\n", dev_why.c_str());
        return fa::kExitNoGpu;
    }
    std::unique_ptr<ch12::Transport> t =
        o.virtual_ranks > 0 ? ch12::make_virtual_transport(o.virtual_ranks)
                            : ch12::make_nccl_transport(env.rank, env.world, env.local_rank, o.rendezvous, o.timeout_s);
    return o.dtype == "fp16" ? run<__half>(p, args, o, env, *t, dev) : run<__nv_bfloat16>(p, args, o, env, *t, dev);
} catch (const std::exception& e) {
    std::fprintf(stderr, "chapter12: %s\n", e.what());
    return fa::kExitFailed;
}
