// A full scan of the N×N buffers S and P against the contract of naive_attention.h. The sampled
// rows that programs and tests compare with the float64 reference cover a few hundred rows; this
// pass covers every entry, so an element a kernel never wrote (left as the NaN poison) or a mask
// applied to the wrong side of the diagonal is found wherever it is.
#include "naive_attention.h"

#include <cmath>

#include "../../common/check.h"
#include "../../common/device.h"

namespace ch3 {
namespace {

// Grid-stride over all B·H·N·N entries; entry e is (head, i, j) with j = e mod N, i = (e / N) mod N.
__global__ void scan_kernel(const float* __restrict__ S, const float* __restrict__ P,
                            std::size_t total, int N, bool causal, bool masked_scores_neg_inf,
                            unsigned long long* bad) {
    unsigned long long bad_S = 0, bad_P = 0;
    const std::size_t n = std::size_t(N);
    for (std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += std::size_t(gridDim.x) * blockDim.x) {
        const std::size_t j = e % n, i = (e / n) % n;
        const bool visible = !causal || j <= i;
        const float s = S[e], p = P[e];
        const bool s_ok = visible || !masked_scores_neg_inf ? isfinite(s) : s == -INFINITY;
        const bool p_ok = visible ? p >= 0.0f && p <= 1.0f : p == 0.0f;  // NaN fails both
        bad_S += !s_ok;
        bad_P += !p_ok;
    }
    if (bad_S) atomicAdd(&bad[0], bad_S);
    if (bad_P) atomicAdd(&bad[1], bad_P);
}

}  // namespace

IntermediateScan scan_intermediates(int variant, const fa::AttnShape& s, const float* S,
                                    const float* P) {
    fa::DeviceBuffer<unsigned long long> bad(2);
    bad.zero();
    scan_kernel<<<1024, 256>>>(S, P, workspace_floats(s) / 2, s.N, s.causal,
                               variant == kHandWritten, bad.get());
    CUDA_CHECK_LAUNCH();
    const std::vector<unsigned long long> counts = bad.download();
    return {std::size_t(counts[0]), std::size_t(counts[1])};
}

}  // namespace ch3
