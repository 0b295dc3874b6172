// Chapter 6: FlashAttention-2 backward in fp32 on CUDA cores. This is the file to edit.
//
//   ./chapter6 --dq atomic   preprocess + one dK/dV kernel that also adds dQ with fp32 atomics
//   ./chapter6 --dq split    preprocess + the dK/dV kernel without dQ + a dQ kernel
//   ./chapter6               both, then the naive cuBLAS backward for comparison
//
// The kernels (Algorithm 2 of FlashAttention-2, line numbers in the comments):
//   preprocess_kernel   D_i = rowsum(dO_i ∘ O_i), one warp per row; clears dQ for --dq atomic.
//   dkdv_kernel         grid (T_c, H, B): block j keeps K_j, V_j in shared memory and dK_j, dV_j
//                       in registers, and loops over the query tiles Q_i. Each step recomputes
//                       S_ij = Q_i K_jᵀ·scale and P_ij = exp(S_ij − L_i) from the forward's
//                       logsumexp, then dV_j += P_ijᵀ dO_i, dP_ij = dO_i V_jᵀ,
//                       dS_ij = P_ij ∘ (dP_ij − D_i), dK_j += dS_ijᵀ Q_i; with atomics it also
//                       adds dS_ij K_j·scale into dQ_i in global memory.
//   dq_kernel           grid (T_r, H, B), --dq split only: block i keeps Q_i, dO_i and its dQ_i
//                       accumulator on chip, loops over K_j, V_j, recomputes S_ij, P_ij, dP_ij,
//                       dS_ij and adds dS_ij K_j. It redoes two of the five tile products of
//                       dkdv_kernel, but needs no atomics and writes dQ_i once.
//
// Who owns what (256 threads = 8 warps, tiles B_r = B_c = 64, head dim padded to DP ∈ {32, 64,
// 96, 128} with zero columns; lane = threadIdx.x % 32, warp = threadIdx.x / 32):
//   Score tiles S_ij, dP_ij (64 × 64): ty = 4·(warp / 2) + lane / 8, tx = 8·(warp % 2) + lane % 8.
//     Thread (ty, tx) owns rows ty + 16·a and columns tx + 16·b (a, b < 4): a 4 × 4 register
//     tile of S_ij and one of dP_ij, and writes P_ij and dS_ij at those places in shared memory.
//   Row tiles (64 rows × DP columns): dK_j and dV_j in dkdv_kernel, dQ_i in both kernels.
//     TXD threads along the head dim (16, or 8 when DP/4 is not a multiple of 16), TYC = 256/TXD
//     along the rows. Thread (tyc, txd) owns the float4 column groups txd + TXD·q (q < CG) of
//     CR = 64/TYC rows: key rows tyc·CR + e (consecutive, so one vector load reads its P_ij and
//     dS_ij entries) for dK_j and dV_j; query rows tyc + TYC·e (interleaved, so the lanes of a
//     request read different rows of dS_ij in different banks) for dQ_i.
// Why these mappings are free of shared-memory bank conflicts is spelled out in Cfg below.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/dispatch.h"
#include "../../common/math.h"
#include "../../common/warp.cuh"
#include "flash2_backward.h"

