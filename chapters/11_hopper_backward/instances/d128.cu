// Chapter 11: the dK/dV kernels of steps 1–6 at head dim 128 (kernel_instances.h).
#include "../kernel_instances.h"

namespace ch11 {
FA_CH11_INSTANTIATE(128)
}  // namespace ch11
