/// @file bwd_config.h
/// @brief Chapter 8: the tile shape of a backward kernel, once at compile time (BwdConfig, DqConfig)
/// and once at run time (BwdTiles, what the program, the tests and the sweep print). Plain C++.
#pragma once

#include <string>

#include "../../07_tensor_cores/kernel/tile_config.h"

namespace ch8 {

/// The run-time view of a backward kernel's tiles.
struct BwdTiles {
    int warps;        ///< warps of the dK/dV kernel; steps 1–5: each owns 16 key rows, so B_c = 16 · warps
    int Br;           ///< query rows per inner-loop tile Q_i, dO_i
    int sub;          ///< query columns a warp's Sᵀ, dPᵀ hold at a time (B_r in B_r/sub passes)
    int stages;       ///< Q_i/dO_i/L_i/D_i buffers (1: loaded synchronously each tile)
    bool kv_in_regs;  ///< the A fragments of K_j and V_j kept in registers for the whole inner loop
    int dq_warps;     ///< warps of the separate dQ kernel (--dq split); B_r of that kernel = 16 · dq_warps
    int dq_Bc;        ///< keys per K_j/V_j tile of the separate dQ kernel
    int dq_vec;       ///< floats per atomicAdd of line 15 (--dq atomic) the configuration asks for: 1, 2 or 4
    int dq_vec_run;   ///< the width that runs: dq_vec in code for compute capability 9.0 (or newer) and
                      ///< in the emulator, 1 in code for an older GPU (the scalar fallback)
    int dq_m;         ///< m-tiles (16 query rows each) of one warp's share of line 15 (BwdConfig's DqM)
    int key_warps = 0;  ///< step 6: warps along the keys, 32 keys each (B_c = 32 · key_warps); 0 in steps 1–5
    int s_sub = 0;      ///< step 6: queries of one Sᵀ slice (16, or `sub`: the whole pass); 0 in steps 1–5
    bool prefetch = false;  ///< step 6: each warp product reads k-step kk + 1's fragments before kk's products
    constexpr int Bc() const { return key_warps > 0 ? 32 * key_warps : 16 * warps; }
    /// "B_c x B_r = 64 x 64 (passes of 32), 4 warps, 2 stages, K/V in smem; dQ kernel 64 x 64", and
    /// with vector dQ atomics "; dQ atomics float4" (or "; dQ atomics float4 asked, scalar run"),
    /// with dq_m > 1 "; line 15 in 2 m-tiles per warp"; step 6 says its warp layout after the warps
    /// ("8 warps as 4 (keys) x 2 (queries; D for dK, dV)") and after the stages how much of Sᵀ it
    /// holds ("S^T 16 queries at a time" or "S^T of the whole pass") and, with prefetch, "loads one
    /// k-step ahead".
    std::string str() const;
};

/// The dK/dV kernel (FA2 Algorithm 2, lines 5–19), its features switched on by `Step` (1..5):
///   1  mma.sync m16n8k16 on fragments read pair by pair from row-major tiles; Pᵀ and dSᵀ go
///      through shared memory and are read back as A fragments
///   2  ldmatrix (.trans for Qᵀ, dOᵀ as B operands and dS as the A operand of dQ) from XOR-swizzled tiles
///   3  cp.async pipeline of `Stages` buffers for Q_i, dO_i, L_i, D_i
///   4  Pᵀ and dSᵀ stay in registers as the A operands of dV_j and dK_j (only dSᵀ is stored, for dQ)
///   5  tiles and warps per head dim (candidates.h, --sweep), and the width of line 15's atomics:
///      `DqVec` floats per atomicAdd (1, 2 or 4; vector atomics need compute capability 9.0, the
///      code for older GPUs adds the same values one float at a time), and line 15's warp tile:
///      `DqM` m-tiles of dQ_i per warp (1: one m-tile by D/slices columns, the warp's dS fragments
///      held while it walks the columns; 2 or 4: DqM m-tiles by B_r·D/(16·DqM·Warps) columns with
///      the accumulators held while it walks the keys, so each K_j fragment read from shared
///      memory serves DqM m-tiles instead of one; README, "Shared-memory traffic")
/// Warp w owns key rows 16w..16w+15 of the block's K_j, V_j (B_c = 16 · Warps): it computes the
/// transposed tiles Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ (16 × B_r), so that Pᵀ and dSᵀ are already
/// the A fragments of dV_j += Pᵀ dO_i and dK_j += dSᵀ Q_i, and dK_j, dV_j (16 × D) stay in its registers.
/// It does so `Sub` query columns at a time (B_r / Sub passes over the Q_i tile): Sᵀ, dPᵀ, Pᵀ and
/// dSᵀ of one pass take Sub/2 + Sub/2 + Sub/4 + Sub/4 registers next to dK_j, dV_j's D.
template <int Step, int D_, int Warps, int Br_, int Stages, bool KVInRegs, int Sub = Br_, int DqVec = 1,
          int DqM = 1>
struct BwdConfig {
    static constexpr int kStep = Step;
    static constexpr int D = D_;
    static constexpr int kWarps = Warps;
    static constexpr int kThreads = 32 * Warps;
    static constexpr int Bc = 16 * Warps;
    static constexpr int Br = Br_;
    static constexpr int kSub = Sub;
    static constexpr int kStages = Stages;
    static constexpr bool kKVInRegs = KVInRegs;
    static constexpr int kDqVec = DqVec;  ///< floats per dQ atomicAdd (dq_add)
    static constexpr int kDqM = DqM;      ///< m-tiles of dQ_i per warp in line 15 (dq_add)
    static constexpr bool kPrefetch = false;  ///< step 6's option (Fa2LayoutConfig), off in steps 1–5
    /// Line 15's columns per warp with DqM > 1: the B_r × D product in Warps equal tiles.
    static constexpr int kDqCols = DqM > 1 ? Br_ * D_ / (16 * DqM * Warps) : D_;

