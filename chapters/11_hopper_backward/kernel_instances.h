/// @file kernel_instances.h
/// @brief Chapter 11: the definition of ladder_kernels (kernel_table.h) for one head dim; each
/// instances/d*.cu includes it once, so the two head dims compile side by side.
#pragma once

#include <vector>

#include "kernel/hopper_backward.cuh"
#include "kernel_table.h"

namespace ch11 {

template <class T, class Cfg>
KernelEntry entry_of() {
    return {{Cfg::Br, Cfg::Bc, Cfg::kStages, Cfg::kThreads, Cfg::kSmemBytes, Cfg::kLine15},
            hopper_dkdv_kernel<T, Cfg>};
}

template <class T, int D>
const std::vector<KernelEntry>& ladder_kernels() {
    static const std::vector<KernelEntry> entries = [] {
        std::vector<KernelEntry> e = {entry_of<T, LadderConfig<1, D>>(), entry_of<T, LadderConfig<2, D>>(),
                                      entry_of<T, LadderConfig<3, D>>(), entry_of<T, LadderConfig<4, D>>()};
        for (const KernelEntry& c : fa::entries_of<KernelEntry>(typename Step5Tiles<D>::List{},
                                                                 [](auto cfg) { return entry_of<T, decltype(cfg)>(); }))
            e.push_back(c);
        e.push_back(entry_of<T, Step6Config<D>>());
        return e;
    }();
    return entries;
}

#define FA_CH11_INSTANTIATE(D)                                                           \
    template const std::vector<KernelEntry>& ladder_kernels<__half, D>();                \
    template const std::vector<KernelEntry>& ladder_kernels<__nv_bfloat16, D>();

}  // namespace ch11
