// Chapter 10: the host-side rules of a decoding step: shapes and their checks, the split plans
// (the heuristic the README measures), which kernel shape each variant has. Plain C++, tested in CI.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "../../common/math.h"
#include "decoding.h"
#include "kernel/candidates.h"
#include "kernel/split_plan.h"

namespace ch10 {

std::string variant_name(int variant) {
    static const char* names[] = {"1-fa2-grid", "2-split-kv", "3-gqa", "4-paged", "5-tuned", "6-fp8-kv"};
    if (variant < kFirstVariant || variant > kLastVariant) return "unknown";
    return names[variant - 1];
}

int DecodeShape::page_shift() const {
    int shift = 0;
    while (page_size > 0 && (1 << shift) < page_size) ++shift;
    return shift;
}
int DecodeShape::max_pages() const { return page_size > 0 ? fa::ceil_div(N_max, page_size) : 0; }
std::size_t DecodeShape::cache_elems() const {
    const std::size_t tokens = paged() ? std::size_t(pool_pages()) * page_size : std::size_t(B) * N_max;
    return tokens * std::size_t(H_kv) * D;
}
int DecodeShape::max_len() const { return lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end()); }
double DecodeShape::kv_bytes(std::size_t elem_bytes) const {
    double tokens = 0;
    for (int len : lens) tokens += len;
    return 2.0 * tokens * H_kv * D * double(elem_bytes);
}

std::string DecodeShape::str() const {
    std::string l;
    const bool same = std::all_of(lens.begin(), lens.end(), [&](int x) { return x == lens[0]; });
    if (same && !lens.empty()) {
        l = std::to_string(lens[0]);
    } else {
        for (std::size_t b = 0; b < lens.size() && b < 6; ++b) l += (b ? "," : "") + std::to_string(lens[b]);
        if (lens.size() > 6) l += ",...";
    }
    char buf[224];
    std::snprintf(buf, sizeof buf, "B=%d H_q=%d H_kv=%d q_len=%d D=%d lens=%s %s", B, H_q, H_kv, q_len, D,
                  l.c_str(), paged() ? ("paged P=" + std::to_string(page_size)).c_str() : "contiguous");
    return buf;
}

DecodeShape make_decode_shape(int B, int H_q, int H_kv, int q_len, int D, int N_max, std::vector<int> lens,
                              int page_size) {
    DecodeShape s;
    s.B = B, s.H_q = H_q, s.H_kv = H_kv, s.q_len = q_len, s.D = D, s.N_max = N_max, s.page_size = page_size;
    s.scale = float(1.0 / std::sqrt(double(D)));
    s.lens = std::move(lens);
    return s;
}

std::string invalid_reason(const DecodeShape& s) {
    char buf[256];
    if (s.B < 1 || s.H_q < 1 || s.H_kv < 1 || s.N_max < 1 || s.B > 65535) {
        std::snprintf(buf, sizeof buf, "B, H_q, H_kv and N_max must be >= 1 (and B <= 65535); got %s", s.str().c_str());
        return buf;
    }
    if (s.H_q % s.H_kv != 0) {
        std::snprintf(buf, sizeof buf, "H_q = %d is not a multiple of H_kv = %d (GQA needs H_q = g * H_kv)", s.H_q,
                      s.H_kv);
        return buf;
    }
    if (s.D != 64 && s.D != 128) {
        std::snprintf(buf, sizeof buf, "head dim %d is not supported: the kernels are compiled for D = 64 and 128",
                      s.D);
        return buf;
    }
    if (s.q_len < 1 || s.q_len > 16) {
        std::snprintf(buf, sizeof buf, "q_len = %d: decoding takes 1..16 new tokens per sequence", s.q_len);
        return buf;
    }
    if (int(s.lens.size()) != s.B) {
        std::snprintf(buf, sizeof buf, "%zu cache lengths given for B = %d sequences", s.lens.size(), s.B);
        return buf;
    }
    for (int b = 0; b < s.B; ++b)
        if (s.lens[b] < s.q_len || s.lens[b] > s.N_max) {
            std::snprintf(buf, sizeof buf,
                          "cache length %d of sequence %d is outside q_len..N_max = %d..%d (the cache holds "
                          "the new tokens, and at most N_max)",
                          s.lens[b], b, s.q_len, s.N_max);
            return buf;
        }
    if (s.paged() && (s.page_size < 16 || s.page_size > 256 || (s.page_size & (s.page_size - 1)) != 0)) {
        std::snprintf(buf, sizeof buf, "page size %d: pages hold a power of two of 16..256 tokens", s.page_size);
        return buf;
    }
    if (double(s.N_max) * s.D >= 2147483648.0 || double(s.H_q) * s.q_len > 65535.0 * kQRows) {
        std::snprintf(buf, sizeof buf, "N_max * D = %.0f (or H_q * q_len) is too large for the kernels' indices",
                      double(s.N_max) * s.D);
        return buf;
    }
    return "";
}

