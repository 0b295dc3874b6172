/// @file fp8.h
/// @brief Chapter 10, step 6: the e4m3 cache's number format, written once for the kernels, the
/// host's quantization, the CPU mirror and the tests (cuda_fp8.h's conversions run on both sides,
/// so the host and the GPU round every value alike).
///
/// e4m3 (OCP FP8): 1 sign bit, 4 exponent bits, 3 mantissa bits; finite values up to ±448, no
/// infinity, one NaN pattern per sign. A cached row of K or V holds e4m3(x / s): its own 8-bit
/// value and a scale s per (sequence, KV head), one for K and one for V, so that the largest |x|
/// of the head maps to 448. The dequantized value is s·e4m3(x / s).
#pragma once

#include <cstdint>

#include <cuda_fp8.h>

#include "../../../common/host_device.h"

namespace ch10 {

/// The largest finite e4m3 value.
constexpr float kE4m3Max = 448.0f;

/// The scale of a (sequence, KV head) whose largest |x| is `amax`: amax / 448, so no value of
/// the head saturates; 1 for a head of zeros.
FA_HOST_DEVICE inline float e4m3_scale(float amax) { return amax > 0.0f ? amax / kE4m3Max : 1.0f; }

/// e4m3(x / s), rounded to nearest even; beyond ±448 it saturates to ±448 (a new token larger
/// than the scale allows is clipped, not made NaN); NaN stays NaN.
FA_HOST_DEVICE inline std::uint8_t e4m3_quantize(float x, float s) {
    return std::uint8_t(__nv_cvt_float_to_fp8(x / s, __NV_SATFINITE, __NV_E4M3));
}

/// The value of an e4m3 byte as a float (exact: e4m3's 4 significant bits and exponents
/// 2^-9 .. 2^8 lie inside fp16's, and so inside fp32's and bf16's).
FA_HOST_DEVICE inline float e4m3_value(std::uint8_t bits) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(bits), __NV_E4M3)));
}

}  // namespace ch10
