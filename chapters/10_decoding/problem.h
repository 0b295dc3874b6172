/// @file problem.h
/// @brief Chapter 10: the inputs of one decoding step (random, seeded), the cache before and after
/// the append, and the arrays on the device (or, for the emulator, on the host) that the program and
/// the tests run the kernels on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../../common/device.h"
#include "../../common/dtype.h"
#include "decoding.h"

namespace ch10 {

/// Host bytes the arrays of this file take at most for shape s (with pages of up to 256 tokens):
/// the logical cache K, V of a DecodeProblem, a StoredCache's four copies, and one cache read back
/// (7.5 float copies of the cache); with `fp8` (kernel 6 runs) an Fp8Cache too (3 more), plus
/// 64 MiB for the rest. The program compares it with what the machine has before it makes any.
double host_bytes(const DecodeShape& s, bool fp8 = false);

/// One decoding step's inputs, rounded to the kernels' 16-bit type, as floats.
struct DecodeProblem {
    DecodeShape s;           ///< contiguous (page_size 0): the logical view
    std::vector<float> Q;    ///< (B, H_q, q_len, D)
    std::vector<float> K, V; ///< the logical cache after the append (B, H_kv, N_max, D); rows ≥ len are NaN
    double max_abs_V = 0;
};

/// Seeded inputs off zero mean: Q uniform in magnitude·[−0.9, 1.1), K in [−0.8, 1.2), V in [−0.5, 1.5),
/// rounded to T; cache rows past each sequence's length are NaN (a kernel that reads them fails).
template <class T>
DecodeProblem make_problem(const DecodeShape& s, std::uint64_t seed, double magnitude = 1.0);

/// --load-npy: the shape of the decoding step saved in `dir`, from the headers of q.npy
/// (B, H_q, q_len, D) and k_cache.npy, v_cache.npy (B, H_kv, N_max, D), float32 or float16, and
/// from cache_lens.npy (B), int32 or int64: each sequence's length after the append. Contiguous,
/// scale 1/√D; invalid_reason says whether the kernels support it. Throws "PATH: why" when the
/// files disagree with each other.
DecodeShape npy_decode_shape(const std::string& dir);
/// The inputs saved in `dir`, of shape s (npy_decode_shape), as floats not yet rounded: Q finite,
/// the cache rows below each sequence's length finite; the rows past it are not read (NaN here,
/// as make_problem's). Throws "PATH: why" otherwise.
DecodeProblem load_decode_npy(const std::string& dir, const DecodeShape& s);
/// Rounds Q, K, V of p to T, as the kernels are given them (NaN stays NaN), and sets max_abs_V.
template <class T>
void round_to(DecodeProblem& p);
/// --save-npy: writes q.npy, k_cache.npy, v_cache.npy (the logical cache after the append, NaN
/// past each length), cache_lens.npy (int32), and the outputs o.npy (B, H_q, q_len, D) and l.npy
/// (B, H_q, q_len, natural-log logsumexp) into `dir`, which must exist. Throws "PATH: why".
void save_decode_npy(const std::string& dir, const DecodeProblem& p, const std::vector<float>& O,
                     const std::vector<float>& L);

/// The rows of the new tokens (B, H_kv, q_len, D) of a logical cache X.
std::vector<float> new_tokens(const DecodeProblem& p, const std::vector<float>& X);
/// X as stored before the append: the new tokens' rows are NaN too.
std::vector<float> before_append(const DecodeProblem& p, const std::vector<float>& X);

/// Empty when `got` (the cache as stored, floats) holds the new tokens at the right rows and
/// nothing else moved: every element equal to `want` (NaN where want is NaN). Else the first
/// difference.
std::string compare_cache(const std::vector<float>& got, const std::vector<float>& want);

/// The cache of problem p as the kernels read it, in layout `s` (contiguous, or paged with pages
/// shuffled by `seed`): expected contents after the append, contents before, the block table.
struct StoredCache {
    DecodeShape s;
    std::vector<float> K, V, K_before, V_before;
    std::vector<int> table;  ///< paged only; else one unused entry
};
StoredCache stored_cache(const DecodeProblem& p, int page_size, std::uint64_t seed);

/// Step 6: the cache of problem p in e4m3 (kernel/fp8.h), stored in the layout of c. Each (sequence,
/// KV head) has a scale for K and one for V, e4m3_scale of the largest |x| of its rows below the
/// length, new tokens included (as a scale calibrated beforehand would cover them).
struct Fp8Cache {
    std::vector<float> K_scale, V_scale;                  ///< (B, H_kv)
    std::vector<std::uint8_t> K, V, K_before, V_before;   ///< e4m3(x / s) of c.K, c.V, c.K_before, c.V_before
    DecodeProblem dequantized;  ///< p with every cached x replaced by s·e4m3(x / s): what the references read
};
Fp8Cache quantize_cache(const DecodeProblem& p, const StoredCache& c);
/// The values of e4m3 bytes, unscaled (to compare a stored cache with compare_cache).
std::vector<float> e4m3_values(const std::vector<std::uint8_t>& bytes);

/// Q, the cache, the outputs and the split partials of one problem, in device memory (GPU) or in
/// host vectors (the emulator): `Emulated` picks. The cache starts as before the append; append()
/// runs the kernel that adds the new tokens. With `fp8` the cache is fp8's e4m3 bytes and scales
/// (step 6), and there is no 16-bit cache.
template <class T, bool Emulated>
class DecodeArraysOwner {
public:
    DecodeArraysOwner(const DecodeProblem& p, const StoredCache& c, const Fp8Cache* fp8 = nullptr);
    /// A copy of every array as it is now (on the GPU, device to device: a model's layers, model_step.h).
    DecodeArraysOwner(const DecodeArraysOwner& o);
    DecodeArraysOwner& operator=(const DecodeArraysOwner&) = delete;
    /// Appends the new tokens (append_kv or append_fp8 on `stream`, or their emulation).
    void append(cudaStream_t stream = 0);
    /// The cache as stored (step 6: e4m3_values of its bytes).
    std::vector<float> K_stored() const;
    std::vector<float> V_stored() const;
    /// The arrays for `plan` (partials grown to fit), outputs and partials poisoned (NaN).
    DecodeArrays<T> arrays(const SplitPlan& plan);
    std::vector<float> O() const;
    std::vector<float> L() const;
    const DecodeShape& shape() const { return s_; }
    /// Bytes of all the arrays it holds (model_step.h's layer_bytes predicts them).
    std::size_t bytes() const;

private:
    template <class U>
    using Store = std::conditional_t<Emulated, std::vector<U>, fa::DeviceBuffer<U>>;
    DecodeShape s_;
    bool fp8_;
    Store<T> Q_, K_, V_, K_new_, V_new_, O_;
    Store<std::uint8_t> K8_, V8_;
    Store<float> K_scale_, V_scale_, L_, O_part_, L_part_;
    Store<int> lens_, table_, counters_;
};

}  // namespace ch10
