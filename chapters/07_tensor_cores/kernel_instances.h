/// @file kernel_instances.h
/// @brief Chapter 7: the definitions of DimKernels (kernel_table.h), the compiled kernels of one head
/// dim. Included only by the files that instantiate one head dim each: instances/d*.cu (GPU) and
/// emulator/d*.cpp (CPU emulator).
#pragma once

#include <vector>

#include "kernel_table.h"
#include "kernel/flash_forward.cuh"
#include "kernel/wmma_forward.cuh"

namespace ch7 {
inline namespace FA_TC_KERNELS {

template <class T, class Cfg>
KernelEntry mma_entry() {
    return {Cfg::kTiles, Cfg::kSmemBytes, flash_forward_kernel<T, Cfg>};
}

template <class T, int D>
KernelEntry wmma_entry() {
    return {WmmaTiles<D>::kTiles, WmmaTiles<D>::kSmemBytes, wmma_kernel<T, D>};
}

template <class T, int D>
KernelEntry DimKernels<T, D>::ladder(int variant) {
    switch (variant) {
        case kWmma: return wmma_entry<T, D>();
        case kMmaSync: return mma_entry<T, LadderConfig<2, D>>();
        case kLdmatrix: return mma_entry<T, LadderConfig<3, D>>();
        case kCpAsync: return mma_entry<T, LadderConfig<4, D>>();
        default: return mma_entry<T, LadderConfig<5, D>>();
    }
}

template <class T, int D>
const std::vector<KernelEntry>& DimKernels<T, D>::tuned() {
    static const std::vector<KernelEntry> entries =
        fa::entries_of<KernelEntry>(typename TunedTiles<D>::List{}, [](auto cfg) { return mma_entry<T, decltype(cfg)>(); });
    return entries;
}

}  // namespace FA_TC_KERNELS
}  // namespace ch7

/// Compiles head dim D's kernels for both 16-bit types: the one line of each instances/ file.
#define CH7_INSTANTIATE_HEAD_DIM(D)                          \
    namespace ch7 {                                          \
    inline namespace FA_TC_KERNELS {                         \
    template struct DimKernels<__half, D>;                   \
    template struct DimKernels<__nv_bfloat16, D>;            \
    }                                                        \
    }
