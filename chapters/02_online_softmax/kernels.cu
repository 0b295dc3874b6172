// Chapter 2 kernels: row softmax on the GPU, one thread block per row. This is the file to edit.
//
// Variants (ch2::Kernel; `./chapter2 --kernel K` runs one of them, the default runs all three):
//   1 three-pass        pass 1: m = block max of x (eq. 1); pass 2: d = block sum of e^{x−m} (eq. 2);
//                       pass 3: y = e^{x−m}/d (eq. 3). Reads x three times, writes y once.
//   2 online-streaming  pass 1: each thread folds its entries into an online state (m, d) (Alg. 1),
//                       the states merge in warp shuffles and across warps through shared memory
//                       (Alg. 2); pass 2: y = e^{x−m}/d. Reads x twice, writes y once. Any length.
//   3 online-registers  as 2, but pass 1 keeps the thread's entries in registers (as e^{x − m_t}
//                       with the thread's own max m_t), so pass 2 only rescales them by e^{m_t − m}/d:
//                       reads x once, writes y once. Rows of up to kMaxRegisterCols = 32768 entries.
// ch2::softmax_online_gpu uses 3, and 2 for longer rows.
//
// Who owns what. Block b owns row b (gridDim.x = rows). Its T threads (T a multiple of 32, at most
// 1024) split the row into chunks of 4 entries; thread t owns chunks t, t + T, t + 2T, … (in kernel
// 3: the first VPT of them, VPT = 1, 2, 4 or 8, held in registers). When the row start is 16-byte
// aligned (cols % 4 == 0 and x, y aligned) chunk q is the entries 4q … 4q+3, read with one 16-byte
// load; otherwise chunk q = kT + t is the entries 4kT + t + cT (c = 0 … 3), read with four 4-byte
// loads, each coalesced across the warp. Entries past the row end read as −inf and are not written.
// The states of a row meet in shared memory: one (m, d) per warp, 32 at most.
//
// In place (y == x) is safe: every entry is read and then written by the same thread, and every
// read of pass 1 happens before the block-wide barrier that precedes the first write.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "../../common/check.h"
#include "../../common/math.h"
#include "../../common/warp.cuh"
#include "online_softmax.h"

namespace ch2 {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxThreads = 1024;     // threads per block (one row)
constexpr int kStreamThreads = 512;   // block size of kernels 1 and 2 for long rows
constexpr int kStreamBatch = 4;       // chunks each thread loads before using them (kernel 2)
constexpr int kMaxCols = 1 << 30;     // keeps every in-row index in an int

// The 4 entries of one chunk.
struct Chunk {
    float v[4];
};

// Index in the row of entry c of chunk q (see "who owns what" above).
template <bool kAligned>
__device__ __forceinline__ int entry_index(int q, int c, int T) {
    if constexpr (kAligned) return 4 * q + c;
    else return 4 * (q - q % T) + c * T + q % T;
}

// Number of chunks that cover a row: every chunk q < chunk_count holds at least one entry for
// aligned rows; for unaligned rows it is a whole number of rounds of T chunks.
template <bool kAligned>
__device__ __forceinline__ int chunk_count(int cols, int T) {
    if constexpr (kAligned) return fa::ceil_div(cols, 4);
    else return fa::ceil_div(cols, 4 * T) * T;
}

// Chunk q of a row; entries past the row end read as −inf. Aligned rows have cols % 4 == 0, so a
// chunk is either whole or entirely past the end.
template <bool kAligned>
__device__ __forceinline__ Chunk load_chunk(const float* row, int cols, int q, int T) {
    Chunk a;
    if constexpr (kAligned) {
        const float4 f = 4 * q < cols ? *reinterpret_cast<const float4*>(row + 4 * q)
                                      : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        a.v[0] = f.x, a.v[1] = f.y, a.v[2] = f.z, a.v[3] = f.w;
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int j = entry_index<kAligned>(q, c, T);
            a.v[c] = j < cols ? row[j] : -INFINITY;
        }
    }
    return a;
}

