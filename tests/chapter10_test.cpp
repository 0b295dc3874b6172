// Tests of chapter 10: attention for decoding.
//
// [cpu]: the split plan (every key in exactly one split, every split's first key seen by every new
// token), the paged addressing through a shuffled block table (per key and per tile), the CPU
// mirror of split/merge against the float64 reference (mixed lengths up to 100000, splits from 1
// to more than the chunks, pages shuffled), the split heuristic, the bad-input messages, the
// program's runs (--ladder, --sweep) and their checks, its host-memory bound, the .npy files of
// --save-npy and --load-npy (saved, read back, bad folders refused), and every kernel variant
// on the CPU emulator (tags [v1]..[v5]) with the append step, groups of 1 to 24 rows (a second 16-row
// block whose first row is not token 0); the e4m3 cache of kernel 6: its quantization round trip,
// the append's quantization (saturating beyond the scale), and kernel 6 on the emulator over odd
// lengths, q_len up to 16, g = 1 to 16, D = 64 and 128, large logits.
// [gpu]: every variant on the GPU against the 2× rule: lengths 1, 17, 4097 and 100000 in one batch,
// q_len 1, 3, 4 and 16, g = 1, 4, 8 and MQA, D = 64 and 128, fp16 and bf16, split counts from 1 to more
// than the chunks, pages of 16, 32, 64 and 256 tokens in shuffled order, large logits; the append;
// kernel 6 (e4m3 cache) on the same cases, checked against float64 of its dequantized cache; a model
// step (three layers' appends and kernels 5 or 6) as plain launches and as a CUDA graph, whose
// outputs and caches must agree bit for bit ([cpu]: the bytes a layer takes, as the step plans them).
// Tags: [chapter10], [cpu] or [gpu], [vK] for the kernels of variant K.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../chapters/10_decoding/decoding.h"
#include "../chapters/10_decoding/kernel/fp8.h"
#include "../chapters/10_decoding/kernel/split_plan.h"
#include "../chapters/10_decoding/model_step.h"
#include "../chapters/10_decoding/problem.h"
#include "../common/attention.h"
#include "../common/device.h"
#include "../common/npy.h"
#include "../common/random.h"
#include "support.h"

using namespace ch10;

