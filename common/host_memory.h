/// @file host_memory.h
/// @brief Whether a run fits in this machine's memory, asked before anything is allocated: a shape
/// too large is one line with both numbers and exit status 2, never std::bad_alloc halfway through.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <unistd.h>

#include "exit_codes.h"

namespace fa {

/// Bytes of memory a program can have on this machine now: MemAvailable of /proc/meminfo (what
/// Linux can give without swapping), else the physical memory (sysconf).
inline double host_memory_available() {
    std::ifstream meminfo("/proc/meminfo");
    for (std::string line; std::getline(meminfo, line);)  // "MemAvailable:   24091224 kB"
        if (line.rfind("MemAvailable:", 0) == 0) return std::atof(line.c_str() + 13) * 1024.0;
    return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
}

/// "" when `bytes` fit in `available`; else one sentence with both numbers, naming `what`.
inline std::string host_memory_error(double bytes, double available, const std::string& what) {
    if (bytes <= available) return "";
    char buf[96];
    std::snprintf(buf, sizeof buf, " needs %.2f GB of host memory; this machine has %.2f GB available",
                  bytes / 1e9, available / 1e9);
    return what + buf;
}

/// Exits with kExitBadInput and one line ("chapter5: error: ... needs X GB of host memory; this
/// machine has Y GB available") when `bytes` do not fit in what this machine has available.
inline void require_host_memory(const std::string& program, double bytes, const std::string& what) {
    const std::string why = host_memory_error(bytes, host_memory_available(), what);
    if (why.empty()) return;
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), why.c_str());
    std::exit(kExitBadInput);
}

}  // namespace fa
