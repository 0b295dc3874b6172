/// @file attention_gpu.h
/// @brief Runs an attention forward kernel the course's standard way: poison the outputs, launch,
/// check against the float64 reference, time, print, record.
///
/// Every GPU attention program does the same around its kernel; doing it here once keeps the
/// programs thin and makes every chapter's numbers comparable (same inputs, same timer, same FLOP
/// and byte counts).
#pragma once

#include <cstdio>
#include <vector>

#include "attention.h"
#include "cli.h"
#include "device.h"
#include "dtype.h"
#include "gpu_timer.h"
#include "results.h"

namespace fa {

/// Rounds Q, K, V to T in place: the inputs a T kernel reads, which the float64 reference then
/// uses too (so that its error is the kernel's alone).
template <class T>
void round_inputs_to(AttnProblem& p) {
    round_to<T>(p.Q);
    round_to<T>(p.K);
    round_to<T>(p.V);
}

/// Q, K, V, O (element type T) and L (float) of one problem on the device.
template <class T>
struct DeviceAttention {
    AttnShape shape;
    DeviceBuffer<T> Q, K, V, O;
    DeviceBuffer<float> L;

    explicit DeviceAttention(const AttnProblem& p)
        : shape(p.shape), Q(convert_from_float<T>(p.Q)), K(convert_from_float<T>(p.K)),
          V(convert_from_float<T>(p.V)), O(p.shape.elements()), L(p.shape.rows()) {}

    /// Fills O and L with NaN so that any element a kernel does not write fails the check.
    void poison_outputs() {
        O.poison();
        L.poison();
    }
    std::vector<float> O_host() const { return convert_to_float(O.download()); }
    std::vector<float> L_host() const { return L.download(); }
};

/// Device bytes of Q, K, V, O (elem_bytes each) and L (float).
inline double forward_io_bytes(const AttnShape& s, std::size_t elem_bytes) {
    return (2.0 * double(s.elements()) + 2.0 * double(s.kv_elements())) * double(elem_bytes) +
           double(s.rows()) * sizeof(float);
}

/// What one run_forward call found.
struct ForwardOutcome {
    bool checked = false;  ///< the check ran (not --no-check)
    bool passed = true;    ///< the check passed (true when it did not run)
    ForwardCheck check;
    bool timed = false;    ///< timing ran (not --no-bench)
    TimingStats time;
};

/// Poisons O and L, runs `launch` once, checks O and L against the float64 reference (unless
/// --no-check), then times `launch` (unless --no-bench or timer is null), printing each step and
/// appending a row to --csv. The GB/s printed count the fewest bytes a forward must move: Q, K, V
/// read once, O and L written once.
template <class T, class Launch>
ForwardOutcome run_forward(const ResultTag& tag, const char* label, const AttnProblem& p,
                           DeviceAttention<T>& d, const RunArgs& args, GpuTimer* timer,
                           Launch&& launch, Tolerance tol = kFp32Tolerance) {
    ForwardOutcome out;
    std::printf("%s\n", label);
    d.poison_outputs();
    launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    if (!args.no_check) {
        const std::vector<float> O = d.O_host(), L = d.L_host();
        out.check = check_forward(p, O.data(), L.data(), tol);
        out.check.print();
        out.checked = true;
        out.passed = out.check.ok();
    }
    if (!args.no_bench && timer != nullptr) {
        const double flops = p.shape.flops_forward(), bytes = forward_io_bytes(p.shape, sizeof(T));
        out.time = timer->time(launch, args.repeat);
        out.timed = true;
        print_timing("time", out.time, flops, bytes);
        if (!args.csv.empty())
            append_result_csv(args.csv, tag, p.shape, out.time, flops, bytes,
                              out.checked ? out.check.O.max_abs : NAN,
                              out.checked ? out.check.O.rel_l2 : NAN,
                              out.checked ? (out.passed ? "PASS" : "FAIL") : "skipped");
    }
    return out;
}

}  // namespace fa
