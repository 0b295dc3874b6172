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
/// dSᵀ tile: dq_add() below.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../../../common/math.h"
#include "../../../common/tensor_core/layout.h"
#include "../../../common/tensor_core/ptx.cuh"
#include "../../../common/tensor_core/tile_io.cuh"
#include "../../07_tensor_cores/kernel/warp_tile.cuh"
#include "bwd_config.h"

namespace ch8 {
inline namespace FA_TC_KERNELS {

/// Every backward kernel's arguments: device arrays in the layout of shape.h, 16-bit elements as
/// raw bits. L2 and Di are (B·H, Npad) row vectors; dQacc is (B, H, N, D) fp32.
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
    float scale;       ///< softmax scale
    float scale_log2;  ///< scale · log2 e: P = 2^(S · scale_log2 − L2)
    bool causal;
};

/// Rows of the padded row vectors L2 and Di: the largest B_r divides it.
constexpr int kRowPad = 128;

/// Floats one atomicAdd on global memory can add in this build: vector atomics (`atomicAdd` on
/// float2 and float4, PTX red.global.add.v2/.v4.f32) exist from compute capability 9.0; the
/// emulator has them too (emulator.h), so CI runs the vector path. The host asks a GPU which of
/// the two its code has (launch.cu, dq_vec_probe).
#if defined(FA_TC_EMULATE) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
constexpr int kMaxDqVec = 4;
#else
constexpr int kMaxDqVec = 1;
#endif
/// The floats per dQ atomicAdd a configuration runs in this build: its DqVec where vector atomics
/// exist, one otherwise (the scalar fallback).
template <class Cfg>
constexpr int kDqVecRun = Cfg::kDqVec <= kMaxDqVec ? Cfg::kDqVec : 1;

// The kernels exist in every build; their bodies need compute capability 8.0 (FA_TC_SM80) and
// __trap() otherwise (the host refuses older devices before launching).

/// Line 4: D_i = rowsum(dO_i ∘ O_i), and L2_i = L_i · log2 e; D/8 lanes per row, 8 elements each.
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
        p.L2[row] = valid ? p.L[bh * p.N + i] * fa::kLog2e : 0.0f;
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
/// (the tile's).
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
                const float P = tc::fast_exp2(St[mt][n][i] * scale_log2 - L2s[q]);  // line 11
                dPt[mt][n][i] = P * (dPt[mt][n][i] - Dis[q]);                        // line 14
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
                *reinterpret_cast<uint32_t*>(tile + at) = a[mt][kk][r];
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

/// The A fragment of dS (query rows 16mt.., keys 16kk..) from the dSᵀ tile (row = key): the
/// transpose of what is stored. ldmatrix.trans of matrices (keys 0–7, queries 0–7),
/// (keys 0–7, queries 8–15), (keys 8–15, queries 0–7), (keys 8–15, queries 8–15) gives
/// a0..a3; a lane addresses them the way it addresses K rows for S = Q·Kᵀ (ldsm_k_offset).
template <class Cfg>
__device__ __forceinline__ void load_ds_frag(uint32_t (&a)[4], const uint16_t* dSt, int mt, int kk, int lane) {
    if constexpr (Cfg::kLdmatrix) {  // step 2: ldmatrix.trans
        tc::ldmatrix_x4_trans(a, dSt + tc::ldsm_k_offset(lane, kk, mt, Cfg::Br));
    } else {  // step 1: two 16-bit loads per register
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int q = 16 * mt + tc::frag_a_row(lane, r), key = 16 * kk + tc::frag_a_col(lane, r, 0);
            const uint32_t lo = dSt[tc::row_major(key, q, Cfg::Br)], hi = dSt[tc::row_major(key + 1, q, Cfg::Br)];
            a[r] = lo | (hi << 16);
        }
    }
}

