/// @file dtype.h
/// @brief Element types the kernels read and write (float, half, bfloat16): names and conversions
/// on the host, so one program or test can be written once for all of them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <vector>

namespace fa {

/// Short name used in printouts and result files.
template <class T> constexpr const char* dtype_name();
template <> constexpr const char* dtype_name<float>() { return "fp32"; }
template <> constexpr const char* dtype_name<__half>() { return "fp16"; }
template <> constexpr const char* dtype_name<__nv_bfloat16>() { return "bf16"; }

/// float → T, rounding to nearest even.
template <class T> inline T from_float(float x);
template <> inline float from_float<float>(float x) { return x; }
template <> inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// T → float (exact).
inline float to_float(float x) { return x; }
inline float to_float(__half x) { return __half2float(x); }
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

/// Converts a whole vector.
template <class T>
std::vector<T> convert_from_float(const std::vector<float>& x) {
    std::vector<T> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = from_float<T>(x[i]);
    return y;
}

/// Converts a whole vector to float.
template <class T>
std::vector<float> convert_to_float(const std::vector<T>& x) {
    std::vector<float> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = to_float(x[i]);
    return y;
}

/// Rounds every value to the nearest T and back: the inputs a T kernel really sees, as floats.
template <class T>
void round_to(std::vector<float>& x) {
    for (float& v : x) v = to_float(from_float<T>(v));
}

}  // namespace fa
