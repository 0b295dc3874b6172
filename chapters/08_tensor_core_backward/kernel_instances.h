/// @file kernel_instances.h
/// @brief Chapter 8: the definitions of DimKernels (kernel_table.h) for steps 1–5, the compiled
/// kernels of one head dim. Included only by the files that instantiate one head dim and step
/// group each: instances/d*_*.cu (GPU) and emulator/d*_*.cpp (CPU emulator); step 6's group is
/// kernel_instances_fa2.h, so that an edit of its kernel rebuilds its files only.
#pragma once

#include <vector>

#include "kernel_table.h"
#include "kernel/backward.cuh"

namespace ch8 {
inline namespace FA_TC_KERNELS {

/// The kernels of one KernelPair: its dK/dV kernel (with and without line 15's dQ atomics:
/// `Dkdv<T, Cfg, Atomic>`, dkdv_kernel for steps 1–5), the separate dQ kernel of --dq split, and
/// the preprocess and dQ conversion they share.
template <class T, class Pair, template <class, class, bool> class Dkdv>
KernelEntry entry_of() {
    using B = typename Pair::BwdCfg;
    using Q = typename Pair::DqCfg;
    return {B::tiles(Q::kThreads / 32, Q::Bc), B::kSmemBytes, Q::kSmemBytes, Dkdv<T, B, true>::kernel,
            Dkdv<T, typename B::ScalarDq, false>::kernel, dq_kernel<T, Q>, preprocess_kernel<T, B::D>,
            convert_dq_kernel<T>};
}

/// dkdv_kernel as entry_of takes it.
template <class T, class B, bool Atomic>
struct DkdvKernel {
    static constexpr void (*kernel)(BwdParams) = dkdv_kernel<T, B, Atomic>;
};

/// The entries of a list of KernelPairs, in order.
template <class T, template <class, class, bool> class Dkdv, class List>
std::vector<KernelEntry> entries_of(List list) {
    return fa::entries_of<KernelEntry>(list, [](auto pair) { return entry_of<T, decltype(pair), Dkdv>(); });
}

template <class T, int D>
const std::vector<KernelEntry>& DimKernels<T, D>::ladder() {
    static const std::vector<KernelEntry> entries = entries_of<T, DkdvKernel>(Ladder<D>{});
    return entries;
}

template <class T, int D>
const std::vector<KernelEntry>& DimKernels<T, D>::tuned() {
    static const std::vector<KernelEntry> entries = entries_of<T, DkdvKernel>(typename Step5Tiles<D>::List{});
    return entries;
}

}  // namespace FA_TC_KERNELS
}  // namespace ch8

/// Compiles one step group (ladder, tuned or fa2_layout) of head dim D for both 16-bit types: the
/// one line of each instances/ and emulator/ file.
#define CH8_INSTANTIATE(D, GROUP)                                                        \
    namespace ch8 {                                                                      \
    inline namespace FA_TC_KERNELS {                                                     \
    template const std::vector<KernelEntry>& DimKernels<__half, D>::GROUP();             \
    template const std::vector<KernelEntry>& DimKernels<__nv_bfloat16, D>::GROUP();      \
    }                                                                                    \
    }
