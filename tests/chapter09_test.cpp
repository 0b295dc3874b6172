// Tests of chapter 9: the FlashAttention forward on Hopper (wgmma, TMA, warp specialization).
//
// [cpu]: the 128-byte swizzle, the wgmma matrix descriptors read back through a model of wgmma's
// canonical layouts written from the PTX ISA (every element each k-step reads is the one the kernel
// means), the TMA box, the causal tile plan and masks against brute force, the mbarrier ring
// (stages and phase parities) under random producer/consumer interleavings, the register and
// shared-memory budgets, argument and device checks, and the CPU mirror at the kernels' B_c.
// [gpu]: every step on N ∈ {1, 17, 113, 1023, 4097, 16384}, causal and not, D = 64 and 128, fp16
// and bf16, B·H > 1, large scores, against the float64 reference with the 2× rule (chapter 7's);
// outputs poisoned; nothing written past O and L. They need compute capability 9.0.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../chapters/07_tensor_cores/chapter7.h"
#include "../chapters/09_hopper/building_blocks.h"
#include "../chapters/09_hopper/chapter9.h"
#include "../common/attention.h"
#include "../common/attention_gpu.h"
#include "../common/device.h"
#include "../common/dtype.h"
#include "../common/reference.h"
#include "support.h"

using namespace ch9;

