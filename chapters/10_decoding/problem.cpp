// Chapter 10: inputs of a decoding step, the cache before and after the append, and the arrays
// the kernels run on (problem.h).
#include "problem.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../../common/exit_codes.h"
#include "../../common/parallel.h"
#include "../../common/random.h"
#include "kernel/fp8.h"
#include "kernel/split_plan.h"

namespace ch10 {

namespace {
// x[i] uniform in [lo, hi) rounded to T, one generator per block of `block` elements (seeded by
// the block's index, so the values do not depend on how the work is spread over threads).
template <class T>
void fill_rounded(std::vector<float>& x, std::uint64_t seed, double lo, double hi, std::size_t block) {
    fa::parallel_for((x.size() + block - 1) / block, [&](std::size_t k) {
        fa::Rng rng(seed * 0x9E3779B97F4A7C15ull + k);
        for (std::size_t i = k * block; i < std::min(x.size(), (k + 1) * block); ++i)
            x[i] = fa::to_float(fa::from_float<T>(float(rng.uniform(lo, hi))));
    });
}

// Visits every row (b, h, key) of a logical cache with its offset.
template <class F>
void for_each_row(const DecodeShape& s, F f) {
    for (int b = 0; b < s.B; ++b)
        for (int h = 0; h < s.H_kv; ++h)
            for (int key = 0; key < s.N_max; ++key) f(b, h, key, contiguous_row(b, h, key, s.H_kv, s.N_max, s.D));
}
}  // namespace

double host_bytes(const DecodeShape& s, bool fp8) {
    const double cache = double(s.B) * s.H_kv * (double(s.N_max) + 256.0) * s.D;  // pages round N_max up
    return (fp8 ? 10.5 : 7.5) * cache * sizeof(float) + 64.0 * (1 << 20);
}

template <class T>
DecodeProblem make_problem(const DecodeShape& s, std::uint64_t seed, double magnitude) {
    DecodeProblem p;
    p.s = s;
    p.s.page_size = 0;
    p.Q.resize(s.q_elems());
    p.K.resize(std::size_t(s.B) * s.H_kv * s.N_max * s.D);
    p.V.resize(p.K.size());
    const std::size_t row_block = std::size_t(s.D) * 1024;
    fill_rounded<T>(p.Q, seed, -0.9 * magnitude, 1.1 * magnitude, row_block);
    fill_rounded<T>(p.K, seed + 1, -0.8, 1.2, row_block);
    fill_rounded<T>(p.V, seed + 2, -0.5, 1.5, row_block);
    p.max_abs_V = 1.5;
    fa::parallel_for(std::size_t(s.B) * s.H_kv, [&](std::size_t bh) {  // rows past the length: NaN
        const int b = int(bh / s.H_kv), h = int(bh % s.H_kv);
        const std::size_t from = contiguous_row(b, h, s.lens[b], s.H_kv, s.N_max, s.D);
        const std::size_t to = contiguous_row(b, h, s.N_max, s.H_kv, s.N_max, s.D);
        std::fill(p.K.begin() + from, p.K.begin() + to, NAN);
        std::fill(p.V.begin() + from, p.V.begin() + to, NAN);
    });
    return p;
}
template DecodeProblem make_problem<__half>(const DecodeShape&, std::uint64_t, double);
template DecodeProblem make_problem<__nv_bfloat16>(const DecodeShape&, std::uint64_t, double);

std::vector<float> new_tokens(const DecodeProblem& p, const std::vector<float>& X) {
    const DecodeShape& s = p.s;
    std::vector<float> out(s.new_kv_elems());
    for (int b = 0; b < s.B; ++b)
        for (int h = 0; h < s.H_kv; ++h)
            for (int i = 0; i < s.q_len; ++i) {
                const std::size_t from = contiguous_row(b, h, s.lens[b] - s.q_len + i, s.H_kv, s.N_max, s.D);
                std::memcpy(&out[((std::size_t(b) * s.H_kv + h) * s.q_len + i) * s.D], &X[from], sizeof(float) * s.D);
            }
    return out;
}

std::vector<float> before_append(const DecodeProblem& p, const std::vector<float>& X) {
    std::vector<float> out = X;
    for_each_row(p.s, [&](int b, int, int key, std::size_t at) {
        if (key >= p.s.lens[b] - p.s.q_len && key < p.s.lens[b]) std::fill(&out[at], &out[at] + p.s.D, NAN);
    });
    return out;
}

std::string compare_cache(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) return "the cache has the wrong size";
    for (std::size_t i = 0; i < got.size(); ++i) {
        const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
        if (!same) {
            char buf[160];
            std::snprintf(buf, sizeof buf, "cache element %zu is %g, expected %g", i, double(got[i]), double(want[i]));
            return buf;
        }
    }
    return "";
}

