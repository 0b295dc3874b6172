/// @file results.h
/// @brief One row per measured kernel in a CSV file: what `make bench` collects and `make plots` reads.
///
/// Programs append a row when run with `--csv FILE`; the header line is written when the file is
/// new. The machine description (GPU, driver, CUDA version, clocks, date, command) is written as
/// `#` comment lines by the bench script before the rows.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include "shape.h"
#include "timer.h"

namespace fa {

/// Identifies a measured kernel.
struct ResultTag {
    int chapter;          ///< chapter number
    std::string variant;  ///< kernel name, e.g. "2-tuned"
    std::string dtype;    ///< "fp32", "fp16", "bf16"
    std::string pass;     ///< "fwd" or "bwd"
};

/// The columns of a results file, in order.
inline const char* results_csv_header() {
    return "chapter,variant,dtype,pass,batch,heads,seq,dim,causal,median_ms,min_ms,tflops,gbps,"
           "max_abs_err,rel_l2_err,check";
}

/// Appends one row; `flops` and `bytes` turn the median time into TF/s and GB/s. `check` is
/// "PASS", "FAIL" or "skipped" (errors are then written as nan).
inline void append_result_csv(const std::string& path, const ResultTag& tag, const AttnShape& s,
                              const TimingStats& t, double flops, double bytes, double max_abs_err,
                              double rel_l2_err, const char* check) {
    std::FILE* f = std::fopen(path.c_str(), "a+");
    if (f == nullptr) {
        std::fprintf(stderr, "warning: cannot append to %s\n", path.c_str());
        return;
    }
    std::fseek(f, 0, SEEK_END);
    if (std::ftell(f) == 0) std::fprintf(f, "%s\n", results_csv_header());
    const double sec = t.median_ms * 1e-3;
    std::fprintf(f, "%d,%s,%s,%s,%d,%d,%d,%d,%d,%.6g,%.6g,%.6g,%.6g,%.3e,%.3e,%s\n", tag.chapter,
                 tag.variant.c_str(), tag.dtype.c_str(), tag.pass.c_str(), s.B, s.H, s.N, s.D,
                 int(s.causal), t.median_ms, t.min_ms, flops / sec / 1e12, bytes / sec / 1e9,
                 max_abs_err, rel_l2_err, check);
    std::fclose(f);
}

}  // namespace fa
