/// @file random.h
/// @brief Seeded, platform-independent random inputs.
///
/// The generator (SplitMix64) and the normal transform (Box-Muller) are written here rather than
/// taken from `<random>`, whose distributions differ between standard libraries: the same seed gives
/// the same inputs on every machine, so a failure seen once can be reproduced anywhere.
/// Test data should not be zero-mean (an output near zero makes relative error meaningless):
/// pass a `mean` or an interval off zero.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fa {

/// SplitMix64: a small, fast generator with good statistics for test data.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : state_(seed) {}

    /// Next 64 random bits.
    std::uint64_t next() {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    /// Uniform in [0, 1) with 53 random bits.
    double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
    /// Uniform in [lo, hi).
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    /// Standard normal (Box-Muller; one of the pair is discarded to keep the state simple).
    double normal() {
        const double u1 = 1.0 - uniform();  // in (0, 1]: log is finite
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    std::uint64_t state_;
};

/// Fills x[0..n) with values uniform in [lo, hi).
inline void fill_uniform(float* x, std::size_t n, std::uint64_t seed, double lo, double hi) {
    Rng rng(seed);
    for (std::size_t i = 0; i < n; ++i) x[i] = float(rng.uniform(lo, hi));
}

/// Fills x[0..n) with normal values of the given mean and standard deviation.
inline void fill_normal(float* x, std::size_t n, std::uint64_t seed, double mean, double stddev) {
    Rng rng(seed);
    for (std::size_t i = 0; i < n; ++i) x[i] = float(mean + stddev * rng.normal());
}

/// A new vector of n values uniform in [lo, hi).
inline std::vector<float> random_uniform(std::size_t n, std::uint64_t seed, double lo, double hi) {
    std::vector<float> x(n);
    fill_uniform(x.data(), n, seed, lo, hi);
    return x;
}

/// A new vector of n normal values of the given mean and standard deviation.
inline std::vector<float> random_normal(std::size_t n, std::uint64_t seed, double mean,
                                        double stddev) {
    std::vector<float> x(n);
    fill_normal(x.data(), n, seed, mean, stddev);
    return x;
}

}  // namespace fa
