// Chapter 7: the kernels of kernel/ compiled for the CPU emulator (common/tensor_core/emulator.h)
// and launched on host arrays. Same source, same tile table (kernel_table.h) as the GPU build
// (launch.cu); the kernels of each head dim are compiled in emulator/d*.cpp. Only the PTX
// instructions, wmma and the CUDA intrinsics are emulated, and emulated_build.h includes them before
// the kernels: the kernel headers never include the emulator.
#include "emulated_build.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "../chapter7.h"
#include "../kernel_table.h"

namespace ch7 {
inline namespace emulated {
/// The kernels' dynamic shared memory (their `extern __shared__ smem_raw[]`), one block at a time.
alignas(128) unsigned char smem_raw[tc::emu::kMaxSmemBytes];
}  // namespace emulated

template <class T>
void forward_emulated(int variant, const fa::AttnShape& s, const T* Q, const T* K, const T* V, T* O,
                      float* L, int candidate) {
    const std::string why = unsupported_reason(variant, s, candidate);
    if (!why.empty()) {
        std::fprintf(stderr, "ch7::forward_emulated: %s\n", why.c_str());
        std::exit(2);
    }
    const KernelEntry e = kernel_entry<T>(variant, s.D, candidate);
    const FwdParams p = make_params(s, Q, K, V, O, L);
    tc::emu::launch(grid_of(s, e), dim3(unsigned(e.threads())), smem_raw, std::size_t(e.smem_bytes),
                    [&] { e.kernel(p); });
}

template void forward_emulated<__half>(int, const fa::AttnShape&, const __half*, const __half*, const __half*,
                                       __half*, float*, int);
template void forward_emulated<__nv_bfloat16>(int, const fa::AttnShape&, const __nv_bfloat16*,
                                              const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                                              float*, int);

}  // namespace ch7
