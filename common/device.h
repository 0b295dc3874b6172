/// @file device.h
/// @brief The GPU a program runs on: finding it, describing it, owning its memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "check.h"
#include "exit_codes.h"

namespace fa {

/// Number of usable CUDA devices; 0 when there is no device or no driver (never exits).
inline int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the error so later calls start clean
        return 0;
    }
    return n;
}

/// What programs need to know about the device, read once.
struct DeviceInfo {
    int id = 0;
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    std::size_t smem_per_block = 0;        ///< default dynamic+static limit (48 KB)
    std::size_t smem_per_block_optin = 0;  ///< limit after cudaFuncSetAttribute
    std::size_t smem_per_sm = 0;
    std::size_t l2_bytes = 0;
    std::size_t global_bytes = 0;
};

/// Reads the current device's properties.
inline DeviceInfo device_info() {
    DeviceInfo d;
    CUDA_CHECK(cudaGetDevice(&d.id));
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, d.id));
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.sm_count = p.multiProcessorCount;
    d.smem_per_block = p.sharedMemPerBlock;
    d.smem_per_block_optin = p.sharedMemPerBlockOptin;
    d.smem_per_sm = p.sharedMemPerMultiprocessor;
    d.l2_bytes = std::size_t(p.l2CacheSize);
    d.global_bytes = p.totalGlobalMem;
    return d;
}

/// SMs of the device current at the first call, read once: for launches that size their grid by
/// the SM count on every call (chapter 9's persistent grid, chapter 10's split heuristic).
inline int sm_count() {
    static const int sms = device_info().sm_count;
    return sms;
}

/// Free device memory in bytes, right now.
inline std::size_t device_free_bytes() {
    std::size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
}

/// Prints the device summary every GPU program starts with.
inline void print_device_info(const DeviceInfo& d) {
    int runtime = 0, driver = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    std::printf("device %d: %s (compute capability %d.%d), %d SMs, CUDA runtime %d.%d, driver API %d.%d\n",
                d.id, d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count, runtime / 1000,
                (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10);
    std::printf("  shared memory: %zu KB per block (%zu KB opt-in), %zu KB per SM; L2 %.0f MB; "
                "memory %.1f GB total, %.1f GB free\n",
                d.smem_per_block / 1024, d.smem_per_block_optin / 1024, d.smem_per_sm / 1024,
                d.l2_bytes / 1048576.0, d.global_bytes / 1e9, device_free_bytes() / 1e9);
}

/// Exits with a clear message and kExitNoGpu when `bytes` of device memory are needed but fewer
/// are free: this GPU cannot run the request.
inline void require_free_memory(std::size_t bytes, const char* what) {
    const std::size_t free_b = device_free_bytes();
    if (bytes <= free_b) return;
    std::fprintf(stderr, "%s needs %.2f GB of device memory, but only %.2f GB are free on this GPU.\n",
                 what, bytes / 1e9, free_b / 1e9);
    std::exit(kExitNoGpu);
}

/// Exits with one clear message and kExitNoGpu when no CUDA device is present; otherwise returns
/// (and prints) it. Programs call it after every input is checked, so that bad input is exit
/// status 2 on any machine.
inline DeviceInfo require_device(const char* program, bool print = true) {
    if (cuda_device_count() == 0) {
        std::fprintf(stderr, "%s: no CUDA device found; this program runs its kernels on an NVIDIA GPU ('make test' "
                             "checks the CPU parts of the course without one)\n", program);
        std::exit(kExitNoGpu);
    }
    DeviceInfo d = device_info();
    if (print) print_device_info(d);
    return d;
}

/// The current device's shared-memory limit per block after opting in (what cudaFuncSetAttribute
/// can raise a kernel's limit to). Read from the driver once per device and remembered, so launch
/// code may ask before every launch; device_info() reads every property and is for programs' start.
inline std::size_t smem_per_block_optin() {
    static std::mutex mutex;
    static std::map<int, std::size_t> known;
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mutex);
    auto it = known.find(device);
    if (it == known.end()) {
        int bytes = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        it = known.emplace(device, std::size_t(bytes)).first;
    }
    return it->second;
}

