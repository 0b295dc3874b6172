/// @file kernel_table.h
/// @brief Chapter 11: the compiled dK/dV kernels (steps 1–6 at D = 64 and 128), declared here,
/// defined in kernel_instances.h and compiled once per head dim (instances/d64.cu, d128.cu).
#pragma once

#include <cuda.h>

#include <vector>

#include "../../common/dispatch.h"
#include "../08_tensor_core_backward/kernel/backward.cuh"  // ch8::BwdParams
#include "chapter11.h"
#include "kernel/bwd_hopper_config.h"

namespace ch11 {

/// One compiled dK/dV kernel and what it needs.
struct KernelEntry {
    Tiles tiles;
    void (*kernel)(ch8::BwdParams, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, int*);
};

/// The head dims the kernels are compiled for.
using HeadDims = fa::HeadDimList<64, 128>;

/// Steps 1–4 at head dim D (index variant − 1), then step 5's candidates (Step5Tiles<D>), then step 6.
template <class T, int D>
const std::vector<KernelEntry>& ladder_kernels();

/// The entry of (variant, D) and for step 5 candidate `candidate` (−1: the default); all must be
/// valid (unsupported_reason empty).
template <class T>
KernelEntry kernel_entry(int variant, int D, int candidate = -1) {
    return HeadDims::with(D, [&](auto d) {
        constexpr int Dc = decltype(d)::value;
        constexpr int n5 = int(Step5Tiles<Dc>::List::size);
        const int k = variant < kOverlap    ? variant - 1
                      : variant == kOverlap ? kOverlap - 1 + (candidate >= 0 ? candidate : Step5Tiles<Dc>::kDefault)
                                            : kOverlap - 1 + n5;
        return ladder_kernels<T, Dc>()[std::size_t(k)];
    });
}

}  // namespace ch11