namespace ch6 {
namespace {

constexpr int kThreads = 256;
constexpr int kBr = 64, kBc = 64;

// Compile-time layout for head dimension padded to DP.
template <int DP_>
struct Cfg {
    static constexpr int DP = DP_;
    // Row stride of Q_s, dO_s, K_s, V_s: DP + 4 floats, so consecutive rows start 4 banks apart
    // and the 8 rows a warp reads with one 16-byte request (8 tx values in the score tiles) cover
    // all 32 banks once.
    static constexpr int RS = DP + 4;
    // Row stride of P_s and dS_s: 72 ≡ 8 (mod 32). A warp's scalar stores of its score tile go to
    // 4 consecutive rows × 8 consecutive columns: banks 8·row + col, 32 different ones. The dQ
    // step reads float4s of 4 consecutive rows at one column: banks 0, 8, 16, 24 (+0..3).
    static constexpr int PS = kBc + 8;
    // Row tiles: a warp is 4 rows × 8 consecutive float4 column groups, so each 16-byte request
    // reads 128 consecutive bytes of one row of dO_i, Q_i or K_j (rows share them by broadcast).
    static constexpr int TXD = (DP / 4) % 16 == 0 ? 16 : 8;  // threads along the head dim
    static constexpr int CG = DP / 4 / TXD;                  // float4 column groups per thread
    static constexpr int TYC = kThreads / TXD;               // threads along the rows
    static constexpr int CR = kBc / TYC;                     // rows per thread
    static constexpr int kTile = kBr * RS;                   // floats of one 64-row tile
    // Blocks per SM to leave registers for: up to DP = 64 two blocks fit the shared memory of an
    // H100 (2 × 104.5 KB), and at 128 registers per thread (2 × 256 × 128 = the register file)
    // the compiler still needs no spills; beyond, one block (about 220 registers at DP = 128).
    static constexpr int kMinBlocksPerSM = DP <= 64 ? 2 : 1;
    static_assert(kBr == kBc, "row tiles serve both key rows and query rows");
    static_assert(DP % 32 == 0 && CG * TXD * 4 == DP && CR * TYC == kBc, "layout");
};

// Everything the dK/dV and dQ kernels read and write.
struct Params {
    const float *Q, *K, *V, *dO, *L, *Dsum;
    float *dQ, *dK, *dV;
    int N, D;
    float scale;
    bool causal;
};

// Thread coordinates in the score tiles and in the row tiles.
struct Coords {
    int ty, tx;    // score tiles: rows ty + 16a, columns tx + 16b
    int tyc, txd;  // row tiles
};

template <class C>
__device__ __forceinline__ Coords coords() {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    constexpr int kWarpsAlongD = C::TXD / 8;  // a warp is 4 rows × 8 column groups
    Coords c;
    c.ty = 4 * (warp / 2) + lane / 8;
    c.tx = 8 * (warp % 2) + lane % 8;
    c.tyc = 4 * (warp / kWarpsAlongD) + lane / 8;
    c.txd = 8 * (warp % kWarpsAlongD) + lane % 8;
    return c;
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }

// Copies rows row0 .. row0+63 of two N × D matrices of one head (a and b) into shared tiles
// (row stride C::RS, C::DP columns) with 16-byte loads, all loads issued before the first store.
// Rows ≥ N and columns ≥ D become 0, so padded rows and head dims add nothing to the products.
template <class C>
__device__ __forceinline__ void load_tile_pair(float* a_s, const float* a, float* b_s, const float* b,
                                               int row0, int N, int D) {
    constexpr int kGroups = C::DP / 4, kPerThread = kBr * kGroups / kThreads;
    static_assert(kBr * kGroups % kThreads == 0, "whole float4 groups per thread");
    float4 va[kPerThread], vb[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int e = threadIdx.x + k * kThreads, r = e / kGroups, d = 4 * (e % kGroups);
        const bool valid = row0 + r < N && d < D;
        const std::size_t at = std::size_t(row0 + r) * D + d;
        va[k] = valid ? ld4(a + at) : make_float4(0.f, 0.f, 0.f, 0.f);
        vb[k] = valid ? ld4(b + at) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int e = threadIdx.x + k * kThreads, r = e / kGroups, d = 4 * (e % kGroups);
        st4(a_s + r * C::RS + d, va[k]);
        st4(b_s + r * C::RS + d, vb[k]);
    }
}

// L_i (as L_i·log2 e, for exp2) and D_i of query rows i0 .. i0+63; rows ≥ N get 0 (they are
// masked when P is formed).
__device__ __forceinline__ void load_row_stats(float* L_s, float* Dsum_s, const float* L,
                                               const float* Dsum, int i0, int N) {
    const int r = threadIdx.x;
    if (r < kBr) {
        const bool valid = i0 + r < N;
        L_s[r] = valid ? L[i0 + r] * fa::kLog2e : 0.0f;
        Dsum_s[r] = valid ? Dsum[i0 + r] : 0.0f;
    }
}

// acc[a][b] += Σ_d A_s[ty + 16a][d] · B_s[tx + 16b][d]: this thread's 4 × 4 piece of the 64 × 64
// product A Bᵀ of two shared tiles (S_ij = Q_i K_jᵀ, dP_ij = dO_i V_jᵀ). Per 4 values of d:
// 8 float4 loads, 64 FMAs.
template <class C>
__device__ __forceinline__ void tile_abt(const float* A_s, const float* B_s, const Coords& t,
                                         float (&acc)[4][4]) {
#pragma unroll 4
    for (int d = 0; d < C::DP; d += 4) {
        float4 a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = ld4(A_s + (t.ty + 16 * i) * C::RS + d);
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = ld4(B_s + (t.tx + 16 * j) * C::RS + d);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
            }
    }
}

// Alg. 2 line 11: P_ij = exp(S_ij·scale − L_i), and line 14: dS_ij = P_ij ∘ (dP_ij − D_i), from
// this thread's register tiles into shared memory (P_s only when it is non-null). With kMask,
// entries whose key is past N, whose query is past N, or (causal) whose key comes after the
// query get P = dS = 0: tail tiles and the tiles the diagonal cuts.
template <class C, bool kMask>
__device__ __forceinline__ void write_p_ds(const float (&S)[4][4], const float (&dP)[4][4],
                                           const float* L_s, const float* Dsum_s, float* P_s,
                                           float* dS_s, const Coords& t, float scale_log2, int i0,
                                           int j0, int N, bool causal) {
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const int r = t.ty + 16 * a, query = i0 + r;
        const float L2 = L_s[r], D_i = Dsum_s[r];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int c = t.tx + 16 * b, key = j0 + c;
            float p = exp2f(fmaf(S[a][b], scale_log2, -L2));
            if (kMask && (query >= N || key >= N || (causal && key > query))) p = 0.0f;
            if (P_s != nullptr) P_s[r * C::PS + c] = p;
            dS_s[r * C::PS + c] = p * (dP[a][b] - D_i);
        }
    }
}