    static constexpr bool kLdmatrix = Step >= 2;  ///< ldmatrix(.trans) + swizzled shared memory
    static constexpr bool kCpAsync = Step >= 3;   ///< cp.async pipeline of the Q_i/dO_i tiles
    static constexpr bool kRegsPdS = Step >= 4;   ///< Pᵀ, dSᵀ as register A operands

    /// Chapter 7's view of one warp's products: A = the warp's 16 rows of K_j (or V_j), B = the B_r
    /// rows of Q_i (or dO_i); its scores(), pack_p() and accumulate_pv() do the mma work.
    using Warp = ch7::MmaConfig<(Step >= 2 ? 3 : 2), D_, Warps, 1, Sub, 1, KVInRegs>;
    /// The Pᵀ and dSᵀ tiles (B_c × B_r): row stride B_r, as chapter 7's load_a_frag reads them.
    struct PdsTile {
        static constexpr int D = Br_;
        static constexpr bool kLdmatrix = Step >= 2;
    };

    /// Shared memory (bytes): K_j, V_j; per stage Q_i, dO_i (16-bit) and L_i, D_i (fp32); dSᵀ; Pᵀ
    /// while it goes through shared memory (steps 1–3).
    static constexpr int kSmemBytes =
        2 * (2 * Bc * D + Stages * 2 * Br * D + Bc * Br + (Step >= 4 ? 0 : Bc * Br)) + Stages * 2 * Br * 4;
    /// The same kernel with scalar dQ atomics and one m-tile per warp in line 15: the dK/dV kernel
    /// without line 15 (--dq split) depends on neither DqVec nor DqM, so they all share that one.
    using ScalarDq = BwdConfig<Step, D_, Warps, Br_, Stages, KVInRegs, Sub, 1>;
    static constexpr BwdTiles tiles(int dq_warps, int dq_Bc) {
        return {Warps, Br_, Sub, Stages, KVInRegs, dq_warps, dq_Bc, DqVec, DqVec, DqM};
    }

