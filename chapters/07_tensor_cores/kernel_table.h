/// @file kernel_table.h
/// @brief Chapter 7: which compiled kernel runs (variant, head dim, tile candidate), shared by the
/// GPU launcher (launch.cu) and the CPU emulator (emulator/emulated_kernels.cpp) so both run the same tiles.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "../../common/dispatch.h"
#include "../../common/math.h"

#include "kernel/candidates.h"
#include "kernel/flash_forward.cuh"  // FwdParams
#include "chapter7.h"

namespace ch7 {
inline namespace FA_TC_KERNELS {

/// One compiled kernel: its tiles (the run-time view of its compile-time configuration) and the
/// shared memory it needs.
struct KernelEntry {
    TileConfig tiles;
    int smem_bytes;
    void (*kernel)(FwdParams);
    int threads() const { return 32 * tiles.warps; }
};

/// The compiled kernels of head dim D: variants 1–5 (the ladder) and variant 6's candidates.
/// Declared here, defined in kernel_instances.h and compiled once per head dim (instances/d*.cu for
/// the GPU, emulator/d*.cpp for the CPU emulator): an edit in kernel/ rebuilds the head dims side
/// by side under make -j, and the launch, which includes this header, instantiates no kernel.
template <class T, int D>
struct DimKernels {
    static KernelEntry ladder(int variant);
    static const std::vector<KernelEntry>& tuned();
};

/// The head dims the kernels are compiled for.
using HeadDims = fa::HeadDimList<32, 64, 96, 128, 256>;

/// Variant 6's candidates for head dim D.
template <class T>
const std::vector<KernelEntry>& kernel_candidates(int D) {
    return *HeadDims::with(D, [](auto d) { return &DimKernels<T, decltype(d)::value>::tuned(); });
}

/// Variant 6's default candidate for head dim D.
inline int default_candidate(int D) {
    return HeadDims::with(D, [](auto d) { return TunedTiles<decltype(d)::value>::kDefault; });
}

/// The kernel for (variant, D, candidate); the arguments must be valid (unsupported_reason empty).
template <class T>
KernelEntry kernel_entry(int variant, int D, int candidate) {
    if (variant == kTuned)
        return kernel_candidates<T>(D)[std::size_t(candidate >= 0 ? candidate : default_candidate(D))];
    return HeadDims::with(D, [&](auto d) { return DimKernels<T, decltype(d)::value>::ladder(variant); });
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
    p.N_k = s.keys();
    p.group = s.group();
    p.scale = s.scale;
    p.scale_log2 = s.scale * fa::kLog2e;
    p.causal = s.causal;
    return p;
}

/// The launch grid: (T_r query blocks, H, B).
inline dim3 grid_of(const fa::AttnShape& s, const KernelEntry& e) {
    return dim3(unsigned(fa::ceil_div(s.N, e.tiles.Br())), unsigned(s.H), unsigned(s.B));
}

}  // namespace FA_TC_KERNELS
}  // namespace ch7