namespace {

bool have_sm80() { return fa::cuda_device_count() > 0 && device_unsupported_reason().empty(); }

// How a case cuts the cache.
enum class Cut {
    kHeuristic,  // default_plan (on the emulator: the heuristic with one block per SM of a small GPU)
    kOne,        // one split
    kMany,       // chunks of one tile (B_c keys)
    kExtra,      // one tile per split and 5 more (empty) splits in the grid than any sequence needs
};

SplitPlan plan_for(Cut cut, int variant, const DecodeShape& s, int candidate, bool emulated) {
    const int Bc = block_keys(variant, candidate);
    if (variant == kFa2Grid || cut == Cut::kOne) return plan_with_chunk(s, s.max_len(), Bc);
    if (cut == Cut::kHeuristic)
        return emulated ? plan_splits(s, groups_per_split(variant, s), Bc, 8) : default_plan(variant, s, candidate);
    SplitPlan p = plan_with_chunk(s, Bc, Bc);
    if (cut == Cut::kExtra) p.splits += 5;
    return p;
}

const char* cut_name(Cut c) {
    switch (c) {
        case Cut::kHeuristic: return "heuristic";
        case Cut::kOne: return "one split";
        case Cut::kMany: return "one tile per split";
        default: return "more splits than chunks";
    }
}

// The rows checked against float64: every row of sequences with at most 5000 keys, and the first
// and last 4 rows of each longer one (the references cost len·D per row).
std::vector<std::size_t> checked_rows(const DecodeShape& s) {
    std::vector<std::size_t> rows;
    const std::size_t per_seq = std::size_t(s.H_q) * s.q_len;
    for (int b = 0; b < s.B; ++b)
        for (std::size_t r = 0; r < per_seq; ++r)
            if (s.lens[b] <= 5000 || r < 4 || r + 4 >= per_seq) rows.push_back(b * per_seq + r);
    return rows;
}

// The float64 reference and the CPU mirror of one problem, computed once per (problem, chunk).
struct Expected {
    std::vector<std::size_t> rows;
    std::vector<double> O, L;
    std::map<std::pair<int, int>, std::pair<std::vector<float>, std::vector<float>>> mirror;  // (chunk, B_c)
};

// The mirror of problem p (for kernel 6: of its dequantized cache, with its products in fp16).
template <class T>
const std::pair<std::vector<float>, std::vector<float>>& mirror_of(const DecodeProblem& p, Expected& e,
                                                                  const SplitPlan& plan, int Bc, bool fp8) {
    auto key = std::make_pair(plan.chunk, Bc);
    auto it = e.mirror.find(key);
    if (it == e.mirror.end()) {
        std::vector<float> O(e.rows.size() * p.s.D), L(e.rows.size());
        if (fp8)
            mirror_decode<T, __half>(p.s, plan, Bc, p.Q.data(), p.K.data(), p.V.data(), nullptr, e.rows, O.data(),
                                     L.data());
        else
            mirror_decode<T>(p.s, plan, Bc, p.Q.data(), p.K.data(), p.V.data(), nullptr, e.rows, O.data(), L.data());
        it = e.mirror.emplace(key, std::make_pair(std::move(O), std::move(L))).first;
    }
    return it->second;
}

// One problem (inputs, reference) per (dtype, shape, seed, magnitude), made once for all variants.
// With fp8 (kernel 6) the reference reads the cache dequantized from e4m3 (quantize_cache).
template <class T>
std::pair<const DecodeProblem*, Expected*> problem_of(const DecodeShape& s, std::uint64_t seed, double magnitude,
                                                       bool fp8) {
    static std::map<std::string, std::pair<DecodeProblem, Expected>> cache;  // the last problem only (they are large)
    const std::string key = std::string(fa::dtype_name<T>()) + s.str() + "/" + std::to_string(seed) + "/" +
                            std::to_string(magnitude) + "/" + std::to_string(s.N_max) + (fp8 ? "/e4m3" : "");
    auto it = cache.find(key);
    if (it == cache.end()) {
        cache.clear();
        DecodeProblem p = make_problem<T>(s, seed, magnitude);
        Expected e;
        e.rows = checked_rows(s);
        e.O.resize(e.rows.size() * s.D), e.L.resize(e.rows.size());
        const DecodeProblem& q = fp8 ? quantize_cache(p, stored_cache(p, 0, 0)).dequantized : p;
        decode_reference_rows(q.s, q.Q.data(), q.K.data(), q.V.data(), e.rows, e.O.data(), e.L.data());
        it = cache.emplace(key, std::make_pair(std::move(p), std::move(e))).first;
    }
    return {&it->second.first, &it->second.second};
}

// Runs `variant` on problem (s, seed) with the cache stored in pages of `page_size` (0:
// contiguous), on the GPU or the emulator; checks the append and the 2× rule.
template <class T, bool Emulated>
void check_variant(int variant, const DecodeShape& s, int page_size, Cut cut, int candidate = -1,
                   double magnitude = 1.0) {
    const bool fp8 = variant == kFp8;
    auto [p, e] = problem_of<T>(s, 11 + std::uint64_t(s.max_len()), magnitude, fp8);
    const StoredCache c = stored_cache(*p, page_size, 99);
    const Fp8Cache f = fp8 ? quantize_cache(*p, c) : Fp8Cache{};  // step 6: e4m3, and what the references read
    const DecodeProblem& q = fp8 ? f.dequantized : *p;
    DecodeArraysOwner<T, Emulated> arrays(*p, c, fp8 ? &f : nullptr);
    arrays.append();
    if constexpr (!Emulated) CUDA_CHECK(cudaDeviceSynchronize());
    INFO("kernel " << variant_name(variant) << " candidate " << candidate << ", " << c.s.str() << ", "
                   << fa::dtype_name<T>() << ", " << cut_name(cut) << ", magnitude " << magnitude);
    if (c.K.size() <= (std::size_t(1) << 25)) {  // the append, element by element (not on the largest caches)
        CHECK(compare_cache(arrays.K_stored(), fp8 ? e4m3_values(f.K) : c.K) == "");
        CHECK(compare_cache(arrays.V_stored(), fp8 ? e4m3_values(f.V) : c.V) == "");
    }
    const SplitPlan plan = plan_for(cut, variant, c.s, candidate, Emulated);
    // Kernel 5 counts each group's finished splits in `counters`, and the block that finishes a
    // group resets its counter for the next launch: so it runs twice on the same arrays, outputs
    // poisoned again before the second run, and the second run is checked.
    for (int launch = 0; launch < (variant >= kTuned ? 2 : 1); ++launch) {
        const DecodeArrays<T> a = arrays.arrays(plan);
        if constexpr (Emulated) {
            decode_emulated<T>(variant, c.s, a, plan, candidate);
        } else {
            decode<T>(variant, c.s, a, plan, candidate);
            CUDA_CHECK(cudaDeviceSynchronize());
        }
    }
    const std::vector<float> O = arrays.O(), L = arrays.L();
    std::size_t nonfinite = 0;
    for (float x : O) nonfinite += !std::isfinite(x);
    for (float x : L) nonfinite += !std::isfinite(x);
    CHECK(nonfinite == 0);
    std::vector<float> Os(e->rows.size() * s.D), Ls(e->rows.size());
    for (std::size_t r = 0; r < e->rows.size(); ++r) {
        std::copy_n(&O[e->rows[r] * s.D], s.D, &Os[r * s.D]);
        Ls[r] = L[e->rows[r]];
    }
    const auto& m = mirror_of<T>(q, *e, plan, block_keys(variant, candidate), fp8);
    const RuleCheck rule = low_precision_rule(q.s, e->rows.size(), Os.data(), Ls.data(), e->O.data(), e->L.data(),
                                              m.first.data(), m.second.data(), q.max_abs_V);
    INFO("splits x keys " << plan.splits << " x " << plan.chunk << "\n" << rule.text);
    CHECK(rule.ok);
}

// Variant v's paged-or-contiguous layout for a case asking for pages of P tokens.
int page_size_for(int variant, int P) { return variant == kPaged || (variant >= kTuned && P > 0) ? (P > 0 ? P : 64) : 0; }

// The emulator's cases: small caches (the emulator runs a kernel thousands of times slower).
template <class T>
void emulated_cases(int variant) {
    struct Case {
        int B, H_q, H_kv, q_len, D;
        std::vector<int> lens;
        int P;
        Cut cut;
    };
    const std::vector<Case> cases = {
        {4, 4, 1, 1, 64, {1, 17, 70, 200}, 16, Cut::kMany},      // MQA, mixed lengths, pages of 16
        {2, 8, 2, 3, 128, {3, 150}, 64, Cut::kExtra},             // g = 4, q_len 3, empty splits
        {1, 8, 8, 2, 64, {130}, 0, Cut::kHeuristic},              // g = 1
        {2, 8, 1, 2, 64, {40, 96}, 16, Cut::kOne},                // MQA with g·q_len = 16 rows
        {2, 12, 2, 3, 64, {5, 65}, 32, Cut::kMany},               // g = 6, q_len 3: a second row block
    };  // (rows 16, 17: tokens 1, 2); 65: the new tokens straddle a tile (keys 62, 63 | 64)
    for (const Case& k : cases) {
        DecodeShape s = make_decode_shape(k.B, k.H_q, k.H_kv, k.q_len, k.D, 1, k.lens);
        s.N_max = s.max_len() + 5;
        check_variant<T, true>(variant, s, page_size_for(variant, k.P), k.cut);
    }
}

// Lengths of a batch, each at least q_len (the cache holds the new tokens).
std::vector<int> lengths(std::vector<int> lens, int q_len) {
    for (int& l : lens) l = std::max(l, q_len);
    return lens;
}

// The GPU cases: lengths 1, 17, 700, 4097 in one batch (small grid: 1, 17, 258, whose new tokens
// straddle a tile when q_len > 1) with g = 1, 4, 8 and MQA, q_len 1 and 4,
// three ways to cut the cache; then the batch with a sequence of 100000 tokens (g = 4 and MQA).
template <class T>
void gpu_cases(int variant, bool both_dims) {
    const bool small = fa::test::small_shapes();
    struct Heads {
        int H_q, H_kv;
    };
    const std::vector<Heads> heads = {{2, 2}, {8, 2}, {16, 2}, {8, 1}};  // g = 1, 4, 8; MQA (H_kv = 1)
    const std::vector<int> dims = both_dims ? std::vector<int>{128, 64} : std::vector<int>{128};
    const std::vector<int> mixed = small ? std::vector<int>{1, 17, 258} : std::vector<int>{1, 17, 700, 4097};
    for (int D : dims)
        for (int q_len : {1, 4})
            for (const Heads& h : heads) {
                if (small && h.H_kv != 1 && h.H_q != 16) continue;
                const std::vector<int> lens = lengths(mixed, q_len);
                DecodeShape s = make_decode_shape(int(lens.size()), h.H_q, h.H_kv, q_len, D, 1, lens);
                s.N_max = s.max_len() + 3;
                const int P = h.H_q == 8 ? 16 : h.H_q == 16 ? 256 : 64;
                for (Cut cut : {Cut::kHeuristic, Cut::kOne, Cut::kExtra}) {
                    if ((variant == kFa2Grid || small) && cut == Cut::kOne) continue;
                    check_variant<T, false>(variant, s, page_size_for(variant, P), cut);
                }
            }
    if (small) return;
    for (int q_len : {1, 4}) {  // g = 4 with q_len 1, MQA (g = 8) with q_len 4
        const Heads h = q_len == 1 ? Heads{8, 2} : Heads{8, 1};
        DecodeShape s = make_decode_shape(4, h.H_q, h.H_kv, q_len, 128, 100000, lengths({1, 17, 4097, 100000}, q_len));
        check_variant<T, false>(variant, s, page_size_for(variant, 64), variant == kFa2Grid ? Cut::kHeuristic : Cut::kExtra);
    }
}

}  // namespace

