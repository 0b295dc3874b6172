// Chapter 8: the kernels of kernel/ compiled for the CPU emulator (common/tensor_core/emulator.h)
// and launched on host arrays, with the same tile table (kernel_table.h) as the GPU build
// (launch.cu). The emulated instructions are included here, before the kernels.
#define FA_TC_EMULATE 1
#include "../../../common/tensor_core/emulator.h"
#include "../../../common/tensor_core/emulated_ptx.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../chapter8.h"
#include "../kernel_table.h"

namespace ch8 {
inline namespace emulated {
/// The kernels' dynamic shared memory (their `extern __shared__ smem_raw[]`), one block at a time.
alignas(128) unsigned char smem_raw[tc::emu::kMaxSmemBytes];
}  // namespace emulated

template <class T>
void backward_emulated(int variant, int strategy, const fa::AttnShape& s, const BwdTensors<T>& t,
                       const Workspace& w, int candidate) {
    const std::string why = unsupported_reason(variant, s, candidate);
    if (!why.empty()) {
        std::fprintf(stderr, "ch8::backward_emulated: %s\n", why.c_str());
        std::exit(2);
    }
    const KernelEntry e = kernel_entry<T>(variant, s.D, candidate);
    const BwdParams p = make_params(s, t, w);
    if (strategy == kAtomic) std::fill(p.dQacc, p.dQacc + s.elements(), 0.0f);  // cudaMemsetAsync on a GPU
    tc::emu::launch(preprocess_grid(s), dim3(128), smem_raw, 0, [&] { e.preprocess(p); });
    tc::emu::launch(dkdv_grid(s, e), dim3(unsigned(e.threads())), smem_raw, std::size_t(e.smem_bytes),
                    [&] { (strategy == kAtomic ? e.dkdv_atomic : e.dkdv_only)(p); });
    if (strategy == kAtomic)
        tc::emu::launch(convert_grid(s), dim3(128), smem_raw, 0, [&] { e.convert(p, (long long)s.elements()); });
    else
        tc::emu::launch(dq_grid(s, e), dim3(unsigned(e.dq_threads())), smem_raw, std::size_t(e.dq_smem_bytes),
                        [&] { e.dq(p); });
}

template void backward_emulated<__half>(int, int, const fa::AttnShape&, const BwdTensors<__half>&,
                                        const Workspace&, int);
template void backward_emulated<__nv_bfloat16>(int, int, const fa::AttnShape&, const BwdTensors<__nv_bfloat16>&,
                                               const Workspace&, int);

}  // namespace ch8
