/// @file cli.h
/// @brief The one command-line parser every program of the course uses.
///
/// A program registers its options (each bound to a variable, with a range), then calls parse().
/// Unknown flags, missing values, non-numbers and values outside the range print one clear message
/// and the usage, and exit with status 2. `--help` prints the usage and exits 0.
///
/// ```
/// fa::Cli cli("chapter5", "FlashAttention-2 forward");
/// fa::RunArgs run;        fa::add_run_options(cli, run);
/// fa::AttentionArgs attn; fa::add_attention_options(cli, attn);
/// int kernel = 2;         cli.option("--kernel", &kernel, "kernel variant", 1, 2);
/// cli.parse(argc, argv);
/// ```
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace fa {

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
        add(name, help, std::to_string(*target), Kind::Int, target, double(lo), double(hi));
    }
    /// A 64-bit unsigned option (seeds) accepted only in [lo, hi].
    void option(const char* name, std::uint64_t* target, const char* help, long long lo,
                long long hi) {
        add(name, help, std::to_string(*target), Kind::U64, target, double(lo), double(hi));
    }
    /// A real option accepted only in [lo, hi].
    void option(const char* name, double* target, const char* help, double lo, double hi) {
        add(name, help, format_double(*target), Kind::Double, target, lo, hi);
    }
    /// A text option (a path, a list).
    void option(const char* name, std::string* target, const char* help) {
        add(name, help, *target, Kind::Text, target, 0, 0);
    }

    /// Parses argv; on an error prints it with the usage and exits 2; on --help exits 0.
    void parse(int argc, const char* const* argv) {
        std::string error = try_parse(argc, argv);
        if (help_) {
            std::fputs(usage().c_str(), stdout);
            std::exit(0);
        }
        if (!error.empty()) {
            std::fprintf(stderr, "%s: error: %s\n\n%s", program_.c_str(), error.c_str(),
                         usage().c_str());
            std::exit(2);
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
        return "";
    }

    /// True when the user passed this option on the command line.
    bool given(const char* name) const {
        for (const Option& o : options_)
            if (o.name == name) return o.given;
        return false;
    }

    /// "" when `value` is in the range of integer option `name`, else why not ("must be in
    /// [1, 4096], the range of --batch"): inputs read from files obey the command line's limits.
    std::string range_error(const char* name, unsigned long long value) const {
        for (const Option& o : options_)
            if (o.name == name && (o.kind == Kind::Int || o.kind == Kind::U64)) {
                if (double(value) >= o.lo && double(value) <= o.hi) return "";
                return "must be in [" + std::to_string((long long)o.lo) + ", " +
                       std::to_string((long long)o.hi) + "], the range of " + o.name;
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
            if (o.kind == Kind::Int || o.kind == Kind::U64)
                u += " [" + std::to_string((long long)o.lo) + ".." + std::to_string((long long)o.hi) +
                     ", default " + o.default_text + "]";
            else if (o.kind == Kind::Double)
                u += " [" + format_double(o.lo) + ".." + format_double(o.hi) + ", default " +
                     o.default_text + "]";
            else if (o.kind == Kind::Text && !o.default_text.empty())
                u += " [default " + o.default_text + "]";
            u += "\n";
        }
        u += "  --help                 this text\n";
        return u;
    }

private:
    enum class Kind { Flag, Int, U64, Double, Text };
    struct Option {
        std::string name, help, default_text;
        Kind kind;
        void* target;
        double lo, hi;
        bool given;
    };

    void add(const char* name, const char* help, std::string default_text, Kind kind, void* target,
             double lo, double hi) {
        options_.push_back({name, help, std::move(default_text), kind, target, lo, hi, false});
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

    static std::string assign(Option& o, const std::string& text) {
        const std::string bad = "bad value '" + text + "' for " + o.name;
        if (o.kind == Kind::Text) {
            if (text.empty()) return bad + ": empty";
            *static_cast<std::string*>(o.target) = text;
            return "";
        }
        if (text.empty()) return bad + ": empty";
        char* end = nullptr;
        errno = 0;
        if (o.kind == Kind::Double) {
            const double v = std::strtod(text.c_str(), &end);
            if (*end != '\0' || errno == ERANGE || v != v) return bad + ": not a number";
            if (v < o.lo || v > o.hi)
                return bad + ": must be in [" + format_double(o.lo) + ", " + format_double(o.hi) + "]";
            *static_cast<double*>(o.target) = v;
            return "";
        }
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (*end != '\0' || errno == ERANGE) return bad + ": not a whole number";
        if (double(v) < o.lo || double(v) > o.hi)
            return bad + ": must be in [" + std::to_string((long long)o.lo) + ", " +
                   std::to_string((long long)o.hi) + "]";
        if (o.kind == Kind::Int)
            *static_cast<int*>(o.target) = int(v);
        else
            *static_cast<std::uint64_t*>(o.target) = std::uint64_t(v);
        return "";
    }

    std::string program_, summary_;
    std::vector<Option> options_;
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

/// Registers --seed --repeat --no-check --no-bench --save-npy --load-npy --csv.
inline void add_run_options(Cli& cli, RunArgs& a) {
    cli.option("--seed", &a.seed, "seed of the random inputs", 0, (1LL << 62));
    cli.option("--repeat", &a.repeat, "timed repetitions (median and min reported)", 1, 10000);
    cli.flag("--no-check", &a.no_check, "skip validation against the fp64 CPU reference");
    cli.flag("--no-bench", &a.no_bench, "skip timing");
    cli.option("--save-npy", &a.save_npy, "write inputs and outputs as .npy files into this folder");
    cli.option("--load-npy", &a.load_npy, "read inputs from .npy files in this folder");
    cli.option("--csv", &a.csv, "append one row per timed kernel to this results file");
}

/// Prints a program's last line and returns its exit status: FAIL (1) when a check failed, else
/// PASS, or "not checked" when --no-check left nothing to judge (a timing run passes nothing) (0).
inline int print_verdict(const RunArgs& a, bool ok) {
    std::printf("%s\n", !ok ? "FAIL" : a.no_check ? "not checked (--no-check)" : "PASS");
    return ok ? 0 : 1;
}

/// The attention problem: shape (batch, heads, seq, head_dim), causal mask and softmax scale.
struct AttentionArgs {
    int batch = 4;         ///< B
    int heads = 8;         ///< H
    int seq = 1024;        ///< N
    int dim = 64;          ///< D (head dimension)
    bool causal = false;   ///< mask keys after the query
    double scale = 0.0;    ///< softmax scale; 0 means 1/sqrt(D)
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

}  // namespace fa
