/// @file split_plan.h
/// @brief Chapter 10: where a split of the KV cache starts and ends, which keys a new token sees,
/// and where a key lives in a paged cache. Plain C++ for host and device: the kernels, the CPU
/// mirror and the tests all use these few functions, so each rule is written once.
///
/// A sequence b has `len` tokens in its cache, the q_len new ones included (they were appended
/// first): keys 0 .. len−1. New token i (0 .. q_len−1) is at position len − q_len + i and sees the
/// keys up to itself (causal among the new tokens, everything before them).
#pragma once

#include <cstddef>

#include "../../../common/host_device.h"

namespace ch10 {

/// One past the last key new token i sees: len − q_len + i + 1.
FA_HOST_DEVICE constexpr int key_limit(int len, int q_len, int i) { return len - q_len + i + 1; }

/// Number of non-empty splits of a sequence whose splits hold `chunk` keys each. A split starts at
/// a multiple of `chunk` and only where every new token sees its first key (start ≤ len − q_len):
/// then each split's softmax has at least one visible key in every row, and its L is finite.
FA_HOST_DEVICE constexpr int splits_of(int len, int q_len, int chunk) { return (len - q_len) / chunk + 1; }

/// First key of split s.
FA_HOST_DEVICE constexpr int split_begin(int s, int chunk) { return s * chunk; }

/// One past the last key of split s (s < splits_of): the last split runs to the end of the cache,
/// so it also holds the new tokens' keys (up to chunk + q_len − 1 keys).
FA_HOST_DEVICE constexpr int split_end(int s, int len, int q_len, int chunk) {
    return s == splits_of(len, q_len, chunk) - 1 ? len : (s + 1) * chunk;
}

/// Element offset of row `key` of KV head h of sequence b in a contiguous cache (B, H_kv, N_max, D).
FA_HOST_DEVICE inline std::size_t contiguous_row(int b, int h, int key, int H_kv, int N_max, int D) {
    return ((std::size_t(b) * H_kv + h) * std::size_t(N_max) + std::size_t(key)) * std::size_t(D);
}

/// Element offset of row `key` of KV head h in a paged cache: a pool of pages (pages, H_kv, P, D),
/// P = 2^page_shift tokens per page, and the sequence's row of the block table, `table_row`, whose
/// entry p is the pool page that holds the sequence's keys p·P .. p·P + P − 1.
FA_HOST_DEVICE inline std::size_t paged_row(const int* table_row, int key, int page_shift, int h, int H_kv,
                                            int D) {
    const int page = table_row[key >> page_shift];     // which pool page holds the key
    const int slot = key & ((1 << page_shift) - 1);    // its row inside that page
    return ((std::size_t(page) * H_kv + h) * (std::size_t(1) << page_shift) + std::size_t(slot)) * std::size_t(D);
}

/// A K/V tile of a paged cache: keys key0 .. key0 + B_c − 1, key0 a multiple of B_c (tiles start
/// at split_begin + j·B_c, and a chunk is a multiple of B_c). P and B_c are powers of two, so the
/// tile's keys lie in runs of consecutive pool rows, one block-table entry per run: one run when
/// P ≥ B_c (a page holds whole tiles), else B_c / P runs of one page each. Row i of the tile is row
/// row_in_run(i) of run tile_run(i); the run's first row is at tile_run_row.
FA_HOST_DEVICE constexpr int tile_run(int i, int page_shift) { return i >> page_shift; }
FA_HOST_DEVICE constexpr int row_in_run(int i, int page_shift) { return i & ((1 << page_shift) - 1); }

/// Element offset of the first row of run `run` of the tile from key0 (paged_row of its first key).
FA_HOST_DEVICE inline std::size_t tile_run_row(const int* table_row, int key0, int run, int page_shift, int h,
                                               int H_kv, int D) {
    return paged_row(table_row, key0 + (run << page_shift), page_shift, h, H_kv, D);
}

}  // namespace ch10
