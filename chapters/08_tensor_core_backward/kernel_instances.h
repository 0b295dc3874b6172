/// @file kernel_instances.h
/// @brief Chapter 8: the definitions of DimKernels (kernel_table.h), the compiled kernels of one head
/// dim. Included only by the files that instantiate one head dim and step group each:
/// instances/d*_*.cu (GPU) and emulator/d*_*.cpp (CPU emulator).
#pragma once

#include <vector>

#include "kernel_table.h"
#include "kernel/backward.cuh"
#include "kernel/backward_fa2.cuh"

namespace ch8 {
inline namespace FA_TC_KERNELS {

/// The kernels of one KernelPair: its dK/dV kernel (with and without line 15's dQ atomics), the
/// separate dQ kernel of --dq split, and the preprocess and dQ conversion they share.
template <class T, class Pair>
KernelEntry entry_of() {
    using B = typename Pair::BwdCfg;
    using Q = typename Pair::DqCfg;
    if constexpr (B::kStep == 6)  // step 6: FA2's warp layout is a dK/dV kernel of its own
        return {B::tiles(Q::kThreads / 32, Q::Bc), B::kSmemBytes, Q::kSmemBytes,
                dkdv_fa2_kernel<T, B, true>, dkdv_fa2_kernel<T, typename B::ScalarDq, false>, dq_kernel<T, Q>,
                preprocess_kernel<T, B::D>, convert_dq_kernel<T>};
    else  // steps 1–5: dkdv_kernel
        return {B::tiles(Q::kThreads / 32, Q::Bc), B::kSmemBytes, Q::kSmemBytes,
                dkdv_kernel<T, B, true>, dkdv_kernel<T, typename B::ScalarDq, false>, dq_kernel<T, Q>,
                preprocess_kernel<T, B::D>, convert_dq_kernel<T>};
}

/// The entries of a list of KernelPairs, in order.
template <class T, class List>
std::vector<KernelEntry> entries_of(List list) {
    return fa::entries_of<KernelEntry>(list, [](auto pair) { return entry_of<T, decltype(pair)>(); });
}

template <class T, int D>
const std::vector<KernelEntry>& DimKernels<T, D>::ladder() {
    static const std::vector<KernelEntry> entries = entries_of<T>(Ladder<D>{});
    return entries;
}

template <class T, int D>
const std::vector<KernelEntry>& DimKernels<T, D>::tuned() {
    static const std::vector<KernelEntry> entries = entries_of<T>(typename Step5Tiles<D>::List{});
    return entries;
}

template <class T, int D>
const std::vector<KernelEntry>& DimKernels<T, D>::fa2_layout() {
    static const std::vector<KernelEntry> entries = entries_of<T>(typename Step6Tiles<D>::List{});
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