StoredCache stored_cache(const DecodeProblem& p, int page_size, std::uint64_t seed) {
    StoredCache c;
    c.s = p.s;
    c.s.page_size = page_size;
    if (page_size == 0) {
        c.K = p.K, c.V = p.V;
        c.table = {0};
    } else {
        PagedCopy after = make_paged_copy(c.s, p.K, p.V, seed, NAN);
        c.K = std::move(after.K), c.V = std::move(after.V);
        c.table = std::move(after.table);
    }
    c.K_before = c.K, c.V_before = c.V;
    for (int b = 0; b < c.s.B; ++b)  // the new tokens' rows are not there yet
        for (int h = 0; h < c.s.H_kv; ++h)
            for (int key = c.s.lens[b] - c.s.q_len; key < c.s.lens[b]; ++key) {
                const std::size_t at = c.s.paged() ? paged_row(&c.table[std::size_t(b) * c.s.max_pages()], key,
                                                               c.s.page_shift(), h, c.s.H_kv, c.s.D)
                                                   : contiguous_row(b, h, key, c.s.H_kv, c.s.N_max, c.s.D);
                std::fill(&c.K_before[at], &c.K_before[at] + c.s.D, NAN);
                std::fill(&c.V_before[at], &c.V_before[at] + c.s.D, NAN);
            }
    return c;
}

namespace {
// e4m3_scale of the largest |x| of each (sequence, KV head)'s rows below its length in X.
std::vector<float> head_scales(const DecodeShape& s, const std::vector<float>& X) {
    std::vector<float> scale(std::size_t(s.B) * s.H_kv);
    fa::parallel_for(scale.size(), [&](std::size_t bh) {
        const int b = int(bh / s.H_kv), h = int(bh % s.H_kv);
        float amax = 0.0f;
        for (std::size_t i = contiguous_row(b, h, 0, s.H_kv, s.N_max, s.D);
             i < contiguous_row(b, h, s.lens[b], s.H_kv, s.N_max, s.D); ++i)
            amax = std::max(amax, std::fabs(X[i]));
        scale[bh] = e4m3_scale(amax);
    });
    return scale;
}

// Which (sequence, KV head), b·H_kv + h, owns each element of a cache stored as c is: a
// contiguous cache's rows by position; a pool page by the block-table entry that names it (the
// table is a permutation of the pool's pages).
std::vector<std::size_t> element_heads(const StoredCache& c) {
    const DecodeShape& s = c.s;
    const std::size_t rows = s.cache_elems() / s.D;
    const std::size_t page_rows = s.paged() ? std::size_t(s.page_size) : std::size_t(s.N_max);
    std::vector<std::size_t> page_owner;
    if (s.paged()) {
        page_owner.resize(std::size_t(s.pool_pages()));
        for (std::size_t e = 0; e < c.table.size(); ++e) page_owner[std::size_t(c.table[e])] = e / s.max_pages();
    }
    std::vector<std::size_t> head(rows);
    for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t block = r / page_rows;  // (b, h) of a contiguous cache; (page, h) of a pool
        head[r] = s.paged() ? page_owner[block / s.H_kv] * s.H_kv + block % s.H_kv : block;
    }
    return head;
}

// e4m3(x / s) of every element of X (stored as c is), s its head's scale.
std::vector<std::uint8_t> quantized(const StoredCache& c, const std::vector<std::size_t>& heads,
                                    const std::vector<float>& X, const std::vector<float>& scale) {
    std::vector<std::uint8_t> q(X.size());
    const std::size_t D = std::size_t(c.s.D);
    fa::parallel_for(heads.size(), [&](std::size_t r) {
        for (std::size_t d = 0; d < D; ++d) q[r * D + d] = e4m3_quantize(X[r * D + d], scale[heads[r]]);
    });
    return q;
}

// s·e4m3(x / s) of the logical cache X (NaN stays NaN).
std::vector<float> dequantized(const DecodeShape& s, const std::vector<float>& X, const std::vector<float>& scale) {
    std::vector<float> out(X.size());
    const std::size_t per_head = std::size_t(s.N_max) * s.D;
    fa::parallel_for(scale.size(), [&](std::size_t bh) {
        for (std::size_t i = bh * per_head; i < (bh + 1) * per_head; ++i)
            out[i] = scale[bh] * e4m3_value(e4m3_quantize(X[i], scale[bh]));
    });
    return out;
}
}  // namespace

