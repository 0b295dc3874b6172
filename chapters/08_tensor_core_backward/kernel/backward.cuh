/// @file backward.cuh
/// @brief Chapter 8: the FlashAttention-2 backward (Algorithm 2) on tensor cores, fp16/bf16 in,
/// fp32 accumulation. This is the file to edit.
///
/// Four kernels (launch.cu runs them in this order):
///   preprocess_kernel   line 4: D_i = rowsum(dO_i ∘ O_i); also L_i · log2 e, both into row
///                       vectors padded to a multiple of 128 rows (zeros past N), so the main
///                       kernel copies whole 16-byte chunks of them without bounds checks
///   dkdv_kernel         lines 5–19: one block per K_j, V_j (outer loop), an inner loop over
///                       Q_i, dO_i; dK_j, dV_j in registers; with --dq atomic also line 15, dQ_i
///                       added to an fp32 workspace with atomicAdd
///   convert_dq_kernel   --dq atomic: dQ = scale · workspace, rounded to 16 bits
///   dq_kernel           --dq split: one block per Q_i looping over K_j, dQ_i in registers, no atomics
///
/// The ladder (kernel/bwd_config.h; each step's change is an `if constexpr` labelled `// step N:`):
///   1 direct port  2 ldmatrix(.trans) + swizzle  3 cp.async Q/dO/L/D pipeline
///   4 Pᵀ, dSᵀ in registers  5 tuned tiles (candidates.h)
///   6 FA2's warp layout: a dK/dV kernel of its own, dkdv_fa2_kernel in backward_fa2.cuh
/// The warp-level products are chapter 7's (kernel/warp_tile.cuh): its scores() computes
/// Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ here (A = the warp's key rows, B = the tile's query rows),
/// its accumulate_pv() computes dV_j += Pᵀ dO_i and dK_j += dSᵀ Q_i (B through ldmatrix.trans).
/// The one product chapter 7 has no form of is dQ_i += dS K_j with dS read transposed from the
/// dSᵀ tile: line 15 with atomics, in dq_atomics.cuh (dq_add).
#pragma once

#include <cstdint>
#include <type_traits>

#include "../../../common/math.h"
#include "../../../common/tensor_core/layout.h"
#include "../../../common/tensor_core/ptx.cuh"
#include "../../../common/tensor_core/tile_io.cuh"
#include "../../07_tensor_cores/kernel/warp_tile.cuh"
#include "bwd_config.h"
#include "dq_atomics.cuh"
#include "warp_mma.cuh"

namespace ch8 {
inline namespace FA_TC_KERNELS {

/// Every backward kernel's arguments: device arrays in the layout of shape.h, 16-bit elements as
/// raw bits (K, V, dK, dV of H_kv = H / group heads of N_k rows). L2 and Di are (B·H, Npad) row
/// vectors; dQacc is (B, H, N, D) fp32.
struct BwdParams {
    const uint16_t* Q;
    const uint16_t* K;
    const uint16_t* V;
    const uint16_t* O;
    const uint16_t* dO;
    const float* L;  ///< the forward's logsumexp (natural log)
    float* L2;       ///< L_i · log2 e (preprocess), 0 past N
    float* Di;       ///< D_i (preprocess), 0 past N
    float* dQacc;    ///< --dq atomic: the fp32 dQ workspace
    uint16_t* dQ;
    uint16_t* dK;
    uint16_t* dV;
    int N, Npad, H, BH;
    int N_k;           ///< keys per K/V head
    int group;         ///< query heads per K/V head: H / H_kv
    float scale;       ///< softmax scale
    float scale_log2;  ///< scale · log2 e: P = 2^(S · scale_log2 − L2)
    bool causal;
};

/// Rows of the padded row vectors L2 and Di: the largest B_r divides it.
constexpr int kRowPad = 128;

// The kernels exist in every build; their bodies need compute capability 8.0 (FA_TC_SM80) and
// __trap() otherwise (the host refuses older devices before launching).

/// Line 4: D_i = rowsum(dO_i ∘ O_i), and L2_i = L_i · log2 e; D/8 lanes per row, 8 elements each.
/// A row that sees no key (causal, N > N_k) has L = −inf and O = 0 (reference.h): its L2 is +inf,
/// so that every P of its row is 2^(S − inf) = 0, masked or not (−inf − (−inf) would be NaN).
template <class T, int D>
__global__ void preprocess_kernel(const BwdParams p) {
#if FA_TC_SM80
    constexpr int kLanes = D / 8;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long row = t / kLanes;  // padded row: bh · Npad + i
    const int c = int(t % kLanes);
    const long long bh = row / p.Npad;
    const int i = int(row % p.Npad);
    const bool valid = bh < p.BH && i < p.N;
    float acc = 0.0f;
    if (valid) {
        const long long at = (bh * p.N + i) * D + 8 * c;
        const uint4 o = *reinterpret_cast<const uint4*>(p.O + at), d = *reinterpret_cast<const uint4*>(p.dO + at);
        const uint32_t ow[4] = {o.x, o.y, o.z, o.w}, dw[4] = {d.x, d.y, d.z, d.w};
        #pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int shift = 16 * (e % 2);
            acc += tc::bits_to_float<T>(uint16_t(ow[e / 2] >> shift)) * tc::bits_to_float<T>(uint16_t(dw[e / 2] >> shift));
        }
    }
    #pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (c == 0 && bh < p.BH) {
        p.Di[row] = acc;
        const float L = valid ? p.L[bh * p.N + i] : 0.0f;
        p.L2[row] = L == -INFINITY ? INFINITY : L * fa::kLog2e;
    }
#else
    __trap();  // compute capability < 8.0: the host refuses to launch
#endif
}

