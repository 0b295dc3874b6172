// Chapter 9 host side: the tensor maps TMA reads, and one launch per step and head dim.
#include <cudaTypedefs.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/math.h"
#include "chapter9.h"
#include "kernel/flash_forward.cuh"

namespace ch9 {

std::string step_name(int step) {
    static const char* names[] = {"1-wgmma", "2-tma", "3-warp-specialized", "4-pingpong", "5-overlap", "6-tma-store"};
    return step >= kFirstStep && step <= kLastStep ? names[step - 1] : "unknown";
}

std::string unsupported_reason(int step, const fa::AttnShape& s) {
    char buf[192];
    if (step < kFirstStep || step > kLastStep) {
        std::snprintf(buf, sizeof buf, "step %d does not exist (chapter 9 has steps %d..%d)", step, kFirstStep,
                      kLastStep);
        return buf;
    }
    if (s.D != 64 && s.D != 128) {
        std::snprintf(buf, sizeof buf, "head dim %d is not supported: chapter 9's kernels are compiled for D = 64 "
                      "and D = 128", s.D);
        return buf;
    }
    if (s.N < 1 || s.B < 1 || s.H < 1 || s.B > 65535 || s.H > 65535) {
        std::snprintf(buf, sizeof buf, "shape %s is outside the grid chapter 9 launches (N >= 1, 1 <= B, H <= 65535)",
                      s.str().c_str());
        return buf;
    }
    return "";
}

std::string device_unsupported_reason(const fa::DeviceInfo& d) {
    if (d.cc_major == 9 && d.cc_minor == 0) return "";
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s has compute capability %d.%d; chapter 9's kernels use Hopper-only instructions (wgmma, "
                  "setmaxnreg: sm_90a) and run on compute capability 9.0 only",
                  d.name.c_str(), d.cc_major, d.cc_minor);
    return buf;
}

namespace {

/// cuTensorMapEncodeTiled from the driver, found through the runtime (no -lcuda at link time).
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !f) {
            std::fprintf(stderr, "chapter 9: the driver has no cuTensorMapEncodeTiled\n");
            std::exit(1);
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

/// The tensor map of Q, K, V or O seen as a 3-D tensor (D, N, B·H): boxes of tma_box(rows, D), 128B
/// swizzle (layout.h), rows past N filled with zeros.
template <class T>
CUtensorMap tensor_map(const T* x, const fa::AttnShape& s, int rows) {
    CUtensorMap map;
    const TmaBox box = tma_box(rows, s.D);
    const cuuint64_t dims[3] = {cuuint64_t(s.D), cuuint64_t(s.N), cuuint64_t(s.heads_total())};
    const cuuint64_t strides[2] = {cuuint64_t(s.D) * sizeof(T), cuuint64_t(s.N) * s.D * sizeof(T)};
    const cuuint32_t box_dims[3] = {cuuint32_t(box.cols), cuuint32_t(box.rows), cuuint32_t(box.heads)};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const CUresult r = encoder()(
        &map, std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
        const_cast<T*>(x), dims, strides, box_dims, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "chapter 9: cuTensorMapEncodeTiled failed (CUresult %d) for %s\n", int(r),
                     s.str().c_str());
        std::exit(1);
    }
    return map;
}

template <class T, int D>
auto kernel_of(int step) {
    return step == kWgmma      ? flash_forward_kernel<T, D, kWgmma>
         : step == kTma        ? flash_forward_kernel<T, D, kTma>
         : step == kSpecialized ? flash_forward_kernel<T, D, kSpecialized>
         : step == kPingpong   ? flash_forward_kernel<T, D, kPingpong>
         : step == kOverlap    ? flash_forward_kernel<T, D, kOverlap>
                               : flash_forward_kernel<T, D, kTmaStore>;
}

template <class T, int D>
void launch(int step, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L) {
    const StepConfig c = step_config(step);
    auto kernel = kernel_of<T, D>(step);
    fa::allow_dynamic_smem_once(kernel, std::size_t(c.smem_bytes(D)), "chapter 9 kernel");
    const Params<T> p{Q, K, V, O, L, s.N, s.H, s.scale, float(s.scale * fa::kLog2e), s.causal};
    const dim3 grid(unsigned(fa::ceil_div(s.N, c.Br)), unsigned(s.H), unsigned(s.B));
    kernel<<<grid, c.threads(), c.smem_bytes(D)>>>(tensor_map(Q, s, c.Br), tensor_map(K, s, c.Bc),
                                                    tensor_map(V, s, c.Bc), tensor_map(O, s, c.Br / c.consumers), p);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
KernelResources kernel_resources(int step, int D) {
    const StepConfig c = step_config(step);
    cudaFuncAttributes a{};
    if (D == 64) {
        auto k = kernel_of<T, 64>(step);
        fa::allow_dynamic_smem_once(k, std::size_t(c.smem_bytes(D)), "chapter 9 kernel");
        CUDA_CHECK(cudaFuncGetAttributes(&a, k));
    } else {
        auto k = kernel_of<T, 128>(step);
        fa::allow_dynamic_smem_once(k, std::size_t(c.smem_bytes(D)), "chapter 9 kernel");
        CUDA_CHECK(cudaFuncGetAttributes(&a, k));
    }
    return {a.numRegs, a.localSizeBytes, c.threads(), c.smem_bytes(D)};
}

template <class T>
void forward(int step, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L) {
    if (s.D == 64) launch<T, 64>(step, s, Q, K, V, O, L);
    else launch<T, 128>(step, s, Q, K, V, O, L);
}

template KernelResources kernel_resources<__half>(int, int);
template KernelResources kernel_resources<__nv_bfloat16>(int, int);
template void forward<__half>(int, const fa::AttnShape&, const __half*, const __half*, const __half*, __half*,
                              float*);
template void forward<__nv_bfloat16>(int, const fa::AttnShape&, const __nv_bfloat16*, const __nv_bfloat16*,
                                     const __nv_bfloat16*, __nv_bfloat16*, float*);

}  // namespace ch9
