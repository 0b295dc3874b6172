/// @file math.h
/// @brief Small arithmetic every chapter needs: `ceil_div` (tiles covering a length) and `kLog2e`
/// (the factor that turns e^x into 2^(x·log2 e)). Host and device.
#pragma once

#include "host_device.h"

namespace fa {

/// ⌈a / b⌉ for a ≥ 0, b > 0: how many tiles of b cover a, e.g. T_r = ceil_div(N, B_r).
template <class I>
FA_HOST_DEVICE constexpr I ceil_div(I a, I b) {
    return (a + b - 1) / b;
}

/// log2(e): e^x = 2^(x · kLog2e), so a kernel folds it into the softmax scale and uses exp2.
constexpr float kLog2e = 1.4426950408889634f;

}  // namespace fa
