// Chapter 7: the dense-GEMM rate of this GPU (cuBLAS), the "% of GEMM" column of --bench; chapter 9
// prints it too.
#include <cstdint>
#include <type_traits>

#include <cublas_v2.h>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/gpu_timer.h"
#include "chapter7.h"

namespace ch7 {
namespace {

/// Fills x with values uniform in [−1, 1) from a hash of (seed, index), rounded to T.
template <class T>
__global__ void fill_uniform_kernel(T* x, std::size_t n, std::uint32_t seed) {
    const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    std::uint32_t h = std::uint32_t(i) * 0x9E3779B9u ^ seed;
    h ^= h >> 16, h *= 0x85EBCA6Bu, h ^= h >> 13, h *= 0xC2B2AE35u, h ^= h >> 16;
    x[i] = T(float(h) * (2.0f / 4294967296.0f) - 1.0f);
}

}  // namespace

/// The dense-GEMM rate this GPU reaches: cuBLAS cublasGemmEx, n = 8192, T in and out, fp32
/// accumulation, timed like the kernels (median, L2 flushed). The "% of GEMM" column is of this.
template <class T>
double cublas_gemm_tflops(int repeat) {
    fa::GpuTimer timer;
    const int n = 8192;
    const std::size_t elems = std::size_t(n) * n;
    fa::require_free_memory(3 * elems * sizeof(T), "the cuBLAS GEMM benchmark (3 matrices of 8192^2)");
    fa::DeviceBuffer<T> A(elems), B(elems), C(elems);
    const unsigned blocks = unsigned((elems + 255) / 256);
    fill_uniform_kernel<T><<<blocks, 256>>>(A.get(), elems, 1u);
    CUDA_CHECK_LAUNCH();
    fill_uniform_kernel<T><<<blocks, 256>>>(B.get(), elems, 2u);
    CUDA_CHECK_LAUNCH();
    cublasHandle_t handle;
    CUBLAS_CHECK(cublasCreate(&handle));
    const cudaDataType_t type = std::is_same_v<T, __half> ? CUDA_R_16F : CUDA_R_16BF;
    const float alpha = 1.0f, beta = 0.0f;
    auto launch = [&] {
        CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, A.get(), type, n,
                                  B.get(), type, n, &beta, C.get(), type, n, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    };
    const fa::TimingStats t = timer.time(launch, repeat);
    CUBLAS_CHECK(cublasDestroy(handle));
    const double flops = 2.0 * double(n) * n * n;
    fa::print_timing("cuBLAS GEMM 8192^3", t, flops, 0);
    return flops / (t.median_ms * 1e-3) / 1e12;
}

template double cublas_gemm_tflops<__half>(int);
template double cublas_gemm_tflops<__nv_bfloat16>(int);

}  // namespace ch7