// ---- [cpu] -------------------------------------------------------------------------------------

TEST_CASE("split plan: the splits cover every key once and start where every new token sees", "[cpu][chapter10]") {
    for (int q_len : {1, 4, 16})
        for (int len = q_len; len < 700; len += 13)
            for (int chunk : {64, 128, 256}) {
                const int n = splits_of(len, q_len, chunk);
                int next = 0;
                for (int s = 0; s < n; ++s) {
                    INFO("len " << len << " q_len " << q_len << " chunk " << chunk << " split " << s);
                    CHECK(split_begin(s, chunk) == next);
                    CHECK(split_begin(s, chunk) < key_limit(len, q_len, 0));  // every token sees the first key
                    CHECK(split_end(s, len, q_len, chunk) > split_begin(s, chunk));
                    next = split_end(s, len, q_len, chunk);
                }
                CHECK(next == len);
                CHECK(split_begin(n, chunk) > len - q_len);  // a further split would start where a token is blind
            }
}

TEST_CASE("paged addressing: a shuffled block table finds every key of the logical cache", "[cpu][chapter10]") {
    for (int P : {16, 64, 256}) {
        DecodeShape s = make_decode_shape(3, 4, 2, 2, 64, 600, {600, 33, 257}, P);
        const std::vector<float> K = fa::random_uniform(std::size_t(3) * 2 * 600 * 64, 5, -1, 1);
        const PagedCopy c = make_paged_copy(s, K, K, 7, NAN);
        CHECK(std::set<int>(c.table.begin(), c.table.end()).size() == c.table.size());  // a permutation
        CHECK(!std::is_sorted(c.table.begin(), c.table.end()));                       // and shuffled
        std::size_t wrong = 0;
        for (int b = 0; b < s.B; ++b)
            for (int h = 0; h < s.H_kv; ++h)
                for (int key = 0; key < s.lens[b]; ++key) {
                    const std::size_t at = paged_row(&c.table[std::size_t(b) * s.max_pages()], key, s.page_shift(), h, s.H_kv, s.D);
                    const std::size_t want = contiguous_row(b, h, key, s.H_kv, s.N_max, s.D);
                    wrong += !std::equal(&c.K[at], &c.K[at] + s.D, &K[want]);
                }
        INFO("page size " << P);
        CHECK(wrong == 0);
    }
}

TEST_CASE("paged tiles: a tile's runs of pool rows find every key that paged_row finds", "[cpu][chapter10]") {
    // A tile of B_c keys from a multiple of B_c lies in max(1, B_c / P) runs of consecutive pool
    // rows, one block-table entry each (load_paged_kv reads it so); lengths end inside a page.
    for (int P : {16, 32, 64, 128, 256})
        for (int Bc : {64, 128}) {
            DecodeShape s = make_decode_shape(2, 4, 2, 1, 64, 1000, {1000, 203}, P);
            const std::vector<float> K = fa::random_uniform(std::size_t(2) * 2 * 1000 * 64, 9, -1, 1);
            const PagedCopy c = make_paged_copy(s, K, K, 13, NAN);
            std::size_t wrong = 0, wrong_runs = 0;
            for (int b = 0; b < s.B; ++b)
                for (int h = 0; h < s.H_kv; ++h)
                    for (int key0 = 0; key0 < s.lens[b]; key0 += Bc) {
                        const int* table_row = &c.table[std::size_t(b) * s.max_pages()];
                        std::set<int> runs;
                        for (int i = 0; i < Bc && key0 + i < s.lens[b]; ++i) {
                            const int run = tile_run(i, s.page_shift());
                            runs.insert(run);
                            const std::size_t at = tile_run_row(table_row, key0, run, s.page_shift(), h, s.H_kv, s.D) +
                                                   std::size_t(row_in_run(i, s.page_shift())) * s.D;
                            wrong += at != paged_row(table_row, key0 + i, s.page_shift(), h, s.H_kv, s.D);
                        }
                        const int full_runs = std::max(1, Bc / P);  // runs of a tile that the sequence fills
                        wrong_runs += key0 + Bc <= s.lens[b] && int(runs.size()) != full_runs;
                    }
            INFO("page size " << P << ", B_c " << Bc);
            CHECK(wrong == 0);
            CHECK(wrong_runs == 0);
        }
}

TEST_CASE("CPU mirror in fp32 (split/merge, paged) equals the float64 reference", "[cpu][chapter10]") {
    DecodeShape s = make_decode_shape(4, 8, 2, 3, 64, 100000, lengths({1, 17, 4097, 100000}, 3));
    const DecodeProblem p = make_problem<__nv_bfloat16>(s, 3);
    const std::vector<std::size_t> rows = checked_rows(s);
    std::vector<double> O(rows.size() * s.D), L(rows.size());
    decode_reference_rows(s, p.Q.data(), p.K.data(), p.V.data(), rows, O.data(), L.data());
    for (int P : {0, 16, 256})
        for (int chunk : {64, 1024, 200000}) {
            const StoredCache c = stored_cache(p, P, 8);
            SplitPlan plan = plan_with_chunk(c.s, chunk, 64);
            std::vector<float> Om(O.size()), Lm(L.size());
            mirror_decode<float>(c.s, plan, 64, p.Q.data(), c.K.data(), c.V.data(), c.table.data(), rows, Om.data(), Lm.data());
            INFO("page size " << P << ", chunk " << chunk);
            CHECK_ACCURATE(fa::validate("O", Om.data(), O.data(), O.size(), fa::kFp32Tolerance), 1e-5);
            CHECK_ACCURATE(fa::validate("L", Lm.data(), L.data(), L.size(), fa::kFp32Tolerance), 1e-5);
        }
}

