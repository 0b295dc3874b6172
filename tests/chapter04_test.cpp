// Tests of chapter 4, FlashAttention-1 forward (Algorithm 1): on the CPU the block sizes of line 1,
// the CPU mirror against the float64 reference (B_r ≠ B_c, N below and between tile sizes, causal
// on and off, fully masked rows inside a tile), its traffic count and the causal tile skipping; on
// the GPU both kernels against the float64 reference over the course's shape grid, against the CPU
// mirror with the same tiles, every head dimension, and poisoned outputs and scratch.
//
// The doc (chapters/04_flash_attention_1/README.md) names, for each classic mistake, the test case
// below that catches it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../chapters/04_flash_attention_1/flash1.h"
#include "../common/attention.h"
#include "../common/attention_gpu.h"
#include "../common/check.h"
#include "../common/device.h"
#include "../common/validate.h"
#include "support.h"

using namespace fa;
using ch4::Tiles;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Kernel against mirror: the same float32 operations in the same order (dot products over d in
// order, P̃V over the keys in order, the same line-12 expression). What differs is the GPU's fused
// multiply-adds and its expf (within 2 ulp of std::exp): a few 1e-6 on S and thus on O and L. 2e-5
// is 2.5 times tighter than the fp64 check; a real tiling bug (a key missed, a rescale dropped)
// moves O by 1e-2 or more.
constexpr Tolerance kMirrorTolerance{2e-5, 2e-5};

struct Outputs {
    std::vector<float> O, L;
};

// The CPU mirror on poisoned outputs (every element must be written).
Outputs run_mirror(const AttnProblem& p, Tiles t, ch4::Traffic* counted = nullptr) {
    Outputs out{std::vector<float>(p.shape.elements(), kNaN), std::vector<float>(p.shape.rows(), kNaN)};
    ch4::forward_cpu_mirror(p.shape, p.Q.data(), p.K.data(), p.V.data(), out.O.data(), out.L.data(), t, counted);
    return out;
}

// A kernel on poisoned O, L and l/m scratch: line 2 must initialize l, m and O, and every row's
// O and L must be written, or NaN fails the check.
Outputs run_gpu(int variant, const AttnProblem& p, Tiles t) {
    DeviceAttention<float> d(p);
    d.poison_outputs();
    DeviceBuffer<float> scratch(ch4::scratch_floats(p.shape));
    scratch.poison();
    ch4::forward(variant, p.shape, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), scratch.get(), t);
    CUDA_CHECK(cudaDeviceSynchronize());
    return {d.O_host(), d.L_host()};
}

void check_against_reference(const AttnProblem& p, const Outputs& out) {
    const ForwardCheck c = check_forward(p, out.O.data(), out.L.data());
    CHECK_VALID(c.O);
    CHECK_VALID(c.L);
}

void check_against_mirror(const AttnShape& s, const Outputs& gpu, const Outputs& mirror) {
    const std::vector<double> O(mirror.O.begin(), mirror.O.end()), L(mirror.L.begin(), mirror.L.end());
    CHECK_VALID(validate("O", gpu.O.data(), O.data(), O.size(), kMirrorTolerance, contiguous(s.H, s.N, s.D)));
    CHECK_VALID(validate("L", gpu.L.data(), L.data(), L.size(), kMirrorTolerance, contiguous(s.H, s.N, 1)));
}

std::string describe(const AttnShape& s, Tiles t) {
    return s.str() + "  B_r=" + std::to_string(t.Br) + " B_c=" + std::to_string(t.Bc);
}

// Tiles that break one-thread-per-row kernels written for B_r = B_c: rectangular both ways, sizes
// that divide nothing, a single row or key per tile, and line 1's choice for 48 KB at D = 64.
const std::vector<Tiles> kOddTiles = {{16, 32}, {32, 16}, {48, 32}, {7, 5}, {5, 7}, {1, 1}, {48, 48}};

// (i, j) tile pairs in which some query row sees some key: what the causal loops must visit.
std::size_t tiles_with_a_visible_key(const AttnShape& s, Tiles t) {
    std::size_t n = 0;
    for (int i = 0; i * t.Br < s.N; ++i)
        for (int j = 0; j * t.Bc < s.N; ++j) {
            bool any = false;
            for (int r = i * t.Br; r < std::min(s.N, (i + 1) * t.Br) && !any; ++r)
                for (int c = j * t.Bc; c < std::min(s.N, (j + 1) * t.Bc) && !any; ++c) any = s.visible(r, c);
            n += any;
        }
    return n;
}

