/// @file validate.h
/// @brief Compares a result with a float64 reference and says exactly where and by how much it differs.
///
/// An element passes when |got − want| ≤ atol + rtol·|want|. A NaN in the result always fails,
/// whatever the reference says, so poisoned (never written) outputs cannot pass; so does an Inf,
/// except where the reference is the same infinity (the L = −inf of an attention row that sees no
/// key, reference.h), which it matches exactly and which adds nothing to the error statistics. The
/// returned Validation carries the error statistics that programs print and tests assert on.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace fa {

/// Absolute and relative tolerance of a comparison.
struct Tolerance {
    double atol;
    double rtol;
};

/// A position in a (batch, head, row, col) tensor.
struct Where {
    long long batch, head, row, col;
};

/// Maps a flat element index of the compared arrays to its (batch, head, row, col).
using WhereFn = std::function<Where(std::size_t)>;

/// Where element i is: `where(i)`, or column i of a single row when no map is given.
inline Where locate(const WhereFn& where, std::size_t i) {
    if (where) return where(i);
    return Where{0, 0, 0, (long long)i};
}

/// Index map of a contiguous (batch, heads, rows, cols) tensor; a matrix is heads = batch = 1.
inline WhereFn contiguous(std::size_t heads, std::size_t rows, std::size_t cols) {
    return [=](std::size_t i) {
        const std::size_t c = i % cols, r = (i / cols) % rows, h = (i / cols / rows) % heads,
                          b = i / cols / rows / heads;
        return Where{(long long)b, (long long)h, (long long)r, (long long)c};
    };
}

/// One element that failed the comparison.
struct Mismatch {
    Where where;
    double got, want;
};

/// What a comparison found.
struct Validation {
    std::string name;              ///< what was compared ("O", "L", ...)
    std::size_t count = 0;         ///< elements compared
    std::size_t failures = 0;      ///< elements outside the tolerance (non-finite ones included)
    std::size_t nonfinite = 0;     ///< NaN or Inf in the result
    double max_abs = 0;            ///< max |got − want|
    double max_rel = 0;            ///< max |got − want| / |want| over elements with |want| > atol
    double rel_l2 = 0;             ///< ‖got − want‖₂ / ‖want‖₂
    Tolerance tol{0, 0};           ///< the tolerance used
    std::vector<Mismatch> first;   ///< the first few failures, in index order

    /// True when every element passed (and there was something to compare).
    bool ok() const { return count > 0 && failures == 0; }

    /// One line of statistics, followed by the first mismatches if any.
    std::string text() const {
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "  %-4s %s  max_abs %.3e  max_rel %.3e  rel_l2 %.3e  (%zu elements, atol %.0e, "
                      "rtol %.0e)\n",
                      name.c_str(), ok() ? "PASS" : "FAIL", max_abs, max_rel, rel_l2, count, tol.atol,
                      tol.rtol);
        std::string t = buf;
        if (failures > 0) {
            std::snprintf(buf, sizeof buf, "       %zu elements out of tolerance, %zu of them NaN/Inf\n",
                          failures, nonfinite);
            t += buf;
        }
        for (const Mismatch& m : first) {
            std::snprintf(buf, sizeof buf,
                          "       at (batch %lld, head %lld, row %lld, col %lld): got %.8g, want %.8g\n",
                          m.where.batch, m.where.head, m.where.row, m.where.col, m.got, m.want);
            t += buf;
        }
        return t;
    }
    /// Prints text().
    void print(std::FILE* out = stdout) const { std::fputs(text().c_str(), out); }
};

/// Compares got[0..n) with want[0..n). `where` names positions in reports (default: flat index as col).
inline Validation validate(const std::string& name, const float* got, const double* want,
                           std::size_t n, Tolerance tol, const WhereFn& where = WhereFn(),
                           std::size_t max_reported = 8) {
    Validation v;
    v.name = name;
    v.count = n;
    v.tol = tol;
    double err2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double g = got[i], w = want[i];
        if (std::isinf(w) && g == w) continue;  // the one infinity a result may hold
        const bool finite = std::isfinite(g);
        const double err = finite ? std::fabs(g - w) : INFINITY;
        // written as !(err <= bound) so that a NaN reference also fails; an infinite reference
        // makes the bound infinite, so it is matched above or not at all
        const bool bad = !finite || std::isinf(w) || !(err <= tol.atol + tol.rtol * std::fabs(w));
        if (!finite) ++v.nonfinite;
        if (bad) {
            ++v.failures;
            if (v.first.size() < max_reported)
                v.first.push_back(Mismatch{locate(where, i), g, w});
        }
        if (finite) {
            if (err > v.max_abs) v.max_abs = err;
            if (std::fabs(w) > tol.atol && err / std::fabs(w) > v.max_rel)
                v.max_rel = err / std::fabs(w);
            err2 += err * err;
        }
        ref2 += w * w;
    }
    if (v.nonfinite > 0) v.max_abs = v.max_rel = v.rel_l2 = INFINITY;
    else v.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    return v;
}

/// Checks that every element of x is finite: catches poisoned (never written) outputs in parts of a
/// tensor that are not compared element by element with the reference.
inline Validation check_all_finite(const std::string& name, const float* x, std::size_t n,
                                   const WhereFn& where = WhereFn()) {
    Validation v;
    v.name = name;
    v.count = n;
    for (std::size_t i = 0; i < n; ++i) {
        if (std::isfinite(x[i])) continue;
        ++v.nonfinite;
        ++v.failures;
        if (v.first.size() < 8) v.first.push_back(Mismatch{locate(where, i), x[i], 0.0});
    }
    if (v.nonfinite > 0) v.max_abs = v.max_rel = v.rel_l2 = INFINITY;
    return v;
}

}  // namespace fa
