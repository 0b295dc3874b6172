// Chapter 11: the launch of the backward on Hopper: chapter 8's preprocess and dQ conversion around
// this chapter's dK/dV kernel (kernel/hopper_backward.cuh), its tensor maps (chapter 9's
// tensor_map.h), the shared-memory limit raised once, the grid, and the device checks.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/exit_codes.h"
#include "../09_hopper/kernel/hopper_layout.h"
#include "../08_tensor_core_backward/kernel_table.h"  // ch8::make_params
#include "../09_hopper/chapter9.h"
#include "../09_hopper/tensor_map.h"
#include "chapter11.h"
#include "kernel_table.h"

namespace ch11 {

std::string variant_name(int variant) {
    static const char* names[] = {"1-wgmma",         "2-tma",     "3-warp-specialized",
                                  "4-dq-tma-reduce", "5-overlap", "6-deterministic"};
    if (variant < kFirstVariant || variant > kLastVariant) return "unknown";
    return names[variant - 1];
}

std::string Tiles::str() const {
    char buf[160];
    static const char* line15_place[] = {"", ", line 15 under the next S^T", ", line 15 before line 16"};
    std::snprintf(buf, sizeof buf, "B_c x B_r = %d x %d, %d stage%s, %d threads, %.1f KB shared memory%s", Bc, Br,
                  stages, stages > 1 ? "s" : "", threads, smem_bytes / 1024.0, line15_place[line15]);
    return buf;
}

Tiles tiles(int variant, int D, int candidate) { return kernel_entry<__half>(variant, D, candidate).tiles; }

std::vector<Tiles> tuning_candidates(int D) {
    std::vector<Tiles> out;
    if (!HeadDims::has(D)) return out;
    const int n = HeadDims::with(D, [](auto d) { return int(Step5Tiles<decltype(d)::value>::List::size); });
    for (int k = 0; k < n; ++k) out.push_back(tiles(kOverlap, D, k));
    return out;
}

int tuned_candidate(int D) {
    return HeadDims::with(D, [](auto d) { return Step5Tiles<decltype(d)::value>::kDefault; });
}

std::string unsupported_reason(int variant, const fa::AttnShape& s, int candidate) {
    char buf[192];
    if (variant < kFirstVariant || variant > kLastVariant) {
        std::snprintf(buf, sizeof buf, "kernel %d does not exist (chapter 11 has kernels %d..%d)", variant,
                      kFirstVariant, kLastVariant);
        return buf;
    }
    if (!HeadDims::has(s.D)) {
        std::snprintf(buf, sizeof buf,
                      "head dim %d is not supported: the Hopper backward kernels of chapter 11 are compiled for D = 64 "
                      "and D = 128",
                      s.D);
        return buf;
    }
    const int n = int(tuning_candidates(s.D).size());
    if (candidate >= 0 && (variant != kOverlap || candidate >= n)) {
        std::snprintf(buf, sizeof buf, "tile candidate %d: only kernel 5 has candidates, 0..%d", candidate, n - 1);
        return buf;
    }
    // the preprocess and the conversion are chapter 8's: its limits on the shape hold here too
    const std::string why = ch8::unsupported_reason(ch8::kFa2Layout, s);
    return why.empty() ? why : "chapter 11 runs chapter 8's preprocess and dQ conversion, and " + why;
}

std::string device_unsupported_reason(const fa::DeviceInfo& d) {
    return ch9::sm90a_unsupported_reason(d, "chapter 11's");
}

template <class T>
fa::KernelResources kernel_resources(int variant, int D, int candidate) {
    const KernelEntry e = kernel_entry<T>(variant, D, candidate);
    return fa::kernel_resources(e.kernel, e.tiles.threads, e.tiles.smem_bytes, "chapter 11 dK/dV kernel");
}

namespace {

void require_supported(int variant, const fa::AttnShape& s, int candidate, const int* dq_counters) {
    std::string why = unsupported_reason(variant, s, candidate);
    if (why.empty() && variant == kDeterministic && dq_counters == nullptr)
        why = "kernel 6 needs its dQ turn counters (dq_counter_ints(s) ints, the last argument)";
    if (!why.empty()) {
        std::fprintf(stderr, "ch11::backward: %s\n", why.c_str());
        std::exit(fa::kExitBadInput);
    }
}

/// The tensor map of the fp32 dQ workspace [B·H][N][D], in boxes of 32 columns × 64 rows with the
/// 128-byte swizzle (one fp32 row of a box is one swizzle atom: bwd_hopper_config.h,
/// dq_stage_offset): what step 4's TMA reduce-adds write through.
CUtensorMap workspace_map(float* dQacc, const fa::AttnShape& s) {
    const cuuint64_t dims[3] = {cuuint64_t(s.D), cuuint64_t(s.N), cuuint64_t(s.B) * cuuint64_t(s.H)};
    const cuuint64_t strides[2] = {cuuint64_t(s.D) * 4, cuuint64_t(s.N) * cuuint64_t(s.D) * 4};
    const cuuint32_t box[3] = {cuuint32_t(tc::hopper::kAtomColsF32), 64, 1};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    CUtensorMap map{};
    const CUresult r = ch9::encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, dQacc, dims, strides, box,
                                           element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "chapter 11: cuTensorMapEncodeTiled failed (CUresult %d) for the dQ workspace of %s\n",
                     int(r), s.str().c_str());
        std::exit(fa::kExitFailed);
    }
    return map;
}

