// Chapter 4: FlashAttention-1 forward — Algorithm 1 of the FlashAttention paper, in float32.
//
// Both variants run the paper's loop order: the outer loop over key/value tiles j, the inner loop
// over query tiles i, and the running O_i, l_i, m_i read from global memory and written back at
// every inner step. The grid has one block per (batch, head) and nothing more: the inner loop
// carries the softmax state of every query row, so it cannot be split across blocks.
//
// Variants (./chapter4 --kernel N; both write O and L = m + log l):
//   1  readable   One thread per query row, the loops of Algorithm 1 exactly as written.
//                 B_r threads per block; tiles from Algorithm 1 line 1, or --br / --bc.
//                   ./chapter4 --kernel 1 --seq 1024 --dim 64
//                   ./chapter4 --kernel 1 --br 32 --bc 16 --causal
//   2  warp rows  The same loops and the same global-memory round-trips of O, l, m, with a
//                 better thread mapping: up to 16 warps per block (as many as shared memory
//                 holds), a warp per query tile of B_r = 16 rows, 8 lanes per row, row maxima and
//                 sums shuffled across those 8 lanes, float4 loads. B_c = 64.
//                   ./chapter4 --kernel 2 --batch 8 --heads 12 --seq 1024 --dim 64
//
// Who owns which data
//   variant 1  Block: one (batch, head); it loads K_j and V_j into shared memory together.
//              Thread t: query row i·B_r + t of every query tile i, that is rows t, t + B_r,
//              t + 2·B_r, ...: its row of Q_i and of S_ij / P̃_ij in shared memory, its row of O
//              and its l, m in global memory. No other thread touches them, so the inner loop
//              needs no barrier.
//   variant 2  Block: one (batch, head); all warps load K_j and V_j together.
//              Warp w of W: query tiles w, w + W, w + 2W, ... (16 rows each), for every j; its own
//              Q_i and P̃_ij tiles in shared memory.
//              Lane (lr, lc) = (lane / 8, lane % 8): rows lr, lr+4, lr+8, lr+12 of the tile; for
//              S_ij and P̃_ij the keys lc, lc+8, ..., lc+56; for O_i the float4 column chunks lc,
//              lc+8, lc+16, lc+24 (columns 4·chunk .. 4·chunk+3). The 8 lanes of a row hold the
//              same m, l; lane lc = 0 writes them.
#include "flash1.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <cuda_runtime.h>

#include "../../common/check.h"
#include "../../common/device.h"
#include "../../common/float4.cuh"
#include "../../common/math.h"
#include "../../common/warp.cuh"