/// Line 15's atomics for one 16 × 8 accumulator tile c of dQ_i with vector atomics (step 5's
/// option), fewer atomic instructions each adding a contiguous 8 or 16 bytes; see dq_add_tile for
/// `at`, row_g and kCheckRows.
///   Vec 2: each row's float2 at its own place: `at` plus an immediate.
///   Vec 4: lanes l and l ^ 1 (t even and t + 1) hold columns 4·(t/2)..4·(t/2) + 3 of both rows
///     between them. The even lane takes row g, the odd lane row g + 8: each gives the other the
///     row it does not take (one shuffle per pair of values exchanged), then adds one float4 of
///     its row, the even lane's two columns first.
/// Vector atomics need aligned addresses (8 or 16 bytes): the workspace starts a multiple of 1 KB
/// into its allocation (after L2 and D_i, whose rows are padded to multiples of 128), its rows are
/// D floats, and the columns a lane adds start at an even (Vec 2) or a multiple of 4 (Vec 4).
template <int Vec, bool kCheckRows, int D>
__device__ __forceinline__ void dq_add_vector(float* at, const float (&c)[4], int row_g, int N, int lane) {
    if constexpr (Vec == 2) {
        #pragma unroll
        for (int r = 0; r < 2; ++r)
            if (!kCheckRows || row_g + 8 * r < N)
                atomicAdd(reinterpret_cast<float2*>(at + 8 * D * r), make_float2(c[2 * r], c[2 * r + 1]));
    } else {
        static_assert(Vec == 4, "dq_add_vector: 2 or 4 floats per atomic");
        const bool odd = lane & 1;  // takes row g + 8
        const float give0 = odd ? c[0] : c[2], give1 = odd ? c[1] : c[3];
        const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
        const float4 v = odd ? make_float4(got0, got1, c[2], c[3]) : make_float4(c[0], c[1], got0, got1);
        if (!kCheckRows || row_g + (odd ? 8 : 0) < N)
            atomicAdd(reinterpret_cast<float4*>(at + (odd ? 8 * D - 2 : 0)), v);
    }
}

/// Line 15's atomics for one 16 × 8 accumulator tile c of dQ_i: one float per atomicAdd, or (step
/// 5) Vec floats (dq_add_vector). Lane l (g = l / 4, t = l % 4) holds rows g (c0, c1) and g + 8
/// (c2, c3), columns 2t and 2t + 1 (tc::frag_c_row, tc::frag_c_col); `at` is its element (g, 2t) of
/// the tile in the workspace (rows of D floats), so every add is `at` plus an immediate, and row_g
/// is that element's row of the head. Rows at or past N are skipped when kCheckRows: a Q_i tile
/// that ends at or before N needs no check, and without one the adds are straight-line code (with
/// it, each add sat in a branch of its own).
template <int Vec, bool kCheckRows, int D>
__device__ __forceinline__ void dq_add_tile(float* at, const float (&c)[4], int row_g, int N, int lane) {
    if constexpr (Vec == 1) {
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            if (!kCheckRows || row_g + 8 * (i / 2) < N) atomicAdd(at + 8 * D * (i / 2) + i % 2, c[i]);
    } else {  // step 5: vector atomics
        dq_add_vector<Vec, kCheckRows, D>(at, c, row_g, N, lane);
    }
}

/// Nothing between the k-steps of a product (mma_prefetched's default).
struct NoStep {
    __device__ __forceinline__ void operator()(int) const {}
};

/// acc (MT m-tiles × 2·NP n-tiles) += A · B over KSteps k-steps, in FlashAttention-2's order: the
/// fragments of k-step kk + 1 are read (ldmatrix) before the products of k-step kk, so that their
/// latency hides behind those products. load_a(a, mt, kk) and load_b(b, np, kk) read one A fragment
/// and one pair of B fragments; each accumulator still adds its k-steps in ascending order.
/// after_step(kk), if given, runs after k-step kk's products (step 6 puts line 15's atomics there).
template <class T, int MT, int NP, int KSteps, class LoadA, class LoadB, class AfterStep = NoStep>
__device__ __forceinline__ void mma_prefetched(float (&acc)[MT][2 * NP][4], LoadA load_a, LoadB load_b,
                                               AfterStep after_step = {}) {
    uint32_t a[2][MT][4], b[2][NP][2][2];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) load_a(a[0][mt], mt, 0);
    #pragma unroll
    for (int np = 0; np < NP; ++np) load_b(b[0][np], np, 0);
    #pragma unroll
    for (int kk = 0; kk < KSteps; ++kk) {
        const int cur = kk % 2, next = 1 - cur;
        if (kk + 1 < KSteps) {
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) load_a(a[next][mt], mt, kk + 1);
            #pragma unroll
            for (int np = 0; np < NP; ++np) load_b(b[next][np], np, kk + 1);
        }
        #pragma unroll
        for (int np = 0; np < NP; ++np)
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                tc::mma_m16n8k16<T>(acc[mt][2 * np], a[cur][mt], b[cur][np][0]);
                tc::mma_m16n8k16<T>(acc[mt][2 * np + 1], a[cur][mt], b[cur][np][1]);
            }
        after_step(kk);
    }
}

