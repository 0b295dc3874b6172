// Tests of chapter 7: FlashAttention-2 forward on tensor cores (fp16/bf16).
//
// [cpu]: the fragment layouts and the tc::swizzle (every index the kernels use, checked against an
// emulation of ldmatrix written from the PTX description), the bank-conflict counts the README
// claims, the CPU mirror against the float64 reference, the 2× rule itself, argument checks.
// [gpu]: the building blocks alone (one mma, fragment loads, S and P·V tiles), then every kernel
// variant on the course's shape grid in fp16 and bf16 against the 2× rule, every tile candidate
// of variant 6, writes past the end of O and L, and large inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../chapters/07_tensor_cores/building_blocks.h"
#include "../chapters/07_tensor_cores/chapter7.h"
#include "../common/tensor_core/layout.h"
#include "../common/attention.h"
#include "../common/attention_gpu.h"
#include "../common/device.h"
#include "../common/dtype.h"
#include "../common/random.h"
#include "../common/reference.h"
#include "support.h"

using namespace ch7;

namespace {

// ---- an emulation of ldmatrix, written from the PTX ISA description --------------------------
// Four 8×8 matrices of 16-bit elements; lane l supplies the address of row l % 8 of matrix l / 8
// (8 contiguous elements). Without .trans, register m of lane l receives elements
// (l / 4, 2(l % 4)) and (l / 4, 2(l % 4) + 1) of matrix m, the first in the low 16 bits; with
// .trans, elements (2(l % 4), l / 4) and (2(l % 4) + 1, l / 4).
struct Regs {
    std::uint32_t r[32][4];
};

Regs emulate_ldmatrix_x4(const std::vector<std::uint16_t>& smem, const int (&row_address)[32], bool trans) {
    Regs out{};
    for (int lane = 0; lane < 32; ++lane)
        for (int m = 0; m < 4; ++m) {
            auto element = [&](int row, int col) { return std::uint32_t(smem[row_address[8 * m + row] + col]); };
            const int g = lane / 4, t = lane % 4;
            const std::uint32_t lo = trans ? element(2 * t, g) : element(g, 2 * t);
            const std::uint32_t hi = trans ? element(2 * t + 1, g) : element(g, 2 * t + 1);
            out.r[lane][m] = lo | (hi << 16);
        }
    return out;
}

// A tile of `rows` × D whose element (r, c) holds the tag 1 + r·D + c, stored swizzled.
std::vector<std::uint16_t> tagged_swizzled_tile(int rows, int D) {
    std::vector<std::uint16_t> t(std::size_t(rows) * D);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < D; ++c) t[tc::swizzle(r, c, D)] = std::uint16_t(1 + r * D + c);
    return t;
}
std::uint16_t tag(int r, int c, int D) { return std::uint16_t(1 + r * D + c); }
std::uint16_t half_of(std::uint32_t reg, int e) { return std::uint16_t(e ? reg >> 16 : reg & 0xFFFF); }

// ---- bank conflicts ----------------------------------------------------------------------------
// Shared memory has 32 banks of 4 bytes. A request is served in as many wavefronts as the most
// distinct 4-byte words any one bank is asked for (the same word twice is a broadcast).
int ways(const std::vector<long>& byte_addresses, int bytes_each) {
    std::map<int, std::set<long>> words_per_bank;
    for (long a : byte_addresses)
        for (long w = a / 4; w < (a + bytes_each + 3) / 4; ++w) words_per_bank[int(w % 32)].insert(w);
    std::size_t worst = 0;
    for (const auto& b : words_per_bank) worst = std::max(worst, b.second.size());
    return int(worst);
}

// ---- GPU helpers -------------------------------------------------------------------------------
// The inputs of a 16-bit kernel: rounded to T, so that the float64 reference sees what it reads.
template <class T>
fa::AttnProblem rounded_problem(const fa::AttnShape& s, std::uint64_t seed, double magnitude = 1.0) {
    fa::AttnProblem p = fa::make_problem(s, seed, magnitude);
    fa::round_to<T>(p.Q);
    fa::round_to<T>(p.K);
    fa::round_to<T>(p.V);
    return p;
}

bool have_sm80() {
    return fa::cuda_device_count() > 0 && device_unsupported_reason(fa::device_info()).empty();
}

// The CPU mirror's errors on problem p (made from `seed`) with key tiles of B_c, computed once per
// (dtype, shape, seed, magnitude, B_c): each variant's test case asks for the same ones.
template <class T>
const MirrorErrors& mirror_of(const fa::AttnProblem& p, std::uint64_t seed, double magnitude, int Bc) {
    static std::map<std::tuple<std::string, std::uint64_t, double, int>, MirrorErrors> cache;
    const auto key = std::make_tuple(fa::dtype_name<T>() + std::string(" ") + p.shape.str(), seed, magnitude, Bc);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, mirror_errors<T>(p, Bc)).first;
    return it->second;
}

// Whether this GPU gives kernel (variant, D, candidate) the shared memory it needs (some D = 256
// kernels need more than the 99 KB of sm_86 and sm_89); the others are skipped, visibly.
bool fits_device(int variant, int D, int candidate) {
    const std::size_t need = std::size_t(smem_bytes(variant, D, candidate)), have = fa::smem_per_block_optin();
    if (need <= have) return true;
    WARN("skipped on this GPU: kernel " << variant_name(variant) << " candidate " << candidate << " at D = " << D
                                        << " needs " << need / 1024 << " KB of shared memory, the GPU gives "
                                        << have / 1024 << " KB");
    return false;
}

// Runs one variant on device inputs and returns the check of O and L (poisoned first).
template <class T>
fa::ForwardCheck run_and_check(int variant, int candidate, const fa::AttnProblem& p, fa::DeviceAttention<T>& d) {
    d.poison_outputs();
    forward<T>(variant, p.shape, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), candidate);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> O = d.O_host(), L = d.L_host();
    return fa::check_forward(p, O.data(), L.data());
}

