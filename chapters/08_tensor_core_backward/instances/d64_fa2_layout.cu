// Chapter 8: the GPU kernels of step 6's candidates at head dim 64 (kernel_instances_fa2.h), one file per head
// dim and step group so that make -j compiles them side by side after an edit in kernel/.
#include "../kernel_instances_fa2.h"

CH8_INSTANTIATE(64, fa2_layout)
