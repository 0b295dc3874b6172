/// @file dispatch.h
/// @brief From a run-time head dimension to a compile-time one: `with_head_dim<64, 128>(D, f)` calls
/// f(std::integral_constant<int, D>{}) for the listed D that equals it (or, with `Padded`, the
/// first listed D at least as large). Kernels are templates on D (register arrays need it); the
/// program reads D at run time; this is the one place the two meet. Chapters 7–10 write their
/// tables of compiled kernels with the two lists below: `HeadDimList` (the head dims a chapter
/// compiles) and `ConfigList` (a step's tile configurations, in the order of its candidates).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>
#include <vector>

#include "exit_codes.h"

namespace fa {

/// How a run-time D picks an instantiation.
enum class DimMatch {
    kExact,   ///< only a listed D runs
    kPadded,  ///< the smallest listed D ≥ the run-time one (the kernel pads the head dim)
};

/// The first of a list of head dims.
template <int First, int... Rest>
constexpr int first_of() {
    return First;
}

/// The listed D that `D` runs as (see DimMatch), or 0 when none.
template <int... Dims>
constexpr int matching_head_dim(int D, DimMatch how) {
    int found = 0;
    ((found == 0 && (how == DimMatch::kExact ? D == Dims : D <= Dims) ? found = Dims : 0), ...);
    return found;
}

/// Calls f(std::integral_constant<int, Dm>{}) with Dm = matching_head_dim<Dims...>(D, how) and
/// returns what f returns. A D that matches none is a caller's bug (programs check the head dim
/// when they parse it): `what` and D are printed and the program exits.
template <int... Dims, class F>
decltype(auto) with_head_dim(int D, F&& f, DimMatch how = DimMatch::kExact, const char* what = "kernel") {
    const int Dm = matching_head_dim<Dims...>(D, how);
    if (Dm == 0) {
        std::fprintf(stderr, "%s: head dim %d has no compiled kernel\n", what, D);
        std::exit(kExitFailed);
    }
    using R = decltype(f(std::integral_constant<int, first_of<Dims...>()>{}));  // every Dims' f returns R
    if constexpr (std::is_void_v<R>) {
        ((Dm == Dims ? (f(std::integral_constant<int, Dims>{}), 0) : 0), ...);
    } else {
        R out{};
        ((Dm == Dims ? (out = f(std::integral_constant<int, Dims>{}), 0) : 0), ...);
        return out;
    }
}

/// The head dims a chapter's kernels are compiled for: the one place its run-time D meets them.
template <int... Dims>
struct HeadDimList {
    /// Calls f(std::integral_constant<int, D>{}) (D must be listed: the chapter's
    /// unsupported_reason checks it with has()).
    template <class F>
    static decltype(auto) with(int D, F&& f) {
        return with_head_dim<Dims...>(D, std::forward<F>(f));
    }
    static std::vector<int> list() { return {Dims...}; }
    /// Whether D has compiled kernels.
    static constexpr bool has(int D) { return matching_head_dim<Dims...>(D, DimMatch::kExact) != 0; }
};

/// A list of tile configurations (types): a step's candidates, in order; candidate k is the k-th.
template <class... Cfgs>
struct ConfigList {
    static constexpr int size = int(sizeof...(Cfgs));
};

/// Calls f(Cfg{}) for every configuration of the list, in order.
template <class... Cfgs, class F>
void for_each_config(ConfigList<Cfgs...>, F&& f) {
    (f(Cfgs{}), ...);
}

/// A step's candidates (`List`, a ConfigList) and the one it runs by default (`kDefault`, an index
/// in List: the fastest of the chapter's sweep, as its README shows).
template <class Candidates, int Default>
struct Tuning {
    using List = Candidates;
    static constexpr int kDefault = Default;
    static_assert(0 <= Default && Default < Candidates::size, "Tuning: the default must be a candidate of the list");
};

/// make(Cfg{}) for every configuration of the list, in order: a step's table of compiled kernels.
template <class Entry, class... Cfgs, class Make>
std::vector<Entry> entries_of(ConfigList<Cfgs...>, Make&& make) {
    return {make(Cfgs{})...};
}

}  // namespace fa
