/// @file tensor_map.h
/// @brief The TMA tensor map of a [B·H][N][D] array of 16-bit elements (hopper_layout.h, tma_box),
/// encoded by the driver's cuTensorMapEncodeTiled, which is reached through the runtime so that no
/// -lcuda is needed. Chapter 9's launch and chapter 11's include it.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "../../common/check.h"
#include "../../common/exit_codes.h"
#include "../../common/shape.h"
#include "kernel/hopper_layout.h"

namespace ch9 {

/// cuTensorMapEncodeTiled from the driver, looked up once through the runtime.
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || f == nullptr) {
            std::fprintf(stderr, "the driver has no cuTensorMapEncodeTiled (CUDA 12.0+ driver needed)\n");
            std::exit(fa::kExitNoGpu);
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

/// The tensor map of a [B·H][N][D] array of T read in boxes of 64 columns × box_rows rows,
/// 128-byte swizzled (hopper_layout.h, tma_box).
template <class T>
CUtensorMap tensor_map(const T* base, const fa::AttnShape& s, int box_rows) {
    const tc::hopper::TmaBox b = tc::hopper::tma_box(std::uint64_t(s.B) * s.H, std::uint64_t(s.N), std::uint64_t(s.D),
                                                     std::uint32_t(box_rows));
    const cuuint32_t element_strides[3] = {1, 1, 1};
    CUtensorMap map{};
    const CUresult r = encode_tiled()(
        &map, std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
        const_cast<T*>(base), b.dims, b.strides, b.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuTensorMapEncodeTiled failed (CUresult %d) for %s\n", int(r), s.str().c_str());
        std::exit(fa::kExitFailed);
    }
    return map;
}

}  // namespace ch9