// Checks kernels (variant, candidate) of one dtype on `shapes` with the 2× rule.
template <class T>
void check_rule_on(const std::vector<fa::AttnShape>& shapes, const std::vector<std::pair<int, int>>& kernels,
                   double magnitude = 1.0) {
    for (const fa::AttnShape& s : shapes) {
        const std::uint64_t seed = 7 + std::uint64_t(s.N);
        const fa::AttnProblem p = rounded_problem<T>(s, seed, magnitude);
        fa::DeviceAttention<T> d(p);
        for (auto [variant, candidate] : kernels) {
            if (!fits_device(variant, s.D, candidate)) continue;
            const MirrorErrors& mirror = mirror_of<T>(p, seed, magnitude, tiles(variant, s.D, candidate).Bc);
            const RuleVerdict v = low_precision_rule(run_and_check<T>(variant, candidate, p, d), mirror);
            INFO(fa::dtype_name<T>() << " " << s.str() << " magnitude " << magnitude << " kernel "
                                     << variant_name(variant) << " candidate " << candidate << "\n"
                                     << v.text);
            CHECK(v.ok);
        }
    }
}

// The emulator (the kernels' source run lane by lane on the CPU) on `shapes`, with the 2× rule.
template <class T>
void check_emulated_on(const std::vector<fa::AttnShape>& shapes, const std::vector<std::pair<int, int>>& kernels) {
    for (const fa::AttnShape& s : shapes) {
        const std::uint64_t seed = 5 + std::uint64_t(s.N);
        const fa::AttnProblem p = rounded_problem<T>(s, seed);
        const std::vector<T> Q = fa::convert_from_float<T>(p.Q), K = fa::convert_from_float<T>(p.K),
                             V = fa::convert_from_float<T>(p.V);
        for (auto [variant, candidate] : kernels) {
            const MirrorErrors& mirror = mirror_of<T>(p, seed, 1.0, tiles(variant, s.D, candidate).Bc);
            std::vector<T> O(s.elements(), fa::from_float<T>(NAN));  // poisoned
            std::vector<float> L(s.rows(), NAN);
            forward_emulated<T>(variant, s, Q.data(), K.data(), V.data(), O.data(), L.data(), candidate);
            const std::vector<float> Of = fa::convert_to_float(O);
            const RuleVerdict v = low_precision_rule(fa::check_forward(p, Of.data(), L.data()), mirror);
            INFO("emulated " << fa::dtype_name<T>() << " " << s.str() << " kernel " << variant_name(variant)
                             << " candidate " << candidate << "\n"
                             << v.text);
            CHECK(v.ok);
        }
    }
}

}  // namespace

// ================================ [cpu] ==========================================================

TEST_CASE("layout: the A and B and C fragments of mma.m16n8k16 cover their tiles exactly once", "[cpu][chapter7]") {
    int a[16][16] = {}, b[16][8] = {}, c[16][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 4; ++r)
            for (int e = 0; e < 2; ++e) ++a[tc::frag_a_row(lane, r)][tc::frag_a_col(lane, r, e)];
        for (int r = 0; r < 2; ++r)
            for (int e = 0; e < 2; ++e) ++b[tc::frag_b_row(lane, r, e)][tc::frag_b_col(lane)];
        for (int i = 0; i < 4; ++i) ++c[tc::frag_c_row(lane, i)][tc::frag_c_col(lane, i)];
    }
    for (int i = 0; i < 16; ++i) {
        for (int j = 0; j < 16; ++j) CHECK(a[i][j] == 1);
        for (int j = 0; j < 8; ++j) CHECK(b[i][j] == 1);
        for (int j = 0; j < 8; ++j) CHECK(c[i][j] == 1);
    }
}

TEST_CASE("layout: the S accumulators of n-tiles 2kk and 2kk+1 are exactly the A fragment of P·V", "[cpu][chapter7]") {
    // P stays in registers only if every lane already holds the P elements its A fragment needs.
    for (int lane = 0; lane < 32; ++lane)
        for (int r = 0; r < 4; ++r)
            for (int e = 0; e < 2; ++e) {
                const int i = tc::p_elem_of_a_reg(r, e);
                INFO("lane " << lane << " register " << r << " element " << e);
                CHECK(tc::frag_c_row(lane, i) == tc::frag_a_row(lane, r));
                CHECK(8 * tc::p_ntile_of_a_reg(r) + tc::frag_c_col(lane, i) == tc::frag_a_col(lane, r, e));
            }
}

TEST_CASE("swizzle: a bijection of each tile and the k-step identity the kernels use", "[cpu][chapter7]") {
    for (int D : head_dims()) {
        const int rows = 128;
        std::vector<int> hits(std::size_t(rows) * D, 0);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < D; ++c) {
                const int o = tc::swizzle(r, c, D);
                REQUIRE(o >= 0);
                REQUIRE(o < rows * D);
                ++hits[o];
                CHECK(o / D == r);              // a row stays in its row
                CHECK(o % 8 == c % 8);          // 16-byte chunks stay whole
            }
        CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
        for (int R0 = 0; R0 < rows; R0 += 8)
            for (int lr = 0; lr < 16; ++lr)
                for (int lc : {0, 8})
                    for (int kk = 0; kk < D / 16; ++kk) {
                        INFO("D " << D << " R0 " << R0 << " lr " << lr << " lc " << lc << " kk " << kk);
                        CHECK(tc::swizzle(R0 + lr, 16 * kk + lc, D) == R0 * D + tc::swizzled_offset(lr, lc, kk, D));
                        if (D % 64 == 0)
                            CHECK(tc::swizzle(R0 + lr, 16 * kk + lc, D) ==
                                  R0 * D + tc::swizzled_k_step(tc::swizzle(lr, lc, D), kk));
                    }
    }
}

