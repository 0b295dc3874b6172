/// @file chapter9.h
/// @brief Chapter 9, the FlashAttention forward on Hopper (wgmma, TMA, warp specialization): what
/// the program and the tests call. Same contract as chapter 7's forward (chapter7.h): Q, K, V, O in
/// T = __half or __nv_bfloat16, L fp32, layout of shape.h, D = 64 or 128, any N ≥ 1, causal or not.
/// The kernels need compute capability 9.0 exactly (sm_90a: wgmma, setmaxnreg).
#pragma once

#include <cstddef>
#include <string>

#include "../../common/device.h"
#include "../../common/shape.h"
#include "kernel/layout.h"

namespace ch9 {

/// "1-wgmma", "2-tma", "3-warp-specialized", "4-pingpong", "5-overlap", "6-tma-store".
std::string step_name(int step);

/// Empty when `step` can run shape `s`; otherwise why not.
std::string unsupported_reason(int step, const fa::AttnShape& s);

/// Empty when device `d` can run the kernels (compute capability 9.0); otherwise one sentence.
std::string device_unsupported_reason(const fa::DeviceInfo& d);

/// Registers, spills, threads and shared memory of one step's kernel (cudaFuncGetAttributes).
struct KernelResources {
    int registers;
    std::size_t local_bytes;
    int threads;
    int smem_bytes;
};
template <class T>
KernelResources kernel_resources(int step, int D);

/// The rate of wgmma m64n128k16 alone (TF/s, median of `repeat` runs): operands in shared memory,
/// one group in flight behind the one being issued, one block of two warpgroups per SM
/// (wgmma_peak.cu). Needs compute capability 9.0.
template <class T>
double wgmma_tflops(int repeat);

/// O = softmax(Q Kᵀ·scale) V and L = rowwise logsumexp on the default stream, device arrays.
template <class T>
void forward(int step, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O, float* L);

}  // namespace ch9
