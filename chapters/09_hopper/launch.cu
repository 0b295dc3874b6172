// Chapter 9: the launch of the Hopper kernels (kernel/hopper_forward.cuh): the tensor maps of the
// TMA (tensor_map.h), the shared-memory limit raised once, the grid, and the device checks.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/dtype.h"
#include "../../common/math.h"
#include "chapter9.h"
#include "../07_tensor_cores/kernel_table.h"
#include "kernel/hopper_forward.cuh"
#include "tensor_map.h"

namespace ch9 {

namespace {

/// One compiled kernel and what it needs.
struct KernelEntry {
    Tiles tiles;
    void (*kernel)(ch7::FwdParams, int, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap);
};

template <class T, class Cfg>
KernelEntry entry_of() {
    return {{Cfg::Br, Cfg::Bc, Cfg::kStages, Cfg::kConsumers, Cfg::kPingpong, Cfg::kPersistent, Cfg::kThreads,
             Cfg::kSmemBytes},
            hopper_forward_kernel<T, Cfg>};
}

/// The head dims the kernels are compiled for.
using HeadDims = fa::HeadDimList<64, 128>;

/// Step 6's candidates at head dim D, in the order of Step6Tiles<D>::List.
template <class T, int D>
const std::vector<KernelEntry>& step6_entries() {
    static const std::vector<KernelEntry> entries =
        fa::entries_of<KernelEntry>(typename Step6Tiles<D>::List{}, [](auto cfg) { return entry_of<T, decltype(cfg)>(); });
    return entries;
}

template <class T, int D>
KernelEntry step_entry(int variant, int candidate) {
    switch (variant) {
        case kWgmma: return entry_of<T, HopperConfig<1, D, 1>>();
        case kTma: return entry_of<T, HopperConfig<2, D, kLadderStages>>();
        case kSpecialized: return entry_of<T, HopperConfig<3, D, kLadderStages>>();
        case kPingpong: return entry_of<T, HopperConfig<4, D, kLadderStages>>();
        case kOverlap: return entry_of<T, HopperConfig<5, D, kLadderStages>>();
        default:  // step 6: a candidate of Step6Tiles
            return step6_entries<T, D>()[std::size_t(candidate >= 0 ? candidate : Step6Tiles<D>::kDefault)];
    }
}

template <class T>
KernelEntry kernel_entry(int variant, int D, int candidate) {
    return HeadDims::with(D, [&](auto d) { return step_entry<T, decltype(d)::value>(variant, candidate); });
}

/// The grid: a block per work item, (T_r, H, B); step 6, persistent: a block per SM, at most one
/// per item (hopper_config.h, persistent_blocks).
dim3 grid_of(const Tiles& t, const fa::AttnShape& s) {
    const int Tr = fa::ceil_div(s.N, t.Br);
    if (!t.persistent) return dim3(unsigned(Tr), unsigned(s.H), unsigned(s.B));
    const std::int64_t items = std::int64_t(Tr) * s.B * s.H;  // < 2^31: Q alone would need 2^38 rows
    return dim3(unsigned(persistent_blocks(fa::sm_count(), int(items))));
}

}  // namespace

std::string variant_name(int variant) {
    static const char* names[] = {"1-wgmma", "2-tma", "3-warp-specialized", "4-pingpong", "5-intra-wg-overlap",
                                  "6-tuned"};
    if (variant < kFirstVariant || variant > kLastVariant) return "unknown";
    return names[variant - 1];
}

std::string Tiles::tag() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "s%d-%dwg-%s%s", stages, consumers, turns ? "turns" : "free",
                  persistent ? "-persistent" : "");
    return buf;
}

std::string Tiles::str() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "B_r x B_c = %d x %d, %d stage%s, %d consumers%s%s, %d threads", Br, Bc, stages,
                  stages > 1 ? "s" : "", consumers, turns ? " in turns" : "", persistent ? ", persistent" : "",
                  threads);
    return buf;
}

Tiles tiles(int variant, int D, int candidate) { return kernel_entry<__half>(variant, D, candidate).tiles; }

std::vector<Tiles> tuning_candidates(int D) {
    std::vector<Tiles> out;
    if (!HeadDims::has(D)) return out;
    const std::vector<KernelEntry>* entries =
        HeadDims::with(D, [](auto d) { return &step6_entries<__half, decltype(d)::value>(); });
    for (const KernelEntry& e : *entries) out.push_back(e.tiles);
    return out;
}

