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

}  // namespace ch12
