/// @file emulated_wmma.h
/// @brief The few nvcuda::wmma calls of chapter 7's variant 1, for the CPU emulator (emulator.h).
///
/// WMMA leaves the distribution of a fragment over the lanes unspecified, so the emulator picks
/// the simplest one: every lane holds the whole 16×16 tile. Loads and stores are then per lane;
/// in shared memory the race check (emulator.h) counts each as one access of the whole warp, so
/// only a __syncwarp() orders it with the lanes' own loads and stores, as on a GPU.
#pragma once

#include <cstddef>
#include <type_traits>

#include "emulator.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "emulated wmma: 16x16x16 only");
    float v[16][16];
};

namespace detail {
/// The 16 runs of 16 elements a 16×16 tile at p (leading dimension ldm) covers, recorded as one
/// access of the warp when p is in shared memory (a fragment may also come from global memory).
/// Lane 0 records it: every lane of the warp makes it between the same two barriers of the warp,
/// so one lane's record is the warp's.
template <class T>
void record_tile(const T* p, unsigned ldm, bool write, const char* file, int line) {
    if (::tc::emu::lane() != 0 || !::tc::emu::in_shared(p)) return;
    for (int r = 0; r < 16; ++r) {
        if (write)
            ::tc::emu::shared_write(p + r * ldm, 16 * sizeof(T), ::tc::emu::Access::kWmmaStore, file, line);
        else
            ::tc::emu::shared_read(p + r * ldm, 16 * sizeof(T), ::tc::emu::Access::kWmmaLoad, file, line);
    }
}
}  // namespace detail

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm,
                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail::record_tile(p, ldm, false, file, line);
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c)
            f.v[r][c] = float(std::is_same<Layout, col_major>::value ? p[c * ldm + r] : p[r * ldm + c]);
}

inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float x) {
    for (auto& row : f.v)
        for (float& e : row) e = x;
}

template <class TA, class LA, class TB, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TB, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
    fragment<accumulator, 16, 16, 16, float> out;
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) {
            float acc = c.v[i][j];
            for (int k = 0; k < 16; ++k) acc += a.v[i][k] * b.v[k][j];
            out.v[i][j] = acc;
        }
    d = out;
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail::record_tile(p, ldm, true, file, line);
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.v[r][c];
}

}  // namespace nvcuda::wmma