TEST_CASE("split heuristic: one wave of equal shares, whole tiles, one split for small work, no second wave", "[cpu][chapter10]") {
    const DecodeShape one = make_decode_shape(1, 32, 8, 1, 128, 32768, {32768});
    const SplitPlan p = plan_splits(one, 8, 64, 264);
    CHECK(p.chunk % 64 == 0);
    CHECK(p.chunk >= kMinChunkTiles * 64);
    CHECK(8 * p.splits <= 264 + 8);          // about one wave of blocks
    CHECK(8 * p.splits >= 264 / 2);
    const DecodeShape many = make_decode_shape(64, 32, 8, 1, 128, 4096, std::vector<int>(64, 4096));
    CHECK(plan_splits(many, 8, 64, 264).splits == 1);  // 512 blocks already fill the GPU
    const DecodeShape mixed = make_decode_shape(4, 32, 8, 1, 128, 100000, {1, 17, 4097, 100000});
    const SplitPlan m = plan_splits(mixed, 8, 64, 264);
    CHECK(splits_of(1, 1, m.chunk) == 1);
    CHECK(m.splits == splits_of(100000, 1, m.chunk));  // the long sequence gets the splits
    CHECK(plan_with_splits(one, 16, 64).splits == 16);
    // Shares rounded up to whole tiles must not spill into a second wave: 131072 keys over 132 SMs
    // are 7944 per block, 8000 in whole tiles, 17 splits per group and 136 blocks; 16 fit.
    const DecodeShape longer = make_decode_shape(1, 32, 8, 1, 128, 131072, {131072});
    const SplitPlan l = plan_splits(longer, 8, 64, 132);
    CHECK(l.splits == 16);
    CHECK(l.chunk == 8192);
    const SplitPlan m132 = plan_splits(mixed, 8, 64, 132);
    int blocks = 0;
    for (int len : mixed.lens) blocks += 8 * splits_of(len, 1, m132.chunk);
    CHECK(blocks <= 132);
    CHECK(blocks > 132 - 8 * 4);  // and not far fewer: the long sequence keeps most of the SMs
}

TEST_CASE("bad input: one clear message", "[cpu][chapter10]") {
    CHECK(invalid_reason(make_decode_shape(1, 6, 4, 1, 128, 100, {100})).find("not a multiple") != std::string::npos);
    CHECK(invalid_reason(make_decode_shape(1, 8, 2, 1, 128, 100, {101})).find("outside") != std::string::npos);
    CHECK(invalid_reason(make_decode_shape(1, 8, 2, 4, 128, 100, {3})).find("outside") != std::string::npos);
    CHECK(invalid_reason(make_decode_shape(1, 8, 2, 1, 96, 100, {100})).find("head dim") != std::string::npos);
    CHECK(invalid_reason(make_decode_shape(1, 8, 2, 1, 128, 100, {100}, 48)).find("page size") != std::string::npos);
    CHECK(invalid_reason(make_decode_shape(2, 8, 2, 1, 128, 100, {100})).find("lengths") != std::string::npos);
    const DecodeShape ok = make_decode_shape(2, 8, 2, 1, 64, 100, {100, 40}, 16);
    CHECK(invalid_reason(ok).empty());
    std::vector<int> table(std::size_t(ok.B) * ok.max_pages());
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = int(i);
    CHECK(invalid_table_reason(ok, table, ok.pool_pages()).empty());
    table[std::size_t(ok.max_pages()) + 2] = ok.pool_pages();  // sequence 1, page 2 (keys 32..47 < 40)
    CHECK(invalid_table_reason(ok, table, ok.pool_pages()).find("outside the pool") != std::string::npos);
    CHECK(unsupported_reason(kPaged, make_decode_shape(1, 8, 2, 1, 64, 100, {100})).find("paged") != std::string::npos);
    CHECK(unsupported_reason(kFp8, make_decode_shape(1, 8, 2, 1, 96, 100, {100})).find("head dim") != std::string::npos);
    CHECK(unsupported_reason(kFp8, make_decode_shape(1, 8, 2, 1, 64, 100, {100}), 0).find("candidate") != std::string::npos);
}

namespace {

// Equal element by element, NaN where the other is NaN.
bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::isnan(a[i]) ? !std::isnan(b[i]) : a[i] != b[i]) return false;
    return true;
}