// Rows that the causal loops visit in some tile (i, j) although they see none of its keys: the
// rows whose m̃_ij is −inf, where e^{S − m̃} would be e^{−inf − (−inf)} = NaN without care.
int fully_masked_rows_in_visited_tiles(const AttnShape& s, Tiles t) {
    int n = 0;
    for (int j = 0; j * t.Bc < s.N; ++j)
        for (int i = ch4::first_query_tile(j, t, s.causal); i * t.Br < s.N; ++i)
            for (int r = i * t.Br; r < std::min(s.N, (i + 1) * t.Br); ++r) n += s.causal && r < j * t.Bc;
    return n;
}

}  // namespace

// ---- CPU ------------------------------------------------------------------------------------------

TEST_CASE("ch4 paper_tiles: Algorithm 1 line 1 with M counted in floats", "[cpu][chapter4]") {
    const std::size_t kb48 = 48 * 1024;  // M = 12288 floats
    CHECK(ch4::paper_tiles(64, kb48).Bc == 48);  // ⌈12288 / 256⌉
    CHECK(ch4::paper_tiles(64, kb48).Br == 48);  // min(48, 64)
    CHECK(ch4::paper_tiles(128, kb48).Bc == 24);
    CHECK(ch4::paper_tiles(128, kb48).Br == 24);
    CHECK(ch4::paper_tiles(16, kb48).Bc == 192);
    CHECK(ch4::paper_tiles(16, kb48).Br == 16);  // B_r capped at d
    CHECK(ch4::paper_tiles(20, kb48).Bc == 154);  // ⌈153.6⌉: rounded up, not down
    CHECK(ch4::paper_tiles(20, kb48).Br == 20);
    CHECK(ch4::paper_tiles(100, kb48).Bc == 31);  // ⌈30.72⌉
    CHECK(ch4::paper_tiles(100, kb48).Br == 31);
    const std::size_t kb227 = 227 * 1024;  // H100's opt-in limit: M = 58112 floats
    CHECK(ch4::paper_tiles(64, kb227).Bc == 227);
    CHECK(ch4::paper_tiles(64, kb227).Br == 64);
    CHECK(ch4::paper_tiles(64, 64).Bc == 1);  // M = 16 floats: still one key and one row
    CHECK(ch4::paper_tiles(64, 64).Br == 1);
}

TEST_CASE("ch4 head dimensions: supported ones accepted, others rejected with a reason", "[cpu][chapter4]") {
    for (int D = 16; D <= 128; D += 4) {
        INFO("D = " << D);
        CHECK(ch4::unsupported_reason(ch4::kReadable, D).empty());
        CHECK(ch4::unsupported_reason(ch4::kWarpRows, D).empty());
    }
    for (int D : {1, 17, 59, 111, 256}) CHECK(ch4::unsupported_reason(ch4::kReadable, D).empty());
    for (int D : {0, 257}) CHECK_FALSE(ch4::unsupported_reason(ch4::kReadable, D).empty());
    for (int D : {2, 17, 18, 59, 130, 256}) CHECK_FALSE(ch4::unsupported_reason(ch4::kWarpRows, D).empty());
    CHECK_FALSE(ch4::unsupported_reason(3, 64).empty());
    CHECK(ch4::tiles_used(ch4::kReadable, {7, 5}).Br == 7);
    CHECK(ch4::tiles_used(ch4::kReadable, {7, 5}).Bc == 5);
    CHECK(ch4::tiles_used(ch4::kWarpRows, {7, 5}).Br == 16);
    CHECK(ch4::tiles_used(ch4::kWarpRows, {7, 5}).Bc == 64);
    CHECK(ch4::scratch_floats(make_shape(2, 3, 17, 64, false)) == 2 * 2 * 3 * 17);
}

TEST_CASE("ch4 mirror matches the fp64 reference: B_r != B_c, N < 32, N not a multiple of either",
          "[cpu][chapter4]") {
    for (bool causal : {false, true})
        for (int D : {16, 20, 64})
            for (int N : {1, 5, 31, 100, 113})
                for (Tiles t : kOddTiles) {
                    const AttnProblem p = make_problem(make_shape(2, 3, N, D, causal), 41);
                    INFO(describe(p.shape, t));
                    check_against_reference(p, run_mirror(p, t));
                }
}