std::string invalid_table_reason(const DecodeShape& s, const std::vector<int>& table, int pool_pages) {
    char buf[256];
    if (table.size() != std::size_t(s.B) * s.max_pages()) {
        std::snprintf(buf, sizeof buf, "the block table has %zu entries, not B * max_pages = %d", table.size(),
                      s.B * s.max_pages());
        return buf;
    }
    for (int b = 0; b < s.B; ++b)
        for (int p = 0; p < fa::ceil_div(s.lens[b], s.page_size); ++p) {
            const int page = table[std::size_t(b) * s.max_pages() + p];
            if (page < 0 || page >= pool_pages) {
                std::snprintf(buf, sizeof buf,
                              "block table entry (sequence %d, page %d) = %d points outside the pool of %d pages", b,
                              p, page, pool_pages);
                return buf;
            }
        }
    return "";
}

SplitPlan plan_with_chunk(const DecodeShape& s, int chunk, int Bc) {
    SplitPlan plan;
    plan.chunk = std::max(Bc, fa::ceil_div(chunk, Bc) * Bc);
    plan.splits = 1;
    for (int len : s.lens) plan.splits = std::max(plan.splits, splits_of(len, s.q_len, plan.chunk));
    return plan;
}

SplitPlan plan_with_splits(const DecodeShape& s, int n, int Bc) {
    return plan_with_chunk(s, fa::ceil_div(s.max_len() - s.q_len + 1, std::max(1, n)), Bc);
}

namespace {
// Blocks of the grid that have keys to read with `chunk` keys per split.
long long busy_blocks(const DecodeShape& s, int groups, int chunk) {
    long long blocks = 0;
    for (int len : s.lens) blocks += groups * static_cast<long long>(splits_of(len, s.q_len, chunk));
    return blocks;
}
}  // namespace

SplitPlan plan_splits(const DecodeShape& s, int groups, int Bc, int slots) {
    double work = 0;  // key rows all blocks read together
    for (int len : s.lens) work += double(groups) * len;
    const double share = work / std::max(1, slots);
    int chunk = std::max(kMinChunkTiles * Bc, int(std::min<double>(share, s.max_len())));
    chunk = fa::ceil_div(chunk, Bc) * Bc;
    // Rounded up to whole tiles the shares can still need a few blocks more than there are SMs
    // (one more split per group): the smallest chunk of whole tiles that fits one wave, found by
    // bisection (busy_blocks only falls as the chunk grows), unless one split per sequence does not.
    const int top = fa::ceil_div(s.max_len(), Bc) * Bc;
    if (chunk < top && busy_blocks(s, groups, chunk) > slots) {
        int lo = chunk, hi = top;  // busy_blocks(lo) > slots; hi: one split for every sequence
        while (hi - lo > Bc) {
            const int mid = lo + (hi - lo) / Bc / 2 * Bc;
            (busy_blocks(s, groups, mid) > slots ? lo : hi) = mid;
        }
        chunk = hi;
    }
    return plan_with_chunk(s, chunk, Bc);
}

