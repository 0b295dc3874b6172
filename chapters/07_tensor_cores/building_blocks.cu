// Chapter 7: the building blocks of the tensor-core kernels, each run alone (building_blocks.h).
// Every kernel here calls the same device functions as the attention kernels; one block of 4
// warps loads the tiles (load_tile needs whole passes of 8 rows) and warp 0 computes.
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/dtype.h"
#include "building_blocks.h"
#include "../../common/tensor_core/layout.h"
#include "kernel/tile_config.h"
#include "../../common/tensor_core/ptx.cuh"
#include "../../common/tensor_core/tile_io.cuh"
#include "kernel/warp_tile.cuh"

namespace ch7::blocks {

namespace {

constexpr int kThreads = 128;

/// The configuration the unit kernels hand to the fragment functions: one m-tile, B_c = 16.
template <int Step, int D>
using UnitConfig = MmaConfig<Step, D, 4, 1, 16, 1, false>;

template <class T>
__global__ void mma_tile_kernel(const float* A, const float* B, float* C) {
#if FA_TC_SM80
    const int lane = int(threadIdx.x);
    uint32_t a[4], b[2];
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int r = 0; r < 4; ++r)
        a[r] = tc::pack2<T>(A[tc::frag_a_row(lane, r) * 16 + tc::frag_a_col(lane, r, 0)],
                        A[tc::frag_a_row(lane, r) * 16 + tc::frag_a_col(lane, r, 1)]);
    for (int r = 0; r < 2; ++r)
        b[r] = tc::pack2<T>(B[tc::frag_b_row(lane, r, 0) * 8 + tc::frag_b_col(lane)],
                        B[tc::frag_b_row(lane, r, 1) * 8 + tc::frag_b_col(lane)]);
    tc::mma_m16n8k16<T>(d, a, b);
    for (int i = 0; i < 4; ++i) C[tc::frag_c_row(lane, i) * 8 + tc::frag_c_col(lane, i)] = d[i];
#else
    __trap();
#endif
}

/// Loads a 16-row tile into shared memory the way the attention kernels do (cp.async).
template <class Cfg>
__device__ void load_unit_tile(uint16_t* s, const uint16_t* tile, int valid_rows) {
#if FA_TC_SM80
    tc::load_tile<16, Cfg::D, kThreads, Cfg::kLdmatrix, tc::Copy::kAsync>(s, tile, 0, valid_rows);
    tc::cp_async_commit();
    tc::cp_async_wait<0>();
    __syncthreads();
#endif
}

template <int Step, int D>
__global__ void __launch_bounds__(kThreads) fragments_kernel(const uint16_t* tile, int valid_rows, int op,
                                                             int kk, uint32_t* out) {
#if FA_TC_SM80
    using Cfg = UnitConfig<Step, D>;
    __shared__ __align__(128) uint16_t s[16 * D];
    load_unit_tile<Cfg>(s, tile, valid_rows);
    const int lane = int(threadIdx.x);
    if (threadIdx.x >= 32) return;
    uint32_t r[4];
    if (op == int(Operand::kQ)) {
        load_a_frag<Cfg>(r, s, 0, kk, lane);
    } else {
        uint32_t b[2][2];
        if (op == int(Operand::kK))
            load_k_frags<Cfg>(b, s, 0, kk, lane);
        else
            load_v_frags<Cfg>(b, s, 0, kk, lane);
        r[0] = b[0][0], r[1] = b[0][1], r[2] = b[1][0], r[3] = b[1][1];
    }
    for (int i = 0; i < 4; ++i) out[4 * lane + i] = r[i];
#else
    __trap();
#endif
}

template <class T, int Step, int D>
__global__ void __launch_bounds__(kThreads) scores_kernel(const uint16_t* Q, const uint16_t* K, float* S_out) {
#if FA_TC_SM80
    using Cfg = UnitConfig<Step, D>;
    __shared__ __align__(128) uint16_t Qs[16 * D];
    __shared__ __align__(128) uint16_t Ks[16 * D];
    load_unit_tile<Cfg>(Qs, Q, 16);
    load_unit_tile<Cfg>(Ks, K, 16);
    const int lane = int(threadIdx.x);
    if (threadIdx.x >= 32) return;
    QFrags<Cfg> q;
    float S[1][2][4];
    scores<T, Cfg>(S, Qs, q, Ks, 0, lane);
    for (int n = 0; n < 2; ++n)
        for (int i = 0; i < 4; ++i) S_out[tc::frag_c_row(lane, i) * 16 + 8 * n + tc::frag_c_col(lane, i)] = S[0][n][i];
#else
    __trap();
#endif
}

template <class T, int Step, int D>
__global__ void __launch_bounds__(kThreads) pv_kernel(const float* P, const uint16_t* V, float* O_out) {
#if FA_TC_SM80
    using Cfg = UnitConfig<Step, D>;
    __shared__ __align__(128) uint16_t Vs[16 * D];
    load_unit_tile<Cfg>(Vs, V, 16);
    const int lane = int(threadIdx.x);
    if (threadIdx.x >= 32) return;
    float S[1][2][4];
    for (int n = 0; n < 2; ++n)
        for (int i = 0; i < 4; ++i) S[0][n][i] = P[tc::frag_c_row(lane, i) * 16 + 8 * n + tc::frag_c_col(lane, i)];
    uint32_t packed[1][1][4];
    pack_p<T, Cfg>(packed, S);
    float O[1][D / 8][4];
    for (int d = 0; d < D / 8; ++d)
        for (int i = 0; i < 4; ++i) O[0][d][i] = 0.0f;
    accumulate_pv<T, Cfg>(O, packed, Vs, lane);
    for (int d = 0; d < D / 8; ++d)
        for (int i = 0; i < 4; ++i) O_out[tc::frag_c_row(lane, i) * D + 8 * d + tc::frag_c_col(lane, i)] = O[0][d][i];
#else
    __trap();
#endif
}

/// Exits with a message unless step is 2 or 3 and D is 64 or 128 (the unit kernels compiled).
void require_unit_shape(int step, int D) {
    if ((step == 2 || step == 3) && (D == 64 || D == 128)) return;
    std::fprintf(stderr, "ch7::blocks: step %d, D = %d not compiled (steps 2, 3; D = 64, 128)\n", step, D);
    std::exit(fa::kExitBadInput);
}

/// Calls f(std::integral_constant<int, Step>, std::integral_constant<int, D>) for runtime values.
template <class F>
void with_step_and_dim(int step, int D, F&& f) {
    require_unit_shape(step, D);
    using S2 = std::integral_constant<int, 2>;
    using S3 = std::integral_constant<int, 3>;
    using D64 = std::integral_constant<int, 64>;
    using D128 = std::integral_constant<int, 128>;
    if (step == 2)
        D == 64 ? f(S2{}, D64{}) : f(S2{}, D128{});
    else
        D == 64 ? f(S3{}, D64{}) : f(S3{}, D128{});
}

template <class T>
const uint16_t* bits(const fa::DeviceBuffer<T>& b) {
    return reinterpret_cast<const uint16_t*>(b.get());
}

}  // namespace

