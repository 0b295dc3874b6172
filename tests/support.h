// Helpers shared by the test files: the shape grid, the small-shape mode for the sanitizer, and
// assertions that print a Validation's report when they fail.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../common/shape.h"
#include "../common/validate.h"

namespace fa::test {

/// True under `make sanitize` (FA_TEST_SMALL=1): GPU tests then use small shapes only, because
/// compute-sanitizer slows kernels down by 10–100×.
inline bool small_shapes() {
    const char* v = std::getenv("FA_TEST_SMALL");
    return v != nullptr && std::strcmp(v, "0") != 0;
}

/// The course's shape grid (chapter 3's): B ∈ {1,2}, H ∈ {1,3}, N ∈ {1,17,113,1023,4097},
/// D ∈ {16,32,64,128}, causal off and on. Small mode keeps N ≤ 113 and (B,H) ∈ {(1,1),(2,3)}.
inline std::vector<AttnShape> shape_grid(const std::vector<int>& dims = {16, 32, 64, 128}) {
    const bool small = small_shapes();
    const std::vector<int> Ns = small ? std::vector<int>{1, 17, 113} : std::vector<int>{1, 17, 113, 1023, 4097};
    const std::vector<std::pair<int, int>> BHs =
        small ? std::vector<std::pair<int, int>>{{1, 1}, {2, 3}}
              : std::vector<std::pair<int, int>>{{1, 1}, {1, 3}, {2, 1}, {2, 3}};
    std::vector<AttnShape> grid;
    for (bool causal : {false, true})
        for (int D : dims)
            for (int N : Ns)
                for (auto bh : BHs) grid.push_back(make_shape(bh.first, bh.second, N, D, causal));
    return grid;
}

/// FlashAttention-2's test shapes of queries and keys of different lengths: (N, N_k) ∈ {(113, 203),
/// (128, 217), (108, 256), (256, 128), (1, 97), (97, 1)}, causal off and on, B = 2, H = 4 with
/// groups of 1, 2 and 4 query heads per K/V head, each head dim of `dims`. Small mode keeps
/// (113, 203) and (97, 1) with groups 1 and 4.
inline std::vector<AttnShape> cross_grid(const std::vector<int>& dims = {64, 128}) {
    const bool small = small_shapes();
    const std::vector<std::pair<int, int>> lengths =
        small ? std::vector<std::pair<int, int>>{{113, 203}, {97, 1}}
              : std::vector<std::pair<int, int>>{{113, 203}, {128, 217}, {108, 256}, {256, 128}, {1, 97}, {97, 1}};
    const std::vector<int> groups = small ? std::vector<int>{1, 4} : std::vector<int>{1, 2, 4};
    std::vector<AttnShape> grid;
    for (bool causal : {false, true})
        for (int D : dims)
            for (auto nk : lengths)
                for (int g : groups) grid.push_back(with_kv(make_shape(2, 4, nk.first, D, causal), nk.second, 4 / g));
    return grid;
}

/// Declares, before main runs, that the test cases tagged [tag] cannot run in this build when
/// `why` is not empty (e.g. NCCL missing): tests/main.cpp then counts them as not run, never as
/// passed, and prints why. Returns whether they can run. Use it to initialize a file's constant.
bool not_runnable_here(const char* tag, const std::string& why);

}  // namespace fa::test

/// Checks a Validation passed; on failure the report (errors, first mismatches) is printed.
#define CHECK_VALID(validation)                   \
    do {                                          \
        const ::fa::Validation& fa_v_ = (validation); \
        INFO(fa_v_.text());                       \
        CHECK(fa_v_.ok());                        \
    } while (0)

/// Like CHECK_VALID, and the relative L2 error must also stay under `max_rel_l2`.
#define CHECK_ACCURATE(validation, max_rel_l2)    \
    do {                                          \
        const ::fa::Validation& fa_v_ = (validation); \
        INFO(fa_v_.text());                       \
        CHECK(fa_v_.ok());                        \
        CHECK(fa_v_.rel_l2 <= (max_rel_l2));      \
    } while (0)
