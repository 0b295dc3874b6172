// Chapter 7: the kernels of head dim 96 on the CPU emulator (emulated_build.h, kernel_instances.h).
#include "emulated_build.h"
#include "../kernel_instances.h"

CH7_INSTANTIATE_HEAD_DIM(96)
