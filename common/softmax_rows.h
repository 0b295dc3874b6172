/// @file softmax_rows.h
/// @brief What the softmax programs (chapters 1 and 2) do around their code: make or load a
/// rows × cols input, save inputs and outputs as .npy, and check a softmax (and its logsumexp)
/// against the float64 reference.
///
/// A row softmax works on a row-major rows × cols float32 matrix x; its result y has the same
/// shape. Checks compare sampled rows with softmax_reference() (all rows when there are few) and
/// scan every element for NaN/Inf, so an element a kernel never wrote fails even outside the sample.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention.h"
#include "cli.h"
#include "exit_codes.h"
#include "host_memory.h"
#include "npy.h"
#include "parallel.h"
#include "random.h"
#include "reference.h"
#include "validate.h"

namespace fa {

/// Random softmax input: every entry scale·N(0.5, 1), seeded (off zero mean like make_problem).
inline std::vector<float> random_rows(std::size_t rows, std::size_t cols, std::uint64_t seed,
                                      double scale) {
    return random_normal(rows * cols, seed, 0.5 * scale, scale);
}

/// Why softmax input x (rows × cols) read from `path` cannot be used, or "": its shape must be
/// (rows, cols) within the ranges of the command line's --rows and --cols, and no entry NaN or +inf
/// (−inf is a masked entry, whose probability is 0).
inline std::string rows_input_error(const Cli& cli, const std::string& path,
                                    const std::vector<std::size_t>& shape, const std::vector<float>& x) {
    if (shape.size() != 2) return path + ": shape " + npy_shape_text(shape) + " is not 2-D (rows, cols)";
    const char* flags[2] = {"--rows", "--cols"};
    for (int i = 0; i < 2; ++i) {
        const std::string why = cli.range_error(flags[i], shape[i]);
        if (!why.empty())
            return path + ": shape " + npy_shape_text(shape) + ": " + (flags[i] + 2) + " " +
                   std::to_string(shape[i]) + " " + why;
    }
    for (std::size_t i = 0; i < x.size(); ++i)
        if (std::isnan(x[i]) || x[i] == std::numeric_limits<float>::infinity())
            return path + ": entry (" + std::to_string(i / shape[1]) + ", " + std::to_string(i % shape[1]) +
                   ") is " + std::to_string(x[i]) + "; softmax inputs must be numbers or -inf";
    return "";
}

/// The softmax input as the command line asks: `dir`/x.npy with --load-npy (a 2-D float32 or
/// float16 array; rows_input_error says what it must be; it sets rows and cols, and a --rows or
/// --cols given that disagrees with it is an error), otherwise rows × cols entries scale·N(0.5, 1)
/// from --seed. Before reading or drawing any, checks from the shape alone (x.npy's header) that
/// `host_arrays` float arrays of rows × cols (named by `what`) fit in this machine's memory. Prints
/// where the input came from; any error is one line and exit status kExitBadInput.
inline std::vector<float> rows_from_args(const Cli& cli, const RunArgs& r, int& rows, int& cols, double scale,
                                         double host_arrays, const char* what) {
    const std::string path = r.load_npy + "/x.npy";
    if (!r.load_npy.empty()) {
        std::vector<std::size_t> shape;
        try {
            const NpyHeader h = read_npy_header(path);
            shape = h.shape;
            std::string why = rows_input_error(cli, path, shape, {});
            if (why.empty() && h.descr != "<f4" && h.descr != "<f2")
                why = path + ": element type is '" + h.descr + "', expected float32 '<f4' or float16 '<f2'";
            if (!why.empty()) cli.fail(why);
        } catch (const std::exception& e) {
            cli.fail(e.what());
        }
        const struct { const char* flag; int value, file; } dims[] = {{"--rows", rows, int(shape[0])},
                                                                      {"--cols", cols, int(shape[1])}};
        for (const auto& d : dims)
            if (cli.given(d.flag) && d.value != d.file)
                cli.fail(std::string(d.flag) + " " + std::to_string(d.value) + " disagrees with " + path +
                         " of shape " + npy_shape_text(shape));
        rows = int(shape[0]);
        cols = int(shape[1]);
    }
    char shape_text[64];
    std::snprintf(shape_text, sizeof shape_text, "%d rows x %d cols (", rows, cols);
    require_host_memory(cli.program(), host_arrays * double(rows) * double(cols) * sizeof(float) + 64.0 * (1 << 20),
                        shape_text + std::string(what) + ")");
    if (r.load_npy.empty()) {
        std::printf("input: %d rows x %d cols, entries %g·N(0.5, 1), seed %llu\n", rows, cols, scale,
                    (unsigned long long)r.seed);
        return random_rows(std::size_t(rows), std::size_t(cols), r.seed, scale);
    }
    std::vector<float> x;
    std::string error;
    try {
        std::vector<std::size_t> shape;
        x = read_npy_floats(path, &shape);
        error = rows_input_error(cli, path, shape, x);
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (!error.empty()) cli.fail(error);
    std::printf("input loaded from %s: %d rows x %d cols\n", path.c_str(), rows, cols);
    return x;
}

/// Writes `name`.npy (rows × cols, or rows when cols is 0) into `dir`; exits with a message on error.
inline void save_rows_npy(const std::string& dir, const char* name, const float* data, int rows,
                          int cols) {
    std::vector<std::size_t> shape = {std::size_t(rows)};
    if (cols > 0) shape.push_back(std::size_t(cols));
    const std::string path = dir + "/" + name + ".npy";
    try {
        write_npy(path, data, shape);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        std::exit(kExitFailed);
    }
    std::printf("saved %s\n", path.c_str());
}

/// Compares the softmax y of x (rows × cols) with the float64 reference on sampled rows (all rows
/// when rows ≤ max_rows) and scans all of y for NaN/Inf.
inline Validation check_softmax_rows(const std::string& name, const float* x, const float* y,
                                     int rows, int cols, Tolerance tol, int max_rows = 256) {
    const std::vector<int> sample = sample_rows(rows, max_rows);
    const std::size_t n = std::size_t(cols), k = sample.size();
    std::vector<double> want(k * n);
    std::vector<float> got(k * n);
    parallel_for(k, [&](std::size_t i) {
        const std::size_t r = std::size_t(sample[i]);
        softmax_reference(x + r * n, &want[i * n], 1, n);
        std::copy_n(y + r * n, n, &got[i * n]);
    });
    const WhereFn where = [&sample, n](std::size_t i) {
        return Where{0, 0, sample[i / n], (long long)(i % n)};
    };
    Validation v = validate(name, got.data(), want.data(), got.size(), tol, where);
    add_finite_scan(v, check_all_finite(name, y, std::size_t(rows) * n, contiguous(1, rows, n)));
    return v;
}

/// Compares lse[r] with the float64 logsumexp of row r of x on sampled rows, and scans every lse[r]
/// for NaN and +inf (−inf is the logsumexp of an all −inf row). A sampled row whose reference is −inf
/// passes only when lse[r] is −inf too.
inline Validation check_logsumexp_rows(const std::string& name, const float* x, const float* lse,
                                       int rows, int cols, Tolerance tol, int max_rows = 256) {
    const std::vector<int> sample = sample_rows(rows, max_rows);
    std::vector<double> want(sample.size());
    std::vector<float> got(sample.size());
    for (std::size_t i = 0; i < sample.size(); ++i) {
        const std::size_t r = std::size_t(sample[i]);
        const double ref = logsumexp_reference(x + r * std::size_t(cols), std::size_t(cols));
        got[i] = lse[r];
        want[i] = ref;
        if (std::isinf(ref) && ref < 0) {
            // both −inf: equal, compared as 0 = 0; otherwise a NaN reference makes it fail
            const bool both = std::isinf(got[i]) && got[i] < 0;
            got[i] = both ? 0.0f : got[i];
            want[i] = both ? 0.0 : std::numeric_limits<double>::quiet_NaN();
        }
    }
    const WhereFn where = [&sample](std::size_t i) { return Where{0, 0, sample[i], 0}; };
    Validation v = validate(name, got.data(), want.data(), got.size(), tol, where);
    std::vector<float> scan(lse, lse + rows);
    for (float& l : scan) l = std::isinf(l) && l < 0 ? 0.0f : l;  // −inf is a legal logsumexp
    add_finite_scan(v, check_all_finite(name, scan.data(), scan.size(), contiguous(1, rows, 1)));
    return v;
}

}  // namespace fa
