// What the programs of chapters 7–9 print around their kernels (report.h).
#include "report.h"

#include <cstdio>

namespace ch7 {

void print_summary(const std::vector<SummaryRow>& rows, const std::vector<RateColumn>& rates, int name_width,
                   int tiles_width) {
    std::printf("\n%-*s %-*s %5s %6s %7s %4s %10s %9s", name_width, "kernel", tiles_width, "tiles", "regs", "spill",
                "smem KB", "blk", "median ms", "TF/s");
    for (const RateColumn& c : rates)
        if (c.tflops > 0) std::printf(" %9s", c.title);
    std::printf("  check\n");
    for (const SummaryRow& r : rows) {
        std::printf("%-*s %-*s %5d %6zu %7.1f %4d", name_width, r.name.c_str(), tiles_width, r.tiles.c_str(),
                    r.res.registers, r.res.local_bytes, r.res.smem_bytes / 1024.0, r.res.blocks_per_sm);
        if (r.timed) std::printf(" %10.4f %9.2f", r.median_ms, r.tflops);
        else std::printf(" %10s %9s", "-", "-");
        for (const RateColumn& c : rates) {
            if (c.tflops <= 0) continue;
            if (r.timed) std::printf(" %8.1f%%", 100.0 * r.tflops / c.tflops);
            else std::printf(" %9s", "-");
        }
        std::printf("  %s\n", !r.checked ? "skipped" : r.passed ? "PASS" : "FAIL");
    }
}

template <class T>
const MirrorErrors& mirror_baseline(std::map<int, MirrorErrors>& by_Bc, const fa::AttnProblem& p, int Bc) {
    const auto found = by_Bc.find(Bc);
    if (found != by_Bc.end()) return found->second;
    const MirrorErrors& m = by_Bc[Bc] = mirror_errors<T>(p, Bc);
    std::printf("\nCPU mirror, B_c = %d (the same 16-bit roundings, fp32 math) vs float64 on the sampled rows:\n"
                "  O max_abs %.3e rel_l2 %.3e   L max_abs %.3e rel_l2 %.3e\n",
                Bc, m.check.O.max_abs, m.check.O.rel_l2, m.check.L.max_abs, m.check.L.rel_l2);
    return m;
}

std::string kernel_label(const SummaryRow& row, const fa::AttnShape& s, int query_blocks, int sm_count) {
    char label[512];
    std::snprintf(label, sizeof label,
                  "\nkernel %s: %s\n  %d threads, %d registers, %zu bytes local memory (spills), %.1f KB "
                  "shared memory, %d blocks/SM; grid %d x %d x %d on %d SMs",
                  row.name.c_str(), row.tiles.c_str(), row.res.threads, row.res.registers, row.res.local_bytes,
                  row.res.smem_bytes / 1024.0, row.res.blocks_per_sm, query_blocks, s.H, s.B, sm_count);
    return label;
}

void record_forward(SummaryRow& row, const fa::ForwardOutcome& out, const MirrorErrors* baseline, double flops) {
    row.checked = out.checked;
    if (out.checked) {
        const RuleVerdict v = low_precision_rule(out.check, *baseline);
        std::printf("%s", v.text.c_str());
        row.passed = v.ok && out.passed;
    }
    row.timed = out.timed;
    if (out.timed) {
        row.median_ms = out.time.median_ms;
        row.tflops = flops / (out.time.median_ms * 1e-3) / 1e12;
    }
}

template const MirrorErrors& mirror_baseline<__half>(std::map<int, MirrorErrors>&, const fa::AttnProblem&, int);
template const MirrorErrors& mirror_baseline<__nv_bfloat16>(std::map<int, MirrorErrors>&, const fa::AttnProblem&,
                                                            int);

}  // namespace ch7