TEST_CASE("ldmatrix emulated from the PTX description at the kernels' addresses gives every lane its fragment",
          "[cpu][chapter7]") {
    for (int D : head_dims()) {
        const std::vector<std::uint16_t> tile = tagged_swizzled_tile(32, D);
        for (int kk = 0; kk < D / 16; ++kk) {
            int addr[32];
            // Q: A fragment of rows 16..31, columns 16kk..
            for (int l = 0; l < 32; ++l) addr[l] = tc::ldsm_a_offset(l, 16, kk, D);
            const Regs q = emulate_ldmatrix_x4(tile, addr, false);
            // K: B fragments of keys 16..31 (nn = 1), d = 16kk..
            for (int l = 0; l < 32; ++l) addr[l] = tc::ldsm_k_offset(l, 1, kk, D);
            const Regs k = emulate_ldmatrix_x4(tile, addr, false);
            // V: B fragments of keys 16..31 (kk_keys = 1), d-tiles 2kk, 2kk+1
            for (int l = 0; l < 32; ++l) addr[l] = tc::ldsm_v_offset(l, 1, kk, D);
            const Regs v = emulate_ldmatrix_x4(tile, addr, true);
            for (int lane = 0; lane < 32; ++lane)
                for (int e = 0; e < 2; ++e) {
                    INFO("D " << D << " kk " << kk << " lane " << lane << " element " << e);
                    for (int r = 0; r < 4; ++r)
                        CHECK(half_of(q.r[lane][r], e) == tag(16 + tc::frag_a_row(lane, r), 16 * kk + tc::frag_a_col(lane, r, e), D));
                    for (int h = 0; h < 2; ++h)
                        for (int r = 0; r < 2; ++r) {
                            CHECK(half_of(k.r[lane][2 * h + r], e) ==
                                  tag(16 + 8 * h + tc::frag_b_col(lane), 16 * kk + tc::frag_b_row(lane, r, e), D));
                            CHECK(half_of(v.r[lane][2 * h + r], e) ==
                                  tag(16 + tc::frag_b_row(lane, r, e), 16 * kk + 8 * h + tc::frag_b_col(lane), D));
                        }
                }
        }
    }
}

TEST_CASE("bank conflicts: the counts the README gives", "[cpu][chapter7]") {
    for (int D : head_dims()) {
        INFO("D " << D);
        // ldmatrix: each 8×8 matrix is one request of 8 rows × 16 bytes
        int worst_swizzled = 0, worst_plain = 0;
        for (int lane0 = 0; lane0 < 32; lane0 += 8)
            for (int kk = 0; kk < D / 16; ++kk) {
                std::vector<long> swz, plain;
                for (int l = lane0; l < lane0 + 8; ++l) {
                    swz.push_back(2L * tc::ldsm_k_offset(l, 0, kk, D));
                    plain.push_back(2L * tc::row_major(tc::ldsm_k_row(l), 16 * kk + tc::ldsm_k_col(l), D));
                }
                worst_swizzled = std::max(worst_swizzled, ways(swz, 16));
                worst_plain = std::max(worst_plain, ways(plain, 16));
            }
        CHECK(worst_swizzled == 1);
        CHECK(worst_plain == (D % 64 == 0 ? 8 : 4));  // rows of 64 or 192 bytes: two bank halves
        if (D % 64 != 0) continue;  // the step-2 counts below are the README's, for whole atoms
        // step 2: one 32-bit load per lane for an A (or K) register, row-major tile
        std::vector<long> a_loads, v_loads;
        for (int l = 0; l < 32; ++l) {
            a_loads.push_back(2L * tc::row_major(tc::frag_a_row(l, 0), tc::frag_a_col(l, 0, 0), D));
            v_loads.push_back(2L * tc::row_major(tc::frag_b_row(l, 0, 0), tc::frag_b_col(l), D));  // one 16-bit half of V's pair
        }
        CHECK(ways(a_loads, 4) == 8);
        CHECK(ways(v_loads, 2) == 4);
    }
    // load_tile: 16-byte stores of a quarter warp (8 consecutive threads), in the parts of
    // tc::load_tile_columns: a power of two of columns at most min(D − col0, threads), C chunks a
    // row, thread x at row x / C, column col0 + 8·(x % C)
    for (int threads : {128, 256})
        for (int D : head_dims())
            for (int col0 = 0; col0 < D;) {
                int cols = 1;
                while (2 * cols <= std::min(D - col0, threads)) cols *= 2;
                const int C = cols / 8;
                for (int x0 = 0; x0 < threads; x0 += 8) {
                    std::vector<long> stores;
                    for (int x = x0; x < x0 + 8; ++x) stores.push_back(2L * tc::swizzle(x / C, col0 + 8 * (x % C), D));
                    INFO("D " << D << " threads " << threads << " columns " << col0 << ".. threads " << x0 << "..");
                    CHECK(ways(stores, 16) == 1);
                }
                col0 += cols;
            }
}

TEST_CASE("tile candidates: legal shapes and the defaults are among them", "[cpu][chapter7]") {
    for (int D : head_dims()) {
        const std::vector<TileConfig> c = tuning_candidates(D);
        REQUIRE(!c.empty());
        for (const TileConfig& t : c) {
            INFO(t.str());
            CHECK(t.Br() % 16 == 0);
            CHECK(t.Bc % 16 == 0);
            CHECK(t.stages >= 2);
            const int smem = 2 * (t.Br() * D + t.stages * 2 * t.Bc * D);
            CHECK(smem <= 227 * 1024);  // H100 opt-in limit
            if (D != 64 && D != 128) CHECK(smem <= 163 * 1024);  // the new head dims: A100's too
        }
        const TileConfig def = tiles(kTuned, D), chosen = c.at(std::size_t(tuned_candidate(D)));
        CHECK(def.str() == chosen.str());
        for (int v = kFirstVariant; v < kTuned; ++v) {
            CHECK(tiles(v, D).Bc == (v == kWmma && D == 256 ? 32 : 64));
            CHECK(smem_bytes(v, D) <= 163 * 1024);  // the ladder runs on an A100 at every D
        }
    }
    CHECK(tuning_candidates(80).empty());
}

