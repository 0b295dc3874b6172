/// @file kernel_table.h
/// @brief Chapter 8: which compiled kernels run (variant, head dim, tile candidate), shared by the
/// GPU launcher (launch.cu) and the CPU emulator (emulator/emulated_kernels.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "../../common/math.h"
#include "chapter8.h"
#include "kernel/backward.cuh"
#include "kernel/backward_fa2.cuh"
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
template <class T, class... Pairs>
std::vector<KernelEntry> entries_of(ch7::ConfigList<Pairs...>) {
    return {entry_of<T, Pairs>()...};
}

/// Steps 1–4 (index variant − 1) and step 5's candidates, for head dim D (64 or 128).
template <class T>
const std::vector<KernelEntry>& kernel_ladder(int D) {
    static const std::vector<KernelEntry> l64 = entries_of<T>(Ladder<64>{}), l128 = entries_of<T>(Ladder<128>{});
    return D == 64 ? l64 : l128;
}
/// The candidates of step 5 or 6 (variant).
template <class T>
const std::vector<KernelEntry>& kernel_candidates(int variant, int D) {
    static const std::vector<KernelEntry> c64 = entries_of<T>(Candidates64{}), c128 = entries_of<T>(Candidates128{});
    static const std::vector<KernelEntry> f64 = entries_of<T>(Fa2Candidates64{}),
                                          f128 = entries_of<T>(Fa2Candidates128{});
    if (variant == kFa2Layout) return D == 64 ? f64 : f128;
    return D == 64 ? c64 : c128;
}

/// The kernels for (variant, D, candidate); the arguments must be valid (unsupported_reason empty).
template <class T>
KernelEntry kernel_entry(int variant, int D, int candidate) {
    if (variant < kTuned) return kernel_ladder<T>(D)[std::size_t(variant - 1)];
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
    p.scale = s.scale;
    p.scale_log2 = s.scale * fa::kLog2e;
    p.causal = s.causal;
    return p;
}

/// The grids: preprocess (128 threads, D/8 per padded row), dK/dV (T_c, H, B), dQ (T_r, H, B),
/// convert (128 threads, 8 elements each).
inline dim3 preprocess_grid(const fa::AttnShape& s) {
    return dim3(unsigned(s.heads_total() * std::size_t(padded_rows(s.N)) * std::size_t(s.D / 8) / 128));
}
inline dim3 dkdv_grid(const fa::AttnShape& s, const KernelEntry& e) {
    return dim3(unsigned(fa::ceil_div(s.N, e.tiles.Bc())), unsigned(s.H), unsigned(s.B));
}
inline dim3 dq_grid(const fa::AttnShape& s, const KernelEntry& e) {
    return dim3(unsigned(fa::ceil_div(s.N, 16 * e.tiles.dq_warps)), unsigned(s.H), unsigned(s.B));
}
inline dim3 convert_grid(const fa::AttnShape& s) {
    return dim3(unsigned(fa::ceil_div<std::size_t>(s.elements() / 8, 128)));
}

}  // namespace FA_TC_KERNELS
}  // namespace ch8