std::string npy_error(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE(".npy files of --save-npy and --load-npy: a step's inputs and outputs saved and read back unchanged; bad "
          "folders get one clear reason", "[cpu][chapter10]") {
    const std::string dir = (std::filesystem::temp_directory_path() / "fa_ch10_npy").string();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const DecodeShape s = make_decode_shape(3, 8, 2, 3, 64, 300, {3, 17, 300});
    const DecodeProblem p = make_problem<__nv_bfloat16>(s, 7);
    std::vector<float> O(s.q_elems()), L(s.rows());
    for (std::size_t i = 0; i < O.size(); ++i) O[i] = float(i % 11) - 5.0f;
    for (std::size_t i = 0; i < L.size(); ++i) L[i] = 0.5f * float(i);
    save_decode_npy(dir, p, O, L);

    const DecodeShape t = npy_decode_shape(dir);
    CHECK(t.str() == s.str());
    CHECK(t.lens == s.lens);
    DecodeProblem q = load_decode_npy(dir, t);
    CHECK(same_floats(q.Q, p.Q));
    CHECK(same_floats(q.K, p.K));  // NaN past each length, as make_problem's
    CHECK(same_floats(q.V, p.V));
    round_to<__nv_bfloat16>(q);  // already bf16 values: unchanged
    CHECK(same_floats(q.Q, p.Q));
    CHECK(q.max_abs_V > 0.0);
    CHECK(q.max_abs_V <= p.max_abs_V);
    std::vector<std::size_t> shape;
    CHECK(fa::read_npy_floats(dir + "/o.npy", &shape) == O);
    CHECK(shape == std::vector<std::size_t>{3, 8, 3, 64});
    CHECK(fa::read_npy_floats(dir + "/l.npy", &shape) == L);
    CHECK(shape == std::vector<std::size_t>{3, 8, 3});

    // lengths that do not fit the cache, of the wrong count or type, and a NaN below a length
    const std::vector<std::int32_t> too_long = {3, 17, 301}, two = {3, 17};
    fa::write_npy(dir + "/cache_lens.npy", too_long.data(), "<i4", 4, {3});
    CHECK_THAT(npy_error([&] { npy_decode_shape(dir); }), Catch::Contains("cache length 301 of sequence 2"));
    fa::write_npy(dir + "/cache_lens.npy", two.data(), "<i4", 4, {2});
    CHECK_THAT(npy_error([&] { npy_decode_shape(dir); }), Catch::Contains("one length per sequence"));
    const std::vector<float> as_floats = {3, 17, 300};
    fa::write_npy(dir + "/cache_lens.npy", as_floats.data(), {3});
    CHECK_THAT(npy_error([&] { npy_decode_shape(dir); }), Catch::Contains("expected int32 '<i4' or int64 '<i8'"));
    std::vector<float> K = p.K;
    K[contiguous_row(1, 1, 16, s.H_kv, s.N_max, s.D) + 5] = NAN;  // sequence 1's last token
    fa::write_npy(dir + "/k_cache.npy", K.data(), {3, 2, 300, 64});
    CHECK_THAT(npy_error([&] { load_decode_npy(dir, t); }), Catch::Contains("k_cache.npy: entry"));
    fa::write_npy(dir + "/v_cache.npy", K.data(), {3, 2, 299, 64});
    CHECK_THAT(npy_error([&] { npy_decode_shape(dir); }), Catch::Contains("differ"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("program runs: --ladder's and --sweep's runs, each checked before any device", "[cpu][chapter10]") {
    const DecodeShape s = make_decode_shape(2, 8, 2, 1, 128, 4097, {4097, 17});
    const std::vector<ProgramRun> ladder = ladder_runs(64, {16, 0, 256}, 2);
    REQUIRE(ladder.size() == 8);
    CHECK(std::tie(ladder[3].variant, ladder[3].page_size, ladder[3].candidate) == std::make_tuple(int(kTuned), 0, 2));
    CHECK(std::tie(ladder[4].variant, ladder[4].page_size, ladder[4].candidate) == std::make_tuple(int(kFp8), 0, -1));
    CHECK(std::tie(ladder[5].variant, ladder[5].page_size, ladder[5].candidate) == std::make_tuple(int(kPaged), 64, -1));
    CHECK(std::tie(ladder[7].variant, ladder[7].page_size) == std::make_tuple(int(kTuned), 256));
    CHECK(runs_error(s, ladder).empty());
    // a page size that is not a power of two, in either list; a candidate past the last; kernel 4 contiguous
    CHECK_THAT(runs_error(s, ladder_runs(17, {16}, -1)), Catch::Contains("page size 17"));
    CHECK_THAT(runs_error(s, ladder_runs(64, {16, 48}, -1)), Catch::Contains("page size 48"));
    const int candidates = int(tuning_candidates().size());
    CHECK_THAT(runs_error(s, ladder_runs(64, {0}, candidates)),
               Catch::Contains("tile candidate " + std::to_string(candidates)));
    CHECK_THAT(runs_error(s, {{kPaged, 0, -1, 0}}), Catch::Contains("paged"));
    CHECK_THAT(runs_error(make_decode_shape(1, 8, 2, 1, 96, 100, {100}), {{kTuned, 0, -1, 0}}), Catch::Contains("head dim"));
    // the sweep: every candidate with the heuristic's plan, then split counts while each gives a plan of its own
    const std::vector<ProgramRun> sweep = sweep_runs(s);
    std::map<int, std::vector<int>> splits_by_candidate;
    for (const ProgramRun& r : sweep) {
        CHECK(std::tie(r.variant, r.page_size) == std::make_tuple(int(kTuned), 0));
        splits_by_candidate[r.candidate].push_back(r.splits);
    }
    CHECK(int(splits_by_candidate.size()) == candidates);
    for (const auto& [c, splits] : splits_by_candidate) {
        INFO("candidate " << c);
        CHECK(splits.front() == 0);
        for (std::size_t i = 1; i < splits.size(); ++i) {
            CHECK(splits[i] == 1 << (i - 1));
            CHECK(plan_with_splits(s, splits[i], block_keys(kTuned, c)).splits == splits[i]);
        }
        const int next = 1 << (splits.size() - 1);
        CHECK((next > 256 || plan_with_splits(s, next, block_keys(kTuned, c)).splits != next));
    }
    CHECK(runs_error(s, sweep).empty());
}

TEST_CASE("host_bytes bounds what the program's host arrays take", "[cpu][chapter10]") {
    for (int page_size : {0, 16, 256}) {
        INFO("page size " << page_size);
        const DecodeShape s = make_decode_shape(2, 8, 2, 3, 64, 1000, {1000, 300});
        const DecodeProblem p = make_problem<__half>(s, 7);
        const StoredCache c = stored_cache(p, page_size, 8);
        // the problem's cache, the stored cache's four copies, and one read back (16 bits, then floats)
        const double floats = double(p.K.size() + p.V.size() + c.K.size() + c.V.size() + c.K_before.size() +
                                     c.V_before.size()) + 1.5 * double(c.K.size());
        CHECK(floats * sizeof(float) <= host_bytes(s) - 64.0 * (1 << 20));
        CHECK(floats * sizeof(float) >= 0.5 * (host_bytes(s) - 64.0 * (1 << 20)));  // and not far above
        // kernel 6 adds the e4m3 cache: four byte copies and the dequantized logical cache
        const Fp8Cache f = quantize_cache(p, c);
        const double fp8_floats = floats + double(f.K.size() + f.V.size() + f.K_before.size() + f.V_before.size()) / 4 +
                                  double(f.dequantized.K.size() + f.dequantized.V.size());
        CHECK(fp8_floats * sizeof(float) <= host_bytes(s, true) - 64.0 * (1 << 20));
    }
}

TEST_CASE("model step: layer_bytes is what a layer's arrays take, contiguous, paged and e4m3", "[cpu][chapter10]") {
    const DecodeShape s = make_decode_shape(3, 8, 2, 2, 64, 300, {300, 5, 129});
    const DecodeProblem p = make_problem<__nv_bfloat16>(s, 3);
    for (int P : {0, 16, 256})
        for (bool fp8 : {false, true}) {
            INFO("page size " << P << (fp8 ? ", e4m3" : ", 16-bit"));
            const StoredCache c = stored_cache(p, P, 4);
            const Fp8Cache f = fp8 ? quantize_cache(p, c) : Fp8Cache{};
            DecodeArraysOwner<__nv_bfloat16, true> layer(p, c, fp8 ? &f : nullptr);
            for (const SplitPlan plan : {SplitPlan{320, 1}, SplitPlan{64, 5}}) {  // no partials, then five splits
                layer.arrays(plan);
                CHECK(layer.bytes() == layer_bytes(c.s, fp8, plan));
            }
        }
}

TEST_CASE("kernel 1 on the CPU emulator (chapter 7's grid)", "[cpu][chapter10][v1]") { emulated_cases<__nv_bfloat16>(kFa2Grid); }
TEST_CASE("kernel 2 on the CPU emulator (split-KV and the combine)", "[cpu][chapter10][v2]") { emulated_cases<__half>(kSplitKv); }
TEST_CASE("kernel 3 on the CPU emulator (GQA packing)", "[cpu][chapter10][v3]") { emulated_cases<__nv_bfloat16>(kGqa); }
TEST_CASE("kernel 4 on the CPU emulator (paged cache)", "[cpu][chapter10][v4]") { emulated_cases<__nv_bfloat16>(kPaged); }
TEST_CASE("kernel 5 on the CPU emulator (every tile candidate)", "[cpu][chapter10][v5]") {
    // Pages smaller than the tile (several runs per tile) and at least as large (one run): 32, 128,
    // 16, 64 (< B_c = 128 of 8 warps), 256.
    const std::vector<int> page_sizes = {32, 128, 16, 64, 256};
    for (int c = 0; c < int(tuning_candidates().size()); ++c) {
        DecodeShape s = make_decode_shape(2, 8, 2, 2, 128, 300, {300, 70});
        check_variant<__half, true>(kTuned, s, 0, Cut::kMany, c);
        check_variant<__half, true>(kTuned, s, page_sizes[std::size_t(c) % page_sizes.size()], Cut::kExtra, c);
    }
}
TEST_CASE("kernel 5 on the CPU emulator: the in-kernel combine's rows (every thread merges)", "[cpu][chapter10][v5]") {
    // The last block of a group merges all its rows at once, row t / (threads/16) on thread t: fewer
    // real rows than warps (g·q_len = 1, 3; padding rows' lanes only shuffle), more (16 rows: g = 8
    // with q_len 2, g = 4 with q_len 4, g = 1 with q_len 16), and a second row block holding fewer
    // rows (g·q_len = 24: rows 16..23). D = 64 and 128 (one or two float4 per lane at 16 lanes per
    // row, two or four at 8).
    struct Case {
        int H_q, H_kv, q_len, D;
    };
    for (const Case& k : {Case{2, 2, 1, 64}, Case{6, 2, 1, 128}, Case{8, 1, 2, 128}, Case{8, 1, 3, 64},
                          Case{8, 2, 4, 128}, Case{2, 2, 16, 64}})
        for (int c : {0, 3}) {  // 4 and 8 warps
            DecodeShape s = make_decode_shape(2, k.H_q, k.H_kv, k.q_len, k.D, 1, lengths({200, 90}, k.q_len));
            s.N_max = s.max_len() + 2;
            check_variant<__nv_bfloat16, true>(kTuned, s, 0, Cut::kMany, c);
        }
}

TEST_CASE("e4m3: every byte's value round-trips, values round to nearest, beyond the scale saturate", "[cpu][chapter10][v6]") {
    std::size_t finite = 0, wrong = 0;
    for (int b = 0; b < 256; ++b) {  // scale 1: a byte's value quantizes back to the byte (its two NaNs stay NaN)
        const float x = e4m3_value(std::uint8_t(b));
        if (std::isnan(x)) continue;
        ++finite;
        wrong += e4m3_quantize(x, 1.0f) != std::uint8_t(b) && !(x == 0.0f && e4m3_quantize(x, 1.0f) == 0);
    }
    CHECK(finite == 254);
    CHECK(wrong == 0);
    CHECK(e4m3_value(0x7E) == kE4m3Max);
    // a head's largest |x| maps to 448; the rest round to nearest: relative error at most 2^-4 for
    // normal values (3 mantissa bits), at most half of 2^-9·s below them (subnormals)
    const std::vector<float> x = fa::random_uniform(4096, 3, -3.0, 5.0);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float s = e4m3_scale(amax);
    double worst = 0;
    for (float v : x) {
        const float back = s * e4m3_value(e4m3_quantize(v, s));
        worst = std::max(worst, std::fabs(double(back) - v) / std::max(std::fabs(double(v)), 64.0 * s));
    }
    CHECK(worst <= 1.0 / 16);
    CHECK(s * e4m3_value(e4m3_quantize(amax, s)) == Approx(amax).epsilon(1e-6));
    CHECK(e4m3_quantize(10.0f * amax, s) == 0x7E);  // +448: saturated, not NaN
    CHECK(e4m3_quantize(-10.0f * amax, s) == 0xFE);
    CHECK(std::isnan(e4m3_value(e4m3_quantize(NAN, s))));  // the tests' NaN poison survives quantization
    CHECK(e4m3_scale(0.0f) == 1.0f);
}

TEST_CASE("kernel 6's append on the CPU emulator quantizes the new tokens, and clips those beyond the scale",
          "[cpu][chapter10][v6]") {
    // The scales are divided by 4 after the cache is quantized: a new token's |x| up to 4·448·s,
    // so many elements exceed the scale. Each new element must hold e4m3(x / s), ±448 beyond it
    // (never NaN); every other row is unchanged. Contiguous and paged (pages of 16).
    for (int P : {0, 16}) {
        DecodeShape s = make_decode_shape(3, 4, 2, 5, 64, 1, {5, 37, 100});
        s.N_max = 104;
        const DecodeProblem p = make_problem<__nv_bfloat16>(s, 21);
        const StoredCache c = stored_cache(p, P, 4);
        Fp8Cache f = quantize_cache(p, c);
        for (float& x : f.K_scale) x /= 4;
        for (float& x : f.V_scale) x /= 4;
        DecodeArraysOwner<__nv_bfloat16, true> arrays(p, c, &f);
        arrays.append();
        const std::vector<float> K = arrays.K_stored(), V = arrays.V_stored();
        std::vector<float> K_want = e4m3_values(f.K_before), V_want = e4m3_values(f.V_before);
        std::size_t clipped = 0;
        for (int b = 0; b < s.B; ++b)
            for (int h = 0; h < s.H_kv; ++h)
                for (int key = s.lens[b] - s.q_len; key < s.lens[b]; ++key) {
                    const std::size_t from = contiguous_row(b, h, key, s.H_kv, s.N_max, s.D);
                    const std::size_t to = P ? paged_row(&c.table[std::size_t(b) * c.s.max_pages()], key, c.s.page_shift(),
                                                         h, s.H_kv, s.D)
                                             : from;
                    const std::size_t head = std::size_t(b) * s.H_kv + h;
                    for (int d = 0; d < s.D; ++d) {
                        K_want[to + d] = e4m3_value(e4m3_quantize(p.K[from + d], f.K_scale[head]));
                        V_want[to + d] = e4m3_value(e4m3_quantize(p.V[from + d], f.V_scale[head]));
                        clipped += std::fabs(p.K[from + d]) > kE4m3Max * f.K_scale[head];
                        CHECK(std::fabs(K_want[to + d]) <= kE4m3Max);
                    }
                }
        INFO("page size " << P);
        CHECK(clipped > 0);
        CHECK(compare_cache(K, K_want) == "");
        CHECK(compare_cache(V, V_want) == "");
    }
}

TEST_CASE("kernel 6 on the CPU emulator (e4m3 cache): the chapter's cases", "[cpu][chapter10][v6]") {
    emulated_cases<__nv_bfloat16>(kFp8);
}
TEST_CASE("kernel 6 on the CPU emulator: q_len up to 16, g = 1 to 16, D = 64 and 128, large logits", "[cpu][chapter10][v6]") {
    // 16 rows of one head (q_len 16), 32 rows (g = 2, q_len 16: two row blocks), g = 16 (MQA with
    // 16 heads), g = 8 with q_len 3 (a second row block from token 1); fp16 and bf16; Q scaled by 8.
    struct Case {
        int H_q, H_kv, q_len, D, P;
        double magnitude;
    };
    for (const Case& k : {Case{2, 2, 16, 64, 0, 1.0}, Case{4, 2, 16, 128, 32, 1.0}, Case{16, 1, 1, 128, 0, 1.0},
                          Case{16, 2, 3, 64, 64, 1.0}, Case{8, 2, 4, 128, 0, 8.0}, Case{16, 1, 2, 64, 16, 8.0}}) {
        DecodeShape s = make_decode_shape(2, k.H_q, k.H_kv, k.q_len, k.D, 1, lengths({203, 67}, k.q_len));
        s.N_max = s.max_len() + 3;
        check_variant<__nv_bfloat16, true>(kFp8, s, k.P, Cut::kMany, -1, k.magnitude);
        check_variant<__half, true>(kFp8, s, k.P, Cut::kHeuristic, -1, k.magnitude);
    }
}

// ---- [gpu] -------------------------------------------------------------------------------------

TEST_CASE("kernel 1 on the GPU: mixed lengths, q_len 1 and 4, g = 1, 4, 8 and MQA", "[gpu][chapter10][v1]") {
    REQUIRE(have_sm80());
    gpu_cases<__nv_bfloat16>(kFa2Grid, false);
}
TEST_CASE("kernel 2 on the GPU: split counts from 1 to more than the chunks", "[gpu][chapter10][v2]") {
    REQUIRE(have_sm80());
    gpu_cases<__half>(kSplitKv, false);
}
TEST_CASE("kernel 3 on the GPU: GQA packing, D = 64 and 128", "[gpu][chapter10][v3]") {
    REQUIRE(have_sm80());
    gpu_cases<__nv_bfloat16>(kGqa, true);
}
TEST_CASE("kernel 4 on the GPU: pages of 16, 64, 256 tokens in shuffled order", "[gpu][chapter10][v4]") {
    REQUIRE(have_sm80());
    gpu_cases<__nv_bfloat16>(kPaged, true);
}
TEST_CASE("kernel 5 on the GPU: contiguous and paged, fp16 and bf16", "[gpu][chapter10][v5]") {
    REQUIRE(have_sm80());
    gpu_cases<__nv_bfloat16>(kTuned, true);
    gpu_cases<__half>(kTuned, false);
}
TEST_CASE("kernel 5 on the GPU: every tile candidate, large logits", "[gpu][chapter10][v5]") {
    REQUIRE(have_sm80());
    DecodeShape s = make_decode_shape(3, 32, 8, 4, 128, 1, fa::test::small_shapes() ? std::vector<int>{5, 258, 129}
                                                                                      : std::vector<int>{5, 9000, 129});
    s.N_max = s.max_len();
    for (int c = 0; c < int(tuning_candidates().size()); ++c)
        for (Cut cut : {Cut::kHeuristic, Cut::kMany}) check_variant<__nv_bfloat16, false>(kTuned, s, 0, cut, c);
    check_variant<__nv_bfloat16, false>(kTuned, s, 0, Cut::kHeuristic, -1, 8.0);
    check_variant<__half, false>(kTuned, s, 64, Cut::kMany, -1, 8.0);
}
TEST_CASE("kernel 5 on the GPU: the in-kernel combine at q_len 1, 3, 4, 16 with g = 1, 4, 8", "[gpu][chapter10][v5]") {
    // g·q_len from 1 to 128 rows (up to 8 row blocks), fewer and more real rows than warps, split
    // counts from the heuristic's to one tile per split (more than 16 splits per row), 4 and 8 warps.
    REQUIRE(have_sm80());
    const bool small = fa::test::small_shapes();
    struct Heads {
        int H_q, H_kv;
    };
    for (int q_len : {1, 3, 4, 16})  // 3: g = 8 has a second row block that starts at token 1
        for (const Heads& h : {Heads{2, 2}, Heads{8, 2}, Heads{16, 2}}) {  // g = 1, 4, 8
            const std::vector<int> lens =
                lengths(small ? std::vector<int>{1, 17, 258} : std::vector<int>{1, 17, 700, 4097}, q_len);
            DecodeShape s = make_decode_shape(int(lens.size()), h.H_q, h.H_kv, q_len, 128, 1, lens);
            s.N_max = s.max_len() + 1;
            for (int c : {-1, 3})
                for (Cut cut : {Cut::kHeuristic, Cut::kMany}) check_variant<__nv_bfloat16, false>(kTuned, s, 0, cut, c);
        }
}
TEST_CASE("kernels 4 and 5 on the GPU: pages of 16, 32, 64, 256 tokens, lengths 1 to 100000", "[gpu][chapter10][v4][v5]") {
    // Pages smaller than a tile (several block-table entries per tile) and at least as large (one),
    // shuffled in the pool, rows no sequence owns NaN; lengths that end inside a page.
    REQUIRE(have_sm80());
    const bool small = fa::test::small_shapes();
    for (int q_len : {1, 4}) {
        const std::vector<int> lens =
            lengths(small ? std::vector<int>{1, 17, 258} : std::vector<int>{1, 17, 4097, 100000}, q_len);
        DecodeShape s = make_decode_shape(int(lens.size()), 8, 2, q_len, 128, 1, lens);
        s.N_max = s.max_len() + 3;
        for (int P : {16, 32, 64, 256}) {
            check_variant<__nv_bfloat16, false>(kPaged, s, P, Cut::kHeuristic);
            for (int c : {-1, 3}) check_variant<__nv_bfloat16, false>(kTuned, s, P, Cut::kHeuristic, c);
            check_variant<__half, false>(kTuned, s, P, Cut::kExtra);
        }
    }
}
TEST_CASE("kernel 6 on the GPU: the e4m3 cache, contiguous and paged, fp16 and bf16", "[gpu][chapter10][v6]") {
    REQUIRE(have_sm80());
    gpu_cases<__nv_bfloat16>(kFp8, true);
    gpu_cases<__half>(kFp8, false);
}
TEST_CASE("kernel 6 on the GPU: q_len up to 16, g = 1 to 16, large logits, pages of 16 to 256", "[gpu][chapter10][v6]") {
    REQUIRE(have_sm80());
    const bool small = fa::test::small_shapes();
    struct Heads {
        int H_q, H_kv;
    };
    for (int q_len : {1, 3, 16})
        for (const Heads& h : {Heads{2, 2}, Heads{16, 2}, Heads{16, 1}}) {  // g = 1, 8, 16
            const std::vector<int> lens =
                lengths(small ? std::vector<int>{1, 17, 258} : std::vector<int>{1, 17, 700, 4097}, q_len);
            DecodeShape s = make_decode_shape(int(lens.size()), h.H_q, h.H_kv, q_len, 128, 1, lens);
            s.N_max = s.max_len() + 1;
            for (int P : {0, 16, 256}) check_variant<__nv_bfloat16, false>(kFp8, s, P, Cut::kHeuristic);
            check_variant<__half, false>(kFp8, s, 0, Cut::kMany, -1, 8.0);
        }
}

namespace {

// A model step of three layers, each a copy of one cache before the append: the plain launches
// append to every layer's cache and give every layer the O and L of one ordinary decode; the
// CUDA graph's replays (twice: kernel 5's counters must be left at zero) give the same bits.
template <class T>
void check_model_step(int variant, int page_size) {
    DecodeShape s = make_decode_shape(3, 8, 2, 2, 128, 1, {5, 300, 1029});
    s.N_max = s.max_len() + 3;
    const bool fp8 = variant == kFp8;
    const DecodeProblem p = make_problem<T>(s, 21);
    const StoredCache c = stored_cache(p, page_size, 22);
    const Fp8Cache f = fp8 ? quantize_cache(p, c) : Fp8Cache{};
    INFO("kernel " << variant_name(variant) << ", " << c.s.str() << ", " << fa::dtype_name<T>());
    const SplitPlan plan = plan_with_chunk(c.s, 2 * block_keys(variant), block_keys(variant));  // several splits
    DecodeArraysOwner<T, false> one(p, c, fp8 ? &f : nullptr);
    one.arrays(plan);
    const std::size_t held = fa::device_buffer_bytes();
    ModelStep<T> model(one, 3, variant, plan);
    CHECK(fa::device_buffer_bytes() - held == 3 * layer_bytes(c.s, fp8, plan));
    // the reference: the same kernels on `one`, on the default stream
    one.append();
    decode<T>(variant, c.s, one.arrays(plan), plan);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> O_one = one.O(), L_one = one.L();
    const std::vector<float> K_want = fp8 ? e4m3_values(f.K) : c.K, V_want = fp8 ? e4m3_values(f.V) : c.V;
    auto check_layers = [&](const char* how) {
        INFO(how);
        const std::vector<float> O = model.O(), L = model.L();
        REQUIRE(O.size() == 3 * O_one.size());
        for (int l = 0; l < 3; ++l) {
            INFO("layer " << l);
            CHECK(std::memcmp(&O[l * O_one.size()], O_one.data(), O_one.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(&L[l * L_one.size()], L_one.data(), L_one.size() * sizeof(float)) == 0);
            CHECK(compare_cache(model.layer(l).K_stored(), K_want) == "");
            CHECK(compare_cache(model.layer(l).V_stored(), V_want) == "");
        }
    };
    CHECK(std::all_of(O_one.begin(), O_one.end(), [](float x) { return std::isfinite(x); }));
    CHECK(std::all_of(L_one.begin(), L_one.end(), [](float x) { return std::isfinite(x); }));
    const Stream stream;
    model.poison();
    model.enqueue(stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    check_layers("plain launches");
    const StreamGraph graph(stream, [&model](cudaStream_t st) { model.enqueue(st); });
    CHECK(graph.nodes() == 6);  // an append and a kernel per layer (kernels 5 and 6 merge in the kernel)
    for (int replay = 0; replay < 2; ++replay) {
        model.poison();
        graph.launch(stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    check_layers("the graph, second replay");
}

}  // namespace

TEST_CASE("model step on the GPU: three layers, plain launches and a CUDA graph agree bit for bit", "[gpu][chapter10][v5][v6]") {
    REQUIRE(have_sm80());
    check_model_step<__nv_bfloat16>(kTuned, 0);
    check_model_step<__half>(kTuned, 64);
    check_model_step<__nv_bfloat16>(kFp8, 0);
    check_model_step<__half>(kFp8, 16);
}