// Writes the entries of chunk q that lie inside the row.
template <bool kAligned>
__device__ __forceinline__ void store_chunk(float* row, int cols, int q, int T, const Chunk& a) {
    if constexpr (kAligned) {
        if (4 * q < cols)
            *reinterpret_cast<float4*>(row + 4 * q) = make_float4(a.v[0], a.v[1], a.v[2], a.v[3]);
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int j = entry_index<kAligned>(q, c, T);
            if (j < cols) row[j] = a.v[c];
        }
    }
}

// The max to subtract before exponentiating: m itself, or 0 when m = −inf (every entry −inf), so
// that e^{x − shift} is e^{−inf} = 0 instead of e^{−inf − (−inf)} = NaN.
__device__ __forceinline__ float exp_shift(float m) { return m == -INFINITY ? 0.0f : m; }

// Alg. 2 across a warp: butterfly of xor shuffles, merging (m, d) pairs; every lane gets the state
// of all 32 lanes.
__device__ __forceinline__ OnlineState warp_merge(OnlineState s) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        OnlineState other;
        other.m = __shfl_xor_sync(kFullMask, s.m, offset);
        other.d = __shfl_xor_sync(kFullMask, s.d, offset);
        s.merge(other);
    }
    return s;
}

// Alg. 2 across the block: each warp merges its lanes, lane 0 of each warp puts the warp's state in
// shared memory, then every warp merges those (at most 32) states. All threads return lane 0's
// result, so the whole block normalizes with bit-identical (m, d). Called once per kernel (the
// scratch arrays are not reused afterwards, so no barrier is needed before the writes).
__device__ __forceinline__ OnlineState block_merge(OnlineState s, float* scratch_m, float* scratch_d) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    s = warp_merge(s);
    if (lane == 0) scratch_m[warp] = s.m, scratch_d[warp] = s.d;
    __syncthreads();
    OnlineState w;  // lanes past the number of warps hold the empty state (−inf, 0)
    if (lane < warps) w.m = scratch_m[lane], w.d = scratch_d[lane];
    w = warp_merge(w);
    w.m = __shfl_sync(kFullMask, w.m, 0);
    w.d = __shfl_sync(kFullMask, w.d, 0);
    return w;
}

// Online state of a few chunks at once: their max m_t and Σ e^{x − m_t}. Replaces the entries by
// e^{x − m_t} (0 for −inf entries and for missing ones). One exponential per entry.
template <int N>
__device__ __forceinline__ OnlineState fold_chunks(Chunk (&a)[N]) {
    OnlineState s;
#pragma unroll
    for (int k = 0; k < N; ++k)
#pragma unroll
        for (int c = 0; c < 4; ++c) s.m = fmaxf(s.m, a[k].v[c]);
    const float shift = exp_shift(s.m);
#pragma unroll
    for (int k = 0; k < N; ++k)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            a[k].v[c] = expf(a[k].v[c] - shift);
            s.d += a[k].v[c];
        }
    return s;
}

// ---- kernel 1: three passes --------------------------------------------------------------------
template <bool kAligned>
__global__ void __launch_bounds__(kMaxThreads)
softmax_three_pass_kernel(const float* x, float* y, int cols) {
    __shared__ float scratch[32];
    const int t = threadIdx.x, T = blockDim.x, n = chunk_count<kAligned>(cols, T);
    const float* x_r = x + std::size_t(blockIdx.x) * cols;
    float* y_r = y + std::size_t(blockIdx.x) * cols;

    float m = -INFINITY;  // pass 1, eq. 1: m = max_j x_j
    for (int q = t; q < n; q += T) {
        const Chunk a = load_chunk<kAligned>(x_r, cols, q, T);
        for (int c = 0; c < 4; ++c) m = fmaxf(m, a.v[c]);
    }
    m = exp_shift(fa::block_max(m, scratch));

    float d = 0.0f;  // pass 2, eq. 2: d = Σ_j e^{x_j − m}
    for (int q = t; q < n; q += T) {
        const Chunk a = load_chunk<kAligned>(x_r, cols, q, T);
        for (int c = 0; c < 4; ++c) d += expf(a.v[c] - m);
    }
    d = fa::block_sum(d, scratch);
    const float inv_d = d > 0.0f ? 1.0f / d : 0.0f;  // d = 0 only for an all −inf row: y = 0

    for (int q = t; q < n; q += T) {  // pass 3, eq. 3: y_j = e^{x_j − m} / d
        Chunk a = load_chunk<kAligned>(x_r, cols, q, T);
        for (int c = 0; c < 4; ++c) a.v[c] = expf(a.v[c] - m) * inv_d;
        store_chunk<kAligned>(y_r, cols, q, T, a);
    }
}

