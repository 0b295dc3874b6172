/// @file cpu_mirror.h
/// @brief The CPU mirror's arithmetic for one query row and one key row, and its preprocess, for
/// the mirrors that split the score matrix another way (chapter 12's ring computes it block by block).
#pragma once

#include <vector>

#include "../../common/shape.h"

namespace ch8 {

/// Lines 10, 11, 13, 14 for query i and key j: P_ij = exp(S_ij · scale − L_i) and
/// dS_ij = P_ij (dP_ij − D_i), in fp32, S and dP as fp32 sums over d.
void p_ds(const fa::AttnShape& s, const float* Qi, const float* Kj, const float* Vj, const float* dOi, float L,
          float Dsum, float& P, float& dS);

/// Line 4 for every row: D_i = rowsum(dO_i ∘ O_i), an fp32 sum over d, as the preprocess kernel adds.
std::vector<float> row_sums_dO_O(const fa::AttnShape& s, const std::vector<float>& dO, const std::vector<float>& O);

}  // namespace ch8
