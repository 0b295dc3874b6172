// The one main translation unit of every test binary (compiled once, linked into each).
//
// Adds to Catch2 what the course needs:
//  - without a CUDA device, test cases tagged [gpu] are filtered out and counted, never run and
//    never reported as passed; likewise test cases tagged [sm90] (Hopper-only instructions) on a
//    GPU whose compute capability is not 9.0, those tagged [gpus2] on a machine with fewer than two
//    GPUs, and those whose tag a test file declared unrunnable in its build (not_runnable_here);
//  - at the end, one machine-readable line "test-summary: passed=P failed=F gpu-not-run=K" that
//    tests/run_tests.sh adds up over all test binaries;
//  - FA_TEST_PLAN=1 lists what a run would do instead of doing it (print_plan);
//  - with Catch2 v2, a console reporter that prints every failure whatever the test's name (see
//    HeaderSafeConsoleReporter; tests/common_test.cpp's "reporter guard" test proves it).
// It builds with Catch2 v2 or v3 (tests/catch2_v3/catch2/catch.hpp maps v3 to v2's names).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "../common/device.h"
#include "support.h"

namespace {

unsigned long long g_gpu_not_run = 0;

// Prints the totals of test cases when the run ends.
struct SummaryListener : Catch::TestEventListenerBase {
    // (the base's constructor takes a ReporterConfig in Catch2 v2, an IConfig pointer in v3)
    template <typename Config>
    explicit SummaryListener(Config&& config) : Catch::TestEventListenerBase(std::forward<Config>(config)) {}
    void testRunEnded(Catch::TestRunStats const& stats) override {
        const Catch::Counts& c = stats.totals.testCases;
        std::printf("test-summary: passed=%llu failed=%llu gpu-not-run=%llu\n",
                    (unsigned long long)c.passed, (unsigned long long)(c.failed + c.failedButOk),
                    g_gpu_not_run);
        std::fflush(stdout);
    }
};

// True for a test case with this tag. (v2 keeps a test case's tags as strings, v3 as Tag objects.)
#if CATCH_VERSION_MAJOR >= 3
bool has_tag(const Catch::TestCaseHandle& t, const char* name) {
    for (const Catch::Tag& tag : t.getTestCaseInfo().tags)
        if (tag.original == Catch::StringRef(name)) return true;
    return false;
}
#else
bool has_tag(const Catch::TestCase& t, const char* name) {
    for (const std::string& tag : t.tags)
        if (tag == name) return true;
    return false;
}
#endif

// Every alternative of a Catch2 test spec ("a,b" means a or b) gets "~[tag]" put in front of it.
// In front, not behind: in a test-name pattern Catch2 reads '~' as part of the name, so
// "kernel 2* ~[gpu]" would look for a test named "kernel 2* ~". An escaped comma ("\,") is part
// of a name, not a separator. An empty spec also gets "~[.]": Catch2 v2 runs hidden test cases
// ([.]) whenever a spec is given, even one that only excludes, and they run only when named.
std::vector<std::string> without(const std::vector<std::string>& specs, const std::string& tag) {
    const std::string not_tag = "~[" + tag + "] ";
    if (specs.empty()) return {not_tag + "~[.]"};
    std::vector<std::string> out;
    for (const std::string& spec : specs) {
        std::string s = not_tag;
        for (std::size_t i = 0; i < spec.size(); ++i) {
            s += spec[i];
            if (spec[i] == ',' && (i == 0 || spec[i - 1] != '\\')) s += not_tag;
        }
        out.push_back(s);
    }
    return out;
}

// A tag whose test cases cannot run here, and why.
struct Unrunnable {
    std::string tag, why;
};

// The tags test files declared unrunnable in this build (fa::test::not_runnable_here), filled
// before main runs: a function's static, so that it exists whichever file initializes first.
std::vector<Unrunnable>& declared_unrunnable() {
    static std::vector<Unrunnable> tags;
    return tags;
}

// The tags whose test cases this machine cannot run: "gpu" without a CUDA device (every other
// case that needs one is tagged [gpu] too); with one, "sm90" on a GPU that is not compute
// capability 9.0 (wgmma, TMA and setmaxnreg exist only there), "gpus2" with fewer than two GPUs,
// and the tags declared unrunnable in this build.
std::vector<Unrunnable> unrunnable_tags() {
    if (fa::cuda_device_count() == 0) return {{"gpu", "no CUDA device"}};
    std::vector<Unrunnable> tags = declared_unrunnable();
    const fa::DeviceInfo d = fa::device_info();
    if (d.cc_major != 9 || d.cc_minor != 0) tags.push_back({"sm90", "they need a GPU of compute capability 9.0 (Hopper)"});
    if (fa::cuda_device_count() < 2) tags.push_back({"gpus2", "they need two GPUs or more, and this machine has one"});
    return tags;
}

// True for a test case with any of these tags.
template <class TestCase>
bool has_any_tag(const TestCase& t, const std::vector<Unrunnable>& tags) {
    for (const Unrunnable& u : tags)
        if (has_tag(t, u.tag.c_str())) return true;
    return false;
}

#if CATCH_VERSION_MAJOR < 3
// Catch2 v2's console reporter (v2.13.10, ConsoleReporter::printHeaderString) prints a test case's
// or section's name above its first failure, and indents every line of the name after the first to
// just past the name's first ": ", wherever that is. When that indent nears the 79 columns it wraps
// to, the failure is never printed: with the ": " at byte 77 of a test name or later (75 of a
// section name, printed 2 further right) an assert in its text wrapper aborts the binary (exit
// 134; with asserts compiled out, an uncaught std::out_of_range does); one byte earlier it loops
// forever writing lines of "-" and does not stop on SIGTERM; two bytes earlier it prints the rest
// one letter a line.
// Chapter 9's grid tests' names have their ": " at bytes 102 and 120. Catch2 v3 honours a ": "
// only in the first quarter of the line (its issue #2309); this reporter does the same for v2: a
// ": " further right is printed as ":" and a line break, so the name wraps at full width and reads
// whole. (tests/common_test.cpp's "reporter guard" plants such failures and reads the output.)
std::string header_safe(std::string name) {
    for (std::size_t i = name.find(": "); i != std::string::npos && i >= CATCH_CONFIG_CONSOLE_WIDTH / 4;
         i = name.find(": ", i))
        name[i + 1] = '\n';
    return name;
}

struct HeaderSafeConsoleReporter : Catch::ConsoleReporter {
    using Catch::ConsoleReporter::ConsoleReporter;
    static std::string getDescription() {
        return "Catch2's console reporter; a test or section name whose first ': ' lies past column "
               "20 breaks its line there instead of indenting past it (Catch2 v2 aborts otherwise)";
    }
    void testCaseStarting(Catch::TestCaseInfo const& info) override {
        Catch::TestCaseInfo shown = info;
        shown.name = header_safe(shown.name);
        Catch::ConsoleReporter::testCaseStarting(shown);
    }
    void sectionStarting(Catch::SectionInfo const& info) override {
        Catch::SectionInfo shown = info;
        shown.name = header_safe(shown.name);
        Catch::ConsoleReporter::sectionStarting(shown);
    }
};
#endif

// FA_TEST_PLAN=1: instead of running, prints the test cases the command line selects, one a line,
// "cpu<TAB>name" or "gpu<TAB>name" (tagged [gpu]), and last "not-run<TAB>K", the selected ones this
// machine cannot run. tests/run_tests.sh runs the cpu ones side by side, a process each, and the
// gpu ones one binary at a time.
template <class Config>
int print_plan(Config& config, const std::vector<Unrunnable>& unrunnable) {
    unsigned long long not_run = 0;
    for (const auto& t : Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config)) {
        if (has_any_tag(t, unrunnable)) {
            ++not_run;
            continue;
        }
#if CATCH_VERSION_MAJOR >= 3
        const std::string& name = t.getTestCaseInfo().name;
#else
        const std::string& name = t.name;
#endif
        std::printf("%s\t%s\n", has_tag(t, "gpu") ? "gpu" : "cpu", name.c_str());
    }
    std::printf("not-run\t%llu\n", not_run);
    return 0;
}

}  // namespace