// True when some entry of tile (i0, j0) is masked.
__device__ __forceinline__ bool tile_needs_mask(int i0, int j0, int N, bool causal) {
    return i0 + kBr > N || j0 + kBc > N || (causal && j0 + kBc - 1 > i0);
}

// CR consecutive floats from shared memory in one load (CR = 4 or 2).
template <int CR>
__device__ __forceinline__ void load_consecutive(const float* p, float (&v)[CR]) {
    if constexpr (CR == 4) {
        const float4 x = ld4(p);
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else {
        static_assert(CR == 2, "rows per thread");
        const float2 x = *reinterpret_cast<const float2*>(p);
        v[0] = x.x, v[1] = x.y;
    }
}

// acc[e][4q + k] += x[e] · y[q].k: the outer product of a column piece and a row piece.
template <class C>
__device__ __forceinline__ void outer_add(float (&acc)[C::CR][4 * C::CG], const float (&x)[C::CR],
                                          const float4 (&y)[C::CG]) {
#pragma unroll
    for (int e = 0; e < C::CR; ++e)
#pragma unroll
        for (int q = 0; q < C::CG; ++q) {
            acc[e][4 * q + 0] = fmaf(x[e], y[q].x, acc[e][4 * q + 0]);
            acc[e][4 * q + 1] = fmaf(x[e], y[q].y, acc[e][4 * q + 1]);
            acc[e][4 * q + 2] = fmaf(x[e], y[q].z, acc[e][4 * q + 2]);
            acc[e][4 * q + 3] = fmaf(x[e], y[q].w, acc[e][4 * q + 3]);
        }
}

// Alg. 2 line 12: dV_j += P_ijᵀ dO_i, and line 16: dK_j += dS_ijᵀ Q_i (the scale is applied once
// at the end). This thread's key rows c = tyc·CR + e, columns of groups txd + TXD·q. Per query
// row r: one vector load each of P_s[r][c..] and dS_s[r][c..], CG float4 loads each of dO_i and
// Q_i, 8·CR·CG FMAs.
template <class C>
__device__ __forceinline__ void accumulate_dk_dv(const float* P_s, const float* dS_s,
                                                 const float* dO_s, const float* Q_s,
                                                 const Coords& t, float (&dV)[C::CR][4 * C::CG],
                                                 float (&dK)[C::CR][4 * C::CG]) {
#pragma unroll 4
    for (int r = 0; r < kBr; ++r) {
        float p[C::CR], ds[C::CR];
        load_consecutive<C::CR>(P_s + r * C::PS + t.tyc * C::CR, p);
        load_consecutive<C::CR>(dS_s + r * C::PS + t.tyc * C::CR, ds);
        float4 o[C::CG], q_row[C::CG];
#pragma unroll
        for (int q = 0; q < C::CG; ++q) {
            o[q] = ld4(dO_s + r * C::RS + 4 * (t.txd + C::TXD * q));
            q_row[q] = ld4(Q_s + r * C::RS + 4 * (t.txd + C::TXD * q));
        }
        outer_add<C>(dV, p, o);
        outer_add<C>(dK, ds, q_row);
    }
}

// Alg. 2 line 15 (without the scale): acc += dS_ij K_j for this thread's query rows
// r = tyc + TYC·e. Per 4 keys: CR float4 loads of dS_s, 4·CG float4 loads of K_j, 16·CR·CG FMAs.
template <class C>
__device__ __forceinline__ void accumulate_dq(const float* dS_s, const float* K_s, const Coords& t,
                                              float (&acc)[C::CR][4 * C::CG]) {
#pragma unroll 2
    for (int c = 0; c < kBc; c += 4) {
        float4 ds4[C::CR];
#pragma unroll
        for (int e = 0; e < C::CR; ++e) ds4[e] = ld4(dS_s + (t.tyc + C::TYC * e) * C::PS + c);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            float ds[C::CR];
            float4 k[C::CG];
#pragma unroll
            for (int e = 0; e < C::CR; ++e)
                ds[e] = u == 0 ? ds4[e].x : u == 1 ? ds4[e].y : u == 2 ? ds4[e].z : ds4[e].w;
#pragma unroll
            for (int q = 0; q < C::CG; ++q) k[q] = ld4(K_s + (c + u) * C::RS + 4 * (t.txd + C::TXD * q));
            outer_add<C>(acc, ds, k);
        }
    }
}