/// Zeroes an accumulator.
template <int MT, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[MT][NT][4]) {
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int n = 0; n < NT; ++n)
            #pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0.0f;
}

/// The lane's element (g, 2t) of the 16 × 8 tile of dQ_i at rows row0.., columns col0.. in the
/// workspace (dq_add_tile's `at`).
template <int D>
__device__ __forceinline__ float* dq_lane_at(float* dQacc_head, int row0, int col0, int lane) {
    return dQacc_head + (row0 + tc::frag_c_row(lane, 0)) * D + col0 + tc::frag_c_col(lane, 0);
}

/// add(std::false_type{}) for a Q_i tile (rows q0..q0 + Br − 1) that ends at or before N, else
/// add(std::true_type{}): dq_add_tile's row check only where rows reach past N.
template <int Br, class Add>
__device__ __forceinline__ void with_row_check(int q0, int N, Add add) {
    if (q0 + Br <= N)
        add(std::false_type{});
    else
        add(std::true_type{});
}

/// Line 15's warp tile with DqM > 1 (step 5's option, step 6's layout): warp w takes m-tiles
/// mt0 = DqM·(w mod B_r/(16·DqM)).. and the kDqCols columns from 16·dd0, in kTiles 16 × 8
/// accumulator tiles, tile u = m·2·kPairs + n.
template <class Cfg>
struct DqWarpTile {
    static constexpr int M = Cfg::kDqM, kPairs = Cfg::kDqCols / 16;  // 16-column pairs of d per warp
    static constexpr int kRowUnits = Cfg::Br / 16 / M, kTiles = M * 2 * kPairs;
    int mt0, dd0;
    __device__ __forceinline__ explicit DqWarpTile(int warp)
        : mt0(M * (warp % kRowUnits)), dd0(kPairs * (warp / kRowUnits)) {}
};

/// Line 15's product for DqM > 1: acc = dS K_j for the warp's tile (DqWarpTile), the accumulators
/// held while it walks the keys 16 at a time: every K_j fragment serves DqM m-tiles, so the warps
/// together read K_j B_r/(16·DqM) times instead of B_r/16.
template <class T, class Cfg>
__device__ __forceinline__ void dq_product(float (&acc)[Cfg::kDqM][2 * (Cfg::kDqCols / 16)][4], const uint16_t* dSt,
                                           const uint16_t* Ks, int warp, int lane) {
    using Tile = DqWarpTile<Cfg>;
    const Tile w(warp);
    zero_acc(acc);
    if constexpr (Cfg::kPrefetch) {  // step 6 option: FA2's order of loads and products
        mma_prefetched<T, Tile::M, Tile::kPairs, Cfg::Bc / 16>(
            acc, [&](uint32_t(&a)[4], int m, int kk) { load_ds_frag<Cfg>(a, dSt, w.mt0 + m, kk, lane); },
            [&](uint32_t(&b)[2][2], int s, int kk) { ch7::load_v_frags<typename Cfg::Warp>(b, Ks, kk, w.dd0 + s, lane); });
    } else {
        #pragma unroll
        for (int kk = 0; kk < Cfg::Bc / 16; ++kk) {
            uint32_t a[Tile::M][4];
            #pragma unroll
            for (int m = 0; m < Tile::M; ++m) load_ds_frag<Cfg>(a[m], dSt, w.mt0 + m, kk, lane);
            #pragma unroll
            for (int s = 0; s < Tile::kPairs; ++s) {
                uint32_t b[2][2];
                ch7::load_v_frags<typename Cfg::Warp>(b, Ks, kk, w.dd0 + s, lane);  // B = K_j: keys × d, .trans
                #pragma unroll
                for (int m = 0; m < Tile::M; ++m) {
                    tc::mma_m16n8k16<T>(acc[m][2 * s], a[m], b[0]);
                    tc::mma_m16n8k16<T>(acc[m][2 * s + 1], a[m], b[1]);
                }
            }
        }
    }
}

