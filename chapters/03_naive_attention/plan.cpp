// Host-side planning of chapter 3: which shapes the kernels take, how much device memory a shape
// needs (and the longest sequence that fits), and what each stage computes and moves. Plain C++,
// so CI tests it without a GPU.
#include <climits>
#include <cstdio>
#include <string>

#include "naive_attention.h"

namespace ch3 {
namespace {

constexpr double kFloat = sizeof(float);

// Entries of S inside the tiles the causal kernels do not skip: row tile tr (rows tr·kTile ..)
// covers keys 0 .. causal_key_end(tr·kTile, N) − 1. The same entries of P are what P V reads.
double causal_tile_entries(int N) {
    double entries = 0;
    for (int row0 = 0; row0 < N; row0 += kTile) {
        const int rows = N - row0 < kTile ? N - row0 : kTile;
        entries += double(rows) * double(causal_key_end(row0, N));
    }
    return entries;
}

std::string gb(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
    return buf;
}

}  // namespace

std::string unsupported_reason(int variant, const fa::AttnShape& s) {
    if (variant != kHandWritten && variant != kCublas)
        return "variant " + std::to_string(variant) +
               " does not exist: 1 is the hand-written pipeline, 2 the cuBLAS one";
    if (s.B < 1 || s.H < 1 || s.N < 1 || s.D < 1) return "B, H, N and D must all be at least 1";
    if (double(s.rows()) > double(INT_MAX))
        return "B·H·N = " + std::to_string(s.rows()) +
               " rows exceed 2^31 − 1, the most blocks a grid's x dimension holds (one block per row)";
    if (variant == kHandWritten && s.heads_total() > 65535)
        return "B·H = " + std::to_string(s.heads_total()) +
               " exceeds 65535, the grid z limit of the hand-written kernels (one z index per head)";
    return "";
}

MemoryEstimate estimate_memory(const fa::AttnShape& s, double overhead_bytes) {
    const double bh = double(s.heads_total()), n = double(s.N);
    MemoryEstimate m;
    m.qkvo = 4 * bh * n * double(s.D) * kFloat;
    m.lse = bh * n * kFloat;
    m.sp = 2 * bh * n * n * kFloat;
    m.overhead = overhead_bytes;
    return m;
}

int largest_seq_that_fits(int B, int H, int D, double overhead_bytes, double free_bytes, int max_seq) {
    auto fits = [&](int N) {
        return estimate_memory(fa::make_shape(B, H, N, D, false), overhead_bytes).total() <= free_bytes;
    };
    if (!fits(1)) return 0;
    int lo = 1, hi = max_seq;  // fits(lo) holds; the answer lies in [lo, hi]
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (fits(mid)) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

std::string memory_shortfall_text(const fa::AttnShape& s, double overhead_bytes, double free_bytes,
                                  const std::string& device) {
    const MemoryEstimate m = estimate_memory(s, overhead_bytes);
    const int fit = largest_seq_that_fits(s.B, s.H, s.D, overhead_bytes, free_bytes);
    std::string t = s.str() + " needs " + gb(m.total()) + " of device memory:\n";
    t += "  S and P (2 x B·H·N² floats)   " + gb(m.sp) + "\n";
    t += "  Q, K, V, O (4 x B·H·N·D)      " + gb(m.qkvo) + "\n";
    t += "  L (B·H·N)                     " + gb(m.lse) + "\n";
    t += "  cuBLAS and timer allowance    " + gb(m.overhead) + "\n";
    t += "but only " + gb(free_bytes) + " are free on " + device + ".\n";
    if (fit > 0)
        t += "The largest N that fits at B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) +
             " D=" + std::to_string(s.D) + " is N = " + std::to_string(fit) + ".\n";
    else
        t += "Not even N = 1 fits at B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) +
             " D=" + std::to_string(s.D) + ".\n";
    return t;
}

std::array<StageCost, 3> stage_costs(int variant, const fa::AttnShape& s) {
    const double bh = double(s.heads_total()), n = double(s.N), d = double(s.D);
    const bool skips_tiles = variant == kHandWritten && s.causal;
    // Entries of S that are computed (and of P that are read by P V).
    const double computed = bh * (skips_tiles ? causal_tile_entries(s.N) : n * n);
    // Entries of S the softmax reads: variant 2 reads only the visible part of each row.
    const double visible = bh * (variant == kCublas && s.causal ? n * (n + 1) / 2 : n * n);
    return {{
        {"S = Q K^T", 2 * d * computed, kFloat * (2 * bh * n * d + bh * n * n)},
        {"P = softmax(S)", 0, kFloat * (visible + bh * n * n + bh * n)},
        {"O = P V", 2 * d * computed, kFloat * (computed + 2 * bh * n * d)},
    }};
}

}  // namespace ch3
