/// @file kernel_instances_fa2.h
/// @brief Chapter 8: the definition of DimKernels::fa2_layout (kernel_table.h), step 6's compiled
/// kernels at one head dim: the dK/dV kernel in FlashAttention-2's warp layout. Included only by
/// instances/d*_fa2_layout.cu and emulator/d*_fa2_layout.cpp.
#pragma once

#include <vector>

#include "kernel/backward_fa2.cuh"
#include "kernel_instances.h"

namespace ch8 {
inline namespace FA_TC_KERNELS {

/// dkdv_fa2_kernel as entry_of takes it.
template <class T, class B, bool Atomic>
struct DkdvFa2Kernel {
    static constexpr void (*kernel)(BwdParams) = dkdv_fa2_kernel<T, B, Atomic>;
};

template <class T, int D>
const std::vector<KernelEntry>& DimKernels<T, D>::fa2_layout() {
    static const std::vector<KernelEntry> entries = entries_of<T, DkdvFa2Kernel>(typename Step6Tiles<D>::List{});
    return entries;
}

}  // namespace FA_TC_KERNELS
}  // namespace ch8