/// --dq atomic, after the main kernel: dQ = scale · dQacc in T, 8 elements per thread.
template <class T>
__global__ void convert_dq_kernel(const BwdParams p, long long elements) {
#if FA_TC_SM80
    const long long at = 8 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (at >= elements) return;
    uint32_t out[4];
    #pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = tc::pack2<T>(p.scale * p.dQacc[at + 2 * k], p.scale * p.dQacc[at + 2 * k + 1]);
    *reinterpret_cast<uint4*>(p.dQ + at) = make_uint4(out[0], out[1], out[2], out[3]);
#else
    __trap();  // compute capability < 8.0: the host refuses to launch
#endif
}

#if FA_TC_SM80

/// Sᵀ entries outside the problem become −inf (so P = 0): queries or keys past N, and with the
/// causal mask keys after the query. Row = key (the warp's MT m-tiles from key0), column = query
/// (the tile's). With N_k ≠ N, pass queries in key coordinates (q0 + N_k − N: the diagonal
/// bottom-right, shape.h) and N_k as N: a query past N is then one past N_k.
template <class Cfg, int MT>
__device__ __forceinline__ void mask_transposed(float (&St)[MT][Cfg::kSub / 8][4], int key0, int q0, int N,
                                                bool causal, int lane) {
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int n = 0; n < Cfg::kSub / 8; ++n)
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int key = key0 + 16 * mt + tc::frag_c_row(lane, i), query = q0 + 8 * n + tc::frag_c_col(lane, i);
                if (query >= N || key >= N || (causal && key > query)) St[mt][n][i] = -INFINITY;
            }
}

/// Lines 11 and 14 on the transposed tiles: Pᵀ = exp(Sᵀ − L) (into St) and dSᵀ = Pᵀ ∘ (dPᵀ − D)
/// (into dPt). Column = query: L2 and D_i of the lane's two query columns per n-tile.
template <class Cfg, int MT>
__device__ __forceinline__ void p_and_ds(float (&St)[MT][Cfg::kSub / 8][4], float (&dPt)[MT][Cfg::kSub / 8][4],
                                         const float* L2s, const float* Dis, float scale_log2, int lane) {
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int n = 0; n < Cfg::kSub / 8; ++n)
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int q = 8 * n + tc::frag_c_col(lane, i);
                const float P = tc::fast_exp2(St[mt][n][i] * scale_log2 - tc::ld_shared(L2s + q));  // line 11
                dPt[mt][n][i] = P * (dPt[mt][n][i] - tc::ld_shared(Dis + q));                        // line 14
                St[mt][n][i] = P;
            }
}

