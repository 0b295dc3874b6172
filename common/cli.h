/// @file cli.h
/// @brief The one command-line parser every program of the course uses.
///
/// A program registers its options (each bound to a variable, with a range or a list of choices)
/// and the pairs of options that cannot be combined, then calls parse(). Unknown flags, missing
/// values, values that are not exactly a number (or a comma-separated list of numbers) in range,
/// a value not among the choices, and two options that cannot go together print one clear message
/// and the usage, and exit with status 2 (kExitBadInput, exit_codes.h) before the program looks
/// for a GPU. `--help` prints the usage and exits 0.
///
/// ```
/// fa::Cli cli("chapter5", "FlashAttention-2 forward");
/// fa::RunArgs run;        fa::add_run_options(cli, run); fa::add_npy_options(cli, run);
/// fa::AttentionArgs attn; fa::add_attention_options(cli, attn);
/// int kernel = 2;         cli.option("--kernel", &kernel, "kernel variant", 1, 2);
/// cli.parse(argc, argv);
/// ```
#pragma once

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "exit_codes.h"

namespace fa {

/// Reads `text` as a whole number in [lo, hi]: an optional sign and decimal digits, nothing else
/// (no spaces, no "12abc", nothing that overflows 64 bits). Returns "" and sets *value, or why not:
/// "empty", "not a whole number" or "must be in [lo, hi]".
inline std::string parse_whole_number(const std::string& text, long long lo, long long hi, long long* value) {
    if (text.empty()) return "empty";
    const std::size_t first = text[0] == '-' || text[0] == '+' ? 1 : 0;
    bool digits = first < text.size();
    for (std::size_t i = first; i < text.size(); ++i) digits &= std::isdigit(static_cast<unsigned char>(text[i])) != 0;
    if (!digits) return "not a whole number";
    errno = 0;
    const long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE || v < lo || v > hi)
        return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    *value = v;
    return "";
}

/// Reads a comma-separated list of whole numbers, each in [lo, hi] ("16,64,256"). Returns "" and
/// sets *out, or says which entry is wrong and why ("entry 2 (''): empty", "entry 1 ('12abc'): not
/// a whole number", "entry 1 ('4294967297'): must be in [1, 16777216]").
inline std::string parse_int_list(const std::string& text, long long lo, long long hi, std::vector<int>* out) {
    std::vector<int> values;
    for (std::size_t begin = 0, entry = 1;; ++entry) {
        const std::size_t comma = text.find(',', begin);
        const std::size_t end = comma == std::string::npos ? text.size() : comma;
        const std::string item = text.substr(begin, end - begin);
        long long v = 0;
        const std::string why = parse_whole_number(item, lo, hi, &v);
        if (!why.empty()) return "entry " + std::to_string(entry) + " ('" + item + "'): " + why;
        values.push_back(int(v));
        if (comma == std::string::npos) break;
        begin = comma + 1;
    }
    *out = std::move(values);
    return "";
}

/// Option parser: `--name value`, `--name=value`, and value-less flags.
class Cli {
public:
    Cli(std::string program, std::string summary)
        : program_(std::move(program)), summary_(std::move(summary)) {}

    /// A flag without a value: present sets `*target = true`.
    void flag(const char* name, bool* target, const char* help) {
        add(name, help, "", Kind::Flag, target, 0, 0);
    }
    /// An integer option accepted only in [lo, hi].
    void option(const char* name, int* target, const char* help, long long lo, long long hi) {
        add(name, help, std::to_string(*target), Kind::Int, target, lo, hi);
    }
    /// A 64-bit unsigned option (seeds) accepted only in [lo, hi].
    void option(const char* name, std::uint64_t* target, const char* help, long long lo,
                long long hi) {
        add(name, help, std::to_string(*target), Kind::U64, target, lo, hi);
    }
    /// A real option accepted only in [lo, hi].
    void option(const char* name, double* target, const char* help, double lo, double hi) {
        add(name, help, format_double(*target), Kind::Double, target, 0, 0);
        options_.back().real_lo = lo, options_.back().real_hi = hi;
    }
    /// A text option (a path).
    void option(const char* name, std::string* target, const char* help) {
        add(name, help, *target, Kind::Text, target, 0, 0);
    }
    /// A text option that must be one of `choices` ("fp16", "bf16").
    void option(const char* name, std::string* target, const char* help, std::vector<std::string> choices) {
        add(name, help, *target, Kind::Choice, target, 0, 0);
        options_.back().choices = std::move(choices);
    }
    /// A comma-separated list of whole numbers, each in [lo, hi] ("1,17,4097").
    void option(const char* name, std::vector<int>* target, const char* help, long long lo, long long hi) {
        std::string text;
        for (int v : *target) text += (text.empty() ? "" : ",") + std::to_string(v);
        add(name, help, text, Kind::IntList, target, lo, hi);
    }