// ---- kernel 2: online, two passes over x --------------------------------------------------------
template <bool kAligned>
__global__ void __launch_bounds__(kMaxThreads)
softmax_online_streaming_kernel(const float* x, float* y, float* lse, int cols) {
    __shared__ float scratch_m[32], scratch_d[32];
    const int t = threadIdx.x, T = blockDim.x, n = chunk_count<kAligned>(cols, T);
    const float* x_r = x + std::size_t(blockIdx.x) * cols;
    float* y_r = y + std::size_t(blockIdx.x) * cols;

    OnlineState s;  // pass 1 (Alg. 1 lines 1–4): this thread's state, kStreamBatch chunks at a time
    for (int q0 = t; q0 < n; q0 += kStreamBatch * T) {
        Chunk a[kStreamBatch];
#pragma unroll
        for (int b = 0; b < kStreamBatch; ++b) a[b] = load_chunk<kAligned>(x_r, cols, q0 + b * T, T);
        s.merge(fold_chunks(a));
    }
    s = block_merge(s, scratch_m, scratch_d);  // Alg. 2: the row's (m, d)

    const float shift = exp_shift(s.m), inv_d = s.d > 0.0f ? 1.0f / s.d : 0.0f;
    for (int q0 = t; q0 < n; q0 += kStreamBatch * T) {  // pass 2 (Alg. 1 lines 5–6)
        Chunk a[kStreamBatch];
#pragma unroll
        for (int b = 0; b < kStreamBatch; ++b) a[b] = load_chunk<kAligned>(x_r, cols, q0 + b * T, T);
#pragma unroll
        for (int b = 0; b < kStreamBatch; ++b) {
            for (int c = 0; c < 4; ++c) a[b].v[c] = expf(a[b].v[c] - shift) * inv_d;
            store_chunk<kAligned>(y_r, cols, q0 + b * T, T, a[b]);
        }
    }
    if (t == 0 && lse != nullptr) lse[blockIdx.x] = s.logsumexp();
}

// ---- kernel 3: online, the row in registers -----------------------------------------------------
template <int VPT, bool kAligned>
__global__ void __launch_bounds__(kMaxThreads)
softmax_online_registers_kernel(const float* x, float* y, float* lse, int cols) {
    __shared__ float scratch_m[32], scratch_d[32];
    const int t = threadIdx.x, T = blockDim.x;
    const float* x_r = x + std::size_t(blockIdx.x) * cols;
    float* y_r = y + std::size_t(blockIdx.x) * cols;

    Chunk a[VPT];  // this thread's chunks t, t + T, …, t + (VPT−1)T: the only read of x
#pragma unroll
    for (int k = 0; k < VPT; ++k) a[k] = load_chunk<kAligned>(x_r, cols, k * T + t, T);
    const OnlineState s_t = fold_chunks(a);                   // (m_t, d_t); a = e^{x − m_t}
    const OnlineState s = block_merge(s_t, scratch_m, scratch_d);  // Alg. 2: the row's (m, d)

    // y = e^{x − m}/d = e^{x − m_t} · e^{m_t − m}/d; a thread that saw only −inf writes zeros
    const float scale = s_t.m == -INFINITY ? 0.0f : expf(s_t.m - s.m) / s.d;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        for (int c = 0; c < 4; ++c) a[k].v[c] *= scale;
        store_chunk<kAligned>(y_r, cols, k * T + t, T, a[k]);
    }
    if (t == 0 && lse != nullptr) lse[blockIdx.x] = s.logsumexp();
}

// ---- launching ----------------------------------------------------------------------------------

int round_up_32(int n) { return fa::ceil_div(n, 32) * 32; }

