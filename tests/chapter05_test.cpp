// Chapter 5 tests: FlashAttention-2 forward. CPU mirror in CI; both kernels, the ladder steps,
// determinism and memory on the GPU. Each kernel's own tests are tagged [v1] or [v2], each ladder
// step's [v2.S], so that `make test-chapter5 VARIANT=2` (or VARIANT=2.4) reruns only the one edited.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "../chapters/05_flash_attention_2/flash2.h"
#include "../common/attention.h"
#include "../common/attention_gpu.h"
#include "support.h"

using namespace fa;

namespace {

// Runs one kernel variant (or ladder step when step > 0) on fresh poisoned outputs.
ForwardCheck run_kernel(DeviceAttention<float>& d, const AttnProblem& p, int variant, int step = 0) {
    d.poison_outputs();
    if (step > 0)
        ch5::forward_ladder_step(step, p.shape, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
    else
        ch5::forward(variant, p.shape, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> O = d.O_host(), L = d.L_host();
    return check_forward(p, O.data(), L.data());
}

// Compares two float outputs (b taken as the reference) with the fp32 tolerance.
Validation agree(const char* name, const std::vector<float>& a, const std::vector<float>& b) {
    const std::vector<double> want(b.begin(), b.end());
    return validate(name, a.data(), want.data(), a.size(), kFp32Tolerance);
}

// Kernels `variants` on the course's shape grid and on head dims that kernel 2 pads. Shapes
// outside, kernels inside: each shape's inputs are made once for all the kernels asked for.
void check_on_grid(const std::vector<int>& variants) {
    std::vector<AttnShape> shapes = test::shape_grid();
    for (int D : {40, 72, 100})  // head dims that are padded inside kernel 2
        for (bool causal : {false, true}) shapes.push_back(make_shape(2, 3, test::small_shapes() ? 113 : 1023, D, causal));
    std::uint64_t seed = 100;
    for (const AttnShape& s : shapes) {
        const AttnProblem p = make_problem(s, ++seed);
        DeviceAttention<float> d(p);
        for (int variant : variants) {
            INFO(s.str() << ", kernel " << variant);
            const ForwardCheck c = run_kernel(d, p, variant);
            CHECK_ACCURATE(c.O, 1e-5);
            CHECK_VALID(c.L);
        }
    }
}

}  // namespace

TEST_CASE("ch5 CPU mirror matches the fp64 reference (B_r != B_c, ragged N, causal)", "[cpu][chapter5]") {
    struct Case { int B, H, N, D; bool causal; ch5::Tiles t; double magnitude; };
    const Case cases[] = {
        {1, 1, 1, 16, false, {32, 16}, 1},   {2, 3, 17, 32, true, {16, 32}, 1},
        {1, 2, 113, 64, false, {32, 16}, 1}, {1, 2, 113, 64, true, {32, 16}, 1},
        {2, 1, 200, 40, true, {64, 64}, 1},  {1, 1, 257, 128, false, {64, 32}, 1},
        {1, 1, 300, 128, true, {48, 80}, 1}, {1, 2, 150, 64, true, {32, 32}, 1000},
    };
    for (const Case& c : cases) {
        const AttnProblem p = make_problem(make_shape(c.B, c.H, c.N, c.D, c.causal), 5 + c.N, c.magnitude);
        std::vector<float> O(p.shape.elements()), L(p.shape.rows());
        ch5::forward_cpu_mirror(p.shape, p.Q.data(), p.K.data(), p.V.data(), O.data(), L.data(), c.t);
        INFO(p.shape.str() << " tiles " << c.t.Br << "x" << c.t.Bc << " magnitude " << c.magnitude);
        const ForwardCheck check = check_forward(p, O.data(), L.data(), kFp32Tolerance, 1 << 30);
        CHECK_ACCURATE(check.O, 1e-5);
        CHECK_VALID(check.L);
    }
}

TEST_CASE("ch5 tiles and supported head dims", "[cpu][chapter5]") {
    CHECK(ch5::ladder_steps() == 7);  // one CH5_LADDER_STEP_TEST line per step, below
    CHECK(ch5::unsupported_reason(ch5::kTuned, 64).empty());
    CHECK(ch5::unsupported_reason(ch5::kTuned, 100).empty());
    CHECK_FALSE(ch5::unsupported_reason(ch5::kTuned, 66).empty());
    CHECK_FALSE(ch5::unsupported_reason(ch5::kTuned, 8).empty());
    CHECK_FALSE(ch5::unsupported_reason(ch5::kTuned, 132).empty());
    CHECK(ch5::unsupported_reason(ch5::kReadable, 7).empty());
    CHECK_FALSE(ch5::unsupported_reason(3, 64).empty());
    const ch5::Tiles big = ch5::tiles(ch5::kTuned, 128, 227 * 1024);
    const ch5::Tiles small = ch5::tiles(ch5::kTuned, 128, 64 * 1024);
    CHECK(big.Br * big.Bc > small.Br * small.Bc);
    CHECK(ch5::tiles(ch5::kReadable, 128, 0).Bc == 16);
}

// ================================ the whole run ==================================================

TEST_CASE("ch5 kernels match the fp64 reference on the shape grid", "[gpu][chapter5]") {
    check_on_grid({ch5::kReadable, ch5::kTuned});
}

TEST_CASE("ch5 kernels agree with each other and with the CPU mirror", "[gpu][chapter5][v1][v2]") {
    for (int N : {1, 17, 113, 300})
        for (int D : {32, 128})
            for (bool causal : {false, true}) {
                const AttnProblem p = make_problem(make_shape(2, 3, N, D, causal), 31 * N + D);
                DeviceAttention<float> d(p);
                std::vector<float> O_mirror(p.shape.elements()), L_mirror(p.shape.rows());
                std::vector<std::vector<float>> O(3), L(3);
                for (int v : {ch5::kReadable, ch5::kTuned}) {
                    run_kernel(d, p, v);
                    O[v] = d.O_host(), L[v] = d.L_host();
                }
                const ch5::Tiles t = ch5::tiles(ch5::kTuned, D, device_info().smem_per_block_optin);
                ch5::forward_cpu_mirror(p.shape, p.Q.data(), p.K.data(), p.V.data(), O_mirror.data(), L_mirror.data(), t);
                INFO(p.shape.str());
                CHECK_VALID(agree("O 1v2", O[1], O[2]));
                CHECK_VALID(agree("L 1v2", L[1], L[2]));
                CHECK_VALID(agree("O 2vm", O[2], O_mirror));
                CHECK_VALID(agree("L 2vm", L[2], L_mirror));
            }
}

// ================================ one kernel: [vK] ================================================
// Each kernel's own tests, tagged [v1] or [v2]. The whole run checks both kernels on the grid in
// one test case, each shape's inputs made once (above); the per-kernel grid test is hidden ([.])
// from it, and runs when selected by its tag (VARIANT=K) or name.

namespace {

// Inputs of magnitude 1e3: scores in the thousands, where e^S alone overflows fp32.
void check_large_inputs(int variant) {
    for (int N : {113, test::small_shapes() ? 200 : 2048})
        for (bool causal : {false, true}) {
            const AttnProblem p = make_problem(make_shape(1, 2, N, 64, causal), 3 * N, 1000.0);
            DeviceAttention<float> d(p);
            INFO(p.shape.str() << ", magnitude 1e3, kernel " << variant);
            const ForwardCheck c = run_kernel(d, p, variant);
            CHECK_VALID(c.O);
            CHECK_VALID(c.L);
        }
}

// Two runs with the same inputs give the same bits.
void check_deterministic(int variant) {
    const AttnProblem p = make_problem(make_shape(2, 3, 1000, 64, true), 77);
    DeviceAttention<float> d(p);
    run_kernel(d, p, variant);
    const std::vector<float> O1 = d.O_host(), L1 = d.L_host();
    run_kernel(d, p, variant);
    const std::vector<float> O2 = d.O_host(), L2 = d.L_host();
    INFO("kernel " << variant);
    CHECK(std::memcmp(O1.data(), O2.data(), O1.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(L1.data(), L2.data(), L1.size() * sizeof(float)) == 0);
}

// The forward allocates no device memory (no N x N matrix, no workspace).
void check_no_allocation(int variant) {
    const int N = test::small_shapes() ? 512 : 16384;
    const AttnProblem p = make_problem(make_shape(1, 1, N, 64, false), 5);
    DeviceAttention<float> d(p);
    run_kernel(d, p, variant);  // first launch loads the module: not part of the measure
    // Free memory is device-wide: another process (make sanitize runs several test binaries at
    // once) can move it during a forward. A forward that keeps memory lowers it on every try, so
    // one try with no change is the pass.
    bool unchanged = false;
    for (int attempt = 0; attempt < 5 && !unchanged; ++attempt) {
        const std::size_t before = device_free_bytes();
        ch5::forward(variant, p.shape, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get());
        CUDA_CHECK(cudaDeviceSynchronize());
        unchanged = device_free_bytes() == before;
    }
    INFO("kernel " << variant << ": N x N floats would be " << double(N) * N * 4 / 1e6 << " MB");
    CHECK(unchanged);
}

}  // namespace

#define CHAPTER5_VARIANT_TESTS(K)                                                                       \
    TEST_CASE("ch5 kernel " #K " on the shape grid", "[.][gpu][chapter5][v" #K "]") { check_on_grid({K}); } \
    TEST_CASE("ch5 kernel " #K ": inputs of magnitude 1e3 do not overflow", "[gpu][chapter5][v" #K "]") { \
        check_large_inputs(K);                                                                          \
    }                                                                                                   \
    TEST_CASE("ch5 kernel " #K ": a fixed seed gives bit-identical output", "[gpu][chapter5][v" #K "]") { \
        check_deterministic(K);                                                                         \
    }                                                                                                   \
    TEST_CASE("ch5 kernel " #K ": extra device memory is O(N), the forward allocates nothing",          \
              "[gpu][chapter5][v" #K "]") {                                                             \
        check_no_allocation(K);                                                                         \
    }

CHAPTER5_VARIANT_TESTS(1)
CHAPTER5_VARIANT_TESTS(2)
static_assert(ch5::kReadable == 1 && ch5::kTuned == 2, "one CHAPTER5_VARIANT_TESTS line per kernel");

// ================================ one ladder step: [v2.S] =========================================

namespace {

// Ladder step `step` on tails and full tiles, both padded head dims, causal and not.
void check_ladder_step(int step) {
    for (int N : {17, test::small_shapes() ? 113 : 1023})
        for (int D : {64, 128})
            for (bool causal : {false, true}) {
                const AttnProblem p = make_problem(make_shape(2, 2, N, D, causal), 7 * N + D);
                DeviceAttention<float> d(p);
                INFO(p.shape.str() << ", ladder step " << step);
                const ForwardCheck c = run_kernel(d, p, 0, step);
                CHECK_ACCURATE(c.O, 1e-5);
                CHECK_VALID(c.L);
            }
}

}  // namespace

#define CH5_LADDER_STEP_TEST(S) \
    TEST_CASE("ch5 ladder step " #S " is correct", "[gpu][chapter5][v2." #S "]") { check_ladder_step(S); }

CH5_LADDER_STEP_TEST(1)
CH5_LADDER_STEP_TEST(2)
CH5_LADDER_STEP_TEST(3)
CH5_LADDER_STEP_TEST(4)
CH5_LADDER_STEP_TEST(5)
CH5_LADDER_STEP_TEST(6)
CH5_LADDER_STEP_TEST(7)
