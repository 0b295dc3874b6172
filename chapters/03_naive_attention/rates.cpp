// The device's own reference rates, measured in the program rather than read from a data sheet:
// what a plain copy moves per second (the ceiling of a memory-bound stage such as the softmax) and
// what cuBLAS's SGEMM computes per second (the ceiling of the two GEMM stages).
#include <cuda_runtime_api.h>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/gpu_timer.h"
#include "naive_attention.h"

namespace ch3 {

double measure_copy_bandwidth(std::size_t bytes, int repeat) {
    const std::size_t n = bytes / sizeof(float);
    fa::DeviceBuffer<float> src(n), dst(n);
    src.zero();
    fa::GpuTimer timer;
    const fa::TimingStats t = timer.time(
        [&] {
            CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice));
        },
        repeat);
    return 2.0 * double(src.bytes()) / (t.median_ms * 1e-3) / 1e9;  // read + written
}

double measure_sgemm_rate(cublasHandle_t cublas, int n, int repeat) {
    const std::size_t nn = std::size_t(n) * std::size_t(n);
    fa::DeviceBuffer<float> A(nn), B(nn), C(nn);
    // Bytes 0x3C make every float ≈ 0.0115: non-zero operands, and n·0.0115² stays far from overflow.
    CUDA_CHECK(cudaMemset(A.get(), 0x3C, A.bytes()));
    CUDA_CHECK(cudaMemset(B.get(), 0x3C, B.bytes()));
    const float alpha = 1.0f, beta = 0.0f;
    fa::GpuTimer timer;
    const fa::TimingStats t = timer.time(
        [&] {
            CUBLAS_CHECK(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, A.get(), n,
                                     B.get(), n, &beta, C.get(), n));
        },
        repeat);
    return 2.0 * double(n) * double(n) * double(n) / (t.median_ms * 1e-3) / 1e12;
}

}  // namespace ch3
