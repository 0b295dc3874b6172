// Chapter 7: the launch of the forward kernels (kernel/ holds them; kernel/flash_forward.cuh lists
// the variants): which compiled kernel runs (kernel_table.h), its shared-memory limit raised once,
// the grid, and the device checks.
#include <cstdio>
#include <string>
#include <vector>

#include "../../common/check.h"
#include "../../common/device.h"
#include "chapter7.h"
#include "kernel_table.h"

namespace ch7 {

std::string variant_name(int variant) {
    static const char* names[] = {"1-wmma", "2-mma-sync", "3-ldmatrix-swizzle", "4-cp-async",
                                  "5-exp2", "6-tuned"};
    if (variant < kFirstVariant || variant > kLastVariant) return "unknown";
    return names[variant - 1];
}

std::string TileConfig::str() const {
    char buf[128];
    std::snprintf(buf, sizeof buf, "B_r x B_c = %d x %d, %d warps x %d m-tile%s, %d stage%s, Q in %s",
                  Br(), Bc, warps, m_tiles, m_tiles > 1 ? "s" : "", stages, stages > 1 ? "s" : "",
                  q_in_regs ? "registers" : "smem");
    return buf;
}

std::vector<int> head_dims() { return HeadDims::list(); }

std::vector<TileConfig> tuning_candidates(int D) {
    std::vector<TileConfig> out;
    if (!HeadDims::has(D)) return out;
    for (const KernelEntry& e : kernel_candidates<__half>(D)) out.push_back(e.tiles);
    return out;
}

int tuned_candidate(int D) { return default_candidate(D); }

TileConfig tiles(int variant, int D, int candidate) { return kernel_entry<__half>(variant, D, candidate).tiles; }

int smem_bytes(int variant, int D, int candidate) { return kernel_entry<__half>(variant, D, candidate).smem_bytes; }

std::string unsupported_reason(int variant, const fa::AttnShape& s, int candidate) {
    char buf[192];
    if (variant < kFirstVariant || variant > kLastVariant) {
        std::snprintf(buf, sizeof buf, "kernel %d does not exist (chapter 7 has kernels %d..%d)", variant,
                      kFirstVariant, kLastVariant);
        return buf;
    }
    if (!HeadDims::has(s.D)) {
        std::string list;
        for (int D : head_dims()) list += (list.empty() ? "" : ", ") + std::to_string(D);
        std::snprintf(buf, sizeof buf,
                      "head dim %d is not supported: the tensor-core kernels of chapter 7 are "
                      "compiled for D = %s",
                      s.D, list.c_str());
        return buf;
    }
    const int n = int(tuning_candidates(s.D).size());
    if (candidate >= 0 && (variant != kTuned || candidate >= n)) {
        std::snprintf(buf, sizeof buf, "tile candidate %d: only kernel 6 has candidates, 0..%d for D = %d",
                      candidate, n - 1, s.D);
        return buf;
    }
    if (s.N < 1 || s.B < 1 || s.H < 1 || s.B > 65535 || s.H > 65535) {
        std::snprintf(buf, sizeof buf, "shape %s is outside the grid chapter 7 launches "
                      "(N >= 1, 1 <= B, H <= 65535)", s.str().c_str());
        return buf;
    }
    const std::string kv = fa::kv_shape_error(s);
    if (!kv.empty()) return kv;
    if (variant == kWmma && (s.keys() != s.N || s.kv_heads() != s.H))
        return "kernel 1 (wmma) needs N_k = N and H_kv = H; kernels 2..6 take --seq-k and --kv-heads";
    return "";
}

std::string device_unsupported_reason(const fa::DeviceInfo& d) {
    if (d.cc_major >= 8) return "";
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s has compute capability %d.%d; chapter 7's kernels need 8.0 or newer "
                  "(mma.sync with bf16, ldmatrix, cp.async)",
                  d.name.c_str(), d.cc_major, d.cc_minor);
    return buf;
}

template <class T>
fa::KernelResources kernel_resources(int variant, int D, int candidate) {
    const KernelEntry e = kernel_entry<T>(variant, D, candidate);
    return fa::kernel_resources(e.kernel, e.threads(), e.smem_bytes, "chapter 7 kernel");
}

template <class T>
void forward(int variant, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L,
             int candidate) {
    const std::string why = unsupported_reason(variant, s, candidate);
    if (!why.empty()) {
        std::fprintf(stderr, "ch7::forward: %s\n", why.c_str());
        std::exit(fa::kExitBadInput);
    }
    const KernelEntry e = kernel_entry<T>(variant, s.D, candidate);
    fa::allow_dynamic_smem_once(e.kernel, std::size_t(e.smem_bytes), "chapter 7 kernel");
    e.kernel<<<grid_of(s, e), e.threads(), e.smem_bytes>>>(make_params(s, Q, K, V, O, L));
    CUDA_CHECK_LAUNCH();
}

template fa::KernelResources kernel_resources<__half>(int, int, int);
template fa::KernelResources kernel_resources<__nv_bfloat16>(int, int, int);
template void forward<__half>(int, const fa::AttnShape&, const __half*, const __half*, const __half*,
                              __half*, float*, int);
template void forward<__nv_bfloat16>(int, const fa::AttnShape&, const __nv_bfloat16*,
                                     const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                                     float*, int);

}  // namespace ch7
