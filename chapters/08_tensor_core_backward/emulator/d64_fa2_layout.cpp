// Chapter 8: the kernels of step 6's candidates at head dim 64 on the CPU emulator (emulated_build.h,
// kernel_instances_fa2.h).
#include "emulated_build.h"
#include "../kernel_instances_fa2.h"

CH8_INSTANTIATE(64, fa2_layout)