/// Element offset of (row, col) in a B_c × B_r tile of Pᵀ or dSᵀ.
template <class Cfg>
__device__ __forceinline__ int pds_offset(int row, int col) {
    if constexpr (Cfg::kLdmatrix)  // step 2: swizzled
        return tc::swizzle(row, col, Cfg::Br);
    else
        return tc::row_major(row, col, Cfg::Br);
}

/// Writes a warp's packed A fragments (its MT · 16 key rows r0.., one pass's Sub query columns
/// from c0) into a Pᵀ/dSᵀ tile. r0 is a multiple of 16 and c0 of Sub (a power of two), so every
/// register's offset is one of the lane's two k-step-0 offsets stepped by tc::swizzled_a_frag_offset
/// (an XOR per k-step, rows as immediates): 2 · Sub/16 address registers instead of 4 · MT · Sub/16.
template <class Cfg, int MT>
__device__ __forceinline__ void store_a_frags(uint16_t* tile, const uint32_t (&a)[MT][Cfg::kSub / 16][4], int r0,
                                              int c0, int lane) {
    static_assert((Cfg::kSub & (Cfg::kSub - 1)) == 0, "store_a_frags: passes of a power of two columns");
    int half[2];  // the lane's offsets of register 0 (h = 0) and 2 (h = 1) of k-step 0, m-tile 0
    #pragma unroll
    for (int h = 0; h < 2; ++h) half[h] = pds_offset<Cfg>(r0 + tc::frag_a_row(lane, 0), c0 + tc::frag_a_col(lane, 2 * h, 0));
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int kk = 0; kk < Cfg::kSub / 16; ++kk)
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int at = Cfg::kLdmatrix ? tc::swizzled_a_frag_offset(half[r / 2], mt, kk, r, Cfg::Br)
                                              : half[r / 2] + 16 * kk + (16 * mt + 8 * (r % 2)) * Cfg::Br;
                tc::st_shared(reinterpret_cast<uint32_t*>(tile + at), a[mt][kk][r]);
            }
}

/// Reads them back (steps 1–3): chapter 7's A-fragment load on a tile of row stride B_r.
template <class Cfg>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[1][Cfg::kSub / 16][4], const uint16_t* tile, int r0,
                                             int c0, int lane) {
    #pragma unroll
    for (int kk = 0; kk < Cfg::kSub / 16; ++kk)
        ch7::load_a_frag<typename Cfg::PdsTile>(a[0][kk], tile, r0, c0 / 16 + kk, lane);
}

/// Stores a warp's MT · 16 rows of an fp32 accumulator (rows row0.., NT · 8 columns from col0 of
/// rows of D) times `mul` as T.
template <class T, int D, int MT, int NT>
__device__ __forceinline__ void store_acc(uint16_t* dst_head, const float (&acc)[MT][NT][4], float mul, int row0,
                                          int N, int lane, int col0 = 0) {
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + 16 * mt + tc::frag_c_row(lane, 2 * h);
            if (row >= N) continue;
            #pragma unroll
            for (int d = 0; d < NT; ++d)
                *reinterpret_cast<uint32_t*>(dst_head + row * D + col0 + 8 * d + tc::frag_c_col(lane, 2 * h)) =
                    tc::pack2<T>(mul * acc[mt][d][2 * h], mul * acc[mt][d][2 * h + 1]);
        }
}

/// Copies `rows` floats (a multiple of 4) of a padded row vector into shared memory, 16 bytes
/// per thread, threads first..first + rows/4 − 1.
template <tc::Copy How>
__device__ __forceinline__ void load_row_vector(float* dst, const float* src, int rows, int first) {
    const int c = int(threadIdx.x) - first;
    if (c < 0 || c >= rows / 4) return;
    if constexpr (How == tc::Copy::kAsync)
        tc::cp_async_16(dst + 4 * c, src + 4 * c);
    else
        tc::st_shared(reinterpret_cast<float4*>(dst + 4 * c), *reinterpret_cast<const float4*>(src + 4 * c));
}

