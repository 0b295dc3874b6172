// Chapter 8: the GPU kernels of steps 1–4 at head dim 64 (kernel_instances.h), one file per head
// dim and step group so that make -j compiles them side by side after an edit in kernel/.
#include "../kernel_instances.h"

CH8_INSTANTIATE(64, ladder)
