/// @file emulator_shadow.h
/// @brief The CPU emulator's race check (emulator.h says what it sees and what not): a shadow of
/// the block's shared memory that records who last wrote and read every two bytes and in which
/// barrier interval, and names the first pair of accesses no barrier separates. Included by
/// emulator_runtime.h, which calls it at every access, barrier and cp.async.
#pragma once

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace tc::emu::detail {

/// Bytes of shared memory per shadow cell: the smallest access the kernels make (one 16-bit value).
inline constexpr std::size_t kGranule = 2;
/// Mark::who of a warp-collective access (ldmatrix, wmma): warp·64 + kCollective.
inline constexpr std::uint16_t kCollective = 32;
/// Mark::who flag: a cp.async of that thread is still filling the bytes.
inline constexpr std::uint16_t kPending = 0x8000;

/// One access: when (its warp's stamp, below), who (warp·64 + lane, or warp·64 + kCollective;
/// kPending added while a cp.async fills the bytes), where (an index into the shadow's sites).
struct Mark {
    std::uint32_t stamp = 0;
    std::uint16_t who = 0;
    std::uint16_t site = 0;
};

/// What an access does to the shadow: a load, a store, or a cp.async issued (its bytes pending
/// until the wait_group that completes its group, then written by its thread: Shadow::land).
enum class Mode { kRead, kWrite, kFill };

/// Time is a stamp from a clock that ticks at every __syncthreads, every __syncwarp and the start
/// of every block. A warp's stamp is the clock at its last __syncwarp or __syncthreads, and an
/// access carries its warp's stamp. An earlier access is ordered before a later one of another
/// warp when a __syncthreads came between (its stamp < the block's stamp), before one of the same
/// warp when a __syncwarp or __syncthreads did (its stamp < the warp's stamp); anything of an
/// earlier block is ordered too. Two accesses of the same bytes by different threads, one a write,
/// that are not ordered are a race, whichever the fibers happened to run first.
class Shadow {
  public:
    /// A launch: `bytes` of shared memory at `smem` (which has kMaxSmemBytes), blocks of `warps`.
    void attach(unsigned char* smem, std::size_t bytes, int warps) {
        smem_ = smem, bytes_ = bytes;
        if (cells_.empty()) cells_.resize(kMaxSmemBytes / kGranule);
        warp_stamp_.assign(std::size_t(warps), clock_);
    }
    /// A new block: a clock tick, after which everything before counts as ordered.
    void begin_block(uint3 block) {
        if (clock_ > 0xF0000000u) {  // before the clock wraps: forget every stamp
            std::fill(cells_.begin(), cells_.end(), Cell{});
            clock_ = 0;
        }
        block_begin_ = block_stamp_ = ++clock_;
        std::fill(warp_stamp_.begin(), warp_stamp_.end(), clock_);
        barriers_.clear();
        block_ = block;
    }
    /// Every thread of the block has reached a __syncthreads.
    void barrier() {
        block_stamp_ = ++clock_;
        std::fill(warp_stamp_.begin(), warp_stamp_.end(), clock_);
        barriers_.push_back(clock_);
    }
    /// The 32 lanes of `warp` have reached a __syncwarp.
    void warp_barrier(int warp) { warp_stamp_[std::size_t(warp)] = ++clock_; }

    /// Whether p points into the launch's shared memory buffer (all kMaxSmemBytes of it).
    bool contains(const void* p) const {
        const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(p), base = reinterpret_cast<std::uintptr_t>(smem_);
        return at >= base && at < base + kMaxSmemBytes;
    }

    /// The Mark of an access by `thread` now, made at file:line (by its whole warp if `collective`).
    Mark mark(int thread, bool collective, Access how, const char* file, int line) {
        const int warp = thread / 32;
        return Mark{warp_stamp_[std::size_t(warp)], std::uint16_t(64 * warp + (collective ? kCollective : thread % 32)),
                    site_of(file, line, how)};
    }
    /// The Mark of `thread`'s cp.async of `site` landing now (at its wait_group).
    Mark landing(int thread, std::uint16_t site) const {
        return Mark{warp_stamp_[std::size_t(thread / 32)], std::uint16_t(64 * (thread / 32) + thread % 32), site};
    }

    /// Checks `me`'s access of `bytes` at p against the shadow and records it. Returns false at a
    /// race, or an access outside the block's shared memory; report() then says what happened.
    bool access(const void* p, std::size_t bytes, Mode mode, const Mark& me) {
        const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(p), base = reinterpret_cast<std::uintptr_t>(smem_);
        if (at < base || at + bytes > base + bytes_) return outside(at, base, bytes, me);
        const int warp = me.who / 64;
        Cell* const begin = cells_.data() + (at - base) / kGranule;
        Cell* const end = cells_.data() + (at - base + bytes - 1) / kGranule + 1;
        Mark later = me;
        if (mode == Mode::kFill) later.who |= kPending;  // reported as the cp.async's issue
        for (Cell* c = begin; c != end; ++c) {
            const Mark w = c->write;
            if (pending(w)) {
                return race(mode == Mode::kRead ? Kind::kReadPending : Kind::kWritePending, w, later, c, end,
                            [&](const Cell& x) { return x.write.who == w.who && pending(x.write); });
            }
            if (!(w.who & kPending) && w.who != me.who && !ordered(w, warp)) {
                return race(mode == Mode::kRead ? Kind::kReadAfterWrite : Kind::kWriteAfterWrite, w, later, c, end,
                            [&](const Cell& x) { return x.write.who == w.who && !ordered(x.write, warp); });
            }
            if (mode == Mode::kRead) {
                if (c->read.who / 64 != warp) c->read_other = c->read;
                c->read = me;
                continue;
            }
            for (const Mark r : {c->read, c->read_other})
                if (r.who != me.who && !ordered(r, warp)) {
                    return race(Kind::kWriteAfterRead, r, later, c, end, [&](const Cell& x) {
                        return (x.read.who == r.who && !ordered(x.read, warp)) ||
                               (x.read_other.who == r.who && !ordered(x.read_other, warp));
                    });
                }
            c->write = later;
        }
        return true;
    }
    /// A cp.async's 16 bytes at dst have landed: written by its thread now (`me`: landing()).
    void land(const void* dst, const Mark& me) {
        Cell* c = cells_.data() + (static_cast<const unsigned char*>(dst) - smem_) / kGranule;
        for (Cell* const end = c + 16 / kGranule; c != end; ++c) c->write = me;
    }

    /// The report of the race (or the access outside shared memory) access() returned false for.
    const std::string& report() const { return report_; }

  private:
    /// The shadow of kGranule bytes: the last write, the last read, and the last read by a warp
    /// other than the last reader's (with two warps' readers kept, a write of any warp meets one).
    struct Cell {
        Mark write, read, read_other;
    };
    struct Site {
        const char* file;
        int line;
        Access how;
    };
    enum class Kind { kReadAfterWrite, kWriteAfterRead, kWriteAfterWrite, kReadPending, kWritePending };
    static constexpr std::size_t kSiteCache = 4096;

    /// Whether the earlier access m (not a pending cp.async) is ordered before an access of `warp` now.
    bool ordered(const Mark& m, int warp) const {
        if (m.stamp < block_stamp_) return true;                              // a __syncthreads since
        return m.who / 64 == warp && m.stamp < warp_stamp_[std::size_t(warp)];  // same warp, a __syncwarp since
    }
    /// Whether m is a cp.async of this block still filling its bytes.
    bool pending(const Mark& m) const { return (m.who & kPending) && m.stamp >= block_begin_; }

    /// The index of (file, line, how) in sites_, added on first sight.
    std::uint16_t site_of(const char* file, int line, Access how) {
        const std::size_t h =
            (reinterpret_cast<std::uintptr_t>(file) ^ std::uintptr_t(line) * 0x9E3779B1u ^ std::uintptr_t(how)) % kSiteCache;
        auto same = [&](const Site& x) { return x.file == file && x.line == line && x.how == how; };
        if (same(sites_[site_cache_[h]])) return site_cache_[h];
        std::size_t i = 1;
        while (i < sites_.size() && !same(sites_[i])) ++i;
        if (i > 0xFFFF) return 0;  // "?": more distinct sites than a report needs to tell apart
        if (i == sites_.size()) sites_.push_back(Site{file, line, how});
        return site_cache_[h] = std::uint16_t(i);
    }

    /// `file` without "dir/.." pairs, from its last chapters/, common/ or tests/ on.
    static std::string tidy_path(const char* file) {
        std::vector<std::string> parts;
        std::stringstream in(file);
        for (std::string part; std::getline(in, part, '/');) {
            if (part == ".." && !parts.empty() && parts.back() != "..")
                parts.pop_back();
            else if (!part.empty() && part != ".")
                parts.push_back(part);
        }
        std::size_t from = 0;
        for (std::size_t i = 0; i < parts.size(); ++i)
            if (parts[i] == "chapters" || parts[i] == "common" || parts[i] == "tests") from = i;
        std::string out;
        for (std::size_t i = from; i < parts.size(); ++i) out += (i > from ? "/" : "") + parts[i];
        return out;
    }

    /// "thread 37 (warp 1, lane 5): store at common/tensor_core/tile_io.cuh:55, after __syncthreads #2"
    std::string describe(const Mark& m) const {
        static const char* const kHow[] = {"load", "store", "ldmatrix", "cp.async", "wmma load", "wmma store"};
        const int warp = (m.who & ~kPending) / 64, lane = (m.who & ~kPending) % 64;
        const Site& site = sites_[m.site];
        std::ostringstream out;
        if (lane == kCollective)
            out << "warp " << warp << " (all lanes)";
        else
            out << "thread " << 32 * warp + lane << " (warp " << warp << ", lane " << lane << ")";
        out << ": " << kHow[int(site.how)];
        if (site.how == Access::kCpAsync && !(m.who & kPending)) out << " (landed at its wait_group)";
        out << " at " << tidy_path(site.file) << ":" << site.line << ", ";
        const auto k = std::upper_bound(barriers_.begin(), barriers_.end(), m.stamp) - barriers_.begin();
        if (k == 0)
            out << "before the block's first __syncthreads";
        else
            out << "after __syncthreads #" << k;
        return out.str();
    }

    /// Writes the report of a race between `earlier` and `later` at cell c, over the cells from c
    /// on that still conflict with the same earlier access (`conflicts`), and returns false.
    template <class Conflicts>
    bool race(Kind kind, const Mark& earlier, const Mark& later, const Cell* c, const Cell* end,
              const Conflicts& conflicts) {
        const Cell* last = c + 1;
        while (last != end && conflicts(*last)) ++last;
        const bool same_warp = (earlier.who & ~kPending) / 64 == (later.who & ~kPending) / 64;
        const char* barrier = same_warp ? "no __syncwarp() or __syncthreads() (lanes of one warp)" : "no __syncthreads()";
        std::ostringstream out;
        out << "race on shared memory in block (" << block_.x << ", " << block_.y << ", " << block_.z << "): ";
        switch (kind) {
            case Kind::kReadAfterWrite:
                out << "read-after-write: " << barrier << " between a write and a read of the same bytes, so on a "
                    << "GPU the read may see the bytes before the write";
                break;
            case Kind::kWriteAfterRead:
                out << "write-after-read: " << barrier << " between a read and a write of the same bytes, so on a "
                    << "GPU the write may land before the read (a buffer refilled while another thread still reads it)";
                break;
            case Kind::kWriteAfterWrite:
                out << "write-after-write: " << barrier << " between two writes of the same bytes, so on a GPU "
                    << "either may be the one that stays";
                break;
            case Kind::kReadPending:
                out << "pending cp.async: a read of bytes a cp.async is still filling (a missing cp.async wait, or "
                    << "a read of a stage still being filled: a cp.async lands only at the wait_group that "
                    << "completes its group, and other threads see it only after a __syncthreads() that follows "
                    << "that wait)";
                break;
            case Kind::kWritePending:
                out << "pending cp.async: a write over bytes a cp.async is still filling (it may land after the "
                    << "write)";
                break;
        }
        const std::size_t first = std::size_t(c - cells_.data()) * kGranule;
        out << "\n  bytes " << first << ".." << first + std::size_t(last - c) * kGranule - 1 << " of the block's "
            << bytes_ << " bytes of shared memory\n  first:  " << describe(earlier) << "\n  then:   " << describe(later);
        report_ = out.str();
        return false;
    }

    /// Writes the report of an access outside the block's shared memory and returns false.
    bool outside(std::uintptr_t at, std::uintptr_t base, std::size_t bytes, const Mark& me) {
        std::ostringstream out;
        out << "shared memory: an access of " << bytes << " bytes at "
            << (at >= base && at < base + kMaxSmemBytes ? "byte " + std::to_string(at - base) : "an address")
            << " outside the block's " << bytes_ << " bytes of dynamic shared memory, in block (" << block_.x << ", "
            << block_.y << ", " << block_.z << ")\n  by " << describe(me);
        report_ = out.str();
        return false;
    }

    unsigned char* smem_ = nullptr;
    std::size_t bytes_ = 0;  // the launch's: each block's shared memory
    std::vector<Cell> cells_;  // one per kGranule bytes of kMaxSmemBytes
    std::uint32_t clock_ = 0;
    std::uint32_t block_begin_ = 0;  // the clock when the running block started
    std::uint32_t block_stamp_ = 0;  // the clock at the block's last __syncthreads (or its start)
    std::vector<std::uint32_t> warp_stamp_;  // the clock at each warp's last __syncwarp or __syncthreads
    std::vector<std::uint32_t> barriers_;    // the block's __syncthreads, by stamp: "#k" in a report
    std::vector<Site> sites_{Site{"?", 0, Access::kLoad}};
    std::uint16_t site_cache_[kSiteCache] = {};  // a hash of (file, line, how) -> its index in sites_
    uint3 block_{};
    std::string report_;
};

}  // namespace tc::emu::detail
