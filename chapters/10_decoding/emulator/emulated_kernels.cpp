// Chapter 10: the kernels of kernel/ compiled for the CPU emulator (common/tensor_core/emulator.h)
// and launched on host arrays: the same source and kernel table (kernel_table.h) as the GPU build
// (launch.cu), so the tests run every variant without a GPU.
#define FA_TC_EMULATE 1
#include "../../../common/tensor_core/emulator.h"
#include "../../../common/tensor_core/emulated_ptx.h"

// The two device functions step 5's combine needs, for blocks that run one after the other.
inline int atomicAdd(int* address, int value) {
    const int old = *address;
    *address += value;
    return old;
}
inline void __threadfence() {}

#include <cstdio>
#include <cstdlib>
#include <string>

#include "../decoding.h"
#include "../kernel_table.h"

namespace ch10 {
inline namespace emulated {
/// The kernels' dynamic shared memory (their `extern __shared__ smem_raw[]`), one block at a time.
alignas(128) unsigned char smem_raw[tc::emu::kMaxSmemBytes];
}  // namespace emulated

template <class T>
void decode_emulated(int variant, const DecodeShape& s, const DecodeArrays<T>& a, const SplitPlan& plan,
                     int candidate) {
    const std::string why = unsupported_reason(variant, s, candidate);
    if (!why.empty()) {
        std::fprintf(stderr, "ch10::decode_emulated: %s\n", why.c_str());
        std::exit(2);
    }
    const KernelEntry e = kernel_entry<T>(variant, s, candidate);
    const DecodeParams p = make_params(variant, s, a, plan);
    tc::emu::launch(decode_grid(p), dim3(unsigned(e.threads)), smem_raw, std::size_t(e.smem_bytes),
                    [&] { e.kernel(p); });
    if (plan.splits > 1 && !p.fused_combine) {
        auto combine = combine_entry<T>(s.D);
        tc::emu::launch(combine_grid(p), dim3(128), smem_raw, 0, [&] { combine(p); });
    }
}

template <class T>
void append_kv_emulated(const DecodeShape& s, const T* K_new, const T* V_new, T* K, T* V, const int* table,
                        const int* lens) {
    const AppendParams a = make_append_params(s, K_new, V_new, K, V, table, lens);
    tc::emu::launch(append_grid(s), dim3(256), smem_raw, 0, [&] { append_kv_kernel(a); });
}

template <class T>
void append_fp8_emulated(const DecodeShape& s, const T* K_new, const T* V_new, std::uint8_t* K8, std::uint8_t* V8,
                         const float* K_scale, const float* V_scale, const int* table, const int* lens) {
    const AppendParams a = make_append_params(s, K_new, V_new, K8, V8, table, lens, K_scale, V_scale);
    tc::emu::launch(append_grid(s), dim3(256), smem_raw, 0, [&] { append_fp8_kernel<T>(a); });
}

#define CH10_INSTANTIATE(T)                                                                                      \
    template void decode_emulated<T>(int, const DecodeShape&, const DecodeArrays<T>&, const SplitPlan&, int);     \
    template void append_kv_emulated<T>(const DecodeShape&, const T*, const T*, T*, T*, const int*, const int*); \
    template void append_fp8_emulated<T>(const DecodeShape&, const T*, const T*, std::uint8_t*, std::uint8_t*,     \
                                         const float*, const float*, const int*, const int*);
CH10_INSTANTIATE(__half)
CH10_INSTANTIATE(__nv_bfloat16)
#undef CH10_INSTANTIATE

}  // namespace ch10
