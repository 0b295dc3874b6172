/// @file kernel_table.h
/// @brief Chapter 7: which compiled kernel runs (variant, head dim, tile candidate), shared by the
/// GPU launcher (launch.cu) and the CPU emulator (emulator/emulated_kernels.cpp) so both run the same tiles.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernel/candidates.h"
#include "chapter7.h"
#include "kernel/flash_forward.cuh"
#include "kernel/wmma_forward.cuh"

namespace ch7 {
inline namespace FA_TC_KERNELS {

/// One compiled kernel: its tiles and what launching it needs.
struct KernelEntry {
    TileConfig tiles;
    int threads, smem_bytes, Br;
    void (*kernel)(FwdParams);
};

template <class T, class Cfg>
KernelEntry mma_entry() {
    return {TileConfig{Cfg::kWarps, Cfg::kMTiles, Cfg::Bc, Cfg::kStages, Cfg::kQInRegs}, Cfg::kThreads,
            Cfg::kSmemBytes, Cfg::Br, flash_forward_kernel<T, Cfg>};
}

template <class T, int D>
KernelEntry wmma_entry() {
    using Tiles = WmmaTiles<D>;
    return {TileConfig{Tiles::kWarps, 1, Tiles::Bc, 1, false}, Tiles::kThreads, Tiles::kSmemBytes, Tiles::Br,
            wmma_kernel<T, D>};
}

template <class T, class List>
std::vector<KernelEntry> entries_of(List list) {
    std::vector<KernelEntry> out;
    for_each_config(list, [&](auto cfg) { out.push_back(mma_entry<T, decltype(cfg)>()); });
    return out;
}

/// Variant 6's candidates for head dim D (64 or 128).
template <class T>
const std::vector<KernelEntry>& kernel_candidates(int D) {
    static const std::vector<KernelEntry> c64 = entries_of<T>(Candidates64{});
    static const std::vector<KernelEntry> c128 = entries_of<T>(Candidates128{});
    return D == 64 ? c64 : c128;
}

template <class T, int D>
KernelEntry ladder_entry(int variant) {
    switch (variant) {
        case kWmma: return wmma_entry<T, D>();
        case kMmaSync: return mma_entry<T, LadderConfig<2, D>>();
        case kLdmatrix: return mma_entry<T, LadderConfig<3, D>>();
        case kCpAsync: return mma_entry<T, LadderConfig<4, D>>();
        default: return mma_entry<T, LadderConfig<5, D>>();
    }
}

/// The kernel for (variant, D, candidate); the arguments must be valid (unsupported_reason empty).
template <class T>
KernelEntry kernel_entry(int variant, int D, int candidate) {
    if (variant == kTuned) {
        const int c = candidate >= 0 ? candidate : D == 64 ? kTunedCandidate64 : kTunedCandidate128;
        return kernel_candidates<T>(D)[std::size_t(c)];
    }
    return D == 64 ? ladder_entry<T, 64>(variant) : ladder_entry<T, 128>(variant);
}

/// The kernels' parameters for device (or, emulated, host) arrays of shape s.
template <class T>
FwdParams make_params(const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L) {
    FwdParams p;
    p.Q = reinterpret_cast<const uint16_t*>(Q);
    p.K = reinterpret_cast<const uint16_t*>(K);
    p.V = reinterpret_cast<const uint16_t*>(V);
    p.O = reinterpret_cast<uint16_t*>(O);
    p.L = L;
    p.N = s.N;
    p.H = s.H;
    p.scale = s.scale;
    p.scale_log2 = s.scale * 1.4426950408889634f;
    p.causal = s.causal;
    return p;
}

/// The launch grid: (T_r query blocks, H, B).
inline dim3 grid_of(const fa::AttnShape& s, const KernelEntry& e) {
    return dim3(unsigned((s.N + e.Br - 1) / e.Br), unsigned(s.H), unsigned(s.B));
}

}  // namespace FA_TC_KERNELS
}  // namespace ch7