    /// `a` and `b` cannot be given together: one of them would be ignored, or they contradict each
    /// other. `why` finishes the message ("--random-lens and --cache-lens cannot be combined: why").
    void conflict(const char* a, const char* b, const char* why) { conflicts_.push_back({a, b, why}); }
    /// A check of the whole command line, run after it parsed: returns "" or why it is refused.
    void rule(std::function<std::string()> check) { rules_.push_back(std::move(check)); }

    /// Parses argv; on an error prints it with the usage and exits 2; on --help exits 0.
    void parse(int argc, const char* const* argv) {
        std::string error = try_parse(argc, argv);
        if (help_) {
            std::fputs(usage().c_str(), stdout);
            std::exit(kExitOk);
        }
        if (!error.empty()) {
            std::fprintf(stderr, "%s: error: %s\n\n%s", program_.c_str(), error.c_str(),
                         usage().c_str());
            std::exit(kExitBadInput);
        }
    }

    /// Parses argv without exiting. Returns "" on success, else the error message.
    std::string try_parse(int argc, const char* const* argv) {
        for (int a = 1; a < argc; ++a) {
            std::string arg = argv[a];
            if (arg == "--help" || arg == "-h") {
                help_ = true;
                return "";
            }
            std::string value;
            bool has_value = false;
            const std::size_t eq = arg.find('=');
            if (eq != std::string::npos) {
                value = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
                has_value = true;
            }
            Option* opt = find(arg);
            if (opt == nullptr) return "unknown option '" + arg + "'";
            if (opt->kind == Kind::Flag) {
                if (has_value) return "option '" + arg + "' takes no value";
                *static_cast<bool*>(opt->target) = true;
                opt->given = true;
                continue;
            }
            if (!has_value) {
                if (a + 1 >= argc) return "option '" + arg + "' needs a value";
                value = argv[++a];
            }
            std::string error = assign(*opt, value);
            if (!error.empty()) return error;
            opt->given = true;
        }
        for (const Conflict& c : conflicts_)
            if (given(c.a) && given(c.b)) return c.a + " and " + c.b + " cannot be combined: " + c.why;
        for (const auto& check : rules_) {
            const std::string why = check();
            if (!why.empty()) return why;
        }
        return "";
    }

    /// Stops the program on a command line that parsed but cannot run (a combination of values
    /// the program does not support): one line "program: error: why", exit status 2.
    [[noreturn]] void fail(const std::string& why) const {
        std::fprintf(stderr, "%s: error: %s\n", program_.c_str(), why.c_str());
        std::exit(kExitBadInput);
    }

    /// The program's name, as messages start with it.
    const std::string& program() const { return program_; }

    /// True when the user passed this option on the command line.
    bool given(const std::string& name) const {
        for (const Option& o : options_)
            if (o.name == name) return o.given;
        return false;
    }

    /// "" when `value` is in the range of integer option `name`, else why not ("must be in
    /// [1, 4096], the range of --batch"): inputs read from files obey the command line's limits.
    std::string range_error(const char* name, unsigned long long value) const {
        for (const Option& o : options_)
            if (o.name == name && (o.kind == Kind::Int || o.kind == Kind::U64)) {
                if (value <= (unsigned long long)o.hi && (long long)value >= o.lo) return "";
                return "must be in [" + std::to_string(o.lo) + ", " + std::to_string(o.hi) + "], the range of " + o.name;
            }
        return std::string("no integer option ") + name;
    }

