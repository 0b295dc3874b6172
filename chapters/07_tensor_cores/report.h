/// @file report.h
/// @brief What the programs of chapters 7–9 print around their kernels: the 2× rule's CPU baseline
/// once per key-tile width, a header line per kernel, its verdict and rate, and the summary table.
///
/// Host code only; chapters 8 and 9 link it through chapter 7's library (the Makefile's USES_).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "../../common/attention_gpu.h"
#include "chapter7.h"

namespace ch7 {

/// One line of a program's summary table: a kernel, its tiles and resources, its time and check.
struct SummaryRow {
    std::string name, tiles;
    fa::KernelResources res;
    double median_ms = 0, tflops = 0;
    bool timed = false, checked = false, passed = true;
};

/// A "% of ..." column of the summary table: each row's TF/s over `tflops` (left out when 0).
struct RateColumn {
    const char* title;  ///< e.g. "% of GEMM"
    double tflops;
};

/// Prints the table: name, tiles, registers, spills, shared memory, blocks/SM, time, TF/s, one
/// column per rate with tflops > 0, and the check. The widths fit each chapter's longest names.
void print_summary(const std::vector<SummaryRow>& rows, const std::vector<RateColumn>& rates, int name_width,
                   int tiles_width);

/// The CPU mirror's errors with key tiles of B_c (the low-precision baseline of the 2× rule), run
/// and printed the first time a program asks for this B_c: the mirror tiles the keys as the kernel
/// does, so kernels of another B_c get their own baseline.
template <class T>
const MirrorErrors& mirror_baseline(std::map<int, MirrorErrors>& by_Bc, const fa::AttnProblem& p, int Bc);

/// The lines printed before a forward kernel runs: its name, tiles, resources and grid.
std::string kernel_label(const SummaryRow& row, const fa::AttnShape& s, int query_blocks, int sm_count);

/// Fills `row` from a forward's outcome: the 2× rule against `baseline` (printed; only when the
/// check ran, and then `baseline` is the mirror of the kernel's B_c) and the rate from `flops`.
void record_forward(SummaryRow& row, const fa::ForwardOutcome& out, const MirrorErrors* baseline, double flops);

}  // namespace ch7
