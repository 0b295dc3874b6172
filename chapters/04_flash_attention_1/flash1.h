/// @file flash1.h
/// @brief Chapter 4, FlashAttention-1 forward (Algorithm 1 of the FlashAttention paper): what the
/// program, the tests and later chapters call.
///
/// Algorithm 1 keeps the running output O, the row sums l and the row maxima m in global memory
/// and updates them once per (query tile, key tile) pair: the outer loop runs over K/V tiles j, the
/// inner loop over query tiles i. Device arrays use the layout of common/shape.h.
#pragma once

#include <cstddef>
#include <string>

#include "../../common/host_device.h"
#include "../../common/shape.h"

namespace ch4 {

/// The kernel variants of this chapter (kernels.cu lists what each one does).
enum Variant : int {
    kReadable = 1,  ///< one thread per query row, Algorithm 1 as written
    kWarpRows = 2,  ///< same loops and global round-trips; a warp per query tile, 8 lanes per row
};

/// Block sizes of Algorithm 1: B_r query rows and B_c keys per tile.
struct Tiles {
    int Br, Bc;
};

/// Algorithm 1 line 1: B_c = ⌈M / 4d⌉, B_r = min(⌈M / 4d⌉, d), with d = D and M the on-chip memory
/// counted in floats (the kernels keep every tile in float32, and the paper counts M in elements):
/// M = smem_bytes_per_block / 4. Both sizes are at least 1.
Tiles paper_tiles(int D, std::size_t smem_bytes_per_block);

/// Empty when `variant` supports head dimension D; otherwise why not (one sentence).
/// Variant 1 takes 1 ≤ D ≤ 256; variant 2 takes multiples of 4 from 4 to 128.
std::string unsupported_reason(int variant, int D);

/// The tiles `variant` runs with: `requested` for variant 1; variant 2 always uses its own
/// compile-time tiles (B_r = 16 rows per warp, B_c = 64 keys) and ignores `requested`.
Tiles tiles_used(int variant, Tiles requested);

/// How `variant` is launched for shape s (variant 2 sizes its warp count from the current device's
/// shared memory, so this asks the CUDA runtime).
struct LaunchConfig {
    Tiles tiles;             ///< B_r, B_c the kernel runs with
    int blocks;              ///< grid size: one block per (batch, head)
    int threads;             ///< threads per block
    std::size_t smem_bytes;  ///< dynamic shared memory per block
};
LaunchConfig launch_config(int variant, const fa::AttnShape& s, Tiles tiles);

/// Empty when `variant` can run shape s with `tiles` on the current device; otherwise why not
/// (head dimension, B_r above 1024 threads, or tiles that need more shared memory than the device has).
std::string launch_problem(int variant, const fa::AttnShape& s, Tiles tiles);

/// Floats of the scratch buffer `forward` needs: the l and m vectors of Algorithm 1 (B·H·N each).
std::size_t scratch_floats(const fa::AttnShape& s);

/// O = softmax(Q Kᵀ·scale) V and L = m + log l (the row logsumexp, as chapters 5–6 return it) with
/// Algorithm 1, for device arrays in the layout of shape.h, on the default stream. `scratch` holds
/// scratch_floats(s) floats (l, then m); its contents on entry do not matter (line 2 initializes it).
/// `tiles` applies to variant 1 (see tiles_used). Exits with a message when the shape or the tiles
/// cannot run (see launch_problem).
void forward(int variant, const fa::AttnShape& s, const float* Q, const float* K, const float* V,
             float* O, float* L, float* scratch, Tiles tiles);

/// Global-memory traffic of Algorithm 1 as its loops request it (bytes, float32), before any L2 cache
/// hit: what the kernels read and write, counted from the loop bounds.
struct Traffic {
    std::size_t inner_steps = 0;  ///< (i, j) steps run (lines 8–13), causal tiles above the diagonal skipped
    double olm_step_bytes = 0;  ///< O_i, l_i, m_i read and written by one full step of B_r rows
    double olm_bytes = 0;       ///< all O, l, m traffic: line 2, lines 8/12/13 of every step, the final L = m + log l
    double q_bytes = 0;         ///< Q_i read at every step (line 8)
    double kv_bytes = 0;        ///< K_j and V_j read once per outer step (line 6)
    double l_out_bytes = 0;     ///< L written once
    double ideal_bytes = 0;     ///< the least a forward must move: Q, K, V read once, O and L written once
    double total_bytes() const { return olm_bytes + q_bytes + kv_bytes + l_out_bytes; }
};
Traffic traffic(const fa::AttnShape& s, Tiles t);

/// CPU mirror of Algorithm 1 with tiles B_r × B_c, in float32 like the kernels, on host arrays: the
/// same loops as the kernels, line by line. When `counted` is given, it receives the traffic the
/// mirror's loops actually made (tests compare it with traffic()).
void forward_cpu_mirror(const fa::AttnShape& s, const float* Q, const float* K, const float* V,
                        float* O, float* L, Tiles tiles, Traffic* counted = nullptr);

/// First query tile the inner loop (line 7) visits for key tile j. With the causal mask, query tile i
/// sees none of key tile j when all its rows are before the tile's first key j·B_c, that is when
/// (i+1)·B_r ≤ j·B_c; those tiles, entirely above the diagonal, are skipped. Tiles that straddle
/// the diagonal are visited and masked element by element.
FA_HOST_DEVICE inline int first_query_tile(int j, Tiles t, bool causal) {
    return causal ? (j * t.Bc) / t.Br : 0;
}

}  // namespace ch4