TEST_CASE("unsupported shapes and kernels and devices get one clear reason", "[cpu][chapter7]") {
    const fa::AttnShape ok = fa::make_shape(1, 2, 100, 64, true);
    CHECK(unsupported_reason(kTuned, ok).empty());
    CHECK(unsupported_reason(kWmma, fa::make_shape(1, 1, 1, 128, false)).empty());
    for (int D : {32, 96, 256}) CHECK(unsupported_reason(kTuned, fa::make_shape(1, 1, 64, D, false)).empty());
    CHECK_THAT(unsupported_reason(kTuned, fa::make_shape(1, 1, 64, 80, false)), Catch::Contains("head dim 80"));
    CHECK_THAT(unsupported_reason(kWmma, fa::make_shape(1, 1, 64, 16, false)),
               Catch::Contains("D = 32, 64, 96, 128, 256"));
    CHECK_THAT(unsupported_reason(7, ok), Catch::Contains("does not exist"));
    CHECK_THAT(unsupported_reason(0, ok), Catch::Contains("does not exist"));
    CHECK_THAT(unsupported_reason(kTuned, ok, 99), Catch::Contains("candidates"));
    CHECK_THAT(unsupported_reason(kLdmatrix, ok, 0), Catch::Contains("only kernel 6"));
    CHECK(unsupported_reason(kTuned, ok, 0).empty());
    fa::DeviceInfo turing;
    turing.name = "T4", turing.cc_major = 7, turing.cc_minor = 5;
    CHECK_THAT(device_unsupported_reason(turing), Catch::Contains("8.0"));
    fa::DeviceInfo hopper;
    hopper.name = "H100", hopper.cc_major = 9, hopper.cc_minor = 0;
    CHECK(device_unsupported_reason(hopper).empty());
}

TEST_CASE("CPU mirror without rounding equals the float64 reference (tiles and masks and online softmax)",
          "[cpu][chapter7]") {
    for (bool causal : {false, true})
        for (int D : {64, 128})
            for (int N : {1, 17, 113, 200})
                for (int Bc : {16, 32, 64, 128}) {
                    const fa::AttnShape s = fa::make_shape(1, 2, N, D, causal);
                    const fa::AttnProblem p = fa::make_problem(s, 3);
                    std::vector<float> O(s.elements()), L(s.rows());
                    for (std::size_t bh = 0; bh < s.heads_total(); ++bh)
                        for (int i0 = 0; i0 < N; i0 += 64) {  // blocks of B_r = 64 rows, the last one short
                            const std::size_t r = bh * N + i0;
                            mirror_rows<float>(s, p.Q.data(), p.K.data(), p.V.data(), bh, i0, std::min(N, i0 + 64),
                                               Bc, &O[r * D], &L[r]);
                        }
                    INFO(s.str() << " B_c " << Bc);
                    const fa::ForwardCheck c = fa::check_forward(p, O.data(), L.data());
                    CHECK_ACCURATE(c.O, 1e-5);
                    CHECK_ACCURATE(c.L, 1e-5);
                }
}

TEST_CASE("CPU mirror in 16 bits: the error of the 16-bit roundings and not of a bug", "[cpu][chapter7]") {
    for (bool causal : {false, true}) {
        const fa::AttnShape s = fa::make_shape(1, 2, 300, 64, causal);
        const fa::AttnProblem p32 = fa::make_problem(s, 5);
        const MirrorErrors e32 = mirror_errors<float>(p32, 64);
        fa::AttnProblem p16 = p32;
        fa::round_to<__half>(p16.Q), fa::round_to<__half>(p16.K), fa::round_to<__half>(p16.V);
        const MirrorErrors e16 = mirror_errors<__half>(p16, 64);
        fa::AttnProblem pb = p32;
        fa::round_to<__nv_bfloat16>(pb.Q), fa::round_to<__nv_bfloat16>(pb.K), fa::round_to<__nv_bfloat16>(pb.V);
        const MirrorErrors eb = mirror_errors<__nv_bfloat16>(pb, 64);
        INFO(e32.check.O.text() << e16.check.O.text() << eb.check.O.text());
        CHECK(e32.check.O.rel_l2 < 1e-6);
        CHECK(e16.check.O.rel_l2 > 10 * e32.check.O.rel_l2);  // rounding P and O shows
        CHECK(eb.check.O.rel_l2 > 4 * e16.check.O.rel_l2);   // bf16 has 3 fewer mantissa bits
        CHECK(e16.check.O.rel_l2 < 2 * unit_roundoff<__half>());  // about one rounding, not more
        CHECK(eb.check.O.rel_l2 < 2 * unit_roundoff<__nv_bfloat16>());
        double max_v = 0;
        for (float x : p16.V) max_v = std::max(max_v, double(std::fabs(x)));
        CHECK(e16.floor_O == std::ldexp(max_v, -20));  // far below one 16-bit rounding of O
        CHECK(e16.floor_O < 0.05 * e16.check.O.max_abs);
        CHECK(e16.floor_rel_L == 64 * std::ldexp(1.0, -22));
    }
}

// ---- queries and keys of different lengths, grouped heads --------------------------------------