TEST_CASE("ch4 mirror with line 1's tiles over many key tiles", "[cpu][chapter4]") {
    for (bool causal : {false, true})
        for (int D : {16, 32, 64, 128}) {
            const AttnProblem p = make_problem(make_shape(1, 2, 301, D, causal), 43);
            const Tiles t = ch4::paper_tiles(D, 48 * 1024);
            INFO(describe(p.shape, t));
            check_against_reference(p, run_mirror(p, t));
        }
}

TEST_CASE("ch4 mirror: fully masked rows inside a visited tile give no NaN (-inf - (-inf))",
          "[cpu][chapter4]") {
    // Causal with B_r > B_c: key tile j = 1 (keys 32..63) is visited with query tile 0 (rows
    // 0..47), and rows 0..31 see none of its keys: their m̃_ij is −inf.
    const Tiles t{48, 32};
    const AttnProblem p = make_problem(make_shape(2, 3, 100, 16, true), 45);
    REQUIRE(fully_masked_rows_in_visited_tiles(p.shape, t) > 0);
    check_against_reference(p, run_mirror(p, t));
}

TEST_CASE("ch4 mirror: the traffic it makes equals ch4::traffic, the formula the program prints",
          "[cpu][chapter4]") {
    for (bool causal : {false, true})
        for (int N : {1, 5, 100, 113})
            for (Tiles t : kOddTiles) {
                const AttnProblem p = make_problem(make_shape(2, 3, N, 20, causal), 47);
                INFO(describe(p.shape, t));
                ch4::Traffic counted;
                run_mirror(p, t, &counted);
                const ch4::Traffic formula = ch4::traffic(p.shape, t);
                CHECK(counted.inner_steps == formula.inner_steps);
                CHECK(counted.olm_bytes == formula.olm_bytes);
                CHECK(counted.q_bytes == formula.q_bytes);
                CHECK(counted.kv_bytes == formula.kv_bytes);
                CHECK(counted.l_out_bytes == formula.l_out_bytes);
                CHECK(counted.ideal_bytes == formula.ideal_bytes);
            }
    // By hand, N = 100, B_r = 48, B_c = 32, one head: T_r = 3, T_c = 4, so 12 steps without the
    // mask; with it, key tiles j = 0, 1, 2, 3 start at query tiles 0, 0, 1, 2: 3 + 3 + 2 + 1 = 9.
    CHECK(ch4::traffic(make_shape(1, 1, 100, 64, false), {48, 32}).inner_steps == 12);
    CHECK(ch4::traffic(make_shape(1, 1, 100, 64, true), {48, 32}).inner_steps == 9);
    // One full step moves O_i, l_i, m_i in and out: 48·(2·64 + 4) floats.
    CHECK(ch4::traffic(make_shape(1, 1, 100, 64, false), {48, 32}).olm_step_bytes == 4.0 * 48 * 132);
}

TEST_CASE("ch4 causal: exactly the tiles entirely above the diagonal are skipped", "[cpu][chapter4]") {
    for (int N : {1, 5, 31, 100, 113, 301})
        for (Tiles t : kOddTiles) {
            const AttnShape causal = make_shape(1, 1, N, 16, true), full = make_shape(1, 1, N, 16, false);
            INFO(describe(causal, t));
            CHECK(ch4::traffic(causal, t).inner_steps == tiles_with_a_visible_key(causal, t));
            CHECK(ch4::traffic(full, t).inner_steps == tiles_with_a_visible_key(full, t));
        }
}

// ---- GPU ------------------------------------------------------------------------------------------

TEST_CASE("ch4 kernels match the fp64 reference on the course's shape grid", "[gpu][chapter4]") {
    const std::size_t smem = device_info().smem_per_block;
    for (int variant : {ch4::kReadable, ch4::kWarpRows})
        for (const AttnShape& s : test::shape_grid()) {
            const Tiles t = ch4::paper_tiles(s.D, smem);
            const AttnProblem p = make_problem(s, 51);
            INFO("variant " << variant << ": " << describe(s, ch4::tiles_used(variant, t)));
            check_against_reference(p, run_gpu(variant, p, t));
        }
}