namespace {

// ---- a model of wgmma's shared-memory operand layouts (PTX ISA, "Shared Memory Matrix Layout") ----
// A descriptor gives a start address, a leading and a stride byte offset and a swizzle mode. With
// the 128-byte swizzle, the unswizzled byte address of an element is formed as below and then bits
// 4–6 are XORed with bits 7–9 (the swizzle acts on the address, so tiles start on 1024 bytes).
struct Decoded {
    std::uint32_t start, leading, stride;
    int mode;
};
Decoded decode(std::uint64_t desc) {
    return {std::uint32_t(desc & 0x3FFF) << 4, std::uint32_t((desc >> 16) & 0x3FFF) << 4,
            std::uint32_t((desc >> 32) & 0x3FFF) << 4, int(desc >> 62)};
}
std::uint32_t swizzle_address(std::uint32_t a, int mode) {
    REQUIRE(mode == 1);  // the only mode the model knows: anything else is a wrong descriptor
    return a ^ (((a >> 7) & 7) << 4);
}
// K-major operand: element (row, k) of the 64 (or N) × 16 slice one wgmma reads; rows in 8-row
// groups `stride` bytes apart, each row 128 bytes, k contiguous (16 × 2 bytes within a row).
std::uint32_t k_major_address(const Decoded& d, int row, int k) {
    return swizzle_address(d.start + (row / 8) * d.stride + (row % 8) * 128 + k * 2, d.mode);
}
// MN-major operand (transposed): element (k, n) of the 16 × N slice; n contiguous in 64-element
// (128-byte) chunks `leading` bytes apart, k rows 128 bytes apart in 8-row groups `stride` apart.
std::uint32_t mn_major_address(const Decoded& d, int k, int n) {
    return swizzle_address(d.start + (n / 64) * d.leading + (k / 8) * d.stride + (k % 8) * 128 + (n % 64) * 2,
                           d.mode);
}

bool have_sm90() { return fa::cuda_device_count() > 0 && device_unsupported_reason(fa::device_info()).empty(); }

template <class T>
fa::AttnProblem rounded_problem(const fa::AttnShape& s, std::uint64_t seed, double magnitude = 1.0) {
    fa::AttnProblem p = fa::make_problem(s, seed, magnitude);
    fa::round_to<T>(p.Q);
    fa::round_to<T>(p.K);
    fa::round_to<T>(p.V);
    return p;
}

// One step on `shapes` with the 2× rule, outputs poisoned before the run.
template <class T>
void check_rule_on(int step, const std::vector<fa::AttnShape>& shapes, double magnitude = 1.0) {
    for (const fa::AttnShape& s : shapes) {
        const std::uint64_t seed = 11 + std::uint64_t(s.N);
        const fa::AttnProblem p = rounded_problem<T>(s, seed, magnitude);
        fa::DeviceAttention<T> d(p);
        d.poison_outputs();
        forward<T>(step, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> O = d.O_host(), L = d.L_host();
        const ch7::RuleVerdict v =
            ch7::low_precision_rule(fa::check_forward(p, O.data(), L.data()), ch7::mirror_errors<T>(p, step_config(step).Bc));
        INFO(fa::dtype_name<T>() << " " << s.str() << " magnitude " << magnitude << " step " << step_name(step) << "\n"
                                 << v.text);
        CHECK(v.ok);
    }
}

// N ∈ {1, 17, 113, 1023, 4097, 16384} (small mode: up to 113), causal and not, D = 64 and 128.
std::vector<fa::AttnShape> step_grid() {
    const bool small = fa::test::small_shapes();
    std::vector<fa::AttnShape> shapes;
    for (bool causal : {false, true})
        for (int D : {64, 128})
            for (int N : small ? std::vector<int>{1, 17, 113} : std::vector<int>{1, 17, 113, 1023, 4097, 16384})
                shapes.push_back(fa::make_shape(N >= 4097 ? 1 : 2, N >= 16384 ? 1 : 3, N, D, causal));
    return shapes;
}

void gpu_step(int step) {
    const std::vector<fa::AttnShape> grid = step_grid();
    check_rule_on<__nv_bfloat16>(step, grid);
    check_rule_on<__half>(step, grid);
    // Large scores (magnitude 4): S reaches several hundred; e^S alone overflows fp32.
    std::vector<fa::AttnShape> large;
    for (bool causal : {false, true})
        for (int D : {64, 128}) large.push_back(fa::make_shape(1, 2, 257, D, causal));
    check_rule_on<__half>(step, large, 4.0);
    check_rule_on<__nv_bfloat16>(step, large, 4.0);
}

// Every element of O and L written, nothing past their ends.
void bounds_step(int step) {
    for (int D : {64, 128}) {
        const fa::AttnShape s = fa::make_shape(1, 2, 17, D, true);
        const fa::AttnProblem p = rounded_problem<__nv_bfloat16>(s, 9);
        fa::DeviceAttention<__nv_bfloat16> d(p);
        const std::size_t pad = 128 * 128;  // a whole query tile of rows past the end
        fa::DeviceBuffer<__nv_bfloat16> O(s.elements() + pad);
        fa::DeviceBuffer<float> L(s.rows() + pad);
        O.poison(), L.poison();
        forward<__nv_bfloat16>(step, s, d.Q.get(), d.K.get(), d.V.get(), O.get(), L.get());
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<__nv_bfloat16> o = O.download();
        const std::vector<float> l = L.download();
        INFO("D " << D << " step " << step_name(step));
        bool untouched = true, written = true;
        for (std::size_t i = s.elements(); i < o.size(); ++i) untouched &= std::isnan(fa::to_float(o[i]));
        for (std::size_t i = s.rows(); i < l.size(); ++i) untouched &= std::isnan(l[i]);
        for (std::size_t i = 0; i < s.elements(); ++i) written &= std::isfinite(fa::to_float(o[i]));
        for (std::size_t i = 0; i < s.rows(); ++i) written &= std::isfinite(l[i]);
        CHECK(untouched);
        CHECK(written);
    }
}

}  // namespace

TEST_CASE("swizzle128: a bijection of each tile, rows stay in their 128 bytes, columns hit 8 bank groups",
          "[cpu][chapter9]") {
    for (int D : {64, 128})
        for (int R : {64, 128}) {
            std::set<int> seen;
            for (int r = 0; r < R; ++r)
                for (int c = 0; c < D; ++c) {
                    const int o = swizzle128(r, c, R);
                    REQUIRE(o >= 0);
                    REQUIRE(o < R * D);
                    seen.insert(o);
                    CHECK(o / 64 == (c / 64) * R + r);  // row r of chunk c/64
                    CHECK(o % 8 == c % 8);              // 16-byte pieces move whole
                }
            CHECK(int(seen.size()) == R * D);
            // The 8 rows of one 8×8 core matrix (same 16-byte piece) land in 8 distinct 16-byte
            // bank groups: no bank conflict for wgmma, TMA, or a 16-byte store per row.
            for (int r0 = 0; r0 < R; r0 += 8)
                for (int c = 0; c < D; c += 8) {
                    std::set<int> groups;
                    for (int r = r0; r < r0 + 8; ++r) groups.insert((swizzle128(r, c, R) * 2 / 16) % 8);
                    CHECK(groups.size() == 8);
                }
        }
}

TEST_CASE("matrix descriptor: the bit fields of the PTX ISA", "[cpu][chapter9]") {
    const std::uint64_t d = matrix_descriptor(0x12400, 16 * 1024, 1024);
    CHECK((d & 0x3FFF) == (0x12400 >> 4));
    CHECK(((d >> 16) & 0x3FFF) == 1024);
    CHECK(((d >> 32) & 0x3FFF) == 64);
    CHECK((d >> 62) == 1);                              // 128-byte swizzle
    CHECK(((d >> 14) & 3) == 0);                        // reserved bits stay clear
    CHECK(((d >> 46) & 0xFFFF) == 0);                   // base offset 0: tiles start on 1024 bytes
    const Decoded back = decode(d);
    CHECK(back.start == 0x12400);
    CHECK(back.leading == 16 * 1024);
    CHECK(back.stride == 1024);
}

TEST_CASE("descriptors: every element each wgmma k-step reads is the one S = Q K^T and O += P V need",
          "[cpu][chapter9][v1][v2][v3][v4][v5][v6]") {
    const std::uint32_t base = 0x4000;  // any 1024-aligned tile start
    const int Br = 128, Bc = 128;
    for (int D : {64, 128}) {
        // Q as A: rows 64wg.. of the block, k-step kk reads columns 16kk..16kk+15.
        for (int wg = 0; wg < 2; ++wg)
            for (int kk = 0; kk < D / 16; ++kk) {
                const Decoded q = decode(k_major_descriptor(base, Br, 64 * wg, kk));
                for (int m = 0; m < 64; ++m)
                    for (int k = 0; k < 16; ++k)
                        REQUIRE(k_major_address(q, m, k) ==
                                base + 2u * std::uint32_t(swizzle128(64 * wg + m, 16 * kk + k, Br)));
            }
        // K as B (K-major too): all B_c rows (n), the same columns.
        for (int kk = 0; kk < D / 16; ++kk) {
            const Decoded k_desc = decode(k_major_descriptor(base, Bc, 0, kk));
            for (int n = 0; n < Bc; ++n)
                for (int k = 0; k < 16; ++k)
                    REQUIRE(k_major_address(k_desc, n, k) == base + 2u * std::uint32_t(swizzle128(n, 16 * kk + k, Bc)));
        }
        // V as B, MN-major: k-step kk reads keys 16kk..16kk+15 (rows), all D columns (n).
        for (int kk = 0; kk < Bc / 16; ++kk) {
            const Decoded v = decode(mn_major_descriptor(base, Bc, kk));
            for (int k = 0; k < 16; ++k)
                for (int n = 0; n < D; ++n)
                    REQUIRE(mn_major_address(v, k, n) == base + 2u * std::uint32_t(swizzle128(16 * kk + k, n, Bc)));
        }
    }
}

TEST_CASE("TMA box: 128-byte rows (the 128B swizzle's limit), the whole tile in D/64 copies", "[cpu][chapter9][v2][v3][v4][v5][v6]") {
    for (int D : {64, 128})
        for (int rows : {64, 128}) {
            const TmaBox b = tma_box(rows, D);
            CHECK(b.cols * 2 == 128);
            CHECK(b.rows == rows);
            CHECK(b.rows <= 256);  // a box dimension's limit
            CHECK(b.heads == 1);
            CHECK(b.cols * b.copies == D);
            CHECK(b.bytes() == rows * D * 2);  // what expect_tx announces equals what arrives
        }
}

TEST_CASE("tile plan: the visited key tiles and the masked ones, against brute force", "[cpu][chapter9]") {
    const StepConfig c = step_config(kLastStep);
    for (bool causal : {false, true})
        for (int N : {1, 17, 113, 128, 129, 300, 1023}) {
            fa::AttnShape s = fa::make_shape(1, 1, N, 64, causal);
            for (int i = 0; i * c.Br < N; ++i) {
                const int visited = key_tiles(i, c.Br, c.Bc, N, causal);
                for (int j = 0; j * c.Bc < N; ++j) {
                    bool any_visible = false, any_hidden = false;
                    for (int row = i * c.Br; row < std::min(N, (i + 1) * c.Br); ++row)
                        for (int col = j * c.Bc; col < (j + 1) * c.Bc; ++col) {
                            const bool vis = col < N && s.visible(row, col);
                            any_visible |= vis, any_hidden |= !vis;
                        }
                    INFO("N " << N << " causal " << causal << " i " << i << " j " << j);
                    CHECK((j < visited) == any_visible);  // visit exactly the tiles with a visible key
                    if (j < visited && any_hidden) CHECK(needs_mask(i, j, c.Br, c.Bc, N, causal));
                }
            }
        }
}

TEST_CASE("mbarrier ring: under any interleaving each consumer reads the tile it waits for",
          "[cpu][chapter9][v2][v3][v4][v5][v6]") {
    // A model of step 3: the producer fills stage stage_of(j) after waiting on `empty` for the
    // release of tile j − S; consumers wait on `full` with parity_of(j). An mbarrier is a phase
    // counter; try_wait.parity(P) succeeds once the phase with parity P has completed, i.e. while
    // the current phase's parity differs from P.
    // Step 5 releases tile j − 1 after tile j (released_after); the ring must not deadlock then.
    const int S = step_config(kSpecialized).stages, tiles = 23;
    std::mt19937 rng(3);
    for (int trial = 0; trial < 400; ++trial) {
        const int step = trial % 2 ? kOverlap : kSpecialized;
        std::vector<int> full_phase(S, 0), empty_phase(S, 0), content(S, -1);
        int produced = 0, consumed = 0, released = 0;
        auto done = [](int phase, std::uint32_t parity) { return std::uint32_t(phase & 1) != parity; };
        for (int moves = 0; released < tiles; ++moves) {
            REQUIRE(moves < 100000);  // no progress: a deadlock
            if (consumed == tiles) {  // after the loop: the last stages are released
                ++empty_phase[stage_of(released++, S)];
                continue;
            }
            if (rng() % 2 && produced < tiles) {
                const int s = stage_of(produced, S);
                if (produced < S || done(empty_phase[s], parity_of(produced - S, S))) {
                    REQUIRE(content[s] == (produced < S ? -1 : produced - S));  // released, never live
                    content[s] = produced++;
                    ++full_phase[s];  // expect_tx + the bytes arrive: the phase completes
                }
            } else {
                const int s = stage_of(consumed, S);
                if (done(full_phase[s], parity_of(consumed, S))) {
                    REQUIRE(content[s] == consumed);
                    const int r = released_after(step, consumed++);
                    if (r >= 0) {
                        REQUIRE(r == released);  // stages are released in order, once each
                        ++empty_phase[stage_of(released++, S)];  // every consumer warp arrives
                    }
                }
            }
        }
        CHECK(produced == tiles);
    }
}

TEST_CASE("pingpong: each named barrier sees as many arrivals as waits, and the turns alternate",
          "[cpu][chapter9][v4][v5][v6]") {
    // Model: consumer w, for tile j = 0..n−1: wait on barrier turn_barrier(w) (bar.sync: returns
    // once the other consumer's arrivals cover it), issue its products, maybe arrive on the other's.
    for (int n : {1, 2, 7}) {
        std::vector<int> arrivals(3, 0), waits(3, 0);
        std::vector<std::pair<int, int>> order;  // (consumer, tile) in the order products are issued
        for (int w = 0; w < 2; ++w)
            if (arrives_before_first(w)) ++arrivals[turn_barrier(1 - w)];
        int next[2] = {0, 0};
        for (int guard = 0; next[0] < n || next[1] < n; ++guard) {
            REQUIRE(guard < 100);  // neither consumer can go: a deadlock
            for (int w = 0; w < 2; ++w) {
                const int b = turn_barrier(w);
                if (next[w] < n && arrivals[b] > waits[b]) {
                    ++waits[b];
                    order.push_back({w, next[w]});
                    if (arrives_after(w, next[w], n)) {
                        const int o = turn_barrier(1 - w);
                        ++arrivals[o];
                        // A hardware barrier counts one phase: a second arrival before the wait
                        // would complete it without the waiting consumer.
                        REQUIRE(arrivals[o] - waits[o] <= 1);
                    }
                    ++next[w];
                }
            }
        }
        INFO("n " << n);
        CHECK(arrivals == waits);  // nothing left pending at exit
        for (std::size_t k = 0; k < order.size(); ++k) {
            CHECK(order[k].first == int(k % 2));  // consumer 0, 1, 0, 1, ...
            CHECK(order[k].second == int(k / 2));
        }
        CHECK(turn_barrier(0) != 0);  // barrier 0 belongs to __syncthreads
        CHECK(turn_barrier(0) != turn_barrier(1));
        for (int w = 0; w < 2; ++w)  // step 6's store barriers are neither __syncthreads' nor a turn's
            CHECK((store_barrier(w) != 0 && store_barrier(w) != turn_barrier(0) && store_barrier(w) != turn_barrier(1)));
        CHECK(store_barrier(0) != store_barrier(1));
        CHECK(store_barrier(1) < 16);  // a block has 16 named barriers
    }
}

TEST_CASE("budgets: registers for setmaxnreg and shared memory fit one block per multiprocessor",
          "[cpu][chapter9]") {
    for (int step = kFirstStep; step <= kLastStep; ++step) {
        const StepConfig c = step_config(step);
        CHECK(c.threads() % 128 == 0);  // whole warpgroups, consumers from a warpgroup boundary
        CHECK(c.consumers * 64 == c.Br);
        for (int D : {64, 128}) CHECK(c.smem_bytes(D) <= 227 * 1024);  // H100/H200 opt-in limit
    }
    const StepConfig c = step_config(kSpecialized);
    CHECK(kProducerRegisters % 8 == 0);
    CHECK(kConsumerRegisters % 8 == 0);
    CHECK(kProducerRegisters >= 24);
    CHECK(kConsumerRegisters <= 256);
    CHECK(128 * (c.producer * kProducerRegisters + c.consumers * kConsumerRegisters) <= 65536);
}

TEST_CASE("unsupported shapes, steps and devices get one clear reason", "[cpu][chapter9]") {
    CHECK(unsupported_reason(kSpecialized, fa::make_shape(2, 3, 17, 128, true)).empty());
    CHECK(unsupported_reason(kWgmma, fa::make_shape(1, 1, 1, 64, false)).empty());
    CHECK_FALSE(unsupported_reason(0, fa::make_shape(1, 1, 17, 64, false)).empty());
    CHECK_FALSE(unsupported_reason(kLastStep + 1, fa::make_shape(1, 1, 17, 64, false)).empty());
    CHECK_FALSE(unsupported_reason(kWgmma, fa::make_shape(1, 1, 17, 32, false)).empty());
    CHECK_FALSE(unsupported_reason(kWgmma, fa::make_shape(1, 1, 17, 256, false)).empty());
    fa::DeviceInfo d;
    d.name = "some GPU";
    d.cc_major = 9, d.cc_minor = 0;
    CHECK(device_unsupported_reason(d).empty());
    for (auto cc : {std::pair<int, int>{8, 0}, {8, 9}, {10, 0}, {12, 0}}) {
        d.cc_major = cc.first, d.cc_minor = cc.second;
        CHECK(device_unsupported_reason(d).find("compute capability 9.0") != std::string::npos);
    }
}

TEST_CASE("CPU mirror at the kernels' B_c: exact without rounding, within the 16-bit budget with it",
          "[cpu][chapter9]") {
    for (bool causal : {false, true}) {
        const fa::AttnShape s = fa::make_shape(1, 2, 300, 64, causal);
        const fa::AttnProblem p = fa::make_problem(s, 21);
        const ch7::MirrorErrors exact = ch7::mirror_errors<float>(p, step_config(kLastStep).Bc);
        CHECK(exact.check.O.rel_l2 < 1e-5);
        CHECK(exact.check.L.rel_l2 < 1e-5);
        const fa::AttnProblem r = rounded_problem<__nv_bfloat16>(s, 21);
        const ch7::MirrorErrors bf16 = ch7::mirror_errors<__nv_bfloat16>(r, step_config(kLastStep).Bc);
        CHECK(bf16.check.O.rel_l2 > 0);
        CHECK(bf16.check.O.rel_l2 < 2e-2);
    }
}

// Both wgmma forms alone: the descriptors of layout.h against the hardware (the CPU test above
// checks them against the model; this checks the model). Exact up to fp32 accumulation order.
template <class T>
void wgmma_blocks() {
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> u(-1.0f, 1.5f);
    auto random_T = [&](std::size_t n) {
        std::vector<T> x(n);
        for (T& v : x) v = T(u(rng));
        return x;
    };
    const std::vector<T> A = random_T(64 * 128), B = random_T(64 * 128);
    const std::vector<float> C = wgmma_ss_block<T>(A, B);
    double worst = 0;
    for (int m = 0; m < 64; ++m)
        for (int n = 0; n < 64; ++n) {
            double ref = 0;
            for (int k = 0; k < 128; ++k) ref += double(fa::to_float(A[m * 128 + k])) * fa::to_float(B[n * 128 + k]);
            const double err = std::fabs(C[m * 64 + n] - ref) / (1.0 + std::fabs(ref));
            worst = std::isnan(err) ? INFINITY : std::max(worst, err);
        }
    INFO(fa::dtype_name<T>() << " S form (K-major A and B): worst relative error " << worst);
    CHECK(worst < 1e-5);
    std::vector<float> P(64 * 64);
    for (float& x : P) x = u(rng);
    const std::vector<T> V = random_T(64 * 128);
    const std::vector<float> O = wgmma_rs_block<T>(P, V);
    worst = 0;
    for (int m = 0; m < 64; ++m)
        for (int n = 0; n < 128; ++n) {
            double ref = 0;
            for (int k = 0; k < 64; ++k) ref += double(fa::to_float(T(P[m * 64 + k]))) * fa::to_float(V[k * 128 + n]);
            const double err = std::fabs(O[m * 128 + n] - ref) / (1.0 + std::fabs(ref));
            worst = std::isnan(err) ? INFINITY : std::max(worst, err);
        }
    INFO(fa::dtype_name<T>() << " PV form (A from registers, V MN-major): worst relative error " << worst);
    CHECK(worst < 1e-5);
}

TEST_CASE("building blocks: wgmma with K-major and MN-major descriptors equals the products",
          "[gpu][chapter9][v1][v2][v3][v4][v5][v6]") {
    REQUIRE(have_sm90());
    wgmma_blocks<__nv_bfloat16>();
    wgmma_blocks<__half>();
}

#define CHAPTER9_STEP_TESTS(K)                                                                            \
    TEST_CASE("step " #K " on N in {1,17,113,1023,4097,16384} and with large scores: the 2x rule",      \
              "[gpu][chapter9][v" #K "]") {                                                              \
        REQUIRE(have_sm90());                                                                            \
        gpu_step(K);                                                                                     \
    }                                                                                                    \
    TEST_CASE("step " #K " writes all of O and L and nothing past their ends", "[gpu][chapter9][v" #K "]") { \
        REQUIRE(have_sm90());                                                                            \
        bounds_step(K);                                                                                  \
    }

CHAPTER9_STEP_TESTS(1)
CHAPTER9_STEP_TESTS(2)
CHAPTER9_STEP_TESTS(3)
CHAPTER9_STEP_TESTS(4)
CHAPTER9_STEP_TESTS(5)
CHAPTER9_STEP_TESTS(6)
static_assert(kFirstStep == 1 && kLastStep == 6, "one CHAPTER9_STEP_TESTS line per step");
