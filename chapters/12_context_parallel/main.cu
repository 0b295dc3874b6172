// Chapter 12 program: ring attention (context parallelism), one process per GPU over NCCL, or P
// virtual ranks in one process on one GPU.
//
//   make chapter12 && ./chapter12 --virtual 4 --causal          4 virtual ranks, step 4 (zigzag)
//   ./chapter12 --virtual 2 --ladder --seq 4096                 every step of the ladder
//   tools/launch.sh 2 ./chapter12 --ladder --causal --seq 16384 --dim 128 --heads 16
//                                 2 GPUs, one process each (RANK, WORLD_SIZE, LOCAL_RANK as
//                                 torchrun sets them; the NCCL id through --rendezvous)
//
// Every rank makes the same seeded inputs and takes its chunks. Rank 0 gathers O and L, checks
// them against the float64 reference with the 2× rule (the ring's CPU mirror) and against the
// single-GPU kernel on the whole sequence, and prints the times: T_P of the ring, T_1 of the same
// kernel on one GPU over the whole sequence, and the efficiency T_1 / (P · T_P).
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
#include "chapter12.h"

namespace {

struct Options {
    std::string dtype = "bf16";
    int step = ch12::kZigzag;
    bool ladder = false;
    int virtual_ranks = 0;
    std::string rendezvous;
    int timeout_s = 120;
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

template <class T>
int run(fa::AttnProblem& p, const fa::RunArgs& args, const Options& o, const Env& env, ch12::Transport& t,
        const fa::DeviceInfo& dev) {
    fa::round_inputs_to<T>(p);
    const fa::AttnShape& s = p.shape;
    const bool lead = env.rank == 0 || o.virtual_ranks > 0;  // prints and checks
    const int P = t.world_size();
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
            double dO = 0, dL = 0;
            for (std::size_t i = 0; i < O.size(); ++i) dO = std::max(dO, double(std::fabs(O[i] - O1[i])));
            for (std::size_t i = 0; i < L.size(); ++i) dL = std::max(dL, double(std::fabs(L[i] - L1[i])));
            std::printf("%s  vs one GPU: max |O - O_1| %.3e, max |L - L_1| %.3e\n", v.text.c_str(), dO, dL);
            ok &= v.ok && std::isfinite(dO) && std::isfinite(dL);
        }
        if (!args.no_bench) {
            const fa::TimingStats tp = timer.time([&] { ring.run(); }, args.repeat);
            if (!lead) continue;
            fa::print_timing("T_P (the ring)", tp, s.flops_forward(), 0);
            if (o.virtual_ranks > 1)
                std::printf("  (virtual ranks share one GPU: T_P is every rank's work in turn, not a parallel time)\n");
            else
                std::printf("  efficiency T_1 / (P T_P) = %.1f%%\n", 100.0 * t1.median_ms / (P * tp.median_ms));
            if (!args.csv.empty())
                fa::append_result_csv(args.csv, {12, ch12::step_name(step) + "-P" + std::to_string(P) +
                                                         (o.virtual_ranks > 0 ? "-virtual" : ""), o.dtype, "fwd"},
                                      s, tp, s.flops_forward(), 0, NAN, NAN, args.no_check ? "skipped" : (ok ? "PASS" : "FAIL"));
        }
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
    cli.option("--step", &o.step, "1 all-gather, 2 ring, 3 overlapped ring, 4 zigzag (overlapped)", ch12::kFirstStep,
               ch12::kLastStep);
    cli.flag("--ladder", &o.ladder, "run every step 1..4");
    cli.option("--virtual", &o.virtual_ranks, "run P virtual ranks in this process on one GPU", 1, 64);
    cli.option("--rendezvous", &o.rendezvous, "file through which rank 0 hands the NCCL id to the others");
    cli.option("--rendezvous-timeout", &o.timeout_s, "seconds the other ranks wait for the NCCL id", 1, 3600);
    cli.conflict("--ladder", "--step", "it runs every step");
    cli.conflict("--virtual", "--rendezvous", "virtual ranks need no NCCL");
    cli.parse(argc, argv);
    const Env env = env_of(cli);
    if (o.virtual_ranks > 0 && env.world > 1) cli.fail("--virtual runs every rank in one process: unset WORLD_SIZE");
    if (env.world > 1 && o.rendezvous.empty())
        cli.fail("WORLD_SIZE=" + std::to_string(env.world) + " needs --rendezvous PATH (tools/launch.sh gives one)");
    if (o.virtual_ranks == 0 && env.world == 1) o.virtual_ranks = 1;
    const fa::AttnShape shape = fa::problem_shape(cli, attn, args);
    const std::string why = ch7::unsupported_reason(ch7::kTuned, shape);
    if (!why.empty()) cli.fail(why);
    fa::AttnProblem p = fa::problem_from_args(cli, attn, args, {9, "Q, K, V, the gathered O and the checks"});

    if (fa::cuda_device_count() <= env.local_rank) {
        std::fprintf(stderr, "chapter12: rank %d needs CUDA device %d, and this machine has %d\n", env.rank,
                     env.local_rank, fa::cuda_device_count());
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