TEST_CASE("ch4 variant 1: B_r != B_c, N < 32, N not a multiple of the tiles", "[gpu][chapter4]") {
    const bool small = test::small_shapes();
    const std::vector<int> Ns = small ? std::vector<int>{1, 5, 100} : std::vector<int>{1, 5, 31, 33, 100, 113};
    const std::vector<int> Ds = small ? std::vector<int>{16, 20} : std::vector<int>{16, 20, 64};
    for (bool causal : {false, true})
        for (int D : Ds)
            for (int N : Ns)
                for (Tiles t : kOddTiles) {
                    const AttnProblem p = make_problem(make_shape(2, 3, N, D, causal), 53);
                    INFO(describe(p.shape, t));
                    check_against_reference(p, run_gpu(ch4::kReadable, p, t));
                }
}

TEST_CASE("ch4 variant 1: fully masked rows inside a visited tile give no NaN", "[gpu][chapter4]") {
    const Tiles t{48, 32};
    const AttnProblem p = make_problem(make_shape(2, 3, 100, 16, true), 45);
    REQUIRE(fully_masked_rows_in_visited_tiles(p.shape, t) > 0);
    check_against_reference(p, run_gpu(ch4::kReadable, p, t));
}

TEST_CASE("ch4 kernels agree with the CPU mirror run with the same tiles", "[gpu][chapter4]") {
    const bool small = test::small_shapes();
    const std::vector<int> Ns = small ? std::vector<int>{1, 17, 100} : std::vector<int>{1, 17, 100, 113, 300};
    const std::vector<int> Ds = small ? std::vector<int>{16, 64} : std::vector<int>{16, 20, 64, 128};
    const std::size_t smem = device_info().smem_per_block;
    for (bool causal : {false, true})
        for (int D : Ds)
            for (int N : Ns) {
                const AttnProblem p = make_problem(make_shape(2, 3, N, D, causal), 55);
                std::vector<std::pair<int, Tiles>> runs = {{ch4::kReadable, ch4::paper_tiles(D, smem)},
                                                           {ch4::kReadable, {48, 32}},
                                                           {ch4::kReadable, {7, 5}},
                                                           {ch4::kWarpRows, ch4::tiles_used(ch4::kWarpRows, {0, 0})}};
                for (const auto& [variant, t] : runs) {
                    INFO("variant " << variant << ": " << describe(p.shape, t));
                    check_against_mirror(p.shape, run_gpu(variant, p, t), run_mirror(p, t));
                }
            }
}

TEST_CASE("ch4 kernels: every head dimension from 16 to 128 in steps of 4, and odd ones on variant 1",
          "[gpu][chapter4]") {
    const std::size_t smem = device_info().smem_per_block;
    const bool small = test::small_shapes();
    std::vector<int> dims, odd_dims = {1, 3, 17, 59, 111};
    for (int D = 16; D <= 128; D += 4) dims.push_back(D);
    if (small) dims = {16, 20, 36, 64, 100, 128}, odd_dims = {3, 17};
    std::vector<std::pair<int, int>> runs;  // (variant, D)
    for (int D : dims) runs.push_back({ch4::kReadable, D}), runs.push_back({ch4::kWarpRows, D});
    for (int D : odd_dims) runs.push_back({ch4::kReadable, D});
    for (const auto& [variant, D] : runs) {
        const AttnProblem p = make_problem(make_shape(1, 2, 77, D, D % 8 == 0), 57);
        INFO("variant " << variant << ": " << p.shape.str());
        check_against_reference(p, run_gpu(variant, p, ch4::paper_tiles(D, smem)));
    }
}

TEST_CASE("ch4 kernels: a second run on the same buffers gives the same bits (line 2 resets O, l, m)",
          "[gpu][chapter4]") {
    for (int variant : {ch4::kReadable, ch4::kWarpRows}) {
        const AttnProblem p = make_problem(make_shape(2, 3, 113, 64, true), 59);
        const Tiles t{48, 32};
        DeviceAttention<float> d(p);
        DeviceBuffer<float> scratch(ch4::scratch_floats(p.shape));
        scratch.poison();
        d.poison_outputs();
        std::vector<float> first;
        for (int run = 0; run < 2; ++run) {  // the second run starts from the first one's O, l, m
            ch4::forward(variant, p.shape, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), scratch.get(), t);
            CUDA_CHECK(cudaDeviceSynchronize());
            if (run == 0) first = d.O_host();
        }
        INFO("variant " << variant);
        const std::vector<float> second = d.O_host();
        CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0);
        check_against_reference(p, {second, d.L_host()});
    }
}