int tuned_candidate(int D) {
    return HeadDims::with(D, [](auto d) { return Step6Tiles<decltype(d)::value>::kDefault; });
}

std::string unsupported_reason(int variant, const fa::AttnShape& s, int candidate) {
    char buf[192];
    if (variant < kFirstVariant || variant > kLastVariant) {
        std::snprintf(buf, sizeof buf, "kernel %d does not exist (chapter 9 has kernels %d..%d)", variant,
                      kFirstVariant, kLastVariant);
        return buf;
    }
    if (s.keys() != s.N || s.kv_heads() != s.H)
        return "chapter 9's kernels take as many keys as queries and one K/V head per query head (chapter 7's "
               "take N_k != N and grouped heads)";
    if (!HeadDims::has(s.D)) {
        std::snprintf(buf, sizeof buf,
                      "head dim %d is not supported: the Hopper kernels of chapter 9 are compiled for D = 64 and D = 128",
                      s.D);
        return buf;
    }
    const int n = int(tuning_candidates(s.D).size());
    if (candidate >= 0 && (variant != kTuned || candidate >= n)) {
        std::snprintf(buf, sizeof buf, "tile candidate %d: only kernel 6 has candidates, 0..%d for D = %d",
                      candidate, n - 1, s.D);
        return buf;
    }
    if (s.N < 1 || s.B < 1 || s.H < 1 || s.B > 65535 || s.H > 65535 || std::int64_t(s.B) * s.H > (1 << 30)) {
        std::snprintf(buf, sizeof buf, "shape %s is outside the grid chapter 9 launches (N >= 1, 1 <= B, H <= 65535)",
                      s.str().c_str());
        return buf;
    }
    return "";
}

std::string sm90a_unsupported_reason(const fa::DeviceInfo& d, const char* whose) {
    if (d.cc_major == 9 && d.cc_minor == 0) return "";
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s has compute capability %d.%d; %s kernels are built for sm_90a (wgmma, TMA, "
                  "setmaxnreg) and run only on compute capability 9.0 (H100, H200)",
                  d.name.c_str(), d.cc_major, d.cc_minor, whose);
    return buf;
}

std::string device_unsupported_reason(const fa::DeviceInfo& d) { return sm90a_unsupported_reason(d, "chapter 9's"); }

template <class T>
fa::KernelResources kernel_resources(int variant, int D, int candidate) {
    const KernelEntry e = kernel_entry<T>(variant, D, candidate);
    return fa::kernel_resources(e.kernel, e.tiles.threads, e.tiles.smem_bytes, "chapter 9 kernel");
}

template <class T>
void forward(int variant, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L,
             int candidate) {
    const std::string why = unsupported_reason(variant, s, candidate);
    if (!why.empty()) {
        std::fprintf(stderr, "ch9::forward: %s\n", why.c_str());
        std::exit(fa::kExitBadInput);
    }
    const KernelEntry e = kernel_entry<T>(variant, s.D, candidate);
    fa::allow_dynamic_smem_once(e.kernel, std::size_t(e.tiles.smem_bytes), "chapter 9 kernel");
    const CUtensorMap mq = tensor_map(Q, s, e.tiles.Br), mk = tensor_map(K, s, e.tiles.Bc),
                      mv = tensor_map(V, s, e.tiles.Bc), mo = tensor_map(O, s, kOBoxRows);
    e.kernel<<<grid_of(e.tiles, s), e.tiles.threads, e.tiles.smem_bytes>>>(ch7::make_params(s, Q, K, V, O, L),
                                                                            s.B * s.H, mq, mk, mv, mo);
    CUDA_CHECK_LAUNCH();
}

template fa::KernelResources kernel_resources<__half>(int, int, int);
template fa::KernelResources kernel_resources<__nv_bfloat16>(int, int, int);
template void forward<__half>(int, const fa::AttnShape&, const __half*, const __half*, const __half*, __half*, float*,
                              int);
template void forward<__nv_bfloat16>(int, const fa::AttnShape&, const __nv_bfloat16*, const __nv_bfloat16*,
                                     const __nv_bfloat16*, __nv_bfloat16*, float*, int);

}  // namespace ch9
