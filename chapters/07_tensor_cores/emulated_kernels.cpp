// Chapter 7: the kernels of kernels.cu compiled for the CPU emulator (emulator.h) and launched on
// host arrays. Same source, same tile table (kernel_table.h); only the PTX instructions, wmma and
// the CUDA intrinsics are emulated.
#define FA_CH7_EMULATE 1
#include "emulator.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "flash2_tc.h"
#include "kernel_table.h"

namespace ch7 {

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
    emu::launch(grid_of(s, e), dim3(unsigned(e.threads)), std::size_t(e.smem_bytes), [&] { e.kernel(p); });
}

template void forward_emulated<__half>(int, const fa::AttnShape&, const __half*, const __half*, const __half*,
                                       __half*, float*, int);
template void forward_emulated<__nv_bfloat16>(int, const fa::AttnShape&, const __nv_bfloat16*,
                                              const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                                              float*, int);

}  // namespace ch7
