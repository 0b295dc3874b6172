// Chapter 8: the kernels of steps 1–4 at head dim 64 on the CPU emulator (emulated_build.h,
// kernel_instances.h).
#include "emulated_build.h"
#include "../kernel_instances.h"

CH8_INSTANTIATE(64, ladder)