TEST_CASE("shape: the causal diagonal bottom-right when N != N_k, hand-checked", "[cpu][chapter7]") {
    // N = 3 queries, N_k = 5 keys: row i sees keys 0..i + 2
    //        keys 0 1 2 3 4
    //   row 0     x x x . .
    //   row 1     x x x x .
    //   row 2     x x x x x
    const fa::AttnShape wide = fa::with_kv(fa::make_shape(1, 1, 3, 64, true), 5, 0);
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j) CHECK(wide.visible(i, j) == (j <= i + 2));
    CHECK(wide.rows_without_keys() == 0);
    // N = 5 queries, N_k = 3 keys: row i sees keys 0..i − 2; rows 0 and 1 see none
    //        keys 0 1 2
    //   row 0     . . .
    //   row 1     . . .
    //   row 2     x . .
    //   row 3     x x .
    //   row 4     x x x
    const fa::AttnShape tall = fa::with_kv(fa::make_shape(1, 1, 5, 64, true), 3, 0);
    for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 3; ++j) CHECK(tall.visible(i, j) == (j <= i - 2));
    CHECK(tall.rows_without_keys() == 2);
    CHECK(fa::with_kv(tall, 3, 0).str() == "B=1 H=1 N=5 D=64 causal N_k=3");
    // FLOPs: the visible area with the diagonal's cells at half: N = N_k keeps FlashAttention's N²/2
    CHECK(fa::make_shape(1, 1, 8, 64, true).pairs() == 32.0);
    CHECK(wide.pairs() == 3.0 * (10 - 3) / 2);  // 12 visible cells, 3 of them on the diagonal
    CHECK(tall.pairs() == 3.0 * (6 - 3) / 2);   // 6 visible cells, 3 on the diagonal
    CHECK(fa::with_kv(fa::make_shape(2, 4, 113, 64, false), 203, 1).flops_forward() == 4.0 * 8 * 113 * 203 * 64);
    // grouped heads: query head h of batch b reads K/V head b·H_kv + h / (H / H_kv)
    const fa::AttnShape gqa = fa::with_kv(fa::make_shape(2, 8, 4, 64, false), 0, 2);
    CHECK(gqa.group() == 4);
    CHECK(gqa.kv_head_of(3) == 0);
    CHECK(gqa.kv_head_of(4) == 1);
    CHECK(gqa.kv_head_of(8 + 5) == 3);
    CHECK(gqa.kv_elements() == 2u * 2 * 4 * 64);
    CHECK(fa::kv_shape_error(gqa).empty());
    CHECK_THAT(fa::kv_shape_error(fa::with_kv(gqa, 0, 3)), Catch::Contains("does not divide"));
    CHECK_THAT(unsupported_reason(kTuned, fa::with_kv(gqa, 0, 3)), Catch::Contains("does not divide"));
    CHECK_THAT(unsupported_reason(kWmma, fa::with_kv(gqa, 5, 0)), Catch::Contains("kernel 1"));
    CHECK(unsupported_reason(kMmaSync, fa::with_kv(gqa, 5, 1)).empty());
}

TEST_CASE("reference: N < N_k is the last N rows of a square problem, and a row that sees no key gives O = 0, "
          "L = -inf", "[cpu][chapter7]") {
    // bottom-right alignment: the N queries of (N, N_k) are the last N of a square problem of N_k
    const fa::AttnShape square = fa::make_shape(1, 1, 9, 64, true), cross = fa::with_kv(fa::make_shape(1, 1, 4, 64, true), 9, 0);
    const fa::AttnProblem ps = fa::make_problem(square, 2);
    fa::AttnProblem pc = ps;
    pc.shape = cross;
    pc.Q.assign(ps.Q.end() - 4 * 64, ps.Q.end());
    std::vector<double> Os(9 * 64), Ls(9), Oc(4 * 64), Lc(4);
    fa::attention_forward_reference(square, ps.Q.data(), ps.K.data(), ps.V.data(), Os.data(), Ls.data());
    fa::attention_forward_reference(cross, pc.Q.data(), pc.K.data(), pc.V.data(), Oc.data(), Lc.data());
    for (int i = 0; i < 4; ++i) {
        CHECK(Lc[i] == Ls[5 + i]);
        for (int d = 0; d < 64; ++d) CHECK(Oc[i * 64 + d] == Os[(5 + i) * 64 + d]);
    }
    // N > N_k: the first N − N_k rows see no key; the check accepts exactly O = 0 and L = −inf there
    const fa::AttnShape tall = fa::with_kv(fa::make_shape(1, 2, 6, 64, true), 2, 1);
    const fa::AttnProblem pt = fa::make_problem(tall, 4);
    std::vector<double> O(tall.elements()), L(tall.rows());
    fa::attention_forward_reference(tall, pt.Q.data(), pt.K.data(), pt.V.data(), O.data(), L.data());
    std::vector<float> Of(O.begin(), O.end()), Lf(L.begin(), L.end());
    for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 6; ++i) {
            CHECK(std::isinf(L[h * 6 + i]) == (i < 4));
            CHECK((O[(h * 6 + i) * 64] == 0.0) == (i < 4));
        }
    CHECK(fa::check_forward(pt, Of.data(), Lf.data()).ok());
    for (float bad : {0.0f, NAN, INFINITY}) {
        std::vector<float> Lb = Lf;
        Lb[6 + 1] = bad;  // head 1, row 1: sees no key
        INFO("L = " << bad);
        CHECK_FALSE(fa::check_forward(pt, Of.data(), Lb.data()).ok());
    }
    std::vector<float> Lb = Lf;
    Lb[5] = -INFINITY;  // row 5 sees both keys: −inf is wrong there
    CHECK_FALSE(fa::check_forward(pt, Of.data(), Lb.data()).ok());
}

TEST_CASE("reference: grouped-query attention equals attention with K/V heads repeated", "[cpu][chapter7]") {
    for (bool causal : {false, true}) {
        const fa::AttnShape gqa = fa::with_kv(fa::make_shape(2, 4, 7, 32, causal), 11, 2);
        const fa::AttnProblem p = fa::make_problem(gqa, 6);
        fa::AttnProblem rep = p;
        rep.shape = fa::with_kv(gqa, 11, 0);
        rep.K.clear(), rep.V.clear();
        for (std::size_t bh = 0; bh < gqa.heads_total(); ++bh) {  // K/V head of each query head, in order
            const std::size_t at = fa::kv_offset(gqa, gqa.kv_head_of(bh)), n = std::size_t(11 * 32);
            rep.K.insert(rep.K.end(), p.K.begin() + at, p.K.begin() + at + n);
            rep.V.insert(rep.V.end(), p.V.begin() + at, p.V.begin() + at + n);
        }
        std::vector<double> O(gqa.elements()), L(gqa.rows()), Or(gqa.elements()), Lr(gqa.rows());
        fa::attention_forward_reference(gqa, p.Q.data(), p.K.data(), p.V.data(), O.data(), L.data());
        fa::attention_forward_reference(rep.shape, rep.Q.data(), rep.K.data(), rep.V.data(), Or.data(), Lr.data());
        CHECK(O == Or);
        CHECK(L == Lr);
    }
}

