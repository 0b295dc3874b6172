#include <cuda_bf16.h>
#include "../../../chapters/08_tensor_core_backward/kernel/backward_fa2.cuh"
#include "../../../chapters/08_tensor_core_backward/kernel/candidates.h"
using namespace ch8;
template __global__ void dkdv_fa2_kernel<__nv_bfloat16, Fa2LayoutConfig<128, 8, 128, 64, 2, false, 32, 4, 32, true>, true>(BwdParams);
template __global__ void dkdv_fa2_kernel<__nv_bfloat16, Fa2LayoutConfig<128, 8, 128, 64, 2, false, 32, 4, 32, false>, true>(BwdParams);
