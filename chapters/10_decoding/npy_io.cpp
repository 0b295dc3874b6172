// Chapter 10: a decoding step's inputs and outputs as .npy files (--load-npy, --save-npy;
// problem.h), so that a step can be checked with NumPy or PyTorch.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "../../common/npy.h"
#include "kernel/split_plan.h"
#include "problem.h"

namespace ch10 {

namespace {

std::vector<std::size_t> shape_of_file(const std::string& path, std::size_t dims, const char* names) {
    const fa::NpyHeader h = fa::read_npy_header(path);
    if (h.descr != "<f4" && h.descr != "<f2")
        throw std::runtime_error(path + ": element type is '" + h.descr + "', expected float32 '<f4' or float16 '<f2'");
    if (h.shape.size() != dims)
        throw std::runtime_error(path + ": shape " + fa::npy_shape_text(h.shape) + " is not " + names);
    return h.shape;
}

// Throws "PATH: entry I is nan; ..." for the first non-finite entry of rows [from, to) of x.
void require_finite(const std::string& path, const std::vector<float>& x, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i)
        if (!std::isfinite(x[i]))
            throw std::runtime_error(path + ": entry " + std::to_string(i) + " is " + std::to_string(x[i]) +
                                     "; queries and the cache below each length must be finite");
}

}  // namespace

DecodeShape npy_decode_shape(const std::string& dir) {
    const auto q = shape_of_file(dir + "/q.npy", 4, "4-D (batch, heads, q_len, head_dim)");
    const auto k = shape_of_file(dir + "/k_cache.npy", 4, "4-D (batch, kv_heads, capacity, head_dim)");
    const auto v = shape_of_file(dir + "/v_cache.npy", 4, "4-D (batch, kv_heads, capacity, head_dim)");
    if (v != k)
        throw std::runtime_error(dir + ": k_cache.npy " + fa::npy_shape_text(k) + " and v_cache.npy " +
                                 fa::npy_shape_text(v) + " differ");
    if (k[0] != q[0] || k[3] != q[3])
        throw std::runtime_error(dir + ": q.npy " + fa::npy_shape_text(q) + " and k_cache.npy " +
                                 fa::npy_shape_text(k) + " disagree on batch or head_dim");
    for (std::size_t d : {q[0], q[1], q[2], q[3], k[1], k[2]})
        if (d == 0 || d > (1u << 24))
            throw std::runtime_error(dir + ": q.npy " + fa::npy_shape_text(q) + ", k_cache.npy " +
                                     fa::npy_shape_text(k) + ": every dimension must be 1..2^24");
    std::vector<std::size_t> ls;
    const std::vector<int> lens = fa::read_npy_ints(dir + "/cache_lens.npy", &ls);
    if (ls.size() != 1 || ls[0] != q[0])
        throw std::runtime_error(dir + "/cache_lens.npy: shape " + fa::npy_shape_text(ls) + ", expected (" +
                                 std::to_string(q[0]) + ",): one length per sequence of q.npy");
    const DecodeShape s = make_decode_shape(int(q[0]), int(q[1]), int(k[1]), int(q[2]), int(q[3]), int(k[2]), lens);
    const std::string why = invalid_reason(s);  // before any row is indexed by a length
    if (!why.empty()) throw std::runtime_error(dir + ": " + s.str() + ": " + why);
    return s;
}

DecodeProblem load_decode_npy(const std::string& dir, const DecodeShape& s) {
    DecodeProblem p;
    p.s = s;
    p.Q = fa::read_npy_floats(dir + "/q.npy", nullptr);
    p.K = fa::read_npy_floats(dir + "/k_cache.npy", nullptr);
    p.V = fa::read_npy_floats(dir + "/v_cache.npy", nullptr);
    require_finite(dir + "/q.npy", p.Q, 0, p.Q.size());
    for (int b = 0; b < s.B; ++b)
        for (int h = 0; h < s.H_kv; ++h) {
            const std::size_t from = contiguous_row(b, h, 0, s.H_kv, s.N_max, s.D),
                              len = contiguous_row(b, h, s.lens[std::size_t(b)], s.H_kv, s.N_max, s.D),
                              to = contiguous_row(b, h, s.N_max, s.H_kv, s.N_max, s.D);
            require_finite(dir + "/k_cache.npy", p.K, from, len);
            require_finite(dir + "/v_cache.npy", p.V, from, len);
            std::fill(p.K.begin() + std::ptrdiff_t(len), p.K.begin() + std::ptrdiff_t(to), NAN);
            std::fill(p.V.begin() + std::ptrdiff_t(len), p.V.begin() + std::ptrdiff_t(to), NAN);
        }
    return p;
}

template <class T>
void round_to(DecodeProblem& p) {
    for (std::vector<float>* x : {&p.Q, &p.K, &p.V})
        for (float& e : *x) e = fa::to_float(fa::from_float<T>(e));
    p.max_abs_V = 0;
    for (float e : p.V)
        if (std::isfinite(e)) p.max_abs_V = std::max(p.max_abs_V, double(std::fabs(e)));
}
template void round_to<__half>(DecodeProblem&);
template void round_to<__nv_bfloat16>(DecodeProblem&);

void save_decode_npy(const std::string& dir, const DecodeProblem& p, const std::vector<float>& O,
                     const std::vector<float>& L) {
    const DecodeShape& s = p.s;
    const auto z = [](int x) { return std::size_t(x); };
    const std::vector<std::size_t> q4 = {z(s.B), z(s.H_q), z(s.q_len), z(s.D)},
                                   kv4 = {z(s.B), z(s.H_kv), z(s.N_max), z(s.D)};
    const std::vector<std::int32_t> lens(s.lens.begin(), s.lens.end());
    fa::write_npy(dir + "/q.npy", p.Q.data(), q4);
    fa::write_npy(dir + "/k_cache.npy", p.K.data(), kv4);
    fa::write_npy(dir + "/v_cache.npy", p.V.data(), kv4);
    fa::write_npy(dir + "/cache_lens.npy", lens.data(), "<i4", 4, {z(s.B)});
    fa::write_npy(dir + "/o.npy", O.data(), q4);
    fa::write_npy(dir + "/l.npy", L.data(), {z(s.B), z(s.H_q), z(s.q_len)});
}

}  // namespace ch10