Fp8Cache quantize_cache(const DecodeProblem& p, const StoredCache& c) {
    Fp8Cache f;
    f.K_scale = head_scales(p.s, p.K);
    f.V_scale = head_scales(p.s, p.V);
    const std::vector<std::size_t> heads = element_heads(c);
    f.K = quantized(c, heads, c.K, f.K_scale), f.V = quantized(c, heads, c.V, f.V_scale);
    f.K_before = quantized(c, heads, c.K_before, f.K_scale), f.V_before = quantized(c, heads, c.V_before, f.V_scale);
    f.dequantized = p;
    f.dequantized.K = dequantized(p.s, p.K, f.K_scale);
    f.dequantized.V = dequantized(p.s, p.V, f.V_scale);
    double max_abs_V = 0;
    for (float x : f.dequantized.V)
        if (!std::isnan(x)) max_abs_V = std::max(max_abs_V, double(std::fabs(x)));
    f.dequantized.max_abs_V = max_abs_V;
    return f;
}

std::vector<float> e4m3_values(const std::vector<std::uint8_t>& bytes) {
    std::vector<float> out(bytes.size());
    for (std::size_t i = 0; i < bytes.size(); ++i) out[i] = e4m3_value(bytes[i]);
    return out;
}

// ---- DecodeArraysOwner ------------------------------------------------------------------------------

namespace {
template <class U>
std::vector<U> to_host(const std::vector<U>& x) { return x; }
template <class U>
std::vector<U> to_host(const fa::DeviceBuffer<U>& x) { return x.download(); }
template <class U>
U* ptr(std::vector<U>& x) { return x.data(); }
template <class U>
U* ptr(const fa::DeviceBuffer<U>& x) { return x.get(); }
template <class U>
void poison(std::vector<U>& x) { std::memset(static_cast<void*>(x.data()), 0xFF, x.size() * sizeof(U)); }
template <class U>
void poison(fa::DeviceBuffer<U>& x) { if (x.size() > 0) x.poison(); }
template <class Store, class U>
Store make_store(const std::vector<U>& host) { return Store(host); }
template <class U>
std::size_t bytes_of(const std::vector<U>& x) { return x.size() * sizeof(U); }
template <class U>
std::size_t bytes_of(const fa::DeviceBuffer<U>& x) { return x.bytes(); }
template <class U>
std::vector<U> copy_of(const std::vector<U>& x) { return x; }
template <class U>
fa::DeviceBuffer<U> copy_of(const fa::DeviceBuffer<U>& x) {
    fa::DeviceBuffer<U> y(x.size());
    if (x.size() > 0) CUDA_CHECK(cudaMemcpy(y.get(), x.get(), x.bytes(), cudaMemcpyDeviceToDevice));
    return y;
}

// The shape and block table must be valid before any array is made: one message, exit status 2
// (kExitBadInput).
const StoredCache& checked(const StoredCache& c) {
    std::string why = invalid_reason(c.s);
    if (why.empty() && c.s.paged()) why = invalid_table_reason(c.s, c.table, c.s.pool_pages());
    if (!why.empty()) {
        std::fprintf(stderr, "ch10: %s\n", why.c_str());
        std::exit(fa::kExitBadInput);
    }
    return c;
}
}  // namespace

template <class T, bool Emulated>
DecodeArraysOwner<T, Emulated>::DecodeArraysOwner(const DecodeProblem& p, const StoredCache& c, const Fp8Cache* fp8)
    : s_(checked(c).s),
      fp8_(fp8 != nullptr),
      Q_(make_store<Store<T>>(fa::convert_from_float<T>(p.Q))),
      K_(make_store<Store<T>>(fa::convert_from_float<T>(fp8_ ? std::vector<float>{} : c.K_before))),
      V_(make_store<Store<T>>(fa::convert_from_float<T>(fp8_ ? std::vector<float>{} : c.V_before))),
      K_new_(make_store<Store<T>>(fa::convert_from_float<T>(new_tokens(p, p.K)))),
      V_new_(make_store<Store<T>>(fa::convert_from_float<T>(new_tokens(p, p.V)))),
      O_(s_.q_elems()),
      K8_(make_store<Store<std::uint8_t>>(fp8_ ? fp8->K_before : std::vector<std::uint8_t>{})),
      V8_(make_store<Store<std::uint8_t>>(fp8_ ? fp8->V_before : std::vector<std::uint8_t>{})),
      K_scale_(make_store<Store<float>>(fp8_ ? fp8->K_scale : std::vector<float>{})),
      V_scale_(make_store<Store<float>>(fp8_ ? fp8->V_scale : std::vector<float>{})),
      L_(s_.rows()),
      lens_(make_store<Store<int>>(s_.lens)),
      table_(make_store<Store<int>>(c.table)),
      counters_(make_store<Store<int>>(std::vector<int>(s_.rows(), 0))) {}