    /// The usage text: one line per option with its help and default.
    std::string usage() const {
        std::string u = "usage: " + program_ + " [options]\n" + summary_ + "\n\noptions:\n";
        for (const Option& o : options_) {
            std::string left = "  " + o.name + (o.kind == Kind::Flag ? "" : " <value>");
            if (left.size() < 24) left.resize(24, ' ');
            u += left + " " + o.help;
            const std::string def = o.default_text.empty() ? "" : ", default " + o.default_text;
            if (o.kind == Kind::Int || o.kind == Kind::U64)
                u += " [" + std::to_string(o.lo) + ".." + std::to_string(o.hi) + def + "]";
            else if (o.kind == Kind::IntList)
                u += " [each " + std::to_string(o.lo) + ".." + std::to_string(o.hi) + def + "]";
            else if (o.kind == Kind::Double)
                u += " [" + format_double(o.real_lo) + ".." + format_double(o.real_hi) + def + "]";
            else if (o.kind == Kind::Choice)
                u += " [" + one_of(o.choices) + def + "]";
            else if (o.kind == Kind::Text && !o.default_text.empty())
                u += " [default " + o.default_text + "]";
            u += "\n";
        }
        u += "  --help                 this text\n";
        return u;
    }

private:
    enum class Kind { Flag, Int, U64, Double, Text, Choice, IntList };
    struct Option {
        std::string name, help, default_text;
        Kind kind = Kind::Flag;
        void* target = nullptr;
        long long lo = 0, hi = 0;
        double real_lo = 0, real_hi = 0;
        std::vector<std::string> choices;
        bool given = false;
    };
    struct Conflict {
        std::string a, b, why;
    };

    void add(const char* name, const char* help, std::string default_text, Kind kind, void* target,
             long long lo, long long hi) {
        Option o;
        o.name = name, o.help = help, o.default_text = std::move(default_text);
        o.kind = kind, o.target = target, o.lo = lo, o.hi = hi;
        options_.push_back(std::move(o));
    }

    Option* find(const std::string& name) {
        for (Option& o : options_)
            if (o.name == name) return &o;
        return nullptr;
    }

    static std::string format_double(double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v);
        return buf;
    }

    // "atomic, split or both"
    static std::string one_of(const std::vector<std::string>& choices) {
        std::string out;
        for (std::size_t i = 0; i < choices.size(); ++i)
            out += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
        return out;
    }

    static std::string assign(Option& o, const std::string& text) {
        const std::string bad = "bad value '" + text + "' for " + o.name + ": ";
        if (text.empty()) return bad + "empty";
        switch (o.kind) {
            case Kind::Text:
                *static_cast<std::string*>(o.target) = text;
                return "";
            case Kind::Choice:
                for (const std::string& c : o.choices)
                    if (c == text) {
                        *static_cast<std::string*>(o.target) = text;
                        return "";
                    }
                return bad + "must be " + one_of(o.choices);
            case Kind::IntList: {
                const std::string why = parse_int_list(text, o.lo, o.hi, static_cast<std::vector<int>*>(o.target));
                return why.empty() ? "" : bad + why;
            }
            case Kind::Double: {
                char* end = nullptr;
                errno = 0;
                const double v = std::strtod(text.c_str(), &end);
                if (std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0' || errno == ERANGE || v != v)
                    return bad + "not a number";
                if (v < o.real_lo || v > o.real_hi)
                    return bad + "must be in [" + format_double(o.real_lo) + ", " + format_double(o.real_hi) + "]";
                *static_cast<double*>(o.target) = v;
                return "";
            }
            default: {
                long long v = 0;
                const std::string why = parse_whole_number(text, o.lo, o.hi, &v);
                if (!why.empty()) return bad + why;
                if (o.kind == Kind::Int)
                    *static_cast<int*>(o.target) = int(v);
                else
                    *static_cast<std::uint64_t*>(o.target) = std::uint64_t(v);
                return "";
            }
        }
    }

    std::string program_, summary_;
    std::vector<Option> options_;
    std::vector<Conflict> conflicts_;
    std::vector<std::function<std::string()>> rules_;
    bool help_ = false;
};

/// Options every program has: seed, repeats, and what to skip or save.
struct RunArgs {
    std::uint64_t seed = 20260101;  ///< seed of the random inputs
    int repeat = 20;                ///< timed repetitions (median and min are reported)
    bool no_check = false;          ///< skip validation against the fp64 reference
    bool no_bench = false;          ///< skip timing
    std::string save_npy;           ///< folder to write inputs and outputs as .npy
    std::string load_npy;           ///< folder to read inputs from instead of generating them
    std::string csv;                ///< results file to append one row per timed kernel to
};