/// Allows `kernel` to use `bytes` of dynamic shared memory. Above the default 48 KB this raises the
/// kernel's limit with cudaFuncSetAttribute; above what the device allows at all, it prints what
/// was asked and what the device has, and exits with kExitNoGpu.
template <class Kernel>
void allow_dynamic_smem(Kernel kernel, std::size_t bytes, const char* what) {
    const DeviceInfo d = device_info();
    if (bytes > d.smem_per_block_optin) {
        std::fprintf(stderr,
                     "%s needs %zu bytes (%.1f KB) of shared memory per block, but %s allows at most "
                     "%zu bytes (%.1f KB). Choose smaller tiles.\n",
                     what, bytes, bytes / 1024.0, d.name.c_str(), d.smem_per_block_optin,
                     d.smem_per_block_optin / 1024.0);
        std::exit(kExitNoGpu);
    }
    CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

/// allow_dynamic_smem for `kernel` the first time it is called with it on the current device,
/// nothing afterwards: the launch code of every chapter calls it before each launch (reading the
/// device properties once per kernel and device, not once per launch); asked for more bytes later,
/// it raises the limit again. One process may drive several GPUs (chapter 12's NCCL ranks), and
/// the limit set on one does not hold on another.
template <class Kernel>
void allow_dynamic_smem_once(Kernel kernel, std::size_t bytes, const char* what) {
    static std::mutex mutex;
    static std::map<std::pair<int, const void*>, std::size_t> allowed;  // the limit is each device's own
    std::lock_guard<std::mutex> lock(mutex);
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const std::pair<int, const void*> key{device, reinterpret_cast<const void*>(kernel)};
    const auto it = allowed.find(key);
    if (it != allowed.end() && it->second >= bytes) return;
    allow_dynamic_smem(kernel, bytes, what);
    allowed[key] = bytes;
}

/// What the compiler and the occupancy calculator say about one kernel: the "resources" line
/// chapters 7–9 print under each kernel (a spill shows as local_bytes > 0).
struct KernelResources {
    int registers = 0;            ///< registers per thread
    std::size_t local_bytes = 0;  ///< local memory per thread (spills): 0 is what we want
    int threads = 0;              ///< threads per block
    int smem_bytes = 0;           ///< dynamic shared memory per block
    int blocks_per_sm = 0;        ///< resident blocks per SM (occupancy calculator)
};

/// The resources of `kernel` launched with `threads` threads and `smem_bytes` of dynamic shared
/// memory (raised for it first, as its launch does, or the occupancy calculator would refuse it).
template <class Kernel>
KernelResources kernel_resources(Kernel kernel, int threads, int smem_bytes, const char* what) {
    allow_dynamic_smem_once(kernel, std::size_t(smem_bytes), what);
    const void* k = reinterpret_cast<const void*>(kernel);
    cudaFuncAttributes a{};
    CUDA_CHECK(cudaFuncGetAttributes(&a, k));
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, threads, std::size_t(smem_bytes)));
    return {a.numRegs, a.localSizeBytes, threads, smem_bytes, blocks};
}

/// Bytes this process holds in DeviceBuffers now: what its runs allocate, whatever other processes
/// on the GPU do meanwhile (cudaMemGetInfo counts theirs too).
inline std::atomic<std::size_t>& device_buffer_bytes() {
    static std::atomic<std::size_t> held{0};
    return held;
}

/// An owning device array of n elements of T (move-only).
template <class T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t n) : n_(n) {
        if (n_ > 0) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes()));
        device_buffer_bytes() += bytes();
    }
    explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
    ~DeviceBuffer() {
        cudaFree(ptr_);
        device_buffer_bytes() -= bytes();
    }
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr, o.n_ = 0; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(ptr_, o.ptr_);
        std::swap(n_, o.n_);
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return ptr_; }
    std::size_t size() const { return n_; }
    std::size_t bytes() const { return n_ * sizeof(T); }

    /// Copies host data in (sizes must match).
    void upload(const std::vector<T>& host) {
        if (host.size() != n_) {
            std::fprintf(stderr, "DeviceBuffer::upload: %zu elements into a buffer of %zu\n",
                         host.size(), n_);
            std::exit(kExitFailed);
        }
        CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
    }
    /// Copies the buffer out.
    std::vector<T> download() const {
        std::vector<T> host(n_);
        CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
        return host;
    }
    /// Fills every byte with 0xFF: NaN in float, half and bfloat16, so unwritten outputs fail checks.
    void poison() { CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes())); }
    /// Fills with zeros.
    void zero() { CUDA_CHECK(cudaMemset(ptr_, 0, bytes())); }

private:
    T* ptr_ = nullptr;
    std::size_t n_ = 0;
};

}  // namespace fa
