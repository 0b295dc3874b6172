/// @file build.h
/// @brief Which build of the tensor-core kernels is being compiled: nvcc for a GPU, or g++ for the
/// CPU emulator (emulator.h). Every toolkit and kernel header includes this first.
///
/// - `FA_TC_EMULATE`: defined (to 1) by a chapter's emulated build, before any include.
/// - `FA_TC_SM80`: 1 while nvcc compiles device code for compute capability 8.0 or newer (bf16
///   mma.sync, cp.async) or while the emulator compiles the kernels; kernels compile their bodies
///   only then and `__trap()` otherwise (the host refuses older devices before launching).
/// - `FA_TC_KERNELS`: the inline namespace the kernels live in, `gpu` or `emulated`: code says
///   ch7::flash_forward_kernel either way, and the two builds never share a symbol.
#pragma once

#if defined(FA_TC_EMULATE) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
#define FA_TC_SM80 1
#else
#define FA_TC_SM80 0
#endif

#if defined(FA_TC_EMULATE)
#define FA_TC_KERNELS emulated
#else
#define FA_TC_KERNELS gpu
#endif