    static_assert(Step >= 1 && Step <= 5, "BwdConfig: steps 1..5");
    static_assert(D == 64 || D == 128, "BwdConfig: head dim 64 or 128");
    static_assert(Br == 64 || Br == 128, "BwdConfig: B_r of 64 or 128 (the swizzled dSᵀ rows)");
    static_assert(kCpAsync ? Stages >= 2 : Stages == 1, "BwdConfig: cp.async needs >= 2 stages");
    static_assert(Br % Sub == 0 && Sub % 16 == 0, "BwdConfig: B_r in passes of a multiple of 16 columns");
    static_assert(Br <= 2 * kThreads, "BwdConfig: L_i and D_i load in one pass");
    static_assert(!KVInRegs || Step >= 4, "BwdConfig: K/V fragments in registers from step 4");
    static_assert(DqVec == 1 || ((DqVec == 2 || DqVec == 4) && Step == 5),
                  "BwdConfig: dQ atomics of 1, 2 or 4 floats (2 and 4 from step 5)");
    static_assert(DqM == 1 || ((DqM == 2 || DqM == 4) && Step == 5 && (Br_ / 16) % DqM == 0 && kDqCols % 16 == 0 &&
                               Br_ * D_ == 16 * DqM * kDqCols * Warps),
                  "BwdConfig: line 15 in warp tiles of 2 or 4 m-tiles (step 5) that split B_r x D into Warps "
                  "tiles of whole 16-column pairs");
};

/// Step 6: the dK/dV kernel in FlashAttention-2's own warp layout (README, "Step 6"), a kernel of
/// its own (dkdv_fa2_kernel). Every warp tile of the products that read Q_i or dO_i is 32 rows (two
/// m-tiles), so each fragment of Q_i or dO_i read from shared memory serves 32 keys instead of 16.
/// The warps form a grid of kKeyWarps = B_c / 32 along the keys by kQueryWarps = Warps / kKeyWarps:
///   lines 10–14: warp (kw, qw) computes Sᵀ, dPᵀ, Pᵀ, dSᵀ for keys 32kw..32kw + 31 and queries
///     qw · kWarpQueries.. of the tile, `Sub` query columns at a time (dPᵀ) and `SSub` within them
///     (Sᵀ: 16, or the whole pass as FA2's 32 × 32 tile of S), and writes Pᵀ and dSᵀ (16-bit, the
///     rounding the mirror has) to shared memory; a barrier;
///   lines 12, 16: warp (kw, qw) owns dV_j, dK_j for the same 32 keys and columns qw · kWarpCols..
///     (D / kQueryWarps of them), with k = all B_r queries: Pᵀ, dSᵀ of the other warp of its key
///     group come from shared memory;
///   line 15: dq_product with DqM = 2, 32 queries × kDqCols columns per warp, its adds
///     (dq_atomics) spread between the k-steps of line 12.
/// Pipeline as step 3 (cp.async of Q_i, dO_i, L_i, D_i in `Stages` buffers); ldmatrix from
/// swizzled tiles as step 2; K_j, V_j fragments in registers when `KVInRegs`; with `Prefetch` every
/// warp product reads the fragments of its next k-step before it multiplies those of this one, the
/// order FA2's own gemm issues them in (mma_prefetched in warp_mma.cuh).
template <int D_, int Warps, int Bc_, int Br_, int Stages, bool KVInRegs, int Sub, int DqVec, int SSub = 16,
          bool Prefetch = false>
struct Fa2LayoutConfig {
    static constexpr int kStep = 6;
    static constexpr int D = D_;
    static constexpr int kWarps = Warps;
    static constexpr int kThreads = 32 * Warps;
    static constexpr int Bc = Bc_;
    static constexpr int Br = Br_;
    static constexpr int kSub = Sub;
    static constexpr int kSSub = SSub;  ///< queries of one Sᵀ slice (16, or the whole pass)
    static constexpr bool kPrefetch = Prefetch;  ///< fragments of k-step kk + 1 loaded before kk's products
    static constexpr int kStages = Stages;
    static constexpr bool kKVInRegs = KVInRegs;
    static constexpr int kDqVec = DqVec;
    static constexpr int kKeyWarps = Bc_ / 32;                   ///< warps along the keys, 32 keys each
    static constexpr int kQueryWarps = Warps / kKeyWarps;        ///< along the queries (lines 10–14) and D (12, 16)
    static constexpr int kWarpQueries = Br_ / kQueryWarps;      ///< a warp's queries of the tile in lines 10–14
    static constexpr int kWarpCols = D_ / kQueryWarps;          ///< a warp's columns of dK_j, dV_j
    static constexpr int kDqM = 2;                               ///< line 15 in 32-row warp tiles too (dq_product)
    static constexpr int kDqCols = Br_ * D_ / (16 * kDqM * Warps);
    static constexpr bool kLdmatrix = true;