// Writes mult·acc to rows row_base + row_step·e (those < N) of a head's N × D matrix.
template <class C>
__device__ __forceinline__ void store_rows(float* out, const float (&acc)[C::CR][4 * C::CG],
                                           int row_base, int row_step, int txd, int N, int D,
                                           float mult) {
#pragma unroll
    for (int e = 0; e < C::CR; ++e) {
        const int row = row_base + row_step * e;
        if (row >= N) continue;
#pragma unroll
        for (int q = 0; q < C::CG; ++q) {
            const int d = 4 * (txd + C::TXD * q);
            if (d >= D) continue;
            st4(out + std::size_t(row) * D + d,
                make_float4(mult * acc[e][4 * q], mult * acc[e][4 * q + 1], mult * acc[e][4 * q + 2],
                            mult * acc[e][4 * q + 3]));
        }
    }
}

// Adds mult·acc to rows row_base + row_step·e (those < N) of a head's N × D matrix with fp32
// atomics: one 16-byte vector atomic per float4 on sm_90, four scalar ones before.
template <class C>
__device__ __forceinline__ void atomic_add_rows(float* out, const float (&acc)[C::CR][4 * C::CG],
                                                int row_base, int row_step, int txd, int N, int D,
                                                float mult) {
#pragma unroll
    for (int e = 0; e < C::CR; ++e) {
        const int row = row_base + row_step * e;
        if (row >= N) continue;
#pragma unroll
        for (int q = 0; q < C::CG; ++q) {
            const int d = 4 * (txd + C::TXD * q);
            if (d >= D) continue;
            float* dst = out + std::size_t(row) * D + d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            atomicAdd(reinterpret_cast<float4*>(dst),
                      make_float4(mult * acc[e][4 * q], mult * acc[e][4 * q + 1],
                                  mult * acc[e][4 * q + 2], mult * acc[e][4 * q + 3]));
#else
#pragma unroll
            for (int k = 0; k < 4; ++k) atomicAdd(dst + k, mult * acc[e][4 * q + k]);
#endif
        }
    }
}

