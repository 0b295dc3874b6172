/// @file kernel_table.h
/// @brief Chapter 8: which compiled kernels run (variant, head dim, tile candidate), shared by the
/// GPU launcher (launch.cu) and the CPU emulator (emulator/emulated_kernels.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "../../common/dispatch.h"
#include "../../common/math.h"
#include "chapter8.h"
#include "kernel/backward.cuh"  // BwdParams
#include "kernel/candidates.h"

namespace ch8 {
inline namespace FA_TC_KERNELS {

/// The kernels of one configuration and what they need.
struct KernelEntry {
    BwdTiles tiles;
    int smem_bytes;     ///< dK/dV kernel
    int dq_smem_bytes;  ///< separate dQ kernel
    void (*dkdv_atomic)(BwdParams);
    void (*dkdv_only)(BwdParams);
    void (*dq)(BwdParams);
    void (*preprocess)(BwdParams);
    void (*convert)(BwdParams, long long);
    int threads() const { return 32 * tiles.warps; }
    int dq_threads() const { return 32 * tiles.dq_warps; }
};

/// The compiled kernels of head dim D: steps 1–4 (the ladder, index variant − 1) and the
/// candidates of steps 5 and 6, in the order of Step5Tiles<D>::List and Step6Tiles<D>::List.
/// Declared here, defined in kernel_instances.h and compiled once per head dim and step group
/// (instances/d*_*.cu for the GPU, emulator/d*_*.cpp for the CPU emulator): an edit of step 6's
/// kernel rebuilds step 6's files only, side by side under make -j, and the launch, which
/// includes this header, instantiates no kernel.
template <class T, int D>
struct DimKernels {
    static const std::vector<KernelEntry>& ladder();
    static const std::vector<KernelEntry>& tuned();       ///< step 5: t0, t1, ...
    static const std::vector<KernelEntry>& fa2_layout();  ///< step 6: f0, f1, ...
};

/// The head dims the kernels are compiled for.
using HeadDims = fa::HeadDimList<64, 128>;

/// The candidates of step 5 or 6 (variant) at head dim D.
template <class T>
const std::vector<KernelEntry>& kernel_candidates(int variant, int D) {
    return *HeadDims::with(D, [&](auto d) {
        using K = DimKernels<T, decltype(d)::value>;
        return variant == kFa2Layout ? &K::fa2_layout() : &K::tuned();
    });
}

/// The kernels for (variant, D, candidate); the arguments must be valid (unsupported_reason empty).
template <class T>
KernelEntry kernel_entry(int variant, int D, int candidate) {
    if (variant < kTuned)
        return HeadDims::with(D, [&](auto d) { return DimKernels<T, decltype(d)::value>::ladder()[std::size_t(variant - 1)]; });
    return kernel_candidates<T>(variant, D)[std::size_t(candidate >= 0 ? candidate : tuned_candidate(D, variant))];
}

/// The kernels' parameters for device (or, emulated, host) arrays.
template <class T>
BwdParams make_params(const fa::AttnShape& s, const BwdTensors<T>& t, const Workspace& w) {
    BwdParams p;
    auto bits = [](const T* x) { return reinterpret_cast<const uint16_t*>(x); };
    p.Q = bits(t.Q), p.K = bits(t.K), p.V = bits(t.V), p.O = bits(t.O), p.dO = bits(t.dO);
    p.L = t.L;
    p.L2 = w.L2, p.Di = w.Di, p.dQacc = w.dQacc;
    p.dQ = reinterpret_cast<uint16_t*>(t.dQ);
    p.dK = reinterpret_cast<uint16_t*>(t.dK);
    p.dV = reinterpret_cast<uint16_t*>(t.dV);
    p.N = s.N, p.Npad = padded_rows(s.N), p.H = s.H, p.BH = int(s.heads_total());
    p.N_k = s.keys(), p.group = s.group();
    p.scale = s.scale;
    p.scale_log2 = s.scale * fa::kLog2e;
    p.causal = s.causal;
    return p;
}

/// The grids: preprocess (128 threads, D/8 per padded row), dK/dV (T_c, H_kv, B): one block per
/// key tile of each K/V head, dQ (T_r, H, B), convert (128 threads, 8 elements each).
inline dim3 preprocess_grid(const fa::AttnShape& s) {
    return dim3(unsigned(s.heads_total() * std::size_t(padded_rows(s.N)) * std::size_t(s.D / 8) / 128));
}
inline dim3 dkdv_grid(const fa::AttnShape& s, const KernelEntry& e) {
    return dim3(unsigned(fa::ceil_div(s.keys(), e.tiles.Bc())), unsigned(s.kv_heads()), unsigned(s.B));
}
inline dim3 dq_grid(const fa::AttnShape& s, const KernelEntry& e) {
    return dim3(unsigned(fa::ceil_div(s.N, 16 * e.tiles.dq_warps)), unsigned(s.H), unsigned(s.B));
}
inline dim3 convert_grid(const fa::AttnShape& s) {
    return dim3(unsigned(fa::ceil_div<std::size_t>(s.elements() / 8, 128)));
}

}  // namespace FA_TC_KERNELS
}  // namespace ch8
