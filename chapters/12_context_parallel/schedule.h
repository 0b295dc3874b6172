/// @file schedule.h
/// @brief Chapter 12's plan, in plain C++ (no GPU): how the sequence is cut into chunks and dealt
/// to P ranks, which rank holds which K/V at each step of the ring, and which chunk × chunk blocks
/// a step computes in full, on the causal diagonal, or skips.
///
/// The sequence of N rows (queries and keys alike) is cut into C chunks as evenly as possible:
/// chunk k has N/C rows, one more for the first N mod C chunks, so that any N works and chunk
/// lengths differ by at most one. Contiguous sharding: C = P, rank r holds chunk r. Zigzag
/// sharding: C = 2P, rank r holds chunks r and 2P−1−r, one from each end of the sequence, so that
/// with the causal mask every rank has the same work.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ch12 {

/// How the sequence is dealt to the ranks.
enum class Sharding { kContiguous, kZigzag };

/// "contiguous" or "zigzag".
const char* sharding_name(Sharding sh);

/// The chunks of a sequence of N rows over P ranks.
struct Layout {
    int N = 1, P = 1;
    Sharding sharding = Sharding::kContiguous;

    /// Number of chunks C: P (contiguous) or 2P (zigzag).
    int chunks() const;
    /// Chunks each rank holds: 1 or 2.
    int chunks_per_rank() const;
    /// First row of chunk k.
    int chunk_begin(int k) const;
    /// Rows of chunk k: N/C, or one more for k < N mod C (0 when N < C and k ≥ N).
    int chunk_length(int k) const;
    /// The longest chunk, ⌈N/C⌉: every buffer slot is this long.
    int max_chunk_length() const;
    /// The chunk of row i (0 ≤ i < N).
    int chunk_of_row(int i) const;
    /// The chunks rank r holds, in slot order: {r} (contiguous) or {r, 2P−1−r} (zigzag).
    std::vector<int> chunks_of_rank(int r) const;
    /// The rank that holds chunk k.
    int owner_of_chunk(int k) const;
};

/// What one chunk × chunk block of the score matrix needs.
enum class Block {
    kFull,      ///< every key of the K chunk is visible to every query of the Q chunk
    kDiagonal,  ///< the same chunk: the causal mask applies inside (equal lengths, aligned)
    kSkip,      ///< nothing visible (a later K chunk under the causal mask), or an empty chunk
};

/// The kind of the block (Q chunk q_chunk, K chunk k_chunk). Chunks are contiguous runs in
/// sequence order, so under the causal mask an earlier K chunk is all visible, the same chunk is
/// the diagonal, a later one is all hidden.
Block block_kind(const Layout& l, bool causal, int q_chunk, int k_chunk);

/// The rank whose K/V rank r holds at step s of the ring (0 ≤ s < P): its own at step 0, then
/// its predecessor's, and so on round the ring: (r − s) mod P.
int kv_owner(int P, int r, int s);

/// The rank that holds the dK/dV partial sums of rank `owner`'s chunks at step s of the backward
/// ring (0 ≤ s ≤ P). They travel with the K/V, so at step s < P they sit where those K/V are,
/// (owner + s) mod P (kv_owner's inverse); one more hop after the last step brings them home:
/// at s = P the holder is the owner again.
int dkv_holder(int P, int owner, int s);

/// One block a rank computes: its Q slot (index into chunks_of_rank(r)), the K chunk's slot in
/// its owner's buffer, both chunks, and the kind.
struct BlockTask {
    int q_slot, k_slot, q_chunk, k_chunk;
    Block kind;
};

/// The blocks rank r computes at step s (skipped ones included, so the caller sees them), in the
/// order it computes and merges them: Q slots outer, K slots inner.
std::vector<BlockTask> step_blocks(const Layout& l, bool causal, int r, int s);

/// Score-matrix entries rank r computes over the whole ring (causal diagonal blocks count
/// n(n+1)/2): the work that must be equal on every rank for the ring not to wait on its slowest.
double rank_work(const Layout& l, bool causal, int r);

/// A run of query rows computed by one call of an equal-length kernel (N_q = N_k = n): rows
/// [q_begin, q_begin + rows) of a chunk, placed at rows [0, rows) of a staging array of n rows.
struct Window {
    int q_begin, rows, n;
};

/// The calls that compute a full block of a query rows against b keys (a, b ≥ 1) with kernels
/// that need as many queries as keys: one call when a = b; when a < b, one call with the queries
/// padded to b rows (rows past a are computed and dropped); when a > b, windows of b rows at
/// 0, b, 2b, … and a last one ending at a (overlapping rows are computed twice, identically).
std::vector<Window> windows(int a, int b);

/// The backward's calls for a full block of a query rows against b keys: windows of b query rows
/// at 0, b, 2b, …, the last one padded to b rows with Q = dO = 0 (a padded row adds nothing to
/// dK_j or dV_j: its dS and dO are 0). Unlike windows(), no query row is in two windows: its terms
/// of dK_j and dV_j must be added once.
std::vector<Window> disjoint_windows(int a, int b);

/// Rank r's chunks of an array of `heads` × N rows of `width` values ((B, H, N, width) with
/// heads = B·H), in the rank's slot layout: slot m holds chunk chunks_of_rank(r)[m] as a compact
/// (heads, length, width) array, slots heads · ⌈N/C⌉ · width values apart (a shorter chunk leaves
/// the end of its slot 0).
std::vector<float> to_slots(const Layout& l, std::size_t heads, int width, int r, const std::vector<float>& whole);

/// The inverse of to_slots: the rows of rank r's slots written to their places in `whole`.
void from_slots(const Layout& l, std::size_t heads, int width, int r, const float* slots, std::vector<float>& whole);

}  // namespace ch12