template <class T, bool Emulated>
DecodeArraysOwner<T, Emulated>::DecodeArraysOwner(const DecodeArraysOwner& o)
    : s_(o.s_),
      fp8_(o.fp8_),
      Q_(copy_of(o.Q_)),
      K_(copy_of(o.K_)),
      V_(copy_of(o.V_)),
      K_new_(copy_of(o.K_new_)),
      V_new_(copy_of(o.V_new_)),
      O_(copy_of(o.O_)),
      K8_(copy_of(o.K8_)),
      V8_(copy_of(o.V8_)),
      K_scale_(copy_of(o.K_scale_)),
      V_scale_(copy_of(o.V_scale_)),
      L_(copy_of(o.L_)),
      O_part_(copy_of(o.O_part_)),
      L_part_(copy_of(o.L_part_)),
      lens_(copy_of(o.lens_)),
      table_(copy_of(o.table_)),
      counters_(copy_of(o.counters_)) {}

template <class T, bool Emulated>
void DecodeArraysOwner<T, Emulated>::append(cudaStream_t stream) {
    if (fp8_) {  // step 6
        if constexpr (Emulated)
            append_fp8_emulated<T>(s_, ptr(K_new_), ptr(V_new_), ptr(K8_), ptr(V8_), ptr(K_scale_), ptr(V_scale_),
                                   ptr(table_), ptr(lens_));
        else
            append_fp8<T>(s_, ptr(K_new_), ptr(V_new_), ptr(K8_), ptr(V8_), ptr(K_scale_), ptr(V_scale_), ptr(table_),
                          ptr(lens_), stream);
        return;
    }
    if constexpr (Emulated)
        append_kv_emulated<T>(s_, ptr(K_new_), ptr(V_new_), ptr(K_), ptr(V_), ptr(table_), ptr(lens_));
    else
        append_kv<T>(s_, ptr(K_new_), ptr(V_new_), ptr(K_), ptr(V_), ptr(table_), ptr(lens_), stream);
}

template <class T, bool Emulated>
std::vector<float> DecodeArraysOwner<T, Emulated>::K_stored() const {
    return fp8_ ? e4m3_values(to_host(K8_)) : fa::convert_to_float(to_host(K_));
}
template <class T, bool Emulated>
std::vector<float> DecodeArraysOwner<T, Emulated>::V_stored() const {
    return fp8_ ? e4m3_values(to_host(V8_)) : fa::convert_to_float(to_host(V_));
}
template <class T, bool Emulated>
std::vector<float> DecodeArraysOwner<T, Emulated>::O() const { return fa::convert_to_float(to_host(O_)); }
template <class T, bool Emulated>
std::vector<float> DecodeArraysOwner<T, Emulated>::L() const { return to_host(L_); }

template <class T, bool Emulated>
std::size_t DecodeArraysOwner<T, Emulated>::bytes() const {
    return bytes_of(Q_) + bytes_of(K_) + bytes_of(V_) + bytes_of(K_new_) + bytes_of(V_new_) + bytes_of(O_) +
           bytes_of(K8_) + bytes_of(V8_) + bytes_of(K_scale_) + bytes_of(V_scale_) + bytes_of(L_) + bytes_of(O_part_) +
           bytes_of(L_part_) + bytes_of(lens_) + bytes_of(table_) + bytes_of(counters_);
}

template <class T, bool Emulated>
DecodeArrays<T> DecodeArraysOwner<T, Emulated>::arrays(const SplitPlan& plan) {
    if (partial_floats(s_, plan) > O_part_.size()) {
        O_part_ = Store<float>(partial_floats(s_, plan));
        L_part_ = Store<float>(partial_rows(s_, plan));
    }
    poison(O_), poison(L_), poison(O_part_), poison(L_part_);
    return {ptr(Q_), ptr(K_), ptr(V_), ptr(K8_), ptr(V8_), ptr(K_scale_), ptr(V_scale_), ptr(table_), ptr(lens_), ptr(O_), ptr(L_), ptr(O_part_), ptr(L_part_), ptr(counters_)};
}

template class DecodeArraysOwner<__half, false>;
template class DecodeArraysOwner<__nv_bfloat16, false>;
template class DecodeArraysOwner<__half, true>;
template class DecodeArraysOwner<__nv_bfloat16, true>;

}  // namespace ch10