/// The inner loop of a dK/dV block (Alg. 2 line 8) over the query tiles of every query head that
/// reads its K/V head: with grouped-query attention dK_j and dV_j are sums over the group's heads,
/// so the block runs lines 8–16 for each of them into the same registers (no atomics, no second
/// pass). One flat index t walks the group's heads, tile after tile, so that the cp.async pipeline
/// runs on from one head to the next: t is query tile i(t) of query head bh(t).
struct GroupTiles {
    long long bh0;  ///< the group's first query head, b·H + h
    int i_begin;    ///< causal: the first query tile that sees a key of the block
    int per_head;   ///< query tiles per head from i_begin
    int count;      ///< tiles of the whole group
    __device__ __forceinline__ long long bh(int t) const { return bh0 + t / per_head; }
    __device__ __forceinline__ int i(int t) const { return i_begin + t % per_head; }
};

/// The tiles of the block of keys k0.. of K/V head (blockIdx.z, blockIdx.y), query tiles of B_r
/// rows. Line 8, causal: the first query that sees key k0 is k0 − (N_k − N) (bottom-right), so the
/// query tiles that end before it see none of the block's keys (the last query sees every key, so
/// at least one tile remains).
__device__ __forceinline__ GroupTiles group_tiles(const BwdParams& p, int k0, int Br) {
    GroupTiles g;
    g.bh0 = (long long)blockIdx.z * p.H + (long long)blockIdx.y * p.group;
    const int Tr = fa::ceil_div(p.N, Br);
    g.i_begin = p.causal ? tc::max_int(0, k0 - (p.N_k - p.N)) / Br : 0;
    g.per_head = Tr - g.i_begin;
    g.count = p.group * g.per_head;
    return g;
}

/// Offset of the K/V head (blockIdx.z, blockIdx.y) of a dK/dV block in K, V, dK, dV.
__device__ __forceinline__ std::size_t kv_head_offset(const BwdParams& p, int D) {
    return (std::size_t(blockIdx.z) * std::size_t(p.H / p.group) + blockIdx.y) * std::size_t(p.N_k) * D;
}

/// Line 6 of a dK/dV block: K_j, V_j (keys k0.. of its K/V head) into Ks, Vs.
template <class Cfg, bool kSwizzled, tc::Copy kCopy>
__device__ __forceinline__ void load_kv_block(uint16_t* Ks, uint16_t* Vs, const BwdParams& p, int k0) {
    const std::size_t kv_head = kv_head_offset(p, Cfg::D);
    tc::load_tile<Cfg::Bc, Cfg::D, Cfg::kThreads, kSwizzled, kCopy>(Ks, p.K + kv_head, k0, p.N_k);
    tc::load_tile<Cfg::Bc, Cfg::D, Cfg::kThreads, kSwizzled, kCopy>(Vs, p.V + kv_head, k0, p.N_k);
}

/// Line 9 of a dK/dV block for tile t: Q_i, dO_i, L2_i, D_i of query tile tiles.i(t) of head
/// tiles.bh(t), into stage t % Stages (Q_i at QdO + s·2·B_r·D, dO_i after it; L2 at LD + 2·s·B_r,
/// D_i after it).
template <class Cfg, bool kSwizzled, tc::Copy kCopy>
__device__ __forceinline__ void load_query_tile(uint16_t* QdO, float* LD, const BwdParams& p, const GroupTiles& tiles,
                                                int t) {
    constexpr int Br = Cfg::Br, D = Cfg::D, kThreads = Cfg::kThreads;
    const long long bh = tiles.bh(t);
    const int i = tiles.i(t);
    uint16_t* Qs = QdO + (t % Cfg::kStages) * 2 * Br * D;
    float* Ls = LD + (t % Cfg::kStages) * 2 * Br;
    tc::load_tile<Br, D, kThreads, kSwizzled, kCopy>(Qs, p.Q + bh * p.N * D, i * Br, p.N);
    tc::load_tile<Br, D, kThreads, kSwizzled, kCopy>(Qs + Br * D, p.dO + bh * p.N * D, i * Br, p.N);
    load_row_vector<kCopy>(Ls, p.L2 + bh * p.Npad + i * Br, Br, 0);
    load_row_vector<kCopy>(Ls + Br, p.Di + bh * p.Npad + i * Br, Br, Br / 4);
}

