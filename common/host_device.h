/// @file host_device.h
/// @brief `FA_HOST_DEVICE`: marks a function that both g++ (CPU code, CI) and nvcc (kernels) compile.
#pragma once

#if defined(__CUDACC__)
#define FA_HOST_DEVICE __host__ __device__
#else
#define FA_HOST_DEVICE
#endif
