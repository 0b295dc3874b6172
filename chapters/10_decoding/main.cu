// Chapter 10 program: attention for decoding, q_len new tokens per sequence against a KV cache.
//
//   make chapter10 && ./chapter10                      kernel 5 (tuned), bf16, B=1 H_q=32 H_kv=8 D=128 N=8192
//   ./chapter10 --ladder --seq 32768                   every variant, checked and timed, beside the
//                                                      read bandwidth of this GPU (same run)
//   ./chapter10 --sweep --seq 32768                    variant 5's candidates × split counts
//   ./chapter10 --kernel 4 --page-size 16              the paged cache, pages of 16 tokens
//   ./chapter10 --kernel 6 --seq 32768                 the e4m3 cache: time, and O's accuracy beside
//                                                      the 16-bit cache's
//   ./chapter10 --batch 4 --cache-lens 1,17,4097,100000 --q-len 1   mixed lengths in one batch
//   ./chapter10 --save-npy dir / --load-npy dir     the step's inputs and O, L as .npy files
//   ./chapter10 --model-step --layers 32 --seq 4096    a step of 32 layers' attention (append and
//                                                      kernel per layer): plain launches, then one
//                                                      CUDA graph
//
// Prints the device, the problem, the append check, then per kernel: its split plan, the check of
// O and L against the float64 reference (2× rule, sampled rows) and the time, as bytes of K and V
// read per second and as a share of the read bandwidth a read-only kernel reaches in this run.
// --model-step: the same for the first layer, whether the graph's O and L equal the plain
// launches', and the time of a whole step both ways.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../common/check.h"
#include "../../common/cli.h"
#include "../../common/device.h"
#include "../../common/dtype.h"
#include "../../common/exit_codes.h"
#include "../../common/gpu_timer.h"
#include "../../common/host_memory.h"
#include "../../common/random.h"
#include "decoding.h"
#include "model_step.h"
#include "problem.h"