bool fa::test::not_runnable_here(const char* tag, const std::string& why) {
    if (!why.empty()) declared_unrunnable().push_back({tag, why});
    return why.empty();
}

CATCH_REGISTER_LISTENER(SummaryListener)
#if CATCH_VERSION_MAJOR < 3
CATCH_REGISTER_REPORTER("course-console", HeaderSafeConsoleReporter)
#endif

int main(int argc, char* argv[]) {
    Catch::Session session;
    const int rc = session.applyCommandLine(argc, argv);
    if (rc != 0) return rc;
#if CATCH_VERSION_MAJOR < 3
    if (session.configData().reporterName == "console") {  // the default, or -r console
        Catch::ConfigData data = session.configData();
        data.reporterName = "course-console";
        session.useConfigData(data);
    }
#endif
    const std::vector<Unrunnable> tags = unrunnable_tags();
    if (std::getenv("FA_TEST_PLAN") != nullptr) return print_plan(session.config(), tags);
    if (!tags.empty()) {
        Catch::Config& config = session.config();
        const auto selected = Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config);
        for (const auto& t : selected)
            if (has_any_tag(t, tags)) ++g_gpu_not_run;
        Catch::ConfigData data = session.configData();
        for (const Unrunnable& u : tags) {
            data.testsOrTags = without(data.testsOrTags, u.tag);
            // (on stderr: stdout stays only names when the tests are listed, as tools/sanitize.sh does)
            unsigned long long n = 0;
            for (const auto& t : selected) n += has_tag(t, u.tag.c_str()) ? 1 : 0;
            if (n > 0 && u.tag != "gpu") std::fprintf(stderr, "%llu test cases tagged [%s] not run: %s\n", n, u.tag.c_str(), u.why.c_str());
        }
        session.useConfigData(data);
    }
    return session.run();
}
