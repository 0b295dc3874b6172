// Chapter 11: the dK/dV kernels of steps 1–6 at head dim 64 (kernel_instances.h).
#include "../kernel_instances.h"

namespace ch11 {
FA_CH11_INSTANTIATE(64)
}  // namespace ch11