#endif  // FA_TC_SM80

/// Lines 5–19 for one K_j, V_j (block x of K/V head (z, y)): dK_j and dV_j, summed over the query
/// heads of the group (GroupTiles), and with kAtomicDq the dQ_i contributions (line 15) by atomicAdd.
template <class T, class Cfg, bool kAtomicDq>
__global__ void __launch_bounds__(Cfg::kThreads, 1) dkdv_kernel(const BwdParams p) {
#if FA_TC_SM80
    constexpr int D = Cfg::D, Br = Cfg::Br, Bc = Cfg::Bc, Sub = Cfg::kSub, kStages = Cfg::kStages;
    using W = typename Cfg::Warp;
    constexpr bool kSwizzled = Cfg::kLdmatrix;                                        // step 2: swizzle
    constexpr tc::Copy kCopy = Cfg::kCpAsync ? tc::Copy::kAsync : tc::Copy::kSync;  // step 3: cp.async
    constexpr bool kStoreDs = kAtomicDq || !Cfg::kRegsPdS;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    uint16_t* Ks = reinterpret_cast<uint16_t*>(smem_raw);
    uint16_t* Vs = Ks + Bc * D;
    uint16_t* QdO = Vs + Bc * D;            // stage s: Q_i at QdO + s·2·B_r·D, dO_i after it
    uint16_t* dSt = QdO + kStages * 2 * Br * D;  // dSᵀ, B_c × B_r
    uint16_t* Pt = dSt + Bc * Br;           // Pᵀ (steps 1–3)
    float* LD = reinterpret_cast<float*>(Pt + (Cfg::kRegsPdS ? 0 : Bc * Br));  // stage s: L2 at LD + 2·s·B_r, D_i after

    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int k0 = int(blockIdx.x) * Bc, wk = 16 * warp, wk0 = k0 + wk;  // block's and warp's first key
    const int diag = p.N_k - p.N;  // query q sees keys up to q + diag (causal, bottom-right)
    const GroupTiles tiles = group_tiles(p, k0, Br);
    auto load_q = [&](int t) { load_query_tile<Cfg, kSwizzled, kCopy>(QdO, LD, p, tiles, t); };  // line 9
    load_kv_block<Cfg, kSwizzled, kCopy>(Ks, Vs, p, k0);  // line 6 (with cp.async in the group of the first Q_i)
    if constexpr (Cfg::kCpAsync) {  // step 3: tiles in flight before the loop
        #pragma unroll
        for (int s = 0; s < kStages - 1; ++s) {
            if (s < tiles.count) load_q(s);
            tc::cp_async_commit();
        }
    }

    float dK[1][D / 8][4], dV[1][D / 8][4];  // line 7
    zero_acc(dK);
    zero_acc(dV);
    ch7::QFrags<W> kf, vf;  // step 4 option: K_j, V_j fragments in registers

    for (int t = 0; t < tiles.count; ++t) {  // line 8, over the group's heads
        if constexpr (Cfg::kCpAsync) {  // step 3: the pipeline (as chapter 7's K/V pipeline)
            tc::cp_async_wait<kStages - 2>();
            __syncthreads();  // tile t visible; every warp done with tile t − 1 and with dSᵀ
            if (t + kStages - 1 < tiles.count) load_q(t + kStages - 1);
            tc::cp_async_commit();
        } else {  // steps 1–2: synchronous loads
            __syncthreads();
            load_q(t);
            __syncthreads();
        }
        if constexpr (Cfg::kKVInRegs)
            if (t == 0) ch7::load_q_frags<W>(kf, Ks, wk, lane), ch7::load_q_frags<W>(vf, Vs, wk, lane);
        const int q0 = tiles.i(t) * Br;
        const uint16_t* Qs = QdO + (t % kStages) * 2 * Br * D;
        const uint16_t* dOs = Qs + Br * D;
        const float* Ls = LD + (t % kStages) * 2 * Br;

        #pragma unroll 1
        for (int c0 = 0; c0 < Br; c0 += Sub) {  // the tile's query columns, Sub at a time
            const int qc = q0 + c0;
            uint32_t Pa[1][Sub / 16][4], dSa[1][Sub / 16][4];
            if (p.causal && wk0 > qc + Sub - 1 + diag) {  // every key of the warp after every query: P = dS = 0
                if constexpr (kStoreDs) {
                    #pragma unroll
                    for (int kk = 0; kk < Sub / 16; ++kk)
                        #pragma unroll
                        for (int r = 0; r < 4; ++r) dSa[0][kk][r] = 0;
                    store_a_frags<Cfg>(dSt, dSa, wk, c0, lane);
                }
                continue;
            }
            float St[1][Sub / 8][4], dPt[1][Sub / 8][4];
            ch7::scores<T, W>(St, Ks, kf, Qs + c0 * D, wk, lane);    // line 10: Sᵀ = K_j Q_iᵀ
            ch7::scores<T, W>(dPt, Vs, vf, dOs + c0 * D, wk, lane);  // line 13: dPᵀ = V_j dO_iᵀ
            if (qc + Sub > p.N || k0 + Bc > p.N_k || (p.causal && wk0 + 15 > qc + diag))  // only edge tiles
                mask_transposed<Cfg>(St, wk0, qc + diag, p.N_k, p.causal, lane);
            p_and_ds<Cfg>(St, dPt, Ls + c0, Ls + Br + c0, p.scale_log2, lane);  // lines 11, 14
            ch7::pack_p<T, W>(Pa, St);
            ch7::pack_p<T, W>(dSa, dPt);
            if constexpr (kStoreDs) store_a_frags<Cfg>(dSt, dSa, wk, c0, lane);
            if constexpr (!Cfg::kRegsPdS) {  // steps 1–3: Pᵀ and dSᵀ through shared memory
                store_a_frags<Cfg>(Pt, Pa, wk, c0, lane);
                __syncwarp();
                load_a_frags<Cfg>(Pa, Pt, wk, c0, lane);
                load_a_frags<Cfg>(dSa, dSt, wk, c0, lane);
            }
            ch7::accumulate_pv<T, W>(dV, Pa, dOs + c0 * D, lane);  // line 12: dV_j += Pᵀ dO_i
            ch7::accumulate_pv<T, W>(dK, dSa, Qs + c0 * D, lane);  // line 16: dK_j += dSᵀ Q_i
        }
        if constexpr (kAtomicDq) {
            __syncthreads();  // dSᵀ complete: line 15 reads every warp's rows
            dq_add<T, Cfg>(p.dQacc + tiles.bh(t) * p.N * D, dSt, Ks, q0, p.N, warp, lane);
        }
    }
    // lines 17–18: dK_j (times the softmax scale, which S carried), dV_j
    store_acc<T, D>(p.dK + kv_head_offset(p, D), dK, p.scale, wk0, p.N_k, lane);
    store_acc<T, D>(p.dV + kv_head_offset(p, D), dV, 1.0f, wk0, p.N_k, lane);
#else
    __trap();  // compute capability < 8.0: the host refuses to launch
#endif
}

