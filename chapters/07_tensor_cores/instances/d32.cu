// Chapter 7: the GPU kernels of head dim 32 (kernel_instances.h), one file per head dim so that
// make -j compiles them side by side after an edit in kernel/.
#include "../kernel_instances.h"

CH7_INSTANTIATE_HEAD_DIM(32)