/// "" when the run can write where the command line says, else why not: --save-npy names an
/// existing folder this user can write into; --csv a file that can be written, or created in an
/// existing folder. Checked before anything runs, so that a long run never ends on a failed write.
inline std::string output_paths_error(const RunArgs& a) {
    struct stat st {};
    if (!a.save_npy.empty() && (stat(a.save_npy.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)))
        return "--save-npy " + a.save_npy + ": no such folder (create it first)";
    if (!a.save_npy.empty() && access(a.save_npy.c_str(), W_OK) != 0)
        return "--save-npy " + a.save_npy + ": the folder is not writable";
    if (!a.csv.empty()) {
        const std::size_t slash = a.csv.rfind('/');
        const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : a.csv.substr(0, slash);
        const bool exists = stat(a.csv.c_str(), &st) == 0;
        if (exists ? S_ISDIR(st.st_mode) || access(a.csv.c_str(), W_OK) != 0 : access(dir.c_str(), W_OK) != 0)
            return "--csv " + a.csv + ": cannot write this file" + (exists ? "" : " (no writable folder " + dir + ")");
    }
    return "";
}

/// Registers --seed --repeat --no-check --no-bench --csv: --repeat and --csv need timing, so
/// either with --no-bench is refused (one of them would be ignored).
inline void add_run_options(Cli& cli, RunArgs& a) {
    cli.option("--seed", &a.seed, "seed of the random inputs", 0, (1LL << 62));
    cli.option("--repeat", &a.repeat, "timed repetitions (median and min reported)", 1, 10000);
    cli.flag("--no-check", &a.no_check, "skip validation against the fp64 CPU reference");
    cli.flag("--no-bench", &a.no_bench, "skip timing");
    cli.option("--csv", &a.csv, "append one row per timed kernel to this results file");
    cli.conflict("--repeat", "--no-bench", "nothing is timed");
    cli.conflict("--csv", "--no-bench", "rows are written for timed kernels only");
    cli.rule([&a] { return output_paths_error(a); });
}

/// Registers --save-npy --load-npy, for programs that read and write their inputs and outputs as
/// .npy files.
inline void add_npy_options(Cli& cli, RunArgs& a) {
    cli.option("--save-npy", &a.save_npy, "write inputs and outputs as .npy files into this folder");
    cli.option("--load-npy", &a.load_npy, "read inputs from .npy files in this folder");
}

/// Prints a program's last line and returns its exit status: FAIL (kExitFailed) when a check
/// failed, else PASS, or "not checked" when --no-check left nothing to judge (kExitOk).
inline int print_verdict(const RunArgs& a, bool ok) {
    std::printf("%s\n", !ok ? "FAIL" : a.no_check ? "not checked (--no-check)" : "PASS");
    return ok ? kExitOk : kExitFailed;
}

/// The attention problem: shape (batch, heads, seq, head_dim), causal mask and softmax scale.
struct AttentionArgs {
    int batch = 4;         ///< B
    int heads = 8;         ///< H
    int seq = 1024;        ///< N
    int dim = 64;          ///< D (head dimension)
    bool causal = false;   ///< mask keys after the query
    double scale = 0.0;    ///< softmax scale; 0 means 1/sqrt(D)
    int seq_k = 0;         ///< N_k, keys per head; 0 means N (add_cross_attention_options)
    int kv_heads = 0;      ///< H_kv, K/V heads; 0 means H (add_cross_attention_options)
};

/// Registers --batch --heads --seq --dim --causal --scale. Upper bounds keep every tensor index in
/// 32 bits' worth of rows; the programs check the memory the shape needs before allocating.
inline void add_attention_options(Cli& cli, AttentionArgs& a) {
    cli.option("--batch", &a.batch, "batch size B", 1, 4096);
    cli.option("--heads", &a.heads, "attention heads H", 1, 4096);
    cli.option("--seq", &a.seq, "sequence length N", 1, 1 << 20);
    cli.option("--dim", &a.dim, "head dimension D", 1, 1024);
    cli.flag("--causal", &a.causal, "causal mask: query i sees keys 0..i");
    cli.option("--scale", &a.scale, "softmax scale (0 = 1/sqrt(D))", 0.0, 1e6);
}

/// Registers --seq-k (N_k ≠ N: queries and keys of different lengths, the causal diagonal
/// bottom-right) and --kv-heads (grouped-query attention, as chapter 10 spells it). Whether H_kv
/// divides H is the program's check (after parsing, with the other shape checks).
inline void add_cross_attention_options(Cli& cli, AttentionArgs& a) {
    cli.option("--seq-k", &a.seq_k, "keys per head N_k (0 = N); causal: query i sees keys 0..i + N_k - N",
               0, 1 << 20);
    cli.option("--kv-heads", &a.kv_heads, "K/V heads H_kv dividing H (0 = H; 1 is MQA)", 0, 4096);
}

}  // namespace fa
