// Chapter 10: the launch of the decoding kernels (kernel/decode_attention.cuh lists the variants):
// which compiled kernel runs (kernel_table.h), the grid, the split plan from the occupancy, and
// the combine kernel after the splits.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../../common/check.h"
#include "../../common/device.h"
#include "decoding.h"
#include "kernel_table.h"

namespace ch10 {

namespace {
void exit_if(const std::string& why, const char* where) {
    if (why.empty()) return;
    std::fprintf(stderr, "%s: %s\n", where, why.c_str());
    std::exit(fa::kExitBadInput);
}
}  // namespace

std::string device_unsupported_reason() {
    const fa::DeviceInfo d = fa::device_info();
    if (d.cc_major >= 8) return "";
    return d.name + " has compute capability " + std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) +
           "; chapter 10's kernels need 8.0 or newer (mma.sync with bf16, ldmatrix, cp.async)";
}

SplitPlan default_plan(int variant, const DecodeShape& s, int candidate) {
    exit_if(unsupported_reason(variant, s, candidate), "ch10::default_plan");
    const int Bc = block_keys(variant, candidate);
    if (variant == kFa2Grid) return plan_with_chunk(s, s.max_len(), Bc);  // one block reads the whole cache
    // the heuristic gives each SM one block's share (README, "How many splits"); kernel 6 two, so
    // that one block's loads run while the other converts its tile in shared memory (step 6)
    return plan_splits(s, groups_per_split(variant, s), Bc, fa::sm_count() * blocks_per_sm(variant));
}

template <class T>
void decode(int variant, const DecodeShape& s, const DecodeArrays<T>& a, const SplitPlan& plan, int candidate,
            cudaStream_t stream) {
    exit_if(unsupported_reason(variant, s, candidate), "ch10::decode");
    const KernelEntry e = kernel_entry<T>(variant, s, candidate);
    if (plan.chunk % e.Bc != 0 || plan.splits < 1 || (variant == kFa2Grid && plan.splits != 1))
        exit_if("the split plan does not fit the kernel (chunk a multiple of B_c; kernel 1 has one split)",
                "ch10::decode");
    const DecodeParams p = make_params(variant, s, a, plan);
    fa::allow_dynamic_smem_once(e.kernel, std::size_t(e.smem_bytes), "chapter 10 kernel");
    e.kernel<<<decode_grid(p), e.threads, e.smem_bytes, stream>>>(p);
    CUDA_CHECK_LAUNCH();
    if (plan.splits > 1 && !p.fused_combine) {  // step 2: merge the splits (step 5 merges in the kernel)
        combine_entry<T>(s.D)<<<combine_grid(p), 128, 0, stream>>>(p);
        CUDA_CHECK_LAUNCH();
    }
}

template <class T>
void append_kv(const DecodeShape& s, const T* K_new, const T* V_new, T* K, T* V, const int* table, const int* lens,
               cudaStream_t stream) {
    exit_if(invalid_reason(s), "ch10::append_kv");
    append_kv_kernel<<<append_grid(s), 256, 0, stream>>>(make_append_params(s, K_new, V_new, K, V, table, lens));
    CUDA_CHECK_LAUNCH();
}

template <class T>
void append_fp8(const DecodeShape& s, const T* K_new, const T* V_new, std::uint8_t* K8, std::uint8_t* V8,
                const float* K_scale, const float* V_scale, const int* table, const int* lens, cudaStream_t stream) {
    exit_if(invalid_reason(s), "ch10::append_fp8");
    append_fp8_kernel<T><<<append_grid(s), 256, 0, stream>>>(make_append_params(s, K_new, V_new, K8, V8, table, lens, K_scale, V_scale));
    CUDA_CHECK_LAUNCH();
}

#define CH10_INSTANTIATE(T)                                                                                      \
    template void decode<T>(int, const DecodeShape&, const DecodeArrays<T>&, const SplitPlan&, int, cudaStream_t);  \
    template void append_kv<T>(const DecodeShape&, const T*, const T*, T*, T*, const int*, const int*, cudaStream_t); \
    template void append_fp8<T>(const DecodeShape&, const T*, const T*, std::uint8_t*, std::uint8_t*, const float*, \
                                const float*, const int*, const int*, cudaStream_t);
CH10_INSTANTIATE(__half)
CH10_INSTANTIATE(__nv_bfloat16)
#undef CH10_INSTANTIATE

}  // namespace ch10