namespace {

/// What to run, from the command line.
struct Options {
    std::string dtype = "bf16";
    std::vector<int> cache_lens, page_sizes = {16, 64, 256};
    int kernel = ch10::kTuned, tiles = -1, splits = 0, B = 1, H_q = 32, H_kv = 8, q_len = 1, D = 128;
    int seq = 8192, page_size = 64, check_rows = 128, layers = 32;
    double magnitude = 1.0;
    bool ladder = false, sweep = false, model_step = false, random_lens = false, dirty_flush = false;
    fa::RunArgs run;
};

/// A read-only kernel: every thread streams 16-byte loads, eight independent ones in flight, and
/// folds them with xor; the (never taken) store keeps the compiler from dropping the loads. Its
/// rate is the most any kernel that reads HBM once can reach on this GPU.
__global__ void __launch_bounds__(512) read_kernel(const uint4* x, std::size_t n, unsigned* sink) {
    constexpr int kInFlight = 8;
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
    std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + (kInFlight - 1) * stride < n; i += kInFlight * stride) {
        uint4 v[kInFlight];
#pragma unroll
        for (int k = 0; k < kInFlight; ++k) v[k] = __ldcs(x + i + k * stride);
#pragma unroll
        for (int k = 0; k < kInFlight; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    for (; i < n; i += stride) acc ^= x[i].x;
    if (acc == 0x9E3779B9u) *sink = acc;
}

/// Runs read_kernel over buf, on `stream`.
void read_all(const fa::DeviceBuffer<uint4>& buf, unsigned* sink, cudaStream_t stream = 0) {
    read_kernel<<<unsigned(fa::device_info().sm_count * 4), 512, 0, stream>>>(buf.get(), buf.size(), sink);
    CUDA_CHECK_LAUNCH();
}

/// GB/s of read_kernel over `bytes` (median, L2 flushed, then `after_flush`).
template <class AfterFlush>
double read_bandwidth(fa::GpuTimer& timer, std::size_t bytes, int repeat, AfterFlush after_flush) {
    fa::require_free_memory(bytes + 64, "the read-bandwidth kernel");
    fa::DeviceBuffer<uint4> buf(bytes / sizeof(uint4));
    fa::DeviceBuffer<unsigned> sink(1);
    buf.zero();
    const fa::TimingStats t = timer.time([&] { read_all(buf, sink.get()); }, repeat, 2, after_flush);
    return double(bytes) / (t.median_ms * 1e-3) / 1e9;
}

/// The cache lengths: --cache-lens (one per sequence, or one for all), drawn in q_len..seq with
/// --random-lens, else all equal to --seq. N_max is the longest.
std::vector<int> cache_lengths(const Options& o) {
    if (!o.cache_lens.empty()) {
        std::vector<int> l = o.cache_lens;
        if (l.size() == 1) l.assign(std::size_t(o.B), l[0]);
        return l;
    }
    std::vector<int> l(std::size_t(o.B), o.seq);
    if (o.random_lens) {
        fa::Rng rng(o.run.seed + 17);
        for (int& x : l) x = o.q_len + int(rng.next() % std::uint64_t(std::max(1, o.seq - o.q_len + 1)));
    }
    return l;
}

/// The split plan of a run: about --splits splits when given (kernel 1 has one), else the variant's own.
ch10::SplitPlan plan_of(const Options& o, const ch10::DecodeShape& s, int variant, int candidate) {
    return o.splits > 0 && variant != ch10::kFa2Grid ? ch10::plan_with_splits(s, o.splits, ch10::block_keys(variant, candidate))
                                                     : ch10::default_plan(variant, s, candidate);
}

bool all_finite(const std::vector<float>& x) {
    return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

/// Equal bit for bit (the values come from 16-bit O and fp32 L, so equal floats mean equal outputs).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// One timed or checked kernel: a line of the summary.
struct Row {
    std::string name, plan;
    double us = 0, gbps = 0;
    double rel_l2 = -1, rel_l2_16bit = -1;  ///< O against float64 of the 16-bit cache; kernel 6: and against its 16-bit O
    bool timed = false, checked = false, passed = true;
};

/// Relative L2 error of n values against `want`.
template <class W>
double rel_l2(const float* got, const W* want, std::size_t n) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double e = double(got[i]) - double(want[i]);
        num += e * e, den += double(want[i]) * double(want[i]);
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

template <class T>
class Runner {
public:
    Runner(const Options& o, const ch10::DecodeProblem& p) : o_(o), p_(p), timer_(true) {
        const int n = std::min<int>(o.check_rows, int(p.s.rows()));
        for (int k = 0; k < n; ++k) rows_.push_back(std::size_t(k) * p.s.rows() / std::size_t(n));
        if (!o.run.no_check) {
            O_ref_.resize(rows_.size() * p.s.D), L_ref_.resize(rows_.size());
            ch10::decode_reference_rows(p.s, p.Q.data(), p.K.data(), p.V.data(), rows_, O_ref_.data(), L_ref_.data());
        }
        if (!o.run.no_bench) {
            clean_ = fa::DeviceBuffer<uint4>(2 * fa::device_info().l2_bytes / sizeof(uint4));
            read_gbps_ = read_bandwidth(timer_, std::size_t(1) << 30, o.run.repeat, after_flush());
            std::printf("read bandwidth (read-only kernel, 1 GiB): %.1f GB/s; L2 before each timed run: %s\n\n",
                        read_gbps_, o.dirty_flush ? "dirty (the flush's writes)" : "clean (another buffer read)");
        }
    }

    /// Runs `variant` on the cache stored with `page_size` (0: contiguous): append, check, time.
    Row run(int variant, int page_size, int candidate, const ch10::SplitPlan* forced = nullptr) {
        Owner& dev = owner(page_size, variant == ch10::kFp8);
        const ch10::DecodeShape& s = dev.shape();
        const int Bc = ch10::block_keys(variant, candidate);
        const ch10::SplitPlan plan = forced != nullptr ? *forced : plan_of(o_, s, variant, candidate);
        Row row = named_row(variant, page_size, candidate, forced == nullptr, plan);
        auto launch = [&] { ch10::decode<T>(variant, s, dev.arrays(plan), plan, candidate); };
        launch();
        CUDA_CHECK(cudaDeviceSynchronize());
        if (!o_.run.no_check) check(dev, plan, Bc, row);
        if (!o_.run.no_bench) {
            const ch10::DecodeArrays<T> a = dev.arrays(plan);
            const fa::TimingStats t =
                timer_.time([&] { ch10::decode<T>(variant, s, a, plan, candidate); }, o_.run.repeat, 2, after_flush());
            row.timed = true;
            row.us = t.median_ms * 1e3;
            row.gbps = s.kv_bytes(elem_bytes(variant)) / (t.median_ms * 1e-3) / 1e9;
            std::printf("  time  median %8.2f us  min %8.2f us  K,V read %7.1f GB/s  (%.1f%% of the read bandwidth)\n",
                        row.us, t.min_ms * 1e3, row.gbps, 100.0 * row.gbps / read_gbps_);
            if (!o_.run.csv.empty()) append_csv(row, variant, candidate, page_size, plan);
        }
        return row;
    }

    /// --model-step: `layers` copies of run r's cache, and one decoding step over all of them (per
    /// layer the append, then the kernel) on one stream, as plain launches and as a CUDA graph
    /// captured once. Checks the first layer (2× rule) and that the graph's O and L equal the plain
    /// launches' bit for bit; times a step both ways. Returns the rows: plain, graph.
    std::vector<Row> model_step(const ch10::ProgramRun& r, int layers) {
        Owner& first = owner(r.page_size, r.variant == ch10::kFp8);
        const ch10::SplitPlan plan = plan_of(o_, first.shape(), r.variant, r.candidate);
        const std::string step = " model-step L=" + std::to_string(layers);
        Row plain = named_row(r.variant, r.page_size, r.candidate, true, plan), graphed = plain;
        plain.name += step + " plain", graphed.name += step + " graph";
        first.arrays(plan);  // the partials the plan needs, copied with the rest
        ch10::ModelStep<T> model(first, layers, r.variant, plan, r.candidate);
        const ch10::Stream stream;
        model.poison();
        model.enqueue(stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<float> O = model.O(), L = model.L();
        if (!o_.run.no_check) check(model.layer(0), plan, ch10::block_keys(r.variant, r.candidate), plain);
        // Captured after the plain launches: the kernels' one-time setup (shared-memory limits) is done.
        const ch10::StreamGraph graph(stream, [&model](cudaStream_t st) { model.enqueue(st); });
        model.poison();
        graph.launch(stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const bool finite = all_finite(O) && all_finite(L), same = same_bits(O, model.O()) && same_bits(L, model.L());
        std::printf("model step: %d layers, each its own cache: the append, then kernel %s; one graph of %zu kernels\n"
                    "  O and L of every layer finite after the plain launches: %s\n"
                    "  the graph's O and L equal the plain launches' bit for bit: %s\n",
                    layers, ch10::variant_name(r.variant).c_str(), graph.nodes(), finite ? "PASS" : "FAIL",
                    same ? "PASS" : "FAIL");
        plain.checked = graphed.checked = true;
        plain.passed = plain.passed && finite;
        graphed.passed = plain.passed && same;
        if (!o_.run.no_bench) time_model_step(model, graph, stream, plan, r, plain, graphed);
        return {plain, graphed};
    }

    double read_gbps() const { return read_gbps_; }

    /// O and L of the last run (after run()).
    std::vector<float> O() const { return stored_->O(); }
    std::vector<float> L() const { return stored_->L(); }

private:
    using Owner = ch10::DecodeArraysOwner<T, false>;

    static std::size_t elem_bytes(int variant) { return variant == ch10::kFp8 ? 1 : sizeof(T); }

    // A summary row named after the run ("5-tuned P=64 c1"; `heuristic` marks a candidate's own
    // plan in --sweep), with its plan printed.
    Row named_row(int variant, int page_size, int candidate, bool heuristic, const ch10::SplitPlan& plan) const {
        Row row;
        row.name = ch10::variant_name(variant) + (page_size ? " P=" + std::to_string(page_size) : "") +
                   (candidate >= 0 ? " c" + std::to_string(candidate) : "");
        if (candidate >= 0 && heuristic) row.name += " heuristic";
        if (o_.dirty_flush) row.name += " dirty-flush";
        row.plan = std::to_string(plan.splits) + " x " + std::to_string(plan.chunk);
        std::printf("kernel %s: %d split%s of %d keys, B_c = %d\n", row.name.c_str(), plan.splits,
                    plan.splits > 1 ? "s" : "", plan.chunk, ch10::block_keys(variant, candidate));
        return row;
    }

    // A model step timed as plain launches and as the graph's replay, each with the L2 flushed
    // first; the difference is what the graph saves: the host's launch calls and the GPU's gaps
    // between kernels (README, "A step of the whole model").
    void time_model_step(const ch10::ModelStep<T>& model, const ch10::StreamGraph& graph, cudaStream_t stream,
                         const ch10::SplitPlan& plan, const ch10::ProgramRun& r, Row& plain, Row& graphed) {
        const double bytes = model.layers() * p_.s.kv_bytes(elem_bytes(r.variant));
        auto time = [&](Row& row, const char* how, auto launch) {
            row.us = timer_.time(launch, o_.run.repeat, 2, after_flush(stream), stream).median_ms * 1e3;
            row.gbps = bytes / (row.us * 1e-6) / 1e9;
            row.timed = true;
            std::printf("  %-15s median %10.1f us a step  %8.2f us a layer  K,V read %7.1f GB/s\n", how, row.us,
                        row.us / model.layers(), row.gbps);
            if (!o_.run.csv.empty()) append_csv(row, r.variant, r.candidate, r.page_size, plan, model.layers());
        };
        time(plain, "plain launches", [&] { model.enqueue(stream); });
        time(graphed, "CUDA graph", [&] { graph.launch(stream); });
        const double saved = plain.us - graphed.us;
        std::printf("  the graph saves %.1f us a step (%.1f%%), %.2f us a layer, %.2f us a kernel\n", saved,
                    100.0 * saved / plain.us, saved / model.layers(), saved / double(graph.nodes()));
    }

    // Before each timed run, after the timer's flush (a memset, which leaves L2 full of dirty
    // lines): a read of another buffer twice the size of L2, so that writing those lines back to
    // memory is not timed and L2 holds clean, unrelated data, as between two decoding steps.
    // --dirty-flush skips it (README: what the write-back costs).
    auto after_flush(cudaStream_t stream = 0) {
        return [this, stream] {
            if (!o_.dirty_flush) read_all(clean_, sink_.get(), stream);
        };
    }

    // Kernel 6 multiplies in fp16 (bf16 Q converted): a |Q| past fp16's 65504 would become inf.
    static void exit_if_q_past_half(const std::vector<float>& Q) {
        float q_max = 0.0f;
        for (float x : Q) q_max = std::max(q_max, std::fabs(x));
        if (q_max <= 65504.0f) return;
        std::fprintf(stderr, "chapter10: kernel 6 multiplies in fp16, which holds |Q| up to 65504; this Q reaches %g\n",
                     double(q_max));
        std::exit(fa::kExitBadInput);
    }

    // The arrays of the cache stored with `page_size`, 16-bit or (fp8) e4m3: made, appended and
    // checked once. An e4m3 cache also has the float64 reference over its dequantized values.
    Owner& owner(int page_size, bool fp8) {
        if (stored_ != nullptr && stored_->shape().page_size == page_size && (fp8_ != nullptr) == fp8) return *stored_;
        stored_.reset(), fp8_.reset();
        const ch10::StoredCache c = ch10::stored_cache(p_, page_size, o_.run.seed + 5);
        if (fp8) {
            exit_if_q_past_half(p_.Q);
            fp8_ = std::make_unique<ch10::Fp8Cache>(ch10::quantize_cache(p_, c));
            if (!o_.run.no_check) {
                O_ref8_.resize(O_ref_.size()), L_ref8_.resize(L_ref_.size());
                const ch10::DecodeProblem& q = fp8_->dequantized;
                ch10::decode_reference_rows(q.s, q.Q.data(), q.K.data(), q.V.data(), rows_, O_ref8_.data(), L_ref8_.data());
            }
        }
        stored_ = std::make_unique<Owner>(p_, c, fp8_.get());
        stored_->append();
        CUDA_CHECK(cudaDeviceSynchronize());
        std::string why = ch10::compare_cache(stored_->K_stored(), fp8 ? ch10::e4m3_values(fp8_->K) : c.K);
        if (why.empty()) why = ch10::compare_cache(stored_->V_stored(), fp8 ? ch10::e4m3_values(fp8_->V) : c.V);
        std::printf("append of the new tokens' K, V to the %s%s cache: %s%s\n", fp8 ? "e4m3 " : "",
                    page_size ? ("paged (P = " + std::to_string(page_size) + ")").c_str() : "contiguous",
                    why.empty() ? "PASS" : "FAIL: ", why.c_str());
        append_failed_ |= !why.empty();
        return *stored_;
    }

    void check(Owner& dev, const ch10::SplitPlan& plan, int Bc, Row& row) {
        const std::vector<float> O = dev.O(), L = dev.L();
        std::vector<float> Os(rows_.size() * p_.s.D), Ls(rows_.size());
        const bool finite = all_finite(O) && all_finite(L);
        for (std::size_t r = 0; r < rows_.size(); ++r) {
            std::copy_n(&O[rows_[r] * p_.s.D], p_.s.D, &Os[r * p_.s.D]);
            Ls[r] = L[rows_[r]];
        }
        // The 2× rule against float64 of the cache the kernel reads: step 6's dequantized one.
        const ch10::DecodeProblem& q = fp8_ != nullptr ? fp8_->dequantized : p_;
        const std::vector<double>& O_ref = fp8_ != nullptr ? O_ref8_ : O_ref_;
        const std::vector<double>& L_ref = fp8_ != nullptr ? L_ref8_ : L_ref_;
        std::vector<float> Om(Os.size()), Lm(Ls.size());
        if (fp8_ != nullptr)  // kernel 6's products are fp16 (bf16 Q converted)
            ch10::mirror_decode<T, __half>(q.s, plan, Bc, q.Q.data(), q.K.data(), q.V.data(), nullptr, rows_, Om.data(),
                                           Lm.data());
        else
            ch10::mirror_decode<T>(q.s, plan, Bc, q.Q.data(), q.K.data(), q.V.data(), nullptr, rows_, Om.data(),
                                   Lm.data());
        const ch10::RuleCheck c = ch10::low_precision_rule(q.s, rows_.size(), Os.data(), Ls.data(), O_ref.data(),
                                                          L_ref.data(), Om.data(), Lm.data(), q.max_abs_V);
        std::printf("%s  every element of O and L finite: %s\n", c.text.c_str(), finite ? "PASS" : "FAIL");
        row.rel_l2 = rel_l2(Os.data(), O_ref_.data(), Os.size());
        if (fp8_ != nullptr) print_fp8_accuracy(plan, Bc, Os, row);
        row.checked = true;
        row.passed = c.ok && finite && !append_failed_;
    }

    // Step 6's cost in accuracy, O's relative L2 error over the checked rows: against float64 of
    // the 16-bit cache, and against O from the 16-bit cache with kernel 5's math (its CPU mirror,
    // which kernel 5 matches within the 2× rule), beside the 16-bit cache's own error.
    void print_fp8_accuracy(const ch10::SplitPlan& plan, int Bc, const std::vector<float>& Os, Row& row) {
        std::vector<float> O16(Os.size()), L16(rows_.size());
        ch10::mirror_decode<T>(p_.s, plan, Bc, p_.Q.data(), p_.K.data(), p_.V.data(), nullptr, rows_, O16.data(), L16.data());
        row.rel_l2_16bit = rel_l2(Os.data(), O16.data(), Os.size());
        std::printf("  accuracy of O, relative L2 over %zu rows:\n"
                    "    e4m3 cache  vs float64 of the 16-bit cache %.3e, vs O of the 16-bit cache %.3e\n"
                    "    16-bit cache (kernel 5's math, CPU mirror) vs float64 of the 16-bit cache %.3e\n",
                    rows_.size(), row.rel_l2, row.rel_l2_16bit, rel_l2(O16.data(), O_ref_.data(), O16.size()));
    }

    // One CSV row; a model step's (`layers` > 1) kv_bytes count every layer's cache.
    void append_csv(const Row& row, int variant, int candidate, int page_size, const ch10::SplitPlan& plan,
                    int layers = 1) {
        std::FILE* f = std::fopen(o_.run.csv.c_str(), "a+");
        if (f == nullptr) return;
        std::fseek(f, 0, SEEK_END);
        if (std::ftell(f) == 0)
            std::fprintf(f, "variant,candidate,dtype,batch,heads_q,heads_kv,q_len,dim,max_len,kv_bytes,page_size,"
                            "splits,chunk,median_us,kv_gbps,read_gbps,check,label,o_rel_l2,o_rel_l2_vs_16bit\n");
        const ch10::DecodeShape& s = p_.s;
        auto number = [](double x) {  // empty: not measured
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.4e", x);
            return x < 0 ? std::string() : std::string(buf);
        };
        std::fprintf(f, "%s,%d,%s,%d,%d,%d,%d,%d,%d,%.0f,%d,%d,%d,%.3f,%.1f,%.1f,%s,%s,%s,%s\n",
                     ch10::variant_name(variant).c_str(), candidate, fa::dtype_name<T>(), s.B, s.H_q, s.H_kv, s.q_len,
                     s.D, s.max_len(), layers * s.kv_bytes(elem_bytes(variant)), page_size, plan.splits, plan.chunk, row.us,
                     row.gbps, read_gbps_, row.checked ? (row.passed ? "PASS" : "FAIL") : "skipped", row.name.c_str(),
                     number(row.rel_l2).c_str(), number(row.rel_l2_16bit).c_str());
        std::fclose(f);
    }

    const Options& o_;
    const ch10::DecodeProblem& p_;
    fa::GpuTimer timer_;
    std::vector<std::size_t> rows_;
    std::vector<double> O_ref_, L_ref_, O_ref8_, L_ref8_;  // float64 of the 16-bit cache; of the e4m3 one
    std::unique_ptr<ch10::Fp8Cache> fp8_;                 // step 6's cache, while kernel 6 runs
    std::unique_ptr<Owner> stored_;
    fa::DeviceBuffer<uint4> clean_;
    fa::DeviceBuffer<unsigned> sink_{1};
    double read_gbps_ = 0;
    bool append_failed_ = false;
};

void print_summary(const std::vector<Row>& rows, double read_gbps) {
    std::printf("\n%-22s %-14s %10s %10s %8s  %s\n", "kernel", "splits x keys", "us", "GB/s", "% read", "check");
    for (const Row& r : rows)
        std::printf("%-22s %-14s %10.2f %10.1f %7.1f%%  %s\n", r.name.c_str(), r.plan.c_str(), r.us, r.gbps,
                    read_gbps > 0 ? 100.0 * r.gbps / read_gbps : 0.0,
                    r.checked ? (r.passed ? "PASS" : "FAIL") : "not checked");
}

/// The problem's shape from the command line; N_max is the longest cache.
ch10::DecodeShape shape_of(const Options& o) {
    ch10::DecodeShape s = ch10::make_decode_shape(o.B, o.H_q, o.H_kv, o.q_len, o.D, 1, cache_lengths(o));
    s.N_max = std::max(1, s.max_len());
    return s;
}

/// The runs the options ask for, in order (decoding.h: sweep_runs, ladder_runs).
std::vector<ch10::ProgramRun> runs_of(const Options& o, const ch10::DecodeShape& shape) {
    if (o.sweep) return ch10::sweep_runs(shape);
    if (o.ladder) return ch10::ladder_runs(o.page_size, o.page_sizes, o.tiles);
    return {{o.kernel, o.kernel == ch10::kPaged ? o.page_size : 0, o.tiles, 0}};
}

/// --save-npy: the inputs and the last run's O, L; exits with kExitFailed if a file cannot be written.
void save_npy(const std::string& dir, const ch10::DecodeProblem& p, const std::vector<float>& O,
              const std::vector<float>& L, const std::string& kernel) {
    try {
        ch10::save_decode_npy(dir, p, O, L);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "chapter10: %s\n", e.what());
        std::exit(fa::kExitFailed);
    }
    std::printf("saved q, k_cache, v_cache, cache_lens, o, l (.npy; o and l of kernel %s) to %s\n", kernel.c_str(),
                dir.c_str());
}

/// `loaded`: the inputs of --load-npy (not rounded yet); otherwise they are drawn from --seed.
template <class T>
int run_all(const Options& o, const ch10::DecodeShape& shape, const std::vector<ch10::ProgramRun>& runs,
            ch10::DecodeProblem loaded) {
    std::printf("problem: %s, %s, K and V: %.1f MB\n", shape.str().c_str(), fa::dtype_name<T>(),
                shape.kv_bytes(sizeof(T)) / 1e6);
    ch10::DecodeProblem p;
    if (o.run.load_npy.empty()) {
        p = ch10::make_problem<T>(shape, o.run.seed, o.magnitude);
    } else {
        p = std::move(loaded);
        ch10::round_to<T>(p);
        std::printf("inputs loaded from %s (rounded to %s)\n", o.run.load_npy.c_str(), fa::dtype_name<T>());
    }
    Runner<T> runner(o, p);
    std::vector<Row> rows;
    if (o.model_step) rows = runner.model_step(runs.front(), o.layers);
    else
        for (const ch10::ProgramRun& r : runs) {
            if (r.splits > 0) {
                const ch10::SplitPlan plan =
                    ch10::plan_with_splits(shape, r.splits, ch10::block_keys(r.variant, r.candidate));
                rows.push_back(runner.run(r.variant, r.page_size, r.candidate, &plan));
                continue;
            }
            if (o.sweep)
                std::printf("candidate %d: %s\n", r.candidate, ch10::tuning_candidates()[std::size_t(r.candidate)].c_str());
            rows.push_back(runner.run(r.variant, r.page_size, r.candidate));
        }
    if (!o.run.save_npy.empty()) save_npy(o.run.save_npy, p, runner.O(), runner.L(), rows.back().name);
    print_summary(rows, runner.read_gbps());
    for (const Row& r : rows)
        if (!r.passed) return fa::kExitFailed;
    return fa::kExitOk;
}

void add_options(fa::Cli& cli, Options& o) {
    fa::add_run_options(cli, o.run);
    fa::add_npy_options(cli, o.run);
    cli.option("--dtype", &o.dtype, "element type of Q, K, V, O", {"fp16", "bf16"});
    cli.option("--kernel", &o.kernel, "variant 1..6 (kernel/decode_attention.cuh lists them)", 1, 6);
    cli.option("--tiles", &o.tiles, "variant 5's tile candidate (-1: the default; --ladder: for kernel 5's rows)", -1,
               int(ch10::tuning_candidates().size()) - 1);
    cli.option("--batch", &o.B, "sequences", 1, 65535);
    cli.option("--heads", &o.H_q, "query heads H_q", 1, 1024);
    cli.option("--kv-heads", &o.H_kv, "KV heads H_kv (H_q = g * H_kv; 1 is MQA)", 1, 1024);
    cli.option("--q-len", &o.q_len, "new tokens per sequence (1..16)", 1, 16);
    cli.option("--dim", &o.D, "head dimension (64 or 128)", 1, 1024);
    cli.option("--seq", &o.seq, "cache length of every sequence (or the most, with --random-lens)", 1, 1 << 24);
    cli.option("--cache-lens", &o.cache_lens, "cache lengths, comma-separated: one per sequence (or one for all)", 1,
               1 << 24);
    cli.flag("--random-lens", &o.random_lens, "draw each sequence's cache length in q_len..seq");
    cli.option("--page-size", &o.page_size, "tokens per page of kernel 4's paged cache (a power of two)", 16, 256);
    cli.option("--page-sizes", &o.page_sizes,
               "--ladder: page sizes at which kernel 5 also runs on a paged cache (0: none)", 0, 256);
    cli.option("--splits", &o.splits, "about this many splits of the longest sequence (0: the heuristic)", 0, 4096);
    cli.option("--check-rows", &o.check_rows, "rows of O checked against the float64 reference", 1, 1 << 20);
    cli.option("--magnitude", &o.magnitude, "scale of Q (large values: large logits)", 1e-3, 1e3);
    cli.flag("--ladder", &o.ladder, "run every variant (and kernel 5 on paged caches)");
    cli.flag("--sweep", &o.sweep, "time variant 5's tile candidates at every power-of-two split count");
    cli.flag("--dirty-flush", &o.dirty_flush, "time right after the L2 flush's writes (no clean read between)");
    cli.flag("--model-step", &o.model_step,
             "a decoding step of --layers layers (each its own cache: append, then the kernel), timed as plain "
             "launches and as one CUDA graph");
    cli.option("--layers", &o.layers, "--model-step: layers, each with its own KV cache", 1, 4096);
    cli.conflict("--cache-lens", "--random-lens", "--cache-lens gives every length");
    cli.conflict("--cache-lens", "--seq", "the longest of --cache-lens is the cache's capacity");
    cli.conflict("--ladder", "--sweep", "each runs its own list of kernels");
    cli.conflict("--ladder", "--kernel", "--ladder runs every kernel");
    for (const char* list : {"--ladder", "--sweep"})
        cli.conflict("--model-step", list, "each runs its own list of kernels");
    cli.conflict("--model-step", "--save-npy", "--save-npy writes one step of one cache: leave out --model-step");
    for (const char* own : {"--kernel", "--tiles", "--page-size", "--page-sizes", "--splits"})
        cli.conflict("--sweep", own, "--sweep runs variant 5's candidates at its own split counts, contiguous cache");
    cli.conflict("--check-rows", "--no-check", "nothing is checked");
    cli.conflict("--dirty-flush", "--no-bench", "nothing is timed");
    for (const char* drawn : {"--batch", "--heads", "--kv-heads", "--q-len", "--dim", "--seq", "--cache-lens",
                              "--random-lens", "--magnitude", "--seed"})
        cli.conflict("--load-npy", drawn, "the inputs and their shape come from the files");
    cli.rule([&cli, &o]() -> std::string {
        if (cli.given("--page-sizes") && !o.ladder) return "--page-sizes applies to --ladder's kernel 5 rows";
        if (cli.given("--layers") && !o.model_step) return "--layers applies to --model-step";
        if (cli.given("--page-size") && !o.ladder && o.kernel != ch10::kPaged)
            return "--page-size applies to kernel 4 (and to --ladder's kernel 4 row)";
        if (o.splits > 0 && !o.ladder && o.kernel == ch10::kFa2Grid)
            return "--splits: kernel 1 reads each sequence in one block (one split)";
        return "";
    });
}

}  // namespace

int main(int argc, char** argv) try {
    Options o;
    fa::Cli cli("chapter10", "attention for decoding: split-KV, GQA packing, a paged cache");
    add_options(cli, o);
    cli.parse(argc, argv);
    ch10::DecodeShape shape;
    ch10::DecodeProblem loaded;  // --load-npy: read and checked before any GPU is looked for
    try {
        shape = o.run.load_npy.empty() ? shape_of(o) : ch10::npy_decode_shape(o.run.load_npy);
    } catch (const std::exception& e) {
        cli.fail(e.what());
    }
    const std::vector<ch10::ProgramRun> runs = runs_of(o, shape);
    const std::string bad = ch10::runs_error(shape, runs);
    if (!bad.empty()) cli.fail(bad);
    if (!o.run.save_npy.empty() && runs.back().variant == ch10::kFp8)
        cli.fail("--save-npy writes the 16-bit cache, which kernel 6 does not read: save with another kernel");
    const bool fp8 = std::any_of(runs.begin(), runs.end(), [](const ch10::ProgramRun& r) { return r.variant == ch10::kFp8; });
    fa::require_host_memory("chapter10", ch10::host_bytes(shape, fp8),
                            shape.str() + " (the cache in float32, as stored before and after the append)");
    if (!o.run.load_npy.empty()) {
        try {
            loaded = ch10::load_decode_npy(o.run.load_npy, shape);
        } catch (const std::exception& e) {
            cli.fail(e.what());
        }
    }
    fa::require_device("chapter10");
    const std::string why = ch10::device_unsupported_reason();
    if (!why.empty()) {
        std::fprintf(stderr, "chapter10: %s\n", why.c_str());
        return fa::kExitNoGpu;
    }
    return o.dtype == "fp16" ? run_all<__half>(o, shape, runs, std::move(loaded))
                             : run_all<__nv_bfloat16>(o, shape, runs, std::move(loaded));
} catch (...) {
    return fa::exit_status_of_exception("chapter10");
}