TEST_CASE("CPU mirror without rounding equals the float64 reference when N != N_k and with grouped heads",
          "[cpu][chapter7]") {
    for (bool causal : {false, true})
        for (auto [N, N_k] : std::vector<std::pair<int, int>>{{113, 203}, {97, 1}, {200, 77}, {1, 97}})
            for (int Bc : {16, 64}) {
                const fa::AttnShape s = fa::with_kv(fa::make_shape(1, 4, N, 64, causal), N_k, 2);
                const fa::AttnProblem p = fa::make_problem(s, 3);
                std::vector<float> O(s.elements()), L(s.rows());
                for (std::size_t bh = 0; bh < s.heads_total(); ++bh)
                    for (int i0 = 0; i0 < N; i0 += 64) {
                        const std::size_t r = bh * N + i0;
                        mirror_rows<float>(s, p.Q.data(), p.K.data(), p.V.data(), bh, i0, std::min(N, i0 + 64), Bc,
                                           &O[r * 64], &L[r]);
                    }
                INFO(s.str() << " B_c " << Bc);
                const fa::ForwardCheck c = fa::check_forward(p, O.data(), L.data());
                CHECK_ACCURATE(c.O, 1e-5);
                CHECK_ACCURATE(c.L, 1e-5);
            }
}

TEST_CASE("the 2x rule: passes within twice the mirror's error and fails beyond it and never passes NaN", "[cpu][chapter7]") {
    auto validation = [](double max_abs, double rel_l2, std::size_t nonfinite = 0) {
        fa::Validation v;
        v.count = 100;
        v.max_abs = max_abs;
        v.rel_l2 = rel_l2;
        v.nonfinite = nonfinite;
        return v;
    };
    MirrorErrors m;
    m.check.O = validation(1e-3, 1e-4);
    m.check.L = validation(1e-6, 1e-7);
    m.floor_O = 1e-5, m.floor_L = 1e-7, m.floor_rel = 1e-6, m.floor_rel_L = 1e-8;
    fa::ForwardCheck k;
    k.O = validation(1.5e-3, 1.5e-4);
    k.L = validation(1.5e-6, 1.5e-7);
    CHECK(low_precision_rule(k, m).ok);
    k.O = validation(2.5e-3, 1.5e-4);
    CHECK_FALSE(low_precision_rule(k, m).ok);  // max abs beyond 2×
    k.O = validation(1.5e-3, 2.5e-4);
    CHECK_FALSE(low_precision_rule(k, m).ok);  // rel L2 beyond 2×
    k.O = validation(1.5e-3, 1.5e-4);
    k.L = validation(3e-6, 1.5e-7);
    CHECK_FALSE(low_precision_rule(k, m).ok);  // L counts too
    k.L = validation(INFINITY, INFINITY, 1);
    CHECK_FALSE(low_precision_rule(k, m).ok);
    k.L = validation(1.5e-6, 1.5e-7);
    k.O = validation(0, 0, 3);  // non-finite elements whatever the statistics say
    CHECK_FALSE(low_precision_rule(k, m).ok);
    CHECK(rule_tolerance(m).atol == Approx(2e-3 + 1e-5));
}

TEST_CASE("emulated kernels: every tile candidate of variant 6 passes the 2x rule", "[cpu][chapter7][v6]") {
    for (int D : head_dims()) {
        std::vector<std::pair<int, int>> kernels;
        for (int c = 0; c < int(tuning_candidates(D).size()); ++c) kernels.push_back({kTuned, c});
        check_emulated_on<__nv_bfloat16>({fa::make_shape(1, 1, 150, D, true)}, kernels);
    }
}

TEST_CASE("emulated kernels: N != N_k with the diagonal bottom-right, grouped heads, rows that see no key",
          "[cpu][chapter7][v6]") {
    // a few small shapes (the emulator is slow); cross_grid's full list runs on a GPU
    // 299 rows see no key: whole blocks (B_r ≤ 128) run no key tile at all, others a few rows
    const fa::AttnShape no_keys = fa::with_kv(fa::make_shape(1, 2, 300, 64, true), 1, 1);
    check_emulated_on<__nv_bfloat16>({no_keys, fa::with_kv(fa::make_shape(1, 2, 113, 64, true), 203, 1),
                                      fa::with_kv(fa::make_shape(1, 4, 1, 128, true), 97, 1)},
                                     {{kTuned, -1}});
    check_emulated_on<__half>({no_keys}, {{kMmaSync, -1}});  // the natural-exp softmax of steps 2–4
}

// ================================ [gpu] ==========================================================

TEST_CASE("building block: one mma.sync m16n8k16 tile equals A·B", "[gpu][chapter7][v2][v3][v4][v5][v6]") {
    REQUIRE(have_sm80());
    const std::vector<float> A = fa::random_normal(16 * 16, 1, 0.3, 1.0), B = fa::random_normal(16 * 8, 2, -0.2, 1.0);
    auto check = [&](auto tag_value, const char* name) {
        using T = decltype(tag_value);
        std::vector<float> a = A, b = B;
        fa::round_to<T>(a), fa::round_to<T>(b);
        const std::vector<float> C = blocks::mma_tile<T>(A, B);
        std::vector<double> want(16 * 8, 0.0);
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 8; ++j)
                for (int k = 0; k < 16; ++k) want[i * 8 + j] += double(a[i * 16 + k]) * b[k * 8 + j];
        INFO(name);
        CHECK_VALID(fa::validate("C", C.data(), want.data(), C.size(), {1e-5, 1e-5}, fa::contiguous(1, 16, 8)));
    };
    check(__half{}, "fp16");
    check(__nv_bfloat16{}, "bf16");
}

