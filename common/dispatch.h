/// @file dispatch.h
/// @brief From a run-time head dimension to a compile-time one: `with_head_dim<64, 128>(D, f)` calls
/// f(std::integral_constant<int, D>{}) for the listed D that equals it (or, with `Padded`, the
/// first listed D at least as large). Kernels are templates on D (register arrays need it); the
/// program reads D at run time; this is the one place the two meet.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <type_traits>

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
        std::exit(EXIT_FAILURE);
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

}  // namespace fa