template <class T>
std::vector<float> mma_tile(const std::vector<float>& A, const std::vector<float>& B) {
    fa::DeviceBuffer<float> dA(A), dB(B), dC(16 * 8);
    dC.poison();
    mma_tile_kernel<T><<<1, 32>>>(dA.get(), dB.get(), dC.get());
    CUDA_CHECK_LAUNCH();
    return dC.download();
}

std::vector<uint32_t> fragment_registers(int step, int D, Operand op, int kk,
                                         const std::vector<uint16_t>& tile, int valid_rows) {
    fa::DeviceBuffer<uint16_t> dtile(tile);
    fa::DeviceBuffer<uint32_t> out(32 * 4);
    out.poison();
    with_step_and_dim(step, D, [&](auto s, auto d) {
        fragments_kernel<decltype(s)::value, decltype(d)::value>
            <<<1, kThreads>>>(dtile.get(), valid_rows, int(op), kk, out.get());
    });
    CUDA_CHECK_LAUNCH();
    return out.download();
}

template <class T>
std::vector<float> tile_scores(int step, int D, const std::vector<float>& Q, const std::vector<float>& K) {
    fa::DeviceBuffer<T> dQ(fa::convert_from_float<T>(Q)), dK(fa::convert_from_float<T>(K));
    fa::DeviceBuffer<float> dS(16 * 16);
    dS.poison();
    with_step_and_dim(step, D, [&](auto s, auto d) {
        scores_kernel<T, decltype(s)::value, decltype(d)::value><<<1, kThreads>>>(bits(dQ), bits(dK), dS.get());
    });
    CUDA_CHECK_LAUNCH();
    return dS.download();
}

template <class T>
std::vector<float> tile_pv(int step, int D, const std::vector<float>& P, const std::vector<float>& V) {
    fa::DeviceBuffer<float> dP(P);
    fa::DeviceBuffer<T> dV(fa::convert_from_float<T>(V));
    fa::DeviceBuffer<float> dO(std::size_t(16) * D);
    dO.poison();
    with_step_and_dim(step, D, [&](auto s, auto d) {
        pv_kernel<T, decltype(s)::value, decltype(d)::value><<<1, kThreads>>>(dP.get(), bits(dV), dO.get());
    });
    CUDA_CHECK_LAUNCH();
    return dO.download();
}

template std::vector<float> mma_tile<__half>(const std::vector<float>&, const std::vector<float>&);
template std::vector<float> mma_tile<__nv_bfloat16>(const std::vector<float>&, const std::vector<float>&);
template std::vector<float> tile_scores<__half>(int, int, const std::vector<float>&, const std::vector<float>&);
template std::vector<float> tile_scores<__nv_bfloat16>(int, int, const std::vector<float>&,
                                                       const std::vector<float>&);
template std::vector<float> tile_pv<__half>(int, int, const std::vector<float>&, const std::vector<float>&);
template std::vector<float> tile_pv<__nv_bfloat16>(int, int, const std::vector<float>&, const std::vector<float>&);

}  // namespace ch7::blocks
