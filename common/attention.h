/// @file attention.h
/// @brief What every attention program does around its kernels: make or load inputs, check the
/// outputs against the float64 reference, save them for NumPy/PyTorch.
///
/// Checking samples query rows for long sequences (all rows when N ≤ the sample size) so that a
/// check of N = 16384 takes seconds, not hours; the rest of each output is still scanned for
/// NaN/Inf, which catches elements a kernel never wrote (outputs are poisoned before each run).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.h"
#include "exit_codes.h"
#include "host_memory.h"
#include "npy.h"
#include "parallel.h"
#include "random.h"
#include "reference.h"
#include "shape.h"
#include "validate.h"

namespace fa {

/// Default tolerance of float32 kernels against the float64 reference (see docs: error budget).
constexpr Tolerance kFp32Tolerance{5e-5, 5e-5};

/// Inputs of one attention problem, float32, layout of shape.h.
struct AttnProblem {
    AttnShape shape;
    std::vector<float> Q, K, V;
};

/// Random Q (B, H, N, D), K and V (B, H_kv, N_k, D), each entry magnitude·N(0.5, 1): seeded, and
/// off zero mean so that O (a weighted mean of V rows) stays away from zero and relative errors
/// mean something.
inline AttnProblem make_problem(const AttnShape& s, std::uint64_t seed, double magnitude = 1.0) {
    AttnProblem p;
    p.shape = s;
    p.Q = random_normal(s.elements(), seed * 3 + 0, 0.5 * magnitude, magnitude);
    p.K = random_normal(s.kv_elements(), seed * 3 + 1, 0.5 * magnitude, magnitude);
    p.V = random_normal(s.kv_elements(), seed * 3 + 2, 0.5 * magnitude, magnitude);
    return p;
}

/// The shape the command line asks for.
inline AttnShape shape_from_args(const AttentionArgs& a) {
    return with_kv(make_shape(a.batch, a.heads, a.seq, a.dim, a.causal, a.scale), a.seq_k, a.kv_heads);
}

/// Throws "PATH: entry I is nan; ..." for the first NaN or Inf of `v` (inputs must be finite).
inline void require_finite(const std::string& path, const std::vector<float>& v) {
    for (std::size_t i = 0; i < v.size(); ++i)
        if (!std::isfinite(v[i]))
            throw std::runtime_error(path + ": entry " + std::to_string(i) + " is " + std::to_string(v[i]) +
                                     "; attention inputs must be finite");
}

/// The shape of the inputs in `dir`, from the headers of q.npy, k.npy and v.npy alone (nothing
/// is allocated for their data): one shape (B, H, N, D) for the three, each dimension within the
/// range the command line allows for it (`cli`'s --batch --heads --seq --dim), element type float32
/// or float16, no bytes missing or left over. Throws "PATH: why" otherwise.
inline AttnShape npy_problem_shape(const Cli& cli, const std::string& dir, bool causal, double scale) {
    const std::vector<std::size_t> sq = read_npy_header(dir + "/q.npy").shape;
    if (sq.size() != 4)
        throw std::runtime_error(dir + "/q.npy: shape " + npy_shape_text(sq) +
                                 " is not 4-D (batch, heads, seq, head_dim)");
    const char* flags[4] = {"--batch", "--heads", "--seq", "--dim"};
    for (int i = 0; i < 4; ++i) {
        const std::string why = cli.range_error(flags[i], sq[i]);
        if (!why.empty())
            throw std::runtime_error(dir + "/q.npy: shape " + npy_shape_text(sq) + ": " + (flags[i] + 2) +
                                     " " + std::to_string(sq[i]) + " " + why);
    }
    for (const char* name : {"/q.npy", "/k.npy", "/v.npy"}) {
        const NpyHeader h = read_npy_header(dir + name);
        if (h.descr != "<f4" && h.descr != "<f2")
            throw std::runtime_error(dir + name + ": element type is '" + h.descr +
                                     "', expected float32 '<f4' or float16 '<f2'");
        if (h.shape != sq)
            throw std::runtime_error(dir + ": q, k, v shapes differ: q.npy " + npy_shape_text(sq) + ", " +
                                     (name + 1) + " " + npy_shape_text(h.shape));
    }
    return make_shape(int(sq[0]), int(sq[1]), int(sq[2]), int(sq[3]), causal, scale);
}

/// Reads q.npy, k.npy, v.npy from `dir` (float32 or float16; npy_problem_shape says what their
/// shapes must be), every entry finite. Throws "PATH: why" otherwise.
inline AttnProblem load_problem_npy(const Cli& cli, const std::string& dir, bool causal, double scale) {
    AttnProblem p;
    p.shape = npy_problem_shape(cli, dir, causal, scale);
    p.Q = read_npy_floats(dir + "/q.npy", nullptr);
    p.K = read_npy_floats(dir + "/k.npy", nullptr);
    p.V = read_npy_floats(dir + "/v.npy", nullptr);
    require_finite(dir + "/q.npy", p.Q);
    require_finite(dir + "/k.npy", p.K);
    require_finite(dir + "/v.npy", p.V);
    return p;
}

/// What a program holds in host memory at most: `arrays` float arrays of B·H·N·D elements (Q, K, V
/// and what it keeps beside them, named by `what`: "Q, K, V, O and its check").
struct HostArrays {
    double arrays;
    const char* what;
};

/// Host bytes of `host` for shape s, each array as large as the larger of Q and K, with a float per
/// row (L) for each array and 64 MiB for the program itself.
inline double host_bytes(const AttnShape& s, HostArrays host) {
    const double elements = double(std::max(s.elements(), s.kv_elements()));
    return host.arrays * (elements + double(s.rows())) * sizeof(float) + 64.0 * (1 << 20);
}

/// The problem's shape as the command line asks: with --load-npy, from the files' headers alone
/// (npy_problem_shape; it sets --batch --heads --seq --dim, and one of them given that disagrees
/// with the files is an error), otherwise from those options. Reads no data, so that a program
/// can refuse a shape it does not support before it reads or draws any input. Any error is one
/// line and exit status kExitBadInput.
inline AttnShape problem_shape(const Cli& cli, AttentionArgs& a, const RunArgs& r) {
    if (r.load_npy.empty()) return shape_from_args(a);
    AttnShape s;
    try {
        s = npy_problem_shape(cli, r.load_npy, a.causal, a.scale);
    } catch (const std::exception& e) {
        cli.fail(e.what());
    }
    const struct { const char* flag; int* arg; int file; } dims[] = {
        {"--batch", &a.batch, s.B}, {"--heads", &a.heads, s.H}, {"--seq", &a.seq, s.N}, {"--dim", &a.dim, s.D}};
    for (const auto& d : dims) {
        if (cli.given(d.flag) && *d.arg != d.file)
            cli.fail(std::string(d.flag) + " " + std::to_string(*d.arg) + " disagrees with the inputs in " +
                     r.load_npy + " (" + s.str() + ")");
        *d.arg = d.file;
    }
    return s;
}

/// The inputs as the command line asks: loaded with --load-npy, otherwise generated from --seed,
/// of the shape problem_shape gives. Before reading or drawing any, checks that the run fits in
/// this machine's memory (`host`). Prints where the inputs came from; any error is one line and
/// exit status kExitBadInput, before the program looks for a GPU.
inline AttnProblem problem_from_args(const Cli& cli, AttentionArgs& a, const RunArgs& r, HostArrays host) {
    const AttnShape s = problem_shape(cli, a, r);
    require_host_memory(cli.program(), host_bytes(s, host), s.str() + " (" + host.what + ")");
    if (r.load_npy.empty()) return make_problem(s, r.seed);
    AttnProblem p;
    try {
        p = load_problem_npy(cli, r.load_npy, a.causal, a.scale);
    } catch (const std::exception& e) {
        cli.fail(e.what());
    }
    std::printf("inputs loaded from %s: %s\n", r.load_npy.c_str(), s.str().c_str());
    return p;
}

/// (B, H_kv, N_k, D): the .npy shape of K, V, dK, dV.
inline std::vector<std::size_t> kv_npy_shape(const AttnShape& s) {
    return {std::size_t(s.B), std::size_t(s.kv_heads()), std::size_t(s.keys()), std::size_t(s.D)};
}

/// Writes q, o (B, H, N, D), k, v (B, H_kv, N_k, D) and l (B, H, N) as .npy files into `dir`
/// (which must exist).
inline void save_forward_npy(const std::string& dir, const AttnProblem& p, const std::vector<float>& O,
                             const std::vector<float>& L) {
    const AttnShape& s = p.shape;
    const std::vector<std::size_t> t4 = {std::size_t(s.B), std::size_t(s.H), std::size_t(s.N), std::size_t(s.D)};
    const std::vector<std::size_t> t3 = {std::size_t(s.B), std::size_t(s.H), std::size_t(s.N)};
    try {
        write_npy(dir + "/q.npy", p.Q.data(), t4);
        write_npy(dir + "/k.npy", p.K.data(), kv_npy_shape(s));
        write_npy(dir + "/v.npy", p.V.data(), kv_npy_shape(s));
        write_npy(dir + "/o.npy", O.data(), t4);
        write_npy(dir + "/l.npy", L.data(), t3);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        std::exit(kExitFailed);
    }
    std::printf("saved q, k, v, o, l (.npy) to %s\n", dir.c_str());
}

/// save_forward_npy, and the backward's do, dq (B, H, N, D), dk, dv (B, H_kv, N_k, D) beside them.
inline void save_backward_npy(const std::string& dir, const AttnProblem& p, const std::vector<float>& O,
                              const std::vector<float>& L, const std::vector<float>& dO, const std::vector<float>& dQ,
                              const std::vector<float>& dK, const std::vector<float>& dV) {
    save_forward_npy(dir, p, O, L);
    const AttnShape& s = p.shape;
    const std::vector<std::size_t> t4 = {std::size_t(s.B), std::size_t(s.H), std::size_t(s.N), std::size_t(s.D)};
    try {
        write_npy(dir + "/do.npy", dO.data(), t4);
        write_npy(dir + "/dq.npy", dQ.data(), t4);
        write_npy(dir + "/dk.npy", dK.data(), kv_npy_shape(s));
        write_npy(dir + "/dv.npy", dV.data(), kv_npy_shape(s));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        std::exit(kExitFailed);
    }
    std::printf("saved do, dq, dk, dv (.npy) to %s\n", dir.c_str());
}

/// Query rows to check in each head: all of them when N ≤ max_rows, else the first and last row,
/// the rows around each multiple of 64 up to the sample size, and random rows (seeded by N).
inline std::vector<int> sample_rows(int N, int max_rows) {
    std::vector<int> rows;
    if (N <= max_rows) {
        for (int i = 0; i < N; ++i) rows.push_back(i);
        return rows;
    }
    rows = {0, 1, N - 2, N - 1};
    for (int t = 64; t < N && int(rows.size()) < max_rows / 2; t += 64) rows.push_back(t - 1), rows.push_back(t);
    Rng rng{std::uint64_t(N)};
    while (int(rows.size()) < max_rows) rows.push_back(int(rng.next() % std::uint64_t(N)));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

/// Adds a finiteness scan of a whole tensor to a comparison of some of its rows. Every non-finite
/// element of the sample is also in the scan, so each one is counted once.
inline void add_finite_scan(Validation& v, const Validation& scan) {
    v.failures = v.failures - v.nonfinite + scan.nonfinite;
    v.nonfinite = scan.nonfinite;
    for (const Mismatch& m : scan.first) {
        bool seen = false;
        for (const Mismatch& f : v.first)
            seen |= f.where.batch == m.where.batch && f.where.head == m.where.head &&
                    f.where.row == m.where.row && f.where.col == m.where.col;
        if (!seen && v.first.size() < 8) v.first.push_back(m);
    }
    if (scan.nonfinite > 0) v.max_abs = v.max_rel = v.rel_l2 = scan.max_abs;
}

/// Result of checking a forward pass: O and L against the reference.
struct ForwardCheck {
    Validation O, L;
    bool ok() const { return O.ok() && L.ok(); }
    void print() const {
        O.print();
        L.print();
    }
};

/// The finiteness scan of L (B,H,N): a row that sees no key holds −inf (reference.h), every other
/// row a finite number.
inline Validation check_L_written(const AttnShape& s, const float* L) {
    std::vector<float> x(L, L + s.rows());
    for (std::size_t r = 0; r < s.rows(); ++r)
        if (int(r % std::size_t(s.N)) < s.rows_without_keys() && std::isinf(x[r]) && x[r] < 0) x[r] = 0;
    return check_all_finite("L", x.data(), x.size(), contiguous(s.H, s.N, 1));
}

/// Checks O (B,H,N,D) and L (B,H,N) on sampled rows of every head against the float64 reference,
/// and scans all of O and L for NaN/Inf (check_L_written).
inline ForwardCheck check_forward(const AttnProblem& p, const float* O, const float* L,
                                  Tolerance tol = kFp32Tolerance, int max_rows_per_head = 128) {
    const AttnShape& s = p.shape;
    const std::vector<int> rows = sample_rows(s.N, max_rows_per_head);
    const std::size_t nr = rows.size(), D = std::size_t(s.D), total = s.heads_total() * nr;
    std::vector<double> refO(total * D), refL(total);
    std::vector<float> gotO(total * D), gotL(total);
    parallel_for(total, [&](std::size_t k) {
        const std::size_t bh = k / nr, r = bh * s.N + std::size_t(rows[k % nr]);
        attention_row_reference(s, p.Q.data(), p.K.data(), p.V.data(), bh, rows[k % nr],
                                &refO[k * D], &refL[k]);
        std::copy_n(O + r * D, D, &gotO[k * D]);
        gotL[k] = L[r];
    });
    auto where = [&](std::size_t per_row) {
        return [&, per_row](std::size_t i) {
            const std::size_t k = i / per_row, bh = k / nr;
            return Where{(long long)(bh / s.H), (long long)(bh % s.H), rows[k % nr],
                         (long long)(i % per_row)};
        };
    };
    ForwardCheck c{validate("O", gotO.data(), refO.data(), gotO.size(), tol, where(D)),
                   validate("L", gotL.data(), refL.data(), gotL.size(), tol, where(1))};
    add_finite_scan(c.O, check_all_finite("O", O, s.elements(), contiguous(s.H, s.N, s.D)));
    add_finite_scan(c.L, check_L_written(s, L));
    return c;
}

}  // namespace fa