// Threads per row of kernels 1 and 2: one per chunk of 4, at least 32, at most kStreamThreads.
int stream_threads(int cols) {
    const int chunks = fa::ceil_div(cols, 4);
    return chunks >= kStreamThreads ? kStreamThreads : round_up_32(chunks);
}

// Chunks per thread and threads per row of kernel 3: the fewest chunks per thread that cover the
// row with at most 256 threads, else 8 chunks (32 entries) per thread and up to 1024 threads.
struct RegisterConfig {
    int vpt, threads;
};
RegisterConfig register_config(int cols) {
    const int chunks = fa::ceil_div(cols, 4);
    for (int vpt : {1, 2, 4}) {
        const int threads = fa::ceil_div(chunks, vpt);
        if (threads <= 256) return {vpt, round_up_32(threads)};
    }
    return {8, round_up_32(fa::ceil_div(chunks, 8))};
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

void check_args(const float* x, float* y, int rows, int cols) {
    if (rows < 0 || cols < 1 || cols > kMaxCols || (rows > 0 && (x == nullptr || y == nullptr))) {
        std::fprintf(stderr, "ch2 softmax: bad arguments rows=%d cols=%d x=%p y=%p (need rows >= 0, "
                             "1 <= cols <= 2^30, device pointers)\n", rows, cols, (const void*)x, (void*)y);
        std::exit(EXIT_FAILURE);
    }
}

template <bool kAligned>
void launch_registers(const float* x, float* y, float* lse, int rows, int cols) {
    const RegisterConfig rc = register_config(cols);
    switch (rc.vpt) {
        case 1: softmax_online_registers_kernel<1, kAligned><<<rows, rc.threads>>>(x, y, lse, cols); break;
        case 2: softmax_online_registers_kernel<2, kAligned><<<rows, rc.threads>>>(x, y, lse, cols); break;
        case 4: softmax_online_registers_kernel<4, kAligned><<<rows, rc.threads>>>(x, y, lse, cols); break;
        default: softmax_online_registers_kernel<8, kAligned><<<rows, rc.threads>>>(x, y, lse, cols); break;
    }
}

template <bool kAligned>
void launch(Kernel kernel, const float* x, float* y, float* lse, int rows, int cols) {
    switch (kernel) {
        case Kernel::ThreePass:
            softmax_three_pass_kernel<kAligned><<<rows, stream_threads(cols)>>>(x, y, cols);
            break;
        case Kernel::OnlineStreaming:
            softmax_online_streaming_kernel<kAligned><<<rows, stream_threads(cols)>>>(x, y, lse, cols);
            break;
        case Kernel::OnlineRegisters:
            launch_registers<kAligned>(x, y, lse, rows, cols);
            break;
    }
}

}  // namespace

const char* kernel_name(Kernel kernel) {
    switch (kernel) {
        case Kernel::ThreePass: return "three-pass";
        case Kernel::OnlineStreaming: return "online-streaming";
        case Kernel::OnlineRegisters: return "online-registers";
    }
    return "unknown";
}

void softmax_gpu(Kernel kernel, const float* x, float* y, float* lse, int rows, int cols) {
    check_args(x, y, rows, cols);
    if (kernel == Kernel::OnlineRegisters && cols > kMaxRegisterCols) {
        std::fprintf(stderr, "ch2 softmax: kernel online-registers holds rows of at most %d entries "
                             "(asked for %d); use online-streaming\n", kMaxRegisterCols, cols);
        std::exit(EXIT_FAILURE);
    }
    if (rows == 0) return;
    if (cols % 4 == 0 && aligned16(x) && aligned16(y)) launch<true>(kernel, x, y, lse, rows, cols);
    else launch<false>(kernel, x, y, lse, rows, cols);
    CUDA_CHECK_LAUNCH();
}

void softmax_online_gpu(const float* x, float* y, float* lse, int rows, int cols) {
    softmax_gpu(cols <= kMaxRegisterCols ? Kernel::OnlineRegisters : Kernel::OnlineStreaming, x, y,
                lse, rows, cols);
}

void softmax_three_pass_gpu(const float* x, float* y, int rows, int cols) {
    softmax_gpu(Kernel::ThreePass, x, y, nullptr, rows, cols);
}

}  // namespace ch2