/// The dK/dV kernel: a block per K_j, V_j of each head, (T_c, H, B), blocks with the most query
/// tiles (causal: the first key blocks) first, except in step 6 (key_block_of).
template <class T>
void launch_dkdv(const KernelEntry& e, const fa::AttnShape& s, const ch8::BwdTensors<T>& t, const ch8::BwdParams& p,
                 int* dq_counters) {
    fa::allow_dynamic_smem_once(e.kernel, std::size_t(e.tiles.smem_bytes), "chapter 11 dK/dV kernel");
    const CUtensorMap mq = ch9::tensor_map(t.Q, s, e.tiles.Br), mk = ch9::tensor_map(t.K, s, e.tiles.Bc),
                      mv = ch9::tensor_map(t.V, s, e.tiles.Bc), mdo = ch9::tensor_map(t.dO, s, e.tiles.Br),
                      mdq = workspace_map(p.dQacc, s);
    const dim3 grid(unsigned(fa::ceil_div(s.N, e.tiles.Bc)), unsigned(s.H), unsigned(s.B));
    e.kernel<<<grid, e.tiles.threads, e.tiles.smem_bytes>>>(p, mq, mk, mv, mdo, mdq, dq_counters);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

std::size_t dq_counter_ints(const fa::AttnShape& s) {
    if (!HeadDims::has(s.D)) return 0;
    const int Br = tiles(kDeterministic, s.D).Br;
    return s.heads_total() * std::size_t(fa::ceil_div(s.N, Br)) * 2;  // bwd_hopper_config.h, dq_counter
}

template <class T>
void backward_part(int part, int variant, const fa::AttnShape& s, const ch8::BwdTensors<T>& t,
                   const ch8::Workspace& w, int candidate, int* dq_counters) {
    require_supported(variant, s, candidate, dq_counters);
    if (part == 1) {
        launch_dkdv<T>(kernel_entry<T>(variant, s.D, candidate), s, t, ch8::make_params(s, t, w), dq_counters);
        return;
    }
    // chapter 8's preprocess (part 0) or conversion (part 2), the same for all its kernels
    ch8::backward_part<T>(part, ch8::kFa2Layout, ch8::kAtomic, s, t, w);
    if (part == 0 && variant == kDeterministic)  // step 6: every turn starts at 0
        CUDA_CHECK(cudaMemsetAsync(dq_counters, 0, dq_counter_ints(s) * sizeof(int)));
}

template <class T>
void backward(int variant, const fa::AttnShape& s, const ch8::BwdTensors<T>& t, const ch8::Workspace& w,
              int candidate, int* dq_counters) {
    for (int part = 0; part < 3; ++part) backward_part<T>(part, variant, s, t, w, candidate, dq_counters);
}

#define FA_CH11_INSTANTIATE_API(T)                                                                                \
    template fa::KernelResources kernel_resources<T>(int, int, int);                                              \
    template void backward<T>(int, const fa::AttnShape&, const ch8::BwdTensors<T>&, const ch8::Workspace&, int,    \
                              int*);                                                                                \
    template void backward_part<T>(int, int, const fa::AttnShape&, const ch8::BwdTensors<T>&, const ch8::Workspace&, \
                                   int, int*);
FA_CH11_INSTANTIATE_API(__half)
FA_CH11_INSTANTIATE_API(__nv_bfloat16)

}  // namespace ch11