/// Line 15's atomics for tiles first..first + Count − 1 of dq_product's acc (all kTiles, or step
/// 6's share between two k-steps of line 12, where the adds run beside tensor-core work instead of
/// in one burst that fills the memory pipeline). Unscaled: convert_dq_kernel applies the scale.
template <class Cfg, int Count>
__device__ __forceinline__ void dq_atomics(float* dQacc_head, const float (&acc)[Cfg::kDqM][2 * (Cfg::kDqCols / 16)][4],
                                           int q0, int N, int warp, int lane, int first) {
    using Tile = DqWarpTile<Cfg>;
    constexpr int D = Cfg::D, kDqVec = kDqVecRun<Cfg>;
    const Tile w(warp);
    float* at = dq_lane_at<D>(dQacc_head, q0 + 16 * w.mt0, 16 * w.dd0, lane);  // every tile's: this plus an immediate
    with_row_check<Cfg::Br>(q0, N, [&](auto check) {
        #pragma unroll
        for (int i = 0; i < Count; ++i) {
            const int u = first + i, m = u / (2 * Tile::kPairs), n = u % (2 * Tile::kPairs);
            if (u < Tile::kTiles)
                dq_add_tile<kDqVec, decltype(check)::value, D>(at + 16 * m * D + 8 * n, acc[m][n],
                                                               q0 + 16 * (w.mt0 + m) + tc::frag_c_row(lane, 0), N, lane);
        }
    });
}

/// Line 15 with atomics: dQ_i += dS K_j (unscaled; convert_dq_kernel applies the scale), from
/// the block's complete dSᵀ tile. The adds are Cfg::kDqVec floats wide where this build has
/// vector atomics, one float otherwise. How the B_r × D product is shared among the warps:
///   DqM = 1: B_r/16 m-tiles and, when there are more warps than m-tiles, column slices; warp w
///     takes units w, w + Warps, ... and holds the unit's dS fragments (B_c/16 of them) while it
///     walks its columns 16 at a time: every K_j fragment it reads serves one m-tile.
///   DqM = 2, 4 (step 5): dq_product, then dq_atomics of all its tiles.
template <class T, class Cfg>
__device__ __forceinline__ void dq_add(float* dQacc_head, const uint16_t* dSt, const uint16_t* Ks, int q0, int N,
                                       int warp, int lane) {
    constexpr int D = Cfg::D, kRowTiles = Cfg::Br / 16;
    constexpr int kDqVec = kDqVecRun<Cfg>;
    if constexpr (Cfg::kDqM == 1) {
        constexpr int kSlices = Cfg::kWarps > kRowTiles ? Cfg::kWarps / kRowTiles : 1;
        constexpr int kSliceTiles = D / 16 / kSlices;  // 16-column pairs of d per slice
        for (int u = warp; u < kRowTiles * kSlices; u += Cfg::kWarps) {
            const int mt = u % kRowTiles, slice = u / kRowTiles;
            uint32_t a[Cfg::Bc / 16][4];
            #pragma unroll
            for (int kk = 0; kk < Cfg::Bc / 16; ++kk) load_ds_frag<Cfg>(a[kk], dSt, mt, kk, lane);
            #pragma unroll
            for (int s = 0; s < kSliceTiles; ++s) {
                const int dd = slice * kSliceTiles + s;
                float acc[2][4] = {};
                #pragma unroll
                for (int kk = 0; kk < Cfg::Bc / 16; ++kk) {
                    uint32_t b[2][2];
                    ch7::load_v_frags<typename Cfg::Warp>(b, Ks, kk, dd, lane);  // B = K_j: keys × d, .trans
                    tc::mma_m16n8k16<T>(acc[0], a[kk], b[0]);
                    tc::mma_m16n8k16<T>(acc[1], a[kk], b[1]);
                }
                float* at = dq_lane_at<D>(dQacc_head, q0 + 16 * mt, 16 * dd, lane);
                with_row_check<Cfg::Br>(q0, N, [&](auto check) {
                    #pragma unroll
                    for (int h = 0; h < 2; ++h)
                        dq_add_tile<kDqVec, decltype(check)::value, D>(at + 8 * h, acc[h],
                                                                       q0 + 16 * mt + tc::frag_c_row(lane, 0), N, lane);
                });
            }
        }
    } else {
        float acc[Cfg::kDqM][2 * (Cfg::kDqCols / 16)][4];
        dq_product<T, Cfg>(acc, dSt, Ks, warp, lane);
        dq_atomics<Cfg, DqWarpTile<Cfg>::kTiles>(dQacc_head, acc, q0, N, warp, lane, 0);
    }
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
        *reinterpret_cast<float4*>(dst + 4 * c) = *reinterpret_cast<const float4*>(src + 4 * c);
}