int heads_per_block(int variant, const DecodeShape& s) { return variant >= kGqa ? s.g() : 1; }

int groups_per_split(int variant, const DecodeShape& s) {
    const int heads = heads_per_block(variant, s);
    return s.H_q / heads * fa::ceil_div(heads * s.q_len, kQRows);
}

namespace {
/// Step 5's candidates as the program names them (their tiles are the same at every D, paged or not).
using Step5List = TunedTiles<128, false>::List;
}  // namespace

std::vector<std::string> tuning_candidates() {
    std::vector<std::string> out;
    fa::for_each_config(Step5List{}, [&](auto cfg) {
        using C = decltype(cfg);
        out.push_back(std::to_string(C::kWarps) + " warps (B_c = " + std::to_string(C::Bc) + "), " +
                      std::to_string(C::kStages) + " stages" + (C::kEarlyPrefetch ? ", L2 prefetch before lens[b]" : ""));
    });
    return out;
}
int tuned_candidate() { return TunedTiles<128, false>::kDefault; }

int block_keys(int variant, int candidate) {
    if (variant == kFp8) return Fp8Config<128, false>::Bc;
    if (variant != kTuned) return LadderConfig<128, false>::Bc;
    const std::vector<int> bc = fa::entries_of<int>(Step5List{}, [](auto cfg) { return decltype(cfg)::Bc; });
    return bc[std::size_t(candidate < 0 ? tuned_candidate() : candidate)];
}

std::string unsupported_reason(int variant, const DecodeShape& s, int candidate) {
    char buf[192];
    if (variant < kFirstVariant || variant > kLastVariant) {
        std::snprintf(buf, sizeof buf, "kernel %d does not exist (chapter 10 has kernels %d..%d)", variant,
                      kFirstVariant, kLastVariant);
        return buf;
    }
    if (candidate >= 0 && (variant != kTuned || candidate >= kTunedCandidateCount)) {
        std::snprintf(buf, sizeof buf, "tile candidate %d: only kernel 5 has candidates, 0..%d", candidate,
                      kTunedCandidateCount - 1);
        return buf;
    }
    if (variant == kPaged && !s.paged()) return "kernel 4 reads a paged cache (--page-size P)";
    if (variant < kPaged && s.paged()) return "kernels 1-3 read a contiguous cache";
    return invalid_reason(s);
}

std::vector<ProgramRun> sweep_runs(const DecodeShape& s) {
    std::vector<ProgramRun> runs;
    for (int c = 0; c < kTunedCandidateCount; ++c) {
        runs.push_back({kTuned, 0, c, 0});
        for (int n = 1; n <= 256; n *= 2) {
            if (n > 1 && plan_with_splits(s, n, block_keys(kTuned, c)).splits != n) break;  // no more plans of their own
            runs.push_back({kTuned, 0, c, n});
        }
    }
    return runs;
}

std::vector<ProgramRun> ladder_runs(int page_size, const std::vector<int>& page_sizes, int candidate) {
    std::vector<ProgramRun> runs;
    for (int v : {kFa2Grid, kSplitKv, kGqa, kTuned, kFp8}) runs.push_back({v, 0, v == kTuned ? candidate : -1, 0});
    runs.push_back({kPaged, page_size, -1, 0});
    for (int P : page_sizes)
        if (P > 0) runs.push_back({kTuned, P, candidate, 0});
    return runs;
}

std::string runs_error(const DecodeShape& s, const std::vector<ProgramRun>& runs) {
    for (const ProgramRun& r : runs) {
        DecodeShape stored = s;
        stored.page_size = r.page_size;
        const std::string why = unsupported_reason(r.variant, stored, r.candidate);
        if (!why.empty()) return why;
    }
    return "";
}

std::size_t partial_rows(const DecodeShape& s, const SplitPlan& plan) {
    return plan.splits > 1 ? s.rows() * std::size_t(plan.splits) : 0;
}
std::size_t partial_floats(const DecodeShape& s, const SplitPlan& plan) { return partial_rows(s, plan) * s.D; }

}  // namespace ch10