    /// The warp tiles of lines 13 and 10: A = 32 rows of V_j or K_j (two m-tiles), B = Sub rows of
    /// dO_i for dPᵀ, SSub rows of Q_i for Sᵀ. dPᵀ of a pass stays in registers while Sᵀ is computed
    /// beside it: with SSub = 16, 16 queries at a time (K_j's rows read once per 16 queries, no
    /// spills); with SSub = Sub = 32 both 32 × 32 fp32 tiles beside dK_j, dV_j (ptxas spills a few
    /// registers, README "Step 6", and the kernel is faster at D = 128 all the same).
    using Warp = ch7::MmaConfig<3, D_, Warps, 2, Sub, 1, KVInRegs>;
    using WarpS = ch7::MmaConfig<3, D_, Warps, 2, SSub, 1, KVInRegs>;
    /// One SSub-query slice of a pass, as mask_transposed, p_and_ds and store_a_frags see it.
    struct Slice {
        static constexpr int kSub = SSub;
        static constexpr int Br = Br_;
        static constexpr bool kLdmatrix = true;
    };
    /// The Pᵀ and dSᵀ tiles (B_c × B_r): row stride B_r, as chapter 7's load_a_frag reads them.
    struct PdsTile {
        static constexpr int D = Br_;
        static constexpr bool kLdmatrix = true;
    };

    /// Shared memory (bytes): K_j, V_j; per stage Q_i, dO_i (16-bit) and L_i, D_i (fp32); Pᵀ and dSᵀ.
    static constexpr int kSmemBytes = 2 * (2 * Bc * D + Stages * 2 * Br * D + 2 * Bc * Br) + Stages * 2 * Br * 4;
    /// The kernel without line 15 (--dq split) does not depend on the atomics' width.
    using ScalarDq = Fa2LayoutConfig<D_, Warps, Bc_, Br_, Stages, KVInRegs, Sub, 1, SSub, Prefetch>;
    static constexpr BwdTiles tiles(int dq_warps, int dq_Bc) {
        return {Warps, Br_, Sub, Stages, KVInRegs, dq_warps, dq_Bc, DqVec, DqVec, kDqM, kKeyWarps, SSub, Prefetch};
    }

    static_assert(D == 64 || D == 128, "Fa2LayoutConfig: head dim 64 or 128");
    static_assert(Br == 64 || Br == 128, "Fa2LayoutConfig: B_r of 64 or 128 (the swizzled Pᵀ, dSᵀ rows)");
    static_assert(Bc % 32 == 0 && Warps % kKeyWarps == 0, "Fa2LayoutConfig: whole 32-key groups of warps");
    static_assert(kWarpQueries % Sub == 0 && Sub % 16 == 0, "Fa2LayoutConfig: a warp's queries in passes of 16k");
    static_assert(SSub == 16 || SSub == Sub, "Fa2LayoutConfig: Sᵀ 16 queries at a time, or the whole pass");
    static_assert(kWarpCols % 16 == 0, "Fa2LayoutConfig: dK_j, dV_j columns in whole 16-column pairs");
    static_assert(Stages >= 2, "Fa2LayoutConfig: the cp.async pipeline needs >= 2 stages");
    static_assert(Br <= 2 * kThreads, "Fa2LayoutConfig: L_i and D_i load in one pass");
    static_assert(DqVec == 1 || DqVec == 2 || DqVec == 4, "Fa2LayoutConfig: dQ atomics of 1, 2 or 4 floats");
    static_assert((Br_ / 16) % kDqM == 0 && kDqCols % 16 == 0 && Br_ * D_ == 16 * kDqM * kDqCols * Warps,
                  "Fa2LayoutConfig: line 15 in Warps tiles of 32 rows and whole 16-column pairs");
};

/// The separate dQ kernel of --dq split (Algorithm 2's line 15 with the loops swapped: Q_i outer,
/// K_j inner): warp w owns query rows 16w..16w+15 (B_r = 16 · Warps); S = Q_i K_jᵀ and
/// dP = dO_i V_jᵀ as in chapter 7's forward, dS in registers as the A operand of dQ_i += dS K_j.
template <int Step, int D_, int Warps, int Bc_>
struct DqConfig {
    static constexpr int D = D_;
    static constexpr int kThreads = 32 * Warps;
    static constexpr int Br = 16 * Warps;
    static constexpr int Bc = Bc_;
    static constexpr bool kLdmatrix = Step >= 2;
    static constexpr bool kCpAsync = Step >= 3;
    static constexpr int kStages = kCpAsync ? 2 : 1;
    using Warp = ch7::MmaConfig<(Step >= 2 ? 3 : 2), D_, Warps, 1, Bc_, 1, false>;
    /// Q_i, dO_i, and per stage K_j, V_j (16-bit).
    static constexpr int kSmemBytes = 2 * (2 * Br * D + kStages * 2 * Bc * D);
};

}  // namespace ch8