// Alg. 2 line 4: D_i = rowsum(dO_i ∘ O_i), one warp per row (lanes over float4 groups, then a
// shuffle sum). With `dQ` non-null the warp also clears dQ_i (line 3) for the atomic strategy.
__global__ void preprocess_kernel(const float* O, const float* dO, float* Dsum, float* dQ,
                                  std::size_t rows, int D) {
    const std::size_t row = std::size_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;  // the whole warp leaves together: the shuffles below see 32 lanes
    const std::size_t base = row * D;
    float acc = 0.0f;
    for (int d = 4 * lane; d < D; d += 4 * 32) {
        const float4 o = ld4(O + base + d), g = ld4(dO + base + d);
        acc += o.x * g.x + o.y * g.y + o.z * g.z + o.w * g.w;
        if (dQ != nullptr) st4(dQ + base + d, make_float4(0.f, 0.f, 0.f, 0.f));
    }
    acc = fa::warp_sum(acc);
    if (lane == 0) Dsum[row] = acc;
}

// Alg. 2 lines 5–19 for key tile j = blockIdx.x of head (blockIdx.z, blockIdx.y).
// Shared memory: K_s | V_s | Q_s | dO_s (64 × RS each) | P_s | dS_s (64 × PS each) | L_s | Dsum_s.
template <int DP, bool kAtomicDq>
__global__ void __launch_bounds__(kThreads, Cfg<DP>::kMinBlocksPerSM) dkdv_kernel(const Params p) {
    using C = Cfg<DP>;
    extern __shared__ float4 smem[];
    float* K_s = reinterpret_cast<float*>(smem);
    float* V_s = K_s + C::kTile;
    float* Q_s = V_s + C::kTile;
    float* dO_s = Q_s + C::kTile;
    float* P_s = dO_s + C::kTile;
    float* dS_s = P_s + kBr * C::PS;
    float* L_s = dS_s + kBr * C::PS;
    float* Dsum_s = L_s + kBr;

    const int N = p.N, D = p.D;
    const std::size_t bh = std::size_t(blockIdx.z) * gridDim.y + blockIdx.y;
    const std::size_t head = bh * N * D;  // offset of this head's rows in Q, K, V, dO, dQ, dK, dV
    const int j0 = blockIdx.x * kBc;
    const Coords t = coords<C>();
    const float scale_log2 = p.scale * fa::kLog2e;

    // Alg. 2 line 6: load K_j, V_j (made visible by the barrier at the top of the loop)
    load_tile_pair<C>(K_s, p.K + head, V_s, p.V + head, j0, N, D);
    // line 7: dK_j = 0, dV_j = 0, in registers for the whole loop
    float dK[C::CR][4 * C::CG] = {}, dV[C::CR][4 * C::CG] = {};

    // line 8. Causal: query tiles that end before key j0 see none of K_j and are skipped.
    const int T_r = fa::ceil_div(N, kBr);
    for (int i = p.causal ? j0 / kBr : 0; i < T_r; ++i) {
        const int i0 = i * kBr;
        __syncthreads();  // everyone is done with the previous Q_i, dO_i, P_ij, dS_ij
        // line 9: load Q_i, dO_i, L_i, D_i
        load_tile_pair<C>(Q_s, p.Q + head, dO_s, p.dO + head, i0, N, D);
        load_row_stats(L_s, Dsum_s, p.L + bh * N, p.Dsum + bh * N, i0, N);
        __syncthreads();

        float S[4][4] = {}, dP[4][4] = {};
        tile_abt<C>(Q_s, K_s, t, S);    // line 10: S_ij = Q_i K_jᵀ
        tile_abt<C>(dO_s, V_s, t, dP);  // line 13: dP_ij = dO_i V_jᵀ
        // lines 11 and 14: P_ij and dS_ij into shared memory
        if (tile_needs_mask(i0, j0, N, p.causal))
            write_p_ds<C, true>(S, dP, L_s, Dsum_s, P_s, dS_s, t, scale_log2, i0, j0, N, p.causal);
        else
            write_p_ds<C, false>(S, dP, L_s, Dsum_s, P_s, dS_s, t, scale_log2, i0, j0, N, p.causal);
        __syncthreads();

        accumulate_dk_dv<C>(P_s, dS_s, dO_s, Q_s, t, dV, dK);  // lines 12 and 16
        if constexpr (kAtomicDq) {
            // line 15: dQ_i += dS_ij K_j·scale, added straight into global memory
            float dQ[C::CR][4 * C::CG] = {};
            accumulate_dq<C>(dS_s, K_s, t, dQ);
            atomic_add_rows<C>(p.dQ + head, dQ, i0 + t.tyc, C::TYC, t.txd, N, D, p.scale);
        }
    }
    // line 18: write dK_j (with the softmax scale of S = scale·Q Kᵀ) and dV_j
    store_rows<C>(p.dK + head, dK, j0 + t.tyc * C::CR, 1, t.txd, N, D, p.scale);
    store_rows<C>(p.dV + head, dV, j0 + t.tyc * C::CR, 1, t.txd, N, D, 1.0f);
}

