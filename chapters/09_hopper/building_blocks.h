/// @file building_blocks.h
/// @brief Chapter 9's two wgmma forms run alone on the GPU, with the kernel's layouts and
/// descriptors (building_blocks.cu): what the tests use to tell a wrong operand from a wrong kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <vector>

namespace ch9 {

/// C (64 × 64, row-major fp32) = A Bᵀ, A and B 64 × 128 row-major: the S = Q Kᵀ form (both
/// operands K-major from shared memory, two 64-column chunks along k). One warpgroup.
template <class T>
std::vector<float> wgmma_ss_block(const std::vector<T>& A, const std::vector<T>& B);

/// C (64 × 128) = P V, P 64 × 64 fp32 (rounded to T by the kernel, as pack_p does), V 64 × 128
/// row-major: the O += P̃ V form (P from registers, V MN-major, two 64-column chunks along n).
template <class T>
std::vector<float> wgmma_rs_block(const std::vector<float>& P, const std::vector<T>& V);

}  // namespace ch9
