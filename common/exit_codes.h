/// @file exit_codes.h
/// @brief The exit status of every program of the course (the top README's table), and how a
/// program turns an exception into one line and one of them.
///
/// A script can tell the four outcomes apart without reading the output: 0 every check passed, 1 a
/// check failed, 2 the input was refused before any GPU work, 3 no GPU that can run the request.
#pragma once

#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>

namespace fa {

/// What a program's exit status means; every program returns one of these.
enum ExitCode : int {
    kExitOk = 0,        ///< every check passed (with --no-check: the run finished, nothing judged)
    kExitFailed = 1,    ///< a check failed, or a CUDA error or a failed write stopped the run
    kExitBadInput = 2,  ///< usage, an option, an input file, or a run too large for this machine's
                        ///< memory: refused before the GPU is looked at
    kExitNoGpu = 3,     ///< no CUDA device, or the one there cannot run the request (compute
                        ///< capability, free memory, shared memory per block)
};

/// The handler of a program's `main` (a function-try-block: `int main(...) try { ... } catch
/// (...) { return fa::exit_status_of_exception("chapter5"); }`): prints the exception as one line
/// and returns its exit status. Memory the host could not give is bad input (the run is too large
/// for this machine, as require_host_memory says beforehand when it can); anything else stopped
/// the run.
inline int exit_status_of_exception(const char* program) noexcept {
    try {
        throw;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "%s: error: out of host memory (the run is too large for this machine)\n", program);
        return kExitBadInput;
    } catch (const std::length_error& e) {
        std::fprintf(stderr, "%s: error: an array is too large for this machine (%s)\n", program, e.what());
        return kExitBadInput;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    } catch (...) {
        std::fprintf(stderr, "%s: error: unknown exception\n", program);
    }
    return kExitFailed;
}

}  // namespace fa