// dQ for one query tile i of head (blockIdx.z, blockIdx.y): the loop order of the forward (Q_i
// fixed, K_j and V_j streamed). Recomputes S_ij, P_ij, dP_ij and dS_ij exactly as dkdv_kernel
// does, and accumulates dQ_i = Σ_j dS_ij K_j in registers. Causal: the last query tiles have the
// most key tiles to visit, so they get the first block indices (long blocks start first, short
// ones fill the gaps at the end); dkdv_kernel needs no such reversal, its long blocks are the
// first key tiles already.
// Shared memory: Q_s | dO_s | K_s | V_s (64 × RS each) | dS_s (64 × PS) | L_s | Dsum_s.
template <int DP>
__global__ void __launch_bounds__(kThreads, Cfg<DP>::kMinBlocksPerSM) dq_kernel(const Params p) {
    using C = Cfg<DP>;
    extern __shared__ float4 smem[];
    float* Q_s = reinterpret_cast<float*>(smem);
    float* dO_s = Q_s + C::kTile;
    float* K_s = dO_s + C::kTile;
    float* V_s = K_s + C::kTile;
    float* dS_s = V_s + C::kTile;
    float* L_s = dS_s + kBr * C::PS;
    float* Dsum_s = L_s + kBr;

    const int N = p.N, D = p.D;
    const std::size_t bh = std::size_t(blockIdx.z) * gridDim.y + blockIdx.y;
    const std::size_t head = bh * N * D;
    const int i = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x, i0 = i * kBr;
    const Coords t = coords<C>();
    const float scale_log2 = p.scale * fa::kLog2e;

    // Q_i, dO_i, L_i, D_i stay for the whole loop (visible after the loop's first barrier)
    load_tile_pair<C>(Q_s, p.Q + head, dO_s, p.dO + head, i0, N, D);
    load_row_stats(L_s, Dsum_s, p.L + bh * N, p.Dsum + bh * N, i0, N);
    float dQ[C::CR][4 * C::CG] = {};

    // Causal: key tiles that start after the tile's last query are skipped.
    const int T_c = fa::ceil_div(N, kBc);
    const int j_end = p.causal ? min(T_c, fa::ceil_div(i0 + kBr, kBc)) : T_c;
    for (int j = 0; j < j_end; ++j) {
        const int j0 = j * kBc;
        __syncthreads();  // everyone is done with the previous K_j, V_j, dS_ij
        load_tile_pair<C>(K_s, p.K + head, V_s, p.V + head, j0, N, D);
        __syncthreads();

        float S[4][4] = {}, dP[4][4] = {};
        tile_abt<C>(Q_s, K_s, t, S);
        tile_abt<C>(dO_s, V_s, t, dP);
        if (tile_needs_mask(i0, j0, N, p.causal))
            write_p_ds<C, true>(S, dP, L_s, Dsum_s, nullptr, dS_s, t, scale_log2, i0, j0, N, p.causal);
        else
            write_p_ds<C, false>(S, dP, L_s, Dsum_s, nullptr, dS_s, t, scale_log2, i0, j0, N, p.causal);
        __syncthreads();

        accumulate_dq<C>(dS_s, K_s, t, dQ);
    }
    store_rows<C>(p.dQ + head, dQ, i0 + t.tyc, C::TYC, t.txd, N, D, p.scale);
}

template <int DP>
constexpr std::size_t dkdv_smem_floats() {
    return 4 * std::size_t(Cfg<DP>::kTile) + 2 * std::size_t(kBr) * Cfg<DP>::PS + 2 * kBr;
}
template <int DP>
constexpr std::size_t dq_smem_floats() {
    return 4 * std::size_t(Cfg<DP>::kTile) + std::size_t(kBr) * Cfg<DP>::PS + 2 * kBr;
}