namespace ch4 {
namespace {

/// e^{x − m}, and exactly 0 when x = −inf. x = −inf is a masked score, or m_i before its row has
/// seen any key; m may then be −inf as well, and −inf − (−inf) is NaN, so that case must never
/// reach the subtraction.
__device__ __forceinline__ float exp_diff(float x, float m) {
    return x == -INFINITY ? 0.0f : expf(x - m);
}

/// Query row `row` sees key `key`: the key exists (tiles past N are padded) and, with the causal
/// mask, is not after the row.
__device__ __forceinline__ bool visible(const fa::AttnShape& s, int row, int key) {
    return key < s.N && (!s.causal || key <= row);
}

// ---- variant 1: one thread per query row ------------------------------------------------------

/// Shared memory of variant 1: K_j and V_j (B_c × D each), Q_i (B_r × D), S_ij / P̃_ij (B_r × B_c).
std::size_t readable_smem_bytes(int D, Tiles t) {
    return sizeof(float) * (2 * std::size_t(t.Bc) * D + std::size_t(t.Br) * D + std::size_t(t.Br) * t.Bc);
}

/// Variant 1. K_j and V_j are stored row by row, (c, d) at c·D + d: all threads read the same
/// element at once (a broadcast). Q_i and S_ij are stored column by column, (row t, k) at k·B_r + t:
/// each thread reads its own row, and at the same k the B_r threads hit consecutive banks.
__global__ void flash1_readable(fa::AttnShape s, Tiles t, const float* __restrict__ Q,
                                const float* __restrict__ K, const float* __restrict__ V,
                                float* __restrict__ O, float* __restrict__ L, float* __restrict__ l,
                                float* __restrict__ m) {
    const int N = s.N, D = s.D, B_r = t.Br, B_c = t.Bc, tid = threadIdx.x;
    const int T_r = fa::ceil_div(N, B_r), T_c = fa::ceil_div(N, B_c);  // Alg. 1 line 3 (and 4)
    const std::size_t head = std::size_t(blockIdx.x) * N;            // first row of this (batch, head)
    Q += head * D, K += head * D, V += head * D, O += head * D, L += head, l += head, m += head;

    extern __shared__ float sram[];
    float* K_j = sram;            // (c, d) at c·D + d
    float* V_j = K_j + B_c * D;   // (c, d) at c·D + d
    float* Q_i = V_j + B_c * D;   // (t, d) at d·B_r + t
    float* S_ij = Q_i + B_r * D;  // (t, c) at c·B_r + t: S_ij, then P̃_ij in place

    // Alg. 1 line 2: O = 0, l = 0, m = −inf in global memory (this thread's rows).
    for (int r = tid; r < N; r += B_r) {
        for (int d = 0; d < D; ++d) O[std::size_t(r) * D + d] = 0.0f;
        l[r] = 0.0f;
        m[r] = -INFINITY;
    }
    for (int j = 0; j < T_c; ++j) {  // Alg. 1 line 5
        // Alg. 1 line 6: load K_j, V_j (keys past N as zeros; they are masked below).
        for (int e = tid; e < B_c * D; e += B_r) {
            const int key = j * B_c + e / D;
            K_j[e] = key < N ? K[std::size_t(key) * D + e % D] : 0.0f;
            V_j[e] = key < N ? V[std::size_t(key) * D + e % D] : 0.0f;
        }
        __syncthreads();  // K_j, V_j complete before any thread reads them
        for (int i = first_query_tile(j, t, s.causal); i < T_r; ++i) {  // Alg. 1 line 7
            const int r = i * B_r + tid;  // this thread's row of Q_i
            if (r >= N) continue;         // the last tile's rows past N
            // Alg. 1 line 8: load Q_i, l_i, m_i (O_i is read element by element in line 12).
            for (int d = 0; d < D; ++d) Q_i[d * B_r + tid] = Q[std::size_t(r) * D + d];
            const float l_i = l[r], m_i = m[r];
            // Alg. 1 line 9: S_ij = Q_i K_j^T (scaled; masked scores are −inf),
            // and line 10's m̃_ij = rowmax(S_ij) on the way.
            float m_tilde = -INFINITY;
            for (int c = 0; c < B_c; ++c) {
                float S = -INFINITY;
                if (visible(s, r, j * B_c + c)) {
                    float dot = 0.0f;
                    for (int d = 0; d < D; ++d) dot += Q_i[d * B_r + tid] * K_j[c * D + d];
                    S = dot * s.scale;
                }
                S_ij[c * B_r + tid] = S;
                m_tilde = fmaxf(m_tilde, S);
            }
            // Alg. 1 line 10: P̃_ij = exp(S_ij − m̃_ij), l̃_ij = rowsum(P̃_ij).
            float l_tilde = 0.0f;
            for (int c = 0; c < B_c; ++c) {
                const float P = exp_diff(S_ij[c * B_r + tid], m_tilde);
                S_ij[c * B_r + tid] = P;
                l_tilde += P;
            }
            // Alg. 1 line 11: m_new = max(m_i, m̃_ij), l_new = e^{m_i − m_new} l_i + e^{m̃_ij − m_new} l̃_ij.
            const float m_new = fmaxf(m_i, m_tilde);
            const float w_old = exp_diff(m_i, m_new), w_new = exp_diff(m_tilde, m_new);
            const float l_new = w_old * l_i + w_new * l_tilde;
            const float inv_l_new = l_new > 0.0f ? 1.0f / l_new : 0.0f;  // 0: no key seen yet
            // Alg. 1 line 12: O_i = diag(l_new)^-1 (diag(l_i) e^{m_i − m_new} O_i + e^{m̃_ij − m_new} P̃_ij V_j).
            for (int d = 0; d < D; ++d) {
                float PV = 0.0f;
                for (int c = 0; c < B_c; ++c) PV += S_ij[c * B_r + tid] * V_j[c * D + d];
                float& O_rd = O[std::size_t(r) * D + d];
                O_rd = inv_l_new * (l_i * w_old * O_rd + w_new * PV);
            }
            // Alg. 1 line 13: l_i = l_new, m_i = m_new, to global memory.
            l[r] = l_new;
            m[r] = m_new;
        }
        __syncthreads();  // every thread is done with K_j, V_j before the next j overwrites them
    }
    // After line 15: L = m + log l, what chapters 5 and 6 return.
    for (int r = tid; r < N; r += B_r) L[r] = m[r] + logf(l[r]);
}

// ---- variant 2: a warp per query tile ---------------------------------------------------------

constexpr int kRowLanes = 8;                     // lanes sharing one query row: lc = lane % 8
constexpr int kRowGroups = 32 / kRowLanes;       // row groups per warp: lr = lane / 8
constexpr int kRowsPerLane = 4;                  // rows lr, lr + 4, lr + 8, lr + 12
constexpr int kBr = kRowGroups * kRowsPerLane;   // B_r = 16 query rows per warp tile
constexpr int kBc = 64;                          // B_c = 64 keys per K/V tile
constexpr int kKeysPerLane = kBc / kRowLanes;    // keys lc, lc + 8, ..., lc + 56
constexpr int kMaxWarps = 16;                    // 512 threads per block at most
constexpr int kLdP = kBc + 8;  // P̃_ij row stride: the 4 row groups' float4 reads use different banks

/// Row stride (floats) of the K_j, V_j and Q_i tiles: D rounded up so that D/4 is odd. Eight lanes
/// reading float4s at the same column of 8 different rows then hit 8 different groups of 4 banks.
__host__ __device__ inline int tile_ld(int D) { return 4 * ((D / 4) | 1); }

/// Shared memory of variant 2 with `warps` warps: K_j, V_j, and each warp's Q_i and P̃_ij.
std::size_t warp_rows_smem_bytes(int D, int warps) {
    return sizeof(float) * (2 * std::size_t(kBc) * tile_ld(D) +
                            std::size_t(warps) * kBr * (tile_ld(D) + kLdP));
}

/// Copies rows [first, first + rows) of an N × D matrix X into `tile` (row stride ld) as float4s;
/// rows at or past N become zeros, so no thread reads past the end of X nor leaves the tile
/// unwritten. Threads `id` = 0 .. count − 1 share the copy; consecutive ids read consecutive float4s.
__device__ __forceinline__ void load_rows(float* tile, int ld, const float* __restrict__ X, int first,
                                          int rows, int N, int D, int id, int count) {
    const int D4 = D / 4;
    for (int q = id; q < rows * D4; q += count) {
        const int row = q / D4, c4 = q % D4, x = first + row;
        const float4 v = x < N ? reinterpret_cast<const float4*>(X + std::size_t(x) * D)[c4]
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        reinterpret_cast<float4*>(tile + row * ld)[c4] = v;
    }
}

__device__ __forceinline__ float dot4(float acc, float4 a, float4 b) {
    acc += a.x * b.x;
    acc += a.y * b.y;
    acc += a.z * b.z;
    acc += a.w * b.w;
    return acc;
}

__device__ __forceinline__ void axpy4(float4& acc, float p, float4 v) {
    acc.x += p * v.x, acc.y += p * v.y, acc.z += p * v.z, acc.w += p * v.w;
}

/// Alg. 1 lines 8–13 for query tile i and key tile j, by one warp. K_j, V_j are in shared memory;
/// Q_i and P̃_ij are this warp's tiles. kChunks ≥ ⌈D/32⌉: float4 column chunks of O per lane.
template <int kChunks>
__device__ __forceinline__ void warp_tile_step(const fa::AttnShape& s, int i, int j, int lane,
                                               const float* K_j, const float* V_j, float* Q_i,
                                               float* P_ij, const float* __restrict__ Q,
                                               float* __restrict__ O, float* __restrict__ l,
                                               float* __restrict__ m) {
    const int N = s.N, D = s.D, D4 = D / 4, ld = tile_ld(D);
    const int lr = lane / kRowLanes, lc = lane % kRowLanes;
    int row[kRowsPerLane];
#pragma unroll
    for (int a = 0; a < kRowsPerLane; ++a) row[a] = i * kBr + lr + kRowGroups * a;

    // Alg. 1 line 8: load Q_i (the whole warp), l_i and m_i of this lane's rows
    // (O_i is read chunk by chunk in line 12).
    load_rows(Q_i, ld, Q, i * kBr, kBr, N, D, lane, 32);
    float l_i[kRowsPerLane], m_i[kRowsPerLane];
#pragma unroll
    for (int a = 0; a < kRowsPerLane; ++a) {
        l_i[a] = row[a] < N ? l[row[a]] : 0.0f;
        m_i[a] = row[a] < N ? m[row[a]] : -INFINITY;
    }
    __syncwarp();  // Q_i complete before any lane reads it

    // Alg. 1 line 9: S_ij = Q_i K_j^T, this lane's 4 rows × 8 keys, summed over d in order.
    float S[kRowsPerLane][kKeysPerLane] = {};
    for (int c4 = 0; c4 < D4; ++c4) {
        float4 q[kRowsPerLane];
#pragma unroll
        for (int a = 0; a < kRowsPerLane; ++a)
            q[a] = reinterpret_cast<const float4*>(Q_i + (lr + kRowGroups * a) * ld)[c4];
#pragma unroll
        for (int b = 0; b < kKeysPerLane; ++b) {
            const float4 k = reinterpret_cast<const float4*>(K_j + (lc + kRowLanes * b) * ld)[c4];
#pragma unroll
            for (int a = 0; a < kRowsPerLane; ++a) S[a][b] = dot4(S[a][b], q[a], k);
        }
    }
    // Alg. 1 line 10: m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij), l̃_ij = rowsum(P̃_ij). A row's
    // 8 keys per lane are reduced in registers, then across its 8 lanes with shuffles.
    float m_tilde[kRowsPerLane], l_tilde[kRowsPerLane];
#pragma unroll
    for (int a = 0; a < kRowsPerLane; ++a) {
        float row_max = -INFINITY;
#pragma unroll
        for (int b = 0; b < kKeysPerLane; ++b) {
            const int key = j * kBc + lc + kRowLanes * b;
            S[a][b] = visible(s, row[a], key) ? S[a][b] * s.scale : -INFINITY;
            row_max = fmaxf(row_max, S[a][b]);
        }
        m_tilde[a] = fa::group_max<kRowLanes>(row_max);
        float row_sum = 0.0f;
#pragma unroll
        for (int b = 0; b < kKeysPerLane; ++b) {
            S[a][b] = exp_diff(S[a][b], m_tilde[a]);  // S now holds P̃_ij
            row_sum += S[a][b];
        }
        l_tilde[a] = fa::group_sum<kRowLanes>(row_sum);
#pragma unroll
        for (int b = 0; b < kKeysPerLane; ++b)
            P_ij[(lr + kRowGroups * a) * kLdP + lc + kRowLanes * b] = S[a][b];
    }
    __syncwarp();  // P̃_ij complete before any lane reads a row of it

    // Alg. 1 line 12, the product P̃_ij V_j: this lane's 4 rows × its float4 column chunks.
    float4 PV[kRowsPerLane][kChunks];
#pragma unroll
    for (int a = 0; a < kRowsPerLane; ++a)
#pragma unroll
        for (int e = 0; e < kChunks; ++e) PV[a][e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int c = 0; c < kBc; c += 4) {
        float4 p[kRowsPerLane];
#pragma unroll
        for (int a = 0; a < kRowsPerLane; ++a)
            p[a] = reinterpret_cast<const float4*>(P_ij + (lr + kRowGroups * a) * kLdP)[c / 4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
            for (int e = 0; e < kChunks; ++e) {
                const int c4 = lc + kRowLanes * e;
                if (c4 >= D4) continue;
                const float4 v = reinterpret_cast<const float4*>(V_j + (c + k) * ld)[c4];
#pragma unroll
                for (int a = 0; a < kRowsPerLane; ++a) axpy4(PV[a][e], fa::component(p[a], k), v);
            }
    }
    // Alg. 1 lines 11–13, row by row: m_new, l_new; O_i rescaled and written back; l_i, m_i written.
#pragma unroll
    for (int a = 0; a < kRowsPerLane; ++a) {
        if (row[a] >= N) continue;
        const float m_new = fmaxf(m_i[a], m_tilde[a]);
        const float w_old = exp_diff(m_i[a], m_new), w_new = exp_diff(m_tilde[a], m_new);
        const float l_new = w_old * l_i[a] + w_new * l_tilde[a];
        const float inv_l_new = l_new > 0.0f ? 1.0f / l_new : 0.0f;
        const float c_old = l_i[a] * w_old;
        float4* O_r = reinterpret_cast<float4*>(O + std::size_t(row[a]) * D);
#pragma unroll
        for (int e = 0; e < kChunks; ++e) {
            const int c4 = lc + kRowLanes * e;
            if (c4 >= D4) continue;
            float4 o = O_r[c4];
            o.x = inv_l_new * (c_old * o.x + w_new * PV[a][e].x);
            o.y = inv_l_new * (c_old * o.y + w_new * PV[a][e].y);
            o.z = inv_l_new * (c_old * o.z + w_new * PV[a][e].z);
            o.w = inv_l_new * (c_old * o.w + w_new * PV[a][e].w);
            O_r[c4] = o;
        }
        if (lc == 0) {
            l[row[a]] = l_new;
            m[row[a]] = m_new;
        }
    }
}

/// Variant 2: W warps (blockDim.x = 32·W), warp w owns query tiles w, w + W, ...
template <int kChunks>
__global__ void __launch_bounds__(kMaxWarps * 32)
    flash1_warp_rows(fa::AttnShape s, const float* __restrict__ Q, const float* __restrict__ K,
                     const float* __restrict__ V, float* __restrict__ O, float* __restrict__ L,
                     float* __restrict__ l, float* __restrict__ m) {
    const int N = s.N, D = s.D, D4 = D / 4, ld = tile_ld(D);
    const int warp = threadIdx.x / 32, warps = blockDim.x / 32, lane = threadIdx.x % 32;
    const int lr = lane / kRowLanes, lc = lane % kRowLanes;
    const Tiles t{kBr, kBc};
    const int T_r = fa::ceil_div(N, kBr), T_c = fa::ceil_div(N, kBc);  // Alg. 1 line 3 (and 4)
    const std::size_t head = std::size_t(blockIdx.x) * N;
    Q += head * D, K += head * D, V += head * D, O += head * D, L += head, l += head, m += head;

    extern __shared__ float4 sram4[];  // float4: 16-byte aligned
    float* K_j = reinterpret_cast<float*>(sram4);                // kBc × ld
    float* V_j = K_j + kBc * ld;                                 // kBc × ld
    float* Q_i = V_j + kBc * ld + warp * kBr * (ld + kLdP);      // this warp's kBr × ld
    float* P_ij = Q_i + kBr * ld;                                // this warp's kBr × kLdP

    // Alg. 1 line 2: O = 0, l = 0, m = −inf, on this warp's tiles (each lane its own part).
    for (int i = warp; i < T_r; i += warps)
        for (int a = 0; a < kRowsPerLane; ++a) {
            const int r = i * kBr + lr + kRowGroups * a;
            if (r >= N) continue;
            for (int c4 = lc; c4 < D4; c4 += kRowLanes)
                reinterpret_cast<float4*>(O + std::size_t(r) * D)[c4] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (lc == 0) l[r] = 0.0f, m[r] = -INFINITY;
        }
    for (int j = 0; j < T_c; ++j) {  // Alg. 1 line 5
        // Alg. 1 line 6: load K_j, V_j (all warps together).
        load_rows(K_j, ld, K, j * kBc, kBc, N, D, threadIdx.x, blockDim.x);
        load_rows(V_j, ld, V, j * kBc, kBc, N, D, threadIdx.x, blockDim.x);
        __syncthreads();  // K_j, V_j complete before any warp reads them
        // Alg. 1 line 7, spread over the warps: this warp's query tiles.
        for (int i = warp; i < T_r; i += warps)
            if (i >= first_query_tile(j, t, s.causal))
                warp_tile_step<kChunks>(s, i, j, lane, K_j, V_j, Q_i, P_ij, Q, O, l, m);  // lines 8–13
        __syncthreads();  // every warp is done with K_j, V_j before the next j overwrites them
    }
    // After line 15: L = m + log l.
    for (int i = warp; i < T_r; i += warps)
        for (int a = 0; a < kRowsPerLane; ++a) {
            const int r = i * kBr + lr + kRowGroups * a;
            if (lc == 0 && r < N) L[r] = m[r] + logf(l[r]);
        }
}

// ---- launching --------------------------------------------------------------------------------

template <int kChunks>
void launch_warp_rows(const fa::AttnShape& s, const LaunchConfig& c, const float* Q, const float* K,
                      const float* V, float* O, float* L, float* l, float* m) {
    fa::allow_dynamic_smem_once(flash1_warp_rows<kChunks>, c.smem_bytes, "chapter 4 variant 2");
    flash1_warp_rows<kChunks><<<c.blocks, c.threads, c.smem_bytes>>>(s, Q, K, V, O, L, l, m);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

std::string unsupported_reason(int variant, int D) {
    const std::string d = "head dimension " + std::to_string(D);
    if (variant == kReadable)
        return D >= 1 && D <= 256 ? "" : d + " is not supported by variant 1 (it takes 1 to 256)";
    if (variant == kWarpRows)
        return D >= 4 && D <= 128 && D % 4 == 0
                   ? ""
                   : d + " is not supported by variant 2 (it takes multiples of 4 from 4 to 128: "
                         "rows are read as float4, and a lane holds at most 4 float4 columns of O)";
    return "unknown variant " + std::to_string(variant) + " (chapter 4 has variants 1 and 2)";
}

Tiles tiles_used(int variant, Tiles requested) {
    return variant == kWarpRows ? Tiles{kBr, kBc} : requested;
}

LaunchConfig launch_config(int variant, const fa::AttnShape& s, Tiles tiles) {
    LaunchConfig c{tiles_used(variant, tiles), int(s.heads_total()), 0, 0};
    if (variant == kReadable) {
        c.threads = c.tiles.Br;
        c.smem_bytes = readable_smem_bytes(s.D, c.tiles);
        return c;
    }
    // As many warps as there are query tiles, at most kMaxWarps, and as many as shared memory holds.
    const std::size_t optin = fa::smem_per_block_optin();
    int warps = std::min(kMaxWarps, fa::ceil_div(s.N, kBr));
    while (warps > 1 && warp_rows_smem_bytes(s.D, warps) > optin) --warps;
    c.threads = 32 * warps;
    c.smem_bytes = warp_rows_smem_bytes(s.D, warps);
    return c;
}

std::string launch_problem(int variant, const fa::AttnShape& s, Tiles tiles) {
    const std::string why = unsupported_reason(variant, s.D);
    if (!why.empty()) return why;
    const LaunchConfig c = launch_config(variant, s, tiles);
    if (c.tiles.Br < 1 || c.tiles.Bc < 1) return "B_r and B_c must be at least 1";
    if (c.threads > 1024)
        return "B_r = " + std::to_string(c.tiles.Br) +
               " needs that many threads per block (one per query row); a block has at most 1024";
    const std::size_t optin = fa::smem_per_block_optin();
    if (c.smem_bytes > optin) {
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "tiles B_r = %d, B_c = %d at D = %d need %zu bytes (%.1f KB) of shared memory per "
                      "block (K_j, V_j, Q_i, S_ij), but this device allows at most %zu bytes (%.1f KB); "
                      "choose smaller tiles",
                      c.tiles.Br, c.tiles.Bc, s.D, c.smem_bytes, c.smem_bytes / 1024.0, optin,
                      optin / 1024.0);
        return buf;
    }
    return "";
}

std::size_t scratch_floats(const fa::AttnShape& s) { return 2 * s.rows(); }

void forward(int variant, const fa::AttnShape& s, const float* Q, const float* K, const float* V,
             float* O, float* L, float* scratch, Tiles tiles) {
    const std::string why = launch_problem(variant, s, tiles);
    if (!why.empty()) {
        std::fprintf(stderr, "ch4::forward: %s\n", why.c_str());
        std::exit(fa::kExitBadInput);
    }
    const LaunchConfig c = launch_config(variant, s, tiles);
    float* l = scratch;
    float* m = scratch + s.rows();
    if (variant == kReadable) {
        fa::allow_dynamic_smem_once(flash1_readable, c.smem_bytes, "chapter 4 variant 1");
        flash1_readable<<<c.blocks, c.threads, c.smem_bytes>>>(s, c.tiles, Q, K, V, O, L, l, m);
        CUDA_CHECK_LAUNCH();
        return;
    }
    switch (fa::ceil_div(s.D / 4, kRowLanes)) {  // float4 column chunks per lane
        case 1: launch_warp_rows<1>(s, c, Q, K, V, O, L, l, m); break;
        case 2: launch_warp_rows<2>(s, c, Q, K, V, O, L, l, m); break;
        case 3: launch_warp_rows<3>(s, c, Q, K, V, O, L, l, m); break;
        default: launch_warp_rows<4>(s, c, Q, K, V, O, L, l, m); break;
    }
}

}  // namespace ch4
