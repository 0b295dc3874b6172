// Chapter 8: the launch of the backward kernels (kernel/backward.cuh): which compiled kernels run
// (kernel_table.h), their shared-memory limits raised once, the grids, the workspace.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../../common/check.h"
#include "../../common/device.h"
#include "chapter8.h"
#include "kernel_table.h"

namespace ch8 {

const char* strategy_name(int strategy) { return strategy == kAtomic ? "atomic" : "split"; }

std::string variant_name(int variant) {
    static const char* names[] = {"1-direct-port", "2-ldmatrix-swizzle", "3-cp-async", "4-registers", "5-tuned",
                                  "6-fa2-layout"};
    if (variant < kFirstVariant || variant > kLastVariant) return "unknown";
    return names[variant - 1];
}

std::string BwdTiles::str() const {
    char layout[96] = "";
    if (key_warps > 0)  // step 6: the warp grid
        std::snprintf(layout, sizeof layout, " as %d (keys) x %d (queries; D for dK, dV)", key_warps,
                      warps / key_warps);
    char slice[80] = "";
    if (s_sub > 0)  // step 6: how much of Sᵀ a warp holds, and the order of its loads
        std::snprintf(slice, sizeof slice, ", S^T %s%s", s_sub == sub ? "of the whole pass" : "16 queries at a time",
                      prefetch ? ", loads one k-step ahead" : "");
    char buf[320];
    std::snprintf(buf, sizeof buf, "B_c x B_r = %d x %d (passes of %d), %d warps%s, %d stage%s%s, K/V in %s; dQ kernel %d x %d",
                  Bc(), Br, sub, warps, layout, stages, stages > 1 ? "s" : "", slice, kv_in_regs ? "registers" : "smem",
                  16 * dq_warps, dq_Bc);
    std::string out = buf;
    if (dq_vec > 1) out += "; dQ atomics float" + std::to_string(dq_vec);
    if (dq_vec_run != dq_vec) out += " asked, scalar run (this GPU runs code for one before sm_90)";
    if (dq_m > 1) out += "; line 15 in " + std::to_string(dq_m) + " m-tiles per warp";
    return out;
}

std::vector<BwdTiles> tuning_candidates(int D, int variant) {
    std::vector<BwdTiles> out;
    if (!HeadDims::has(D) || (variant != kTuned && variant != kFa2Layout)) return out;
    for (const KernelEntry& e : kernel_candidates<__half>(variant, D)) out.push_back(e.tiles);
    return out;
}

std::string candidate_name(int variant, int k) {
    if (k < 0 || (variant != kTuned && variant != kFa2Layout)) return "";
    return (variant == kTuned ? "t" : "f") + std::to_string(k);
}

bool parse_candidate(const std::string& name, int* variant, int* k) {
    if (name.size() < 2 || name.size() > 3 || (name[0] != 't' && name[0] != 'f')) return false;
    int n = 0;
    for (std::size_t i = 1; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') return false;
        n = 10 * n + (name[i] - '0');
    }
    *variant = name[0] == 't' ? kTuned : kFa2Layout;
    *k = n;
    return true;
}

int tuned_candidate(int D, int variant) {
    return HeadDims::with(D, [&](auto d) {
        constexpr int Dc = decltype(d)::value;
        return variant == kFa2Layout ? Step6Tiles<Dc>::kDefault : Step5Tiles<Dc>::kDefault;
    });
}

namespace {

/// Writes the widest dQ atomic (floats) that the code the GPU runs has: kMaxDqVec as compiled for
/// the architecture the fat binary's loader picked for this device (its sm_90 code, or PTX of it
/// compiled for a newer GPU, has vector atomics; the sm_75..sm_89 code has none).
__global__ void dq_vec_probe(int* out) { *out = kMaxDqVec; }

/// dq_vec_probe's answer for the current device, asked once per device.
int device_max_dq_vec() {
    static std::map<int, int> answers;
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    auto found = answers.find(device);
    if (found != answers.end()) return found->second;
    fa::DeviceBuffer<int> out(1);
    dq_vec_probe<<<1, 1>>>(out.get());
    CUDA_CHECK_LAUNCH();
    return answers[device] = out.download()[0];
}

}  // namespace

BwdTiles tiles(int variant, int D, int candidate) {
    BwdTiles t = kernel_entry<__half>(variant, D, candidate).tiles;
    if (t.dq_vec > 1 && fa::cuda_device_count() > 0) t.dq_vec_run = std::min(t.dq_vec, device_max_dq_vec());
    return t;
}

int padded_rows(int N) { return fa::ceil_div(N, kRowPad) * kRowPad; }

std::string unsupported_reason(int variant, const fa::AttnShape& s, int candidate) {
    char buf[224];
    if (variant < kFirstVariant || variant > kLastVariant) {
        std::snprintf(buf, sizeof buf, "kernel %d does not exist (chapter 8 has kernels %d..%d)", variant,
                      kFirstVariant, kLastVariant);
        return buf;
    }
    if (!HeadDims::has(s.D)) {
        std::snprintf(buf, sizeof buf,
                      "head dim %d is not supported: chapter 8's kernels (and chapter 7's forward) are "
                      "compiled for D = 64 and D = 128", s.D);
        return buf;
    }
    const int n = int(tuning_candidates(s.D, variant).size());
    if (candidate >= 0 && candidate >= n) {
        if (n == 0)
            std::snprintf(buf, sizeof buf, "kernel %d has no tile candidates (only kernels 5 and 6 have them)",
                          variant);
        else
            std::snprintf(buf, sizeof buf, "tile candidate %s: kernel %d has candidates %s..%s for D = %d",
                          candidate_name(variant, candidate).c_str(), variant, candidate_name(variant, 0).c_str(),
                          candidate_name(variant, n - 1).c_str(), s.D);
        return buf;
    }
    if (s.N < 1 || s.B < 1 || s.H < 1 || s.B > 65535 || s.H > 65535 ||
        double(std::max(s.elements(), s.kv_elements())) > 2e9) {
        std::snprintf(buf, sizeof buf, "shape %s is outside what chapter 8 launches "
                      "(N >= 1, 1 <= B, H <= 65535, B*H*N*D < 2^31)", s.str().c_str());
        return buf;
    }
    return fa::kv_shape_error(s);
}

std::size_t workspace_floats(const fa::AttnShape& s, int strategy) {
    return 2 * s.heads_total() * std::size_t(padded_rows(s.N)) + (strategy == kAtomic ? s.elements() : 0);
}

Workspace split_workspace(float* base, const fa::AttnShape& s, int strategy) {
    const std::size_t rows = s.heads_total() * std::size_t(padded_rows(s.N));
    return {base, base + rows, strategy == kAtomic ? base + 2 * rows : nullptr};
}

namespace {

template <class T>
void launch_part(int part, const KernelEntry& e, int strategy, const fa::AttnShape& s, const BwdParams& p) {
    if (part == 0) {
        if (strategy == kAtomic) CUDA_CHECK(cudaMemsetAsync(p.dQacc, 0, s.elements() * sizeof(float)));
        e.preprocess<<<preprocess_grid(s), 128>>>(p);
        CUDA_CHECK_LAUNCH();
    } else if (part == 1) {
        auto kernel = strategy == kAtomic ? e.dkdv_atomic : e.dkdv_only;
        fa::allow_dynamic_smem_once(kernel, std::size_t(e.smem_bytes), "chapter 8 dK/dV kernel");
        kernel<<<dkdv_grid(s, e), e.threads(), e.smem_bytes>>>(p);
        CUDA_CHECK_LAUNCH();
    } else if (strategy == kAtomic) {
        e.convert<<<convert_grid(s), 128>>>(p, (long long)s.elements());
        CUDA_CHECK_LAUNCH();
    } else {
        fa::allow_dynamic_smem_once(e.dq, std::size_t(e.dq_smem_bytes), "chapter 8 dQ kernel");
        e.dq<<<dq_grid(s, e), e.dq_threads(), e.dq_smem_bytes>>>(p);
        CUDA_CHECK_LAUNCH();
    }
}

void require_supported(int variant, const fa::AttnShape& s, int candidate) {
    const std::string why = unsupported_reason(variant, s, candidate);
    if (!why.empty()) {
        std::fprintf(stderr, "ch8::backward: %s\n", why.c_str());
        std::exit(fa::kExitBadInput);
    }
}

}  // namespace

template <class T>
void backward_part(int part, int variant, int strategy, const fa::AttnShape& s, const BwdTensors<T>& t,
                   const Workspace& w, int candidate) {
    require_supported(variant, s, candidate);
    launch_part<T>(part, kernel_entry<T>(variant, s.D, candidate), strategy, s, make_params(s, t, w));
}

template <class T>
void backward(int variant, int strategy, const fa::AttnShape& s, const BwdTensors<T>& t, const Workspace& w,
              int candidate) {
    require_supported(variant, s, candidate);
    const KernelEntry e = kernel_entry<T>(variant, s.D, candidate);
    const BwdParams p = make_params(s, t, w);
    for (int part = 0; part < 3; ++part) launch_part<T>(part, e, strategy, s, p);
}

template <class T>
fa::KernelResources kernel_resources(int variant, int D, int candidate) {
    const KernelEntry e = kernel_entry<T>(variant, D, candidate);
    return fa::kernel_resources(e.dkdv_atomic, e.threads(), e.smem_bytes, "chapter 8 dK/dV kernel");
}

#define FA_CH8_INSTANTIATE(T)                                                                                  \
    template void backward<T>(int, int, const fa::AttnShape&, const BwdTensors<T>&, const Workspace&, int);     \
    template void backward_part<T>(int, int, int, const fa::AttnShape&, const BwdTensors<T>&, const Workspace&, \
                                   int);                                                                       \
    template fa::KernelResources kernel_resources<T>(int, int, int);
FA_CH8_INSTANTIATE(__half)
FA_CH8_INSTANTIATE(__nv_bfloat16)

}  // namespace ch8
