// Chapter 8: the GPU kernels of step 5's candidates at head dim 128 (kernel_instances.h), one file per head
// dim and step group so that make -j compiles them side by side after an edit in kernel/.
#include "../kernel_instances.h"

CH8_INSTANTIATE(128, tuned)