/// --dq split: line 15 for one Q_i (block x of head (z, y)), looping over K_j, V_j of its K/V head;
/// dQ_i in registers.
template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) dq_kernel(const BwdParams p) {
#if FA_TC_SM80
    constexpr int D = Cfg::D, Br = Cfg::Br, Bc = Cfg::Bc, kStages = Cfg::kStages, kThreads = Cfg::kThreads;
    using W = typename Cfg::Warp;
    constexpr bool kSwizzled = Cfg::kLdmatrix;
    constexpr tc::Copy kCopy = Cfg::kCpAsync ? tc::Copy::kAsync : tc::Copy::kSync;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
    uint16_t* dOs = Qs + Br * D;
    uint16_t* KVs = dOs + Br * D;  // stage s: K_j at KVs + s·2·B_c·D, V_j after it

    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int q0 = int(blockIdx.x) * Br, wr = 16 * warp, wq0 = q0 + wr;
    const long long bh = (long long)blockIdx.z * p.H + blockIdx.y;
    const std::size_t head = std::size_t(bh) * std::size_t(p.N);
    const std::size_t kv_head = (std::size_t(blockIdx.z) * std::size_t(p.H / p.group) + blockIdx.y / p.group) * std::size_t(p.N_k);
    const uint16_t* Kh = p.K + kv_head * D;
    const uint16_t* Vh = p.V + kv_head * D;
    const int diag = p.N_k - p.N;  // row q sees keys up to q + diag (causal, bottom-right)
    const int key_end = p.causal ? tc::max_int(0, tc::min_int(p.N_k, q0 + Br + diag)) : p.N_k;
    const int Tc = fa::ceil_div(key_end, Bc);
    auto load_kv = [&](int j) {
        uint16_t* Ks = KVs + (j % kStages) * 2 * Bc * D;
        tc::load_tile<Bc, D, kThreads, kSwizzled, kCopy>(Ks, Kh, j * Bc, p.N_k);
        tc::load_tile<Bc, D, kThreads, kSwizzled, kCopy>(Ks + Bc * D, Vh, j * Bc, p.N_k);
    };
    tc::load_tile<Br, D, kThreads, kSwizzled, kCopy>(Qs, p.Q + head * D, q0, p.N);
    tc::load_tile<Br, D, kThreads, kSwizzled, kCopy>(dOs, p.dO + head * D, q0, p.N);
    if constexpr (Cfg::kCpAsync) {  // step 3: tiles in flight before the loop
        #pragma unroll
        for (int s = 0; s < kStages - 1; ++s) {
            if (s < Tc) load_kv(s);
            tc::cp_async_commit();
        }
    }
    // L2 and D_i of the lane's two rows (padded vectors: no bounds check)
    float L2r[2], Dir[2];
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = wq0 + tc::frag_c_row(lane, 2 * h);
        L2r[h] = p.L2[bh * p.Npad + row];
        Dir[h] = p.Di[bh * p.Npad + row];
    }
    float dQ[1][D / 8][4];
    zero_acc(dQ);
    ch7::QFrags<W> unused;
    for (int j = 0; j < Tc; ++j) {
        if constexpr (Cfg::kCpAsync) {  // step 3
            tc::cp_async_wait<kStages - 2>();
            __syncthreads();
            if (j + kStages - 1 < Tc) load_kv(j + kStages - 1);
            tc::cp_async_commit();
        } else {
            __syncthreads();
            load_kv(j);
            __syncthreads();
        }
        const int k0 = j * Bc;
        if (p.causal && k0 > wq0 + 15 + diag) continue;  // every key after every row of the warp
        const uint16_t* Ks = KVs + (j % kStages) * 2 * Bc * D;
        const uint16_t* Vs = Ks + Bc * D;
        float S[1][Bc / 8][4], dP[1][Bc / 8][4];
        ch7::scores<T, W>(S, Qs, unused, Ks, wr, lane);   // line 10: S = Q_i K_jᵀ
        ch7::scores<T, W>(dP, dOs, unused, Vs, wr, lane);  // line 13: dP = dO_i V_jᵀ
        if (k0 + Bc > p.N_k || (p.causal && k0 + Bc - 1 > wq0 + diag))
            ch7::mask_scores<W>(S, wq0 + diag, k0, p.N_k, p.causal, lane);
        #pragma unroll
        for (int n = 0; n < Bc / 8; ++n)
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float P = tc::fast_exp2(S[0][n][i] * p.scale_log2 - L2r[i / 2]);  // line 11
                dP[0][n][i] = P * (dP[0][n][i] - Dir[i / 2]);                           // line 14
            }
        uint32_t dSa[1][Bc / 16][4];
        ch7::pack_p<T, W>(dSa, dP);
        ch7::accumulate_pv<T, W>(dQ, dSa, Ks, lane);  // line 15: dQ_i += dS K_j
    }
    // step 3: no copy in flight when the block ends (rows that see no key: Q_i, dO_i never waited for)
    if constexpr (Cfg::kCpAsync) tc::cp_async_wait<0>();
    store_acc<T, D>(p.dQ + head * D, dQ, p.scale, wq0, p.N, lane);
#else
    __trap();  // compute capability < 8.0: the host refuses to launch
#endif
}

}  // namespace FA_TC_KERNELS
}  // namespace ch8