TEST_CASE("building block: fragment loads from shared memory (step 2 pairs and step 3 ldmatrix)", "[gpu][chapter7][v2][v3][v4][v5][v6]") {
    REQUIRE(have_sm80());
    for (int step : {2, 3})
        for (int D : {64, 128}) {
            std::vector<std::uint16_t> tile(16 * std::size_t(D));
            for (int r = 0; r < 16; ++r)
                for (int c = 0; c < D; ++c) tile[r * D + c] = tag(r, c, D);
            const int valid = 11;  // rows 11..15 must arrive as zeros
            auto want = [&](int r, int c) { return r < valid ? tag(r, c, D) : std::uint16_t(0); };
            const int kk_step = fa::test::small_shapes() ? D / 16 - 1 : 1;  // sanitizer: first and last k-step
            for (int kk = 0; kk < D / 16; kk += kk_step) {
                const std::vector<std::uint32_t> q = blocks::fragment_registers(step, D, blocks::Operand::kQ, kk, tile, valid);
                const std::vector<std::uint32_t> k = blocks::fragment_registers(step, D, blocks::Operand::kK, kk, tile, valid);
                const std::vector<std::uint32_t> v = blocks::fragment_registers(step, D, blocks::Operand::kV, kk, tile, valid);
                for (int lane = 0; lane < 32; ++lane)
                    for (int e = 0; e < 2; ++e) {
                        INFO("step " << step << " D " << D << " kk " << kk << " lane " << lane << " element " << e);
                        for (int r = 0; r < 4; ++r)
                            CHECK(half_of(q[4 * lane + r], e) == want(tc::frag_a_row(lane, r), 16 * kk + tc::frag_a_col(lane, r, e)));
                        for (int h = 0; h < 2; ++h)
                            for (int r = 0; r < 2; ++r) {
                                CHECK(half_of(k[4 * lane + 2 * h + r], e) ==
                                      want(8 * h + tc::frag_b_col(lane), 16 * kk + tc::frag_b_row(lane, r, e)));
                                CHECK(half_of(v[4 * lane + 2 * h + r], e) ==
                                      want(tc::frag_b_row(lane, r, e), 16 * kk + 8 * h + tc::frag_b_col(lane)));
                            }
                    }
            }
        }
}

TEST_CASE("building block: S = Q·Kᵀ and O = P·V warp tiles", "[gpu][chapter7][v2][v3][v4][v5][v6]") {
    REQUIRE(have_sm80());
    auto run = [](auto tag_value, int step, int D) {
        using T = decltype(tag_value);
        std::vector<float> Q = fa::random_normal(16 * std::size_t(D), 11, 0.5, 1.0);
        std::vector<float> K = fa::random_normal(16 * std::size_t(D), 12, 0.5, 1.0);
        std::vector<float> V = fa::random_normal(16 * std::size_t(D), 13, 0.5, 1.0);
        std::vector<float> P = fa::random_uniform(16 * 16, 14, 0.0, 1.0);
        fa::round_to<T>(Q), fa::round_to<T>(K), fa::round_to<T>(V);
        std::vector<float> Pr = P;
        fa::round_to<T>(Pr);  // pack_p rounds P to T
        const std::vector<float> S = blocks::tile_scores<T>(step, D, Q, K);
        const std::vector<float> O = blocks::tile_pv<T>(step, D, P, V);
        std::vector<double> wantS(16 * 16, 0.0), wantO(16 * std::size_t(D), 0.0);
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 16; ++j)
                for (int d = 0; d < D; ++d) wantS[i * 16 + j] += double(Q[i * D + d]) * K[j * D + d];
        for (int i = 0; i < 16; ++i)
            for (int d = 0; d < D; ++d)
                for (int j = 0; j < 16; ++j) wantO[i * D + d] += double(Pr[i * 16 + j]) * V[j * D + d];
        INFO(fa::dtype_name<T>() << " step " << step << " D " << D);
        CHECK_VALID(fa::validate("S", S.data(), wantS.data(), S.size(), {1e-4, 1e-5}, fa::contiguous(1, 16, 16)));
        CHECK_VALID(fa::validate("O", O.data(), wantO.data(), O.size(), {1e-5, 1e-5}, fa::contiguous(1, 16, D)));
    };
    for (int step : {2, 3})
        for (int D : {64, 128}) {
            run(__half{}, step, D);
            run(__nv_bfloat16{}, step, D);
        }
}

TEST_CASE("every tile candidate of variant 6 passes the 2x rule", "[gpu][chapter7][v6]") {
    REQUIRE(have_sm80());
    const std::vector<int> Ns = fa::test::small_shapes() ? std::vector<int>{1, 113} : std::vector<int>{1, 300, 1023};
    for (int D : head_dims()) {
        std::vector<std::pair<int, int>> kernels;
        for (int c = 0; c < int(tuning_candidates(D).size()); ++c) kernels.push_back({kTuned, c});
        std::vector<fa::AttnShape> shapes;
        for (bool causal : {false, true})
            for (int N : Ns) shapes.push_back(fa::make_shape(1, 2, N, D, causal));
        check_rule_on<__nv_bfloat16>(shapes, kernels);
        check_rule_on<__half>({fa::make_shape(2, 1, Ns.back(), D, true)}, kernels);
    }
}

TEST_CASE("mma.sync peak: a finite, positive rate for both dtypes", "[gpu][chapter7]") {
    REQUIRE(have_sm80());
    // A failed launch throws, and a kernel that does no work times at ~0 ms (an infinite rate); the
    // rate itself is a measurement (README, "How far mma.sync can go"), so no number is checked.
    for (double tflops : {mma_sync_tflops<__half>(3), mma_sync_tflops<__nv_bfloat16>(3)}) {
        CHECK(std::isfinite(tflops));
        CHECK(tflops > 0.0);
    }
}

