/// @file merge.h
/// @brief Merging two partial attention results of one query row: chapter 2's state merge, with
/// O carried along. Compiles for host (the CPU mirror) and device (the merge kernel), so that both
/// merge with the same arithmetic.
///
/// A block of keys gives query row i a partial result (O_i, L_i): O_i the softmax-weighted mean of
/// the block's V rows, L_i = log Σ_j e^{S_ij} over the block's keys. In chapter 2's terms, L_i is
/// the state (m, d) = (L_i, 1): the same sum written with its max at L_i. Two disjoint key blocks
/// merge as two states do, and each O is weighted by its share of the total, e^{L_x − L}.
#pragma once

#include <cmath>

#include "../../common/host_device.h"
#include "../02_online_softmax/online_softmax.h"

namespace ch12 {

/// The logsumexp of the union of two key blocks and the weights of their outputs.
struct MergeWeights {
    float L;              ///< log(e^{L_a} + e^{L_b})
    float w_a, w_b;       ///< e^{L_a − L}, e^{L_b − L}: they sum to 1
};

/// Chapter 2's state of a block whose logsumexp is L: (L, 1); the empty state for L = −inf.
FA_HOST_DEVICE inline ch2::OnlineState state_of(float L) {
    ch2::OnlineState s;
    if (L != -INFINITY) s.m = L, s.d = 1.0f;
    return s;
}

/// Weights of the merge of (O_a, L_a) and (O_b, L_b); both empty (−inf) gives weights 0.
FA_HOST_DEVICE inline MergeWeights merge_weights(float L_a, float L_b) {
    ch2::OnlineState s = state_of(L_a);
    s.merge(state_of(L_b));
    const float L = s.logsumexp();
    if (L == -INFINITY) return {L, 0.0f, 0.0f};
    return {L, expf(L_a - L), expf(L_b - L)};
}

/// One element of the merged output: w_a·O_a + w_b·O_b, in fp32.
FA_HOST_DEVICE inline float merge_output(const MergeWeights& w, float O_a, float O_b) {
    return w.w_a * O_a + w.w_b * O_b;
}

}  // namespace ch12