#endif  // FA_TC_SM80

/// Lines 5–19 for one K_j, V_j (block x of head (z, y)): dK_j and dV_j, and with kAtomicDq the
/// dQ_i contributions (line 15) by atomicAdd.
template <class T, class Cfg, bool kAtomicDq>
__global__ void __launch_bounds__(Cfg::kThreads, 1) dkdv_kernel(const BwdParams p) {
#if FA_TC_SM80
    constexpr int D = Cfg::D, Br = Cfg::Br, Bc = Cfg::Bc, Sub = Cfg::kSub, kStages = Cfg::kStages;
    constexpr int kThreads = Cfg::kThreads;
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
    const long long bh = (long long)blockIdx.z * p.H + blockIdx.y;
    const std::size_t head = std::size_t(bh) * std::size_t(p.N);
    const uint16_t* Qh = p.Q + head * D;
    const uint16_t* dOh = p.dO + head * D;
    const float* L2h = p.L2 + bh * p.Npad;
    const float* Dih = p.Di + bh * p.Npad;
    const int Tr = fa::ceil_div(p.N, Br);
    // line 8, causal: query tiles that end before key k0 see none of its keys
    const int i_begin = p.causal ? k0 / Br : 0;

    auto load_q = [&](int i) {  // line 9: Q_i, dO_i, L_i, D_i
        uint16_t* Qs = QdO + (i % kStages) * 2 * Br * D;
        float* Ls = LD + (i % kStages) * 2 * Br;
        tc::load_tile<Br, D, kThreads, kSwizzled, kCopy>(Qs, Qh, i * Br, p.N);
        tc::load_tile<Br, D, kThreads, kSwizzled, kCopy>(Qs + Br * D, dOh, i * Br, p.N);
        load_row_vector<kCopy>(Ls, L2h + i * Br, Br, 0);
        load_row_vector<kCopy>(Ls + Br, Dih + i * Br, Br, Br / 4);
    };
    // line 6: K_j, V_j (with cp.async in the group of the first Q_i)
    tc::load_tile<Bc, D, kThreads, kSwizzled, kCopy>(Ks, p.K + head * D, k0, p.N);
    tc::load_tile<Bc, D, kThreads, kSwizzled, kCopy>(Vs, p.V + head * D, k0, p.N);
    if constexpr (Cfg::kCpAsync) {  // step 3: tiles in flight before the loop
        #pragma unroll
        for (int s = 0; s < kStages - 1; ++s) {
            if (i_begin + s < Tr) load_q(i_begin + s);
            tc::cp_async_commit();
        }
    }

    float dK[1][D / 8][4], dV[1][D / 8][4];  // line 7
    zero_acc(dK);
    zero_acc(dV);
    ch7::QFrags<W> kf, vf;  // step 4 option: K_j, V_j fragments in registers

    for (int i = i_begin; i < Tr; ++i) {  // line 8
        if constexpr (Cfg::kCpAsync) {  // step 3: the pipeline (as chapter 7's K/V pipeline)
            tc::cp_async_wait<kStages - 2>();
            __syncthreads();  // tile i visible; every warp done with tile i − 1 and with dSᵀ
            if (i + kStages - 1 < Tr) load_q(i + kStages - 1);
            tc::cp_async_commit();
        } else {  // steps 1–2: synchronous loads
            __syncthreads();
            load_q(i);
            __syncthreads();
        }
        if constexpr (Cfg::kKVInRegs)
            if (i == i_begin) ch7::load_q_frags<W>(kf, Ks, wk, lane), ch7::load_q_frags<W>(vf, Vs, wk, lane);
        const int q0 = i * Br;
        const uint16_t* Qs = QdO + (i % kStages) * 2 * Br * D;
        const uint16_t* dOs = Qs + Br * D;
        const float* Ls = LD + (i % kStages) * 2 * Br;

        #pragma unroll 1
        for (int c0 = 0; c0 < Br; c0 += Sub) {  // the tile's query columns, Sub at a time
            const int qc = q0 + c0;
            uint32_t Pa[1][Sub / 16][4], dSa[1][Sub / 16][4];
            if (p.causal && wk0 > qc + Sub - 1) {  // every key of the warp after every query: P = dS = 0
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
            if (qc + Sub > p.N || k0 + Bc > p.N || (p.causal && wk0 + 15 > qc))  // only edge tiles
                mask_transposed<Cfg>(St, wk0, qc, p.N, p.causal, lane);
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
            dq_add<T, Cfg>(p.dQacc + head * D, dSt, Ks, q0, p.N, warp, lane);
        }
    }
    // lines 17–18: dK_j (times the softmax scale, which S carried), dV_j
    store_acc<T, D>(p.dK + head * D, dK, p.scale, wk0, p.N, lane);
    store_acc<T, D>(p.dV + head * D, dV, 1.0f, wk0, p.N, lane);
#else
    __trap();  // compute capability < 8.0: the host refuses to launch
#endif
}

/// --dq split: line 15 for one Q_i (block x of head (z, y)), looping over K_j, V_j; dQ_i in registers.
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
    const uint16_t* Kh = p.K + head * D;
    const uint16_t* Vh = p.V + head * D;
    const int key_end = p.causal ? tc::min_int(p.N, q0 + Br) : p.N;
    const int Tc = fa::ceil_div(key_end, Bc);
    auto load_kv = [&](int j) {
        uint16_t* Ks = KVs + (j % kStages) * 2 * Bc * D;
        tc::load_tile<Bc, D, kThreads, kSwizzled, kCopy>(Ks, Kh, j * Bc, p.N);
        tc::load_tile<Bc, D, kThreads, kSwizzled, kCopy>(Ks + Bc * D, Vh, j * Bc, p.N);
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
        if (p.causal && k0 > wq0 + 15) continue;  // every key after every row of the warp
        const uint16_t* Ks = KVs + (j % kStages) * 2 * Bc * D;
        const uint16_t* Vs = Ks + Bc * D;
        float S[1][Bc / 8][4], dP[1][Bc / 8][4];
        ch7::scores<T, W>(S, Qs, unused, Ks, wr, lane);   // line 10: S = Q_i K_jᵀ
        ch7::scores<T, W>(dP, dOs, unused, Vs, wr, lane);  // line 13: dP = dO_i V_jᵀ
        if (k0 + Bc > p.N || (p.causal && k0 + Bc - 1 > wq0)) ch7::mask_scores<W>(S, wq0, k0, p.N, p.causal, lane);
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
    store_acc<T, D>(p.dQ + head * D, dQ, p.scale, wq0, p.N, lane);
#else
    __trap();  // compute capability < 8.0: the host refuses to launch
#endif
}

}  // namespace FA_TC_KERNELS
}  // namespace ch8
