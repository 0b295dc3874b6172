/// @file check.h
/// @brief Error checks for every CUDA runtime and cuBLAS call, and for every kernel launch.
///
/// Each macro prints the failing call with file:line and the library's error string, then exits
/// with a non-zero status: kExitNoGpu when the error says the GPU cannot run the program (no
/// device or driver, no code compiled for its architecture, its memory full), else kExitFailed. A
/// CUDA error leaves the context unusable, so stopping is the only honest way on; tests see the
/// exit as a failure of the whole test binary.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "exit_codes.h"

namespace fa {

/// True for the errors that say this GPU (or its absence) cannot run the program at all.
inline bool is_unsuitable_gpu_error(cudaError_t err) {
    return err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || err == cudaErrorNoKernelImageForDevice ||
           err == cudaErrorUnsupportedPtxVersion || err == cudaErrorMemoryAllocation;
}

/// Prints a CUDA runtime error and exits (kExitNoGpu or kExitFailed, see above).
[[noreturn]] inline void fail_cuda(cudaError_t err, const char* call, const char* file, int line) {
    std::fprintf(stderr, "CUDA error at %s:%d: %s (%s)\n  in: %s\n", file, line,
                 cudaGetErrorString(err), cudaGetErrorName(err), call);
    std::exit(is_unsuitable_gpu_error(err) ? kExitNoGpu : kExitFailed);
}

/// Prints a cuBLAS error and exits.
[[noreturn]] inline void fail_cublas(cublasStatus_t status, const char* call, const char* file,
                                     int line) {
    std::fprintf(stderr, "cuBLAS error at %s:%d: %s\n  in: %s\n", file, line,
                 cublasGetStatusString(status), call);
    std::exit(status == CUBLAS_STATUS_ALLOC_FAILED ? kExitNoGpu : kExitFailed);
}

}  // namespace fa

/// Checks a CUDA runtime call: `CUDA_CHECK(cudaMalloc(&p, bytes));`
#define CUDA_CHECK(call)                                                           \
    do {                                                                           \
        cudaError_t fa_err_ = (call);                                              \
        if (fa_err_ != cudaSuccess) ::fa::fail_cuda(fa_err_, #call, __FILE__, __LINE__); \
    } while (0)

/// Checks a cuBLAS call: `CUBLAS_CHECK(cublasSgemm(...));`
#define CUBLAS_CHECK(call)                                                                 \
    do {                                                                                   \
        cublasStatus_t fa_status_ = (call);                                                \
        if (fa_status_ != CUBLAS_STATUS_SUCCESS)                                           \
            ::fa::fail_cublas(fa_status_, #call, __FILE__, __LINE__);                      \
    } while (0)

/// Checks the launch that just happened (bad grid, too much shared memory, ...).
/// Errors raised while the kernel runs surface at the next synchronizing CUDA_CHECK.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