// ================================ one kernel: [vK] ================================================
// Each variant's own tests, tagged [vK], so that `make test-chapter7 VARIANT=K` reruns only the
// kernel a student edited: on the CPU emulator, and with a GPU on the GPU. The whole run checks
// every kernel on the grid in one test case, each shape's inputs made once ("every variant on the
// shape grid ..."); the per-kernel grid test is hidden ([.]) from it, and runs when selected by
// its tag or name.

namespace {

// The emulated kernel on tails, causal and not, every head dim, bf16 and fp16: D = 64 and 128 on
// N = 1, 77, 160; D = 32, 96 and 256 on the odd N = 17 (one key tile) and 113 (several).
void emulated_variant(int variant) {
    std::vector<fa::AttnShape> shapes;
    for (bool causal : {false, true})
        for (int D : head_dims())
            for (int N : D == 64 || D == 128 ? std::vector<int>{1, 77, 160} : std::vector<int>{17, 113})
                shapes.push_back(fa::make_shape(1, 1, N, D, causal));
    check_emulated_on<__nv_bfloat16>(shapes, {{variant, -1}});
    check_emulated_on<__half>({fa::make_shape(2, 1, 77, 64, true), fa::make_shape(1, 2, 77, 128, false),
                               fa::make_shape(1, 1, 113, 32, true), fa::make_shape(1, 1, 113, 96, false),
                               fa::make_shape(1, 1, 113, 256, true)},
                              {{variant, -1}});
}

// Kernels on the course's shape grid in fp16 and bf16, and with large scores (magnitude 4: scores
// reach several hundred, e^S alone overflows fp32, and P in fp16). Shapes outside, kernels inside:
// each shape's inputs are made once for all the kernels asked for.
void gpu_grid(const std::vector<std::pair<int, int>>& kernels) {
    check_rule_on<__half>(fa::test::shape_grid(head_dims()), kernels);
    check_rule_on<__nv_bfloat16>(fa::test::shape_grid(head_dims()), kernels);
    std::vector<fa::AttnShape> large;
    for (bool causal : {false, true})
        for (int D : head_dims()) large.push_back(fa::make_shape(1, 2, 257, D, causal));
    check_rule_on<__half>(large, kernels, 4.0);
}

// The kernel writes every element of O and L and nothing past their ends.
void bounds_variant(int variant) {
    for (int D : head_dims()) {
        if (!fits_device(variant, D, -1)) continue;
        const fa::AttnShape s = fa::make_shape(1, 2, 17, D, true);
        const fa::AttnProblem p = rounded_problem<__nv_bfloat16>(s, 9);
        fa::DeviceAttention<__nv_bfloat16> d(p);
        const std::size_t pad = 4096;  // a whole block of rows past the end
        fa::DeviceBuffer<__nv_bfloat16> O(s.elements() + pad);
        fa::DeviceBuffer<float> L(s.rows() + pad);
        O.poison(), L.poison();
        forward<__nv_bfloat16>(variant, s, d.Q.get(), d.K.get(), d.V.get(), O.get(), L.get());
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<__nv_bfloat16> o = O.download();
        const std::vector<float> l = L.download();
        INFO("D " << D << " kernel " << variant_name(variant));
        bool untouched = true;
        for (std::size_t i = s.elements(); i < o.size(); ++i) untouched &= std::isnan(fa::to_float(o[i]));
        for (std::size_t i = s.rows(); i < l.size(); ++i) untouched &= std::isnan(l[i]);
        CHECK(untouched);
        bool written = true;
        for (std::size_t i = 0; i < s.elements(); ++i) written &= std::isfinite(fa::to_float(o[i]));
        for (std::size_t i = 0; i < s.rows(); ++i) written &= std::isfinite(l[i]);
        CHECK(written);
    }
}

}  // namespace

#define CHAPTER7_VARIANT_TESTS(K)                                                                        \
    TEST_CASE("kernel " #K " emulated: the 2x rule on tails, causal and not, every head dim",          \
              "[cpu][chapter7][v" #K "]") {                                                            \
        emulated_variant(K);                                                                           \
    }                                                                                                  \
    TEST_CASE("kernel " #K " on the shape grid and with large scores: error at most 2x the mirror's",  \
              "[.][gpu][chapter7][v" #K "]") {                                                         \
        REQUIRE(have_sm80());                                                                          \
        gpu_grid({{K, -1}});                                                                           \
    }                                                                                                  \
    TEST_CASE("kernel " #K " writes all of O and L and nothing past their ends", "[gpu][chapter7][v" #K "]") { \
        REQUIRE(have_sm80());                                                                          \
        bounds_variant(K);                                                                             \
    }

CHAPTER7_VARIANT_TESTS(1)
CHAPTER7_VARIANT_TESTS(2)
CHAPTER7_VARIANT_TESTS(3)
CHAPTER7_VARIANT_TESTS(4)
CHAPTER7_VARIANT_TESTS(5)
CHAPTER7_VARIANT_TESTS(6)
static_assert(kFirstVariant == 1 && kLastVariant == 6, "one CHAPTER7_VARIANT_TESTS line per variant");

TEST_CASE("every variant on the shape grid and with large scores: error at most 2x the mirror's", "[gpu][chapter7]") {
    REQUIRE(have_sm80());
    std::vector<std::pair<int, int>> kernels;
    for (int v = kFirstVariant; v <= kLastVariant; ++v) kernels.push_back({v, -1});
    gpu_grid(kernels);
}

TEST_CASE("N != N_k and grouped heads on FlashAttention-2's shapes: error at most 2x the mirror's", "[gpu][chapter7]") {
    REQUIRE(have_sm80());
    std::vector<std::pair<int, int>> ladder;
    for (int v = kMmaSync; v < kTuned; ++v) ladder.push_back({v, -1});
    check_rule_on<__nv_bfloat16>(fa::test::cross_grid(), {{kTuned, -1}});
    check_rule_on<__half>(fa::test::cross_grid({64}), ladder);
}
