// Chapter 12: the sharding maps and the ring schedule (schedule.h says what each one means).
#include "schedule.h"

#include <algorithm>

namespace ch12 {

const char* sharding_name(Sharding sh) { return sh == Sharding::kZigzag ? "zigzag" : "contiguous"; }

int Layout::chunks() const { return sharding == Sharding::kZigzag ? 2 * P : P; }

int Layout::chunks_per_rank() const { return sharding == Sharding::kZigzag ? 2 : 1; }

int Layout::chunk_begin(int k) const { return k * (N / chunks()) + std::min(k, N % chunks()); }

int Layout::chunk_length(int k) const { return N / chunks() + (k < N % chunks() ? 1 : 0); }

int Layout::max_chunk_length() const { return (N + chunks() - 1) / chunks(); }

int Layout::chunk_of_row(int i) const {
    const int C = chunks(), q = N / C, longer = N % C;  // the first `longer` chunks have q + 1 rows
    return i < longer * (q + 1) ? i / (q + 1) : longer + (i - longer * (q + 1)) / q;
}

std::vector<int> Layout::chunks_of_rank(int r) const {
    if (sharding == Sharding::kZigzag) return {r, 2 * P - 1 - r};
    return {r};
}

int Layout::owner_of_chunk(int k) const {
    if (sharding == Sharding::kZigzag) return k < P ? k : 2 * P - 1 - k;
    return k;
}

Block block_kind(const Layout& l, bool causal, int q_chunk, int k_chunk) {
    if (l.chunk_length(q_chunk) == 0 || l.chunk_length(k_chunk) == 0) return Block::kSkip;
    if (!causal) return Block::kFull;
    if (k_chunk < q_chunk) return Block::kFull;
    return k_chunk == q_chunk ? Block::kDiagonal : Block::kSkip;
}

int kv_owner(int P, int r, int s) { return ((r - s) % P + P) % P; }

int dkv_holder(int P, int owner, int s) { return (owner + s) % P; }

std::vector<BlockTask> step_blocks(const Layout& l, bool causal, int r, int s) {
    const std::vector<int> q_chunks = l.chunks_of_rank(r), k_chunks = l.chunks_of_rank(kv_owner(l.P, r, s));
    std::vector<BlockTask> tasks;
    for (int qs = 0; qs < int(q_chunks.size()); ++qs)
        for (int ks = 0; ks < int(k_chunks.size()); ++ks)
            tasks.push_back({qs, ks, q_chunks[qs], k_chunks[ks], block_kind(l, causal, q_chunks[qs], k_chunks[ks])});
    return tasks;
}

double rank_work(const Layout& l, bool causal, int r) {
    double work = 0;
    for (int s = 0; s < l.P; ++s)
        for (const BlockTask& t : step_blocks(l, causal, r, s)) {
            const double a = l.chunk_length(t.q_chunk), b = l.chunk_length(t.k_chunk);
            if (t.kind == Block::kFull) work += a * b;
            if (t.kind == Block::kDiagonal) work += a * (a + 1) / 2;
        }
    return work;
}

std::vector<Window> windows(int a, int b) {
    if (a <= b) return {{0, a, b}};
    std::vector<Window> w;
    for (int q = 0; q + b < a; q += b) w.push_back({q, b, b});
    w.push_back({a - b, b, b});
    return w;
}

std::vector<Window> disjoint_windows(int a, int b) {
    std::vector<Window> w;
    for (int q = 0; q < a; q += b) w.push_back({q, std::min(b, a - q), b});
    return w;
}

namespace {

/// Calls f(slot offset, whole offset) for the first value of every row of rank r's chunks.
template <class F>
void for_each_slot_row(const Layout& l, std::size_t heads, int width, int r, F f) {
    const std::vector<int> chunks = l.chunks_of_rank(r);
    const std::size_t w = std::size_t(width), slot = heads * std::size_t(l.max_chunk_length()) * w;
    for (std::size_t m = 0; m < chunks.size(); ++m) {
        const std::size_t len = std::size_t(l.chunk_length(chunks[m])), begin = std::size_t(l.chunk_begin(chunks[m]));
        for (std::size_t h = 0; h < heads; ++h)
            for (std::size_t t = 0; t < len; ++t) f(m * slot + (h * len + t) * w, (h * std::size_t(l.N) + begin + t) * w);
    }
}

}  // namespace

std::vector<float> to_slots(const Layout& l, std::size_t heads, int width, int r, const std::vector<float>& whole) {
    std::vector<float> slots(std::size_t(l.chunks_per_rank()) * heads * std::size_t(l.max_chunk_length()) * std::size_t(width), 0.0f);
    for_each_slot_row(l, heads, width, r, [&](std::size_t at, std::size_t from) {
        std::copy(whole.begin() + std::ptrdiff_t(from), whole.begin() + std::ptrdiff_t(from) + width, slots.begin() + std::ptrdiff_t(at));
    });
    return slots;
}

void from_slots(const Layout& l, std::size_t heads, int width, int r, const float* slots, std::vector<float>& whole) {
    for_each_slot_row(l, heads, width, r, [&](std::size_t at, std::size_t to) {
        std::copy(slots + at, slots + at + width, whole.begin() + std::ptrdiff_t(to));
    });
}

}  // namespace ch12
