/// @file low_precision_rule.h
/// @brief The 2× rule that judges every 16-bit kernel (chapters 7, 8 and 10): its error against
/// float64 is at most twice the error of the same math rounded the same way on the CPU, plus a
/// floor of fp32 round-off; NaN or Inf never pass.
///
/// Why floors: the rule compares the kernel with twice the mirror's error, which is zero when the
/// mirror is exact (N = 1: O = V_0 exactly), while the kernel's fp32 arithmetic runs in another
/// order. The floors are that order's worth of fp32 round-off, far below a 16-bit rounding: for O,
/// 16 fp32 ulps of the largest |V| (|O| ≤ max|V|); for L, the worst-case round-off of a D-term fp32
/// dot product, D · 2⁻²² relative to max(1, |L|) (the kernels sum Q·K in another order than the
/// mirror, on tensor cores).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "validate.h"

namespace fa {

/// The floors of the 2× rule: absolute (O, L) and relative-L2 (rel_O, rel_L).
struct RuleFloors {
    double O, L, rel_O, rel_L;
};

/// The floors for head dim D, from max|V| and max|L| (the file's comment says why each).
inline RuleFloors rule_floors(int D, double max_abs_V, double max_abs_L) {
    const double max_L = std::max(1.0, max_abs_L);
    return {std::ldexp(max_abs_V, -20), D * std::ldexp(max_L, -22), std::ldexp(1.0, -20), D * std::ldexp(1.0, -22)};
}

/// One line of the rule for one output (O, L; chapter 8's dQ, dK, dV): the kernel's max abs error
/// and relative L2 error (k) at most 2 · the mirror's (m) + floor_abs, resp. + floor_rel, nothing
/// non-finite; appends the comparison to `text` and returns the verdict.
inline bool rule_line(const char* name, const Validation& k, const Validation& m, double floor_abs,
                      double floor_rel, std::string& text) {
    const double bound_abs = 2.0 * m.max_abs + floor_abs, bound_rel = 2.0 * m.rel_l2 + floor_rel;
    // a NaN or Inf anywhere makes max_abs +inf and nonfinite > 0: never a pass
    const bool ok = k.count > 0 && k.nonfinite == 0 && m.nonfinite == 0 && std::isfinite(bound_abs) &&
                    std::isfinite(bound_rel) && k.max_abs <= bound_abs && k.rel_l2 <= bound_rel;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "  2x rule %-2s max_abs %.3e <= 2 x %.3e + %.1e = %.3e, rel_l2 %.3e <= 2 x %.3e + "
                  "%.1e = %.3e: %s\n",
                  name, k.max_abs, m.max_abs, floor_abs, bound_abs, k.rel_l2, m.rel_l2, floor_rel,
                  bound_rel, ok ? "PASS" : "FAIL");
    text += buf;
    return ok;
}

}  // namespace fa
