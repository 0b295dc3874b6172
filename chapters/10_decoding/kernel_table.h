/// @file kernel_table.h
/// @brief Chapter 10: which compiled kernel runs (variant, head dim, paged, candidate) and the
/// parameters it gets, shared by the GPU launcher (launch.cu) and the CPU emulator
/// (emulator/emulated_kernels.cpp) so both run the same kernels the same way.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "../../common/dispatch.h"
#include "../../common/math.h"
#include "decoding.h"
#include "kernel/candidates.h"
#include "kernel/decode_attention.cuh"

namespace ch10 {
inline namespace FA_TC_KERNELS {

/// One compiled decoding kernel and what its launch needs.
struct KernelEntry {
    void (*kernel)(DecodeParams);
    int threads;
    int smem_bytes;
    int Bc;
};

template <class T, class Cfg>
KernelEntry entry_of() {
    return {decode_kernel<T, Cfg>, Cfg::kThreads, Cfg::kSmemBytes, Cfg::Bc};
}

/// The head dims the kernels are compiled for.
using HeadDims = fa::HeadDimList<64, 128>;

/// Step 5's candidates at head dim D, contiguous or paged, in the order of TunedTiles' list.
template <class T, int D, bool Paged>
const std::vector<KernelEntry>& tuned_entries() {
    static const std::vector<KernelEntry> entries = fa::entries_of<KernelEntry>(
        typename TunedTiles<D, Paged>::List{}, [](auto cfg) { return entry_of<T, decltype(cfg)>(); });
    return entries;
}

template <class T, int D, bool Paged>
KernelEntry entry_for(int variant, int candidate) {
    if (variant == kFp8) return entry_of<T, Fp8Config<D, Paged>>();
    if (variant == kTuned)
        return tuned_entries<T, D, Paged>()[std::size_t(candidate < 0 ? TunedTiles<D, Paged>::kDefault : candidate)];
    return entry_of<T, LadderConfig<D, Paged>>();
}

/// The kernel for (variant, shape, candidate); arguments already checked.
template <class T>
KernelEntry kernel_entry(int variant, const DecodeShape& s, int candidate) {
    return HeadDims::with(s.D, [&](auto d) {
        constexpr int D = decltype(d)::value;
        return s.paged() ? entry_for<T, D, true>(variant, candidate) : entry_for<T, D, false>(variant, candidate);
    });
}

/// The combine kernel for head dim D.
template <class T>
auto combine_entry(int D) {
    return HeadDims::with(D, [](auto d) { return combine_kernel<T, decltype(d)::value>; });
}

/// The kernels' parameters for (device or host) arrays.
template <class T>
DecodeParams make_params(int variant, const DecodeShape& s, const DecodeArrays<T>& a, const SplitPlan& plan) {
    DecodeParams p;
    p.Q = reinterpret_cast<const uint16_t*>(a.Q);
    const bool fp8 = variant == kFp8;  // step 6: the e4m3 cache, addressed in 16-bit words
    p.K = fp8 ? reinterpret_cast<const uint16_t*>(a.K8) : reinterpret_cast<const uint16_t*>(a.K);
    p.V = fp8 ? reinterpret_cast<const uint16_t*>(a.V8) : reinterpret_cast<const uint16_t*>(a.V);
    p.K_scale = a.K_scale;
    p.V_scale = a.V_scale;
    p.table = a.table;
    p.lens = a.lens;
    p.O = reinterpret_cast<uint16_t*>(a.O);
    p.L = a.L;
    p.O_part = a.O_part;
    p.L_part = a.L_part;
    p.counters = a.counters;
    p.fused_combine = variant >= kTuned;  // step 5 (and 6)
    p.B = s.B, p.H_q = s.H_q, p.H_kv = s.H_kv, p.q_len = s.q_len, p.N_max = s.N_max;
    p.max_pages = s.max_pages(), p.page_shift = s.page_shift();
    p.heads_per_block = heads_per_block(variant, s);
    p.row_blocks = fa::ceil_div(p.heads_per_block * s.q_len, kQRows);
    p.chunk = plan.chunk, p.splits = plan.splits;
    p.scale = s.scale, p.scale_log2 = s.scale * fa::kLog2e;
    return p;
}

/// Grid of the decoding kernel: (splits, query-head groups × row blocks, B).
inline dim3 decode_grid(const DecodeParams& p) {
    return dim3(unsigned(p.splits), unsigned(p.H_q / p.heads_per_block * p.row_blocks), unsigned(p.B));
}
/// Grid of the combine kernel: one warp per row, 4 warps per block.
inline dim3 combine_grid(const DecodeParams& p) {
    return dim3(unsigned(fa::ceil_div(int(std::size_t(p.B) * p.H_q * p.q_len), 4)));
}

/// The append kernels' parameters and grid (256 threads, one 16-byte chunk of the new tokens
/// each). C: T for the 16-bit cache, std::uint8_t for e4m3 with its scales (step 6).
template <class T, class C>
AppendParams make_append_params(const DecodeShape& s, const T* K_new, const T* V_new, C* K, C* V,
                                const int* table, const int* lens, const float* K_scale = nullptr,
                                const float* V_scale = nullptr) {
    AppendParams a;
    a.K_new = reinterpret_cast<const uint16_t*>(K_new);
    a.V_new = reinterpret_cast<const uint16_t*>(V_new);
    a.K = reinterpret_cast<uint16_t*>(K);
    a.V = reinterpret_cast<uint16_t*>(V);
    a.K_scale = K_scale, a.V_scale = V_scale;
    a.table = s.paged() ? table : nullptr;
    a.lens = lens;
    a.B = s.B, a.H_kv = s.H_kv, a.q_len = s.q_len, a.D = s.D, a.N_max = s.N_max;
    a.max_pages = s.max_pages(), a.page_shift = s.page_shift();
    return a;
}
inline dim3 append_grid(const DecodeShape& s) {
    return dim3(unsigned(fa::ceil_div(int(s.new_kv_elems() / 8), 256)));
}

}  // namespace FA_TC_KERNELS
}  // namespace ch10