// f(std::integral_constant<int, DP>{}) for the head dim DP the kernels use for D (padded_dim).
template <class F>
decltype(auto) with_padded_dim(int D, F&& f) {
    return fa::with_head_dim<32, 64, 96, 128>(D, f, fa::DimMatch::kPadded, "chapter 6");
}

Params make_params(const fa::AttnShape& s, const BackwardTensors& t) {
    return Params{t.Q, t.K, t.V, t.dO, t.L, t.Dsum, t.dQ, t.dK, t.dV, s.N, s.D, s.scale, s.causal};
}

void require_supported(const fa::AttnShape& s) {
    const std::string why = unsupported_reason(s.D);
    if (!why.empty()) {
        std::fprintf(stderr, "chapter 6: %s\n", why.c_str());
        std::exit(fa::kExitBadInput);
    }
}

template <int DP>
void launch_dkdv(const fa::AttnShape& s, const Params& p, bool atomic_dq) {
    const auto kernel = atomic_dq ? dkdv_kernel<DP, true> : dkdv_kernel<DP, false>;
    const std::size_t smem = dkdv_smem_floats<DP>() * sizeof(float);
    fa::allow_dynamic_smem_once(kernel, smem, "chapter 6 dK/dV kernel");
    const dim3 grid(fa::ceil_div(s.N, kBc), s.H, s.B);
    kernel<<<grid, kThreads, smem>>>(p);
    CUDA_CHECK_LAUNCH();
}

template <int DP>
void launch_dq(const fa::AttnShape& s, const Params& p) {
    const auto kernel = dq_kernel<DP>;
    const std::size_t smem = dq_smem_floats<DP>() * sizeof(float);
    fa::allow_dynamic_smem_once(kernel, smem, "chapter 6 dQ kernel");
    const dim3 grid(fa::ceil_div(s.N, kBr), s.H, s.B);
    kernel<<<grid, kThreads, smem>>>(p);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

const char* strategy_name(int strategy) { return strategy == kAtomic ? "atomic" : "split"; }

Tiles kernel_tiles() { return {kBr, kBc}; }

std::string unsupported_reason(int D) {
    if (D >= 4 && D <= 128 && D % 4 == 0) return "";
    return "head dimension D = " + std::to_string(D) +
           " is not supported: the backward kernels need D to be a multiple of 4 from 4 to 128 "
           "(16-byte rows; tiles are compiled for D padded to 32, 64, 96 or 128)";
}

int padded_dim(int D) {
    return with_padded_dim(D, [](auto DP) { return int(DP); });
}

std::size_t dkdv_smem_bytes(int D) {
    return with_padded_dim(D, [](auto DP) { return dkdv_smem_floats<DP>() * sizeof(float); });
}

std::size_t dq_smem_bytes(int D) {
    return with_padded_dim(D, [](auto DP) { return dq_smem_floats<DP>() * sizeof(float); });
}

void preprocess(int strategy, const fa::AttnShape& s, const BackwardTensors& t) {
    require_supported(s);
    const std::size_t rows = s.rows();
    const unsigned blocks = unsigned(fa::ceil_div(rows, std::size_t(kThreads / 32)));
    preprocess_kernel<<<blocks, kThreads>>>(t.O, t.dO, t.Dsum, strategy == kAtomic ? t.dQ : nullptr,
                                            rows, s.D);
    CUDA_CHECK_LAUNCH();
}

void dkdv(int strategy, const fa::AttnShape& s, const BackwardTensors& t) {
    require_supported(s);
    const Params p = make_params(s, t);
    with_padded_dim(s.D, [&](auto DP) { launch_dkdv<DP>(s, p, strategy == kAtomic); });
}

void dq_split(const fa::AttnShape& s, const BackwardTensors& t) {
    require_supported(s);
    const Params p = make_params(s, t);
    with_padded_dim(s.D, [&](auto DP) { launch_dq<DP>(s, p); });
}

void backward(int strategy, const fa::AttnShape& s, const BackwardTensors& t) {
    preprocess(strategy, s, t);
    dkdv(strategy, s, t);
    if (strategy == kSplit) dq_split(s, t);
}

}  // namespace ch6
