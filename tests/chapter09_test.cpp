// Tests of chapter 9: the FlashAttention forward on Hopper (wgmma, TMA, warp specialization,
// pingpong, intra-warpgroup overlap, TMA store).
//
// [cpu]: the 128-byte swizzle (a bijection, TMA's address rule), the wgmma descriptor fields and
// the k-step offsets, the TMA box parameters, the ring protocol of step 3 and the turns of steps
// 4-6 (two consumers alternating, three going round) in random interleavings, step 6's persistent
// grid (its order of work items; a block's items in random interleavings: the ring over items,
// q_full/q_empty, the turns), step 6's staging of O, the step configurations and step 6's tile
// candidates, argument checks, and the CPU mirror at the chapter's B_c (chapter 7's, B_c = 128).
// [gpu][sm90] (compute capability 9.0 only; on another GPU tests/main.cpp skips them visibly):
// every step on N ∈ {1, 17, 113, 1023, 4097, 16384}, causal and not, D = 64 and 128, bf16 and
// fp16, B·H > 1, with large scores, against the 2× rule with outputs poisoned; and writes past the
// end of O and L; every tile candidate of step 6 on the same kind of grid, and the persistent ones
// with more work items than the GPU has SMs (so a block runs several); the wgmma peak's rate.
// A kernel whose barrier waits never complete would spin forever: every launch is waited for
// with a time limit (finish_or_stop), past which the program stops with a message.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../chapters/09_hopper/chapter9.h"
#include "../chapters/09_hopper/kernel/hopper_config.h"
#include "../chapters/09_hopper/kernel/hopper_layout.h"
#include "../common/attention.h"
#include "../common/attention_gpu.h"
#include "../common/device.h"
#include "../common/dtype.h"
#include "../common/math.h"
#include "../common/reference.h"
#include "gpu_wait.h"
#include "support.h"

using namespace tc::hopper;

namespace {

bool have_sm90() {
    if (fa::cuda_device_count() == 0) return false;
    const std::string why = ch9::device_unsupported_reason(fa::device_info());
    if (!why.empty()) WARN(why);
    return why.empty();
}

template <class T>
fa::AttnProblem rounded_problem(const fa::AttnShape& s, std::uint64_t seed, double magnitude) {
    fa::AttnProblem p = fa::make_problem(s, seed, magnitude);
    fa::round_to<T>(p.Q);
    fa::round_to<T>(p.K);
    fa::round_to<T>(p.V);
    return p;
}

void finish_or_stop(const std::string& what) { fa::test::finish_or_stop("chapter09_test", what); }

// One kernel of a test: a variant and, for step 6, a tile candidate (−1: the default).
struct Kernel {
    int variant, candidate = -1;
};

// Runs `kernels` on each shape (inputs made once per shape, outputs poisoned before each run)
// and checks O and L with the 2× rule against chapter 7's CPU mirror at each kernel's B_c.
template <class T>
void check_rule_on(const std::vector<fa::AttnShape>& shapes, const std::vector<Kernel>& kernels,
                   double magnitude = 1.0) {
    for (const fa::AttnShape& s : shapes) {
        const std::uint64_t seed = 11 + std::uint64_t(s.N);
        const fa::AttnProblem p = rounded_problem<T>(s, seed, magnitude);
        fa::DeviceAttention<T> d(p);
        std::map<int, ch7::MirrorErrors> mirrors;  // by B_c
        for (const Kernel& k : kernels) {
            const int Bc = ch9::tiles(k.variant, s.D, k.candidate).Bc;
            if (!mirrors.count(Bc)) mirrors.emplace(Bc, ch7::mirror_errors<T>(p, Bc));
            d.poison_outputs();
            ch9::forward<T>(k.variant, s, d.Q.get(), d.K.get(), d.V.get(), d.O.get(), d.L.get(), k.candidate);
            const std::string what = std::string(fa::dtype_name<T>()) + " " + s.str() + " magnitude " +
                                     std::to_string(magnitude) + " kernel " + ch9::variant_name(k.variant) +
                                     " candidate " + std::to_string(k.candidate);
            finish_or_stop(what);
            const std::vector<float> O = d.O_host(), L = d.L_host();
            const ch7::RuleVerdict verdict =
                ch7::low_precision_rule(fa::check_forward(p, O.data(), L.data()), mirrors.at(Bc));
            INFO(what << "\n" << verdict.text);
            CHECK(verdict.ok);
        }
    }
}

// The chapter's grid: N ∈ {1, 17, 113, 1023, 4097, 16384} (small mode: up to 113), causal and
// not, D = 64 and 128, B·H ∈ {2, 6}; both dtypes; then large scores (magnitude 4: scores of
// several hundred, e^S alone overflows fp32).
void gpu_grid(const std::vector<Kernel>& variants) {
    const bool small = fa::test::small_shapes();
    const std::vector<int> Ns = small ? std::vector<int>{1, 17, 113} : std::vector<int>{1, 17, 113, 1023, 4097, 16384};
    std::vector<fa::AttnShape> shapes;
    for (bool causal : {false, true})
        for (int D : {64, 128})
            for (int N : Ns) shapes.push_back(fa::make_shape(N >= 4097 ? 1 : 2, N >= 4097 ? 2 : 3, N, D, causal));
    check_rule_on<__nv_bfloat16>(shapes, variants);
    check_rule_on<__half>(shapes, variants);
    std::vector<fa::AttnShape> large;
    for (bool causal : {false, true})
        for (int D : {64, 128}) large.push_back(fa::make_shape(1, 2, 257, D, causal));
    check_rule_on<__half>(large, variants, 4.0);
    check_rule_on<__nv_bfloat16>(large, variants, 4.0);
}

// A few shapes of several tiles each (the ring wraps around more than once), quick enough for
// the exercises: any stage, phase or fence mistake shows here.
void quick_variant(int variant) {
    std::vector<fa::AttnShape> shapes;
    for (bool causal : {false, true})
        for (int D : {64, 128}) shapes.push_back(fa::make_shape(2, 2, 1000, D, causal));
    check_rule_on<__nv_bfloat16>(shapes, {{variant}});
}

// The kernel writes every element of O and L and nothing past their ends (a whole block of rows
// of padding, poisoned).
void bounds_variant(int variant) {
    for (int D : {64, 128}) {
        const fa::AttnShape s = fa::make_shape(1, 2, 17, D, true);
        const fa::AttnProblem p = rounded_problem<__nv_bfloat16>(s, 9, 1.0);
        fa::DeviceAttention<__nv_bfloat16> d(p);
        const std::size_t pad = 4096;
        fa::DeviceBuffer<__nv_bfloat16> O(s.elements() + pad);
        fa::DeviceBuffer<float> L(s.rows() + pad);
        O.poison(), L.poison();
        ch9::forward<__nv_bfloat16>(variant, s, d.Q.get(), d.K.get(), d.V.get(), O.get(), L.get());
        finish_or_stop("kernel " + ch9::variant_name(variant) + " (bounds)");
        const std::vector<__nv_bfloat16> o = O.download();
        const std::vector<float> l = L.download();
        INFO("D " << D << " kernel " << ch9::variant_name(variant));
        bool untouched = true, written = true;
        for (std::size_t i = s.elements(); i < o.size(); ++i) untouched &= std::isnan(fa::to_float(o[i]));
        for (std::size_t i = s.rows(); i < l.size(); ++i) untouched &= std::isnan(l[i]);
        for (std::size_t i = 0; i < s.elements(); ++i) written &= std::isfinite(fa::to_float(o[i]));
        for (std::size_t i = 0; i < s.rows(); ++i) written &= std::isfinite(l[i]);
        CHECK(untouched);
        CHECK(written);
    }
}

// ---- the ring protocol of step 3, run on the CPU ------------------------------------------------
// A model of the mbarrier (PTX ISA): a phase completes when its arrivals (and, for "full", the
// bytes of the TMA) are in; waiting for parity p succeeds once the phase of parity p has completed,
// i.e. when the number of completed phases c has c mod 2 != p. One producer and `consumers`
// consumers run `tiles` tiles through `stages` buffers in a random interleaving; the TMA's bytes
// land at a random later moment. Returns an empty string when every consumer read every tile from
// a buffer holding it and the producer never overwrote a buffer some consumer had not released;
// otherwise what went wrong.
struct RingParities {
    std::uint32_t (*full)(int, int);
    std::uint32_t (*empty)(int, int);
};

std::string run_ring(int stages, int consumers, int tiles, std::uint32_t seed, RingParities parity) {
    struct Barrier {
        int completed = 0, arrivals = 0;
        bool passed(std::uint32_t p) const { return std::uint32_t(completed & 1) != p; }
    };
    std::vector<Barrier> full(static_cast<std::size_t>(stages)), empty(static_cast<std::size_t>(stages));
    std::vector<int> holds(static_cast<std::size_t>(stages), -1), released(static_cast<std::size_t>(tiles), 0), landing;
    std::vector<int> next(static_cast<std::size_t>(consumers), 0);
    int produced = 0;
    std::uint32_t rng = seed * 2654435761u + 1;
    auto random = [&](int n) { rng = rng * 1664525u + 1013904223u; return int((rng >> 8) % std::uint32_t(n)); };
    for (int steps = 0; steps < 100000; ++steps) {
        std::vector<int> moves;  // 0: producer, 1..consumers: a consumer, -1 - k: landing k
        if (produced < tiles && (produced < stages || empty[std::size_t(ch9::ring_stage(produced, stages))].passed(
                                                          parity.empty(produced, stages))))
            moves.push_back(0);
        for (int c = 0; c < consumers; ++c) {
            const int j = next[std::size_t(c)];
            if (j < tiles && full[std::size_t(ch9::ring_stage(j, stages))].passed(parity.full(j, stages)))
                moves.push_back(1 + c);
        }
        for (std::size_t k = 0; k < landing.size(); ++k) moves.push_back(-1 - int(k));
        if (moves.empty()) {
            for (int c = 0; c < consumers; ++c)
                if (next[std::size_t(c)] < tiles) return "deadlock: consumer waits for tile " + std::to_string(next[std::size_t(c)]);
            return produced == tiles ? "" : "deadlock: the producer waits";
        }
        const int m = moves[std::size_t(random(int(moves.size())))];
        if (m == 0) {  // the producer issues tile `produced` (its bytes land later)
            const int s = ch9::ring_stage(produced, stages);
            if (holds[std::size_t(s)] >= 0 && released[std::size_t(holds[std::size_t(s)])] < consumers)
                return "tile " + std::to_string(produced) + " overwrites tile " + std::to_string(holds[std::size_t(s)]) +
                       " before every consumer released it";
            landing.push_back(produced++);
        } else if (m > 0) {  // a consumer computes its next tile, then releases the buffer
            const int c = m - 1, j = next[std::size_t(c)], s = ch9::ring_stage(j, stages);
            if (holds[std::size_t(s)] != j)
                return "consumer " + std::to_string(c) + " read tile " + std::to_string(holds[std::size_t(s)]) +
                       " for tile " + std::to_string(j);
            ++released[std::size_t(j)];
            if (++empty[std::size_t(s)].arrivals == consumers) empty[std::size_t(s)].arrivals = 0, ++empty[std::size_t(s)].completed;
            ++next[std::size_t(c)];
        } else {  // the TMA's bytes of a tile land: its buffer holds it, the full phase completes
            const std::size_t k = std::size_t(-1 - m);
            const int j = landing[k], s = ch9::ring_stage(j, stages);
            holds[std::size_t(s)] = j;
            ++full[std::size_t(s)].completed;
            landing.erase(landing.begin() + std::ptrdiff_t(k));
        }
    }
    return "no end after 100000 steps";
}

// ---- the consumers' turns of steps 4–6 and the items of a persistent block, run on the CPU -------
// The schedule functions of hopper_config.h, as a table, so the checker below can be handed a
// planted mistake.
struct TurnSchedule {
    int (*count)(int Tc);
    int (*s_tile)(int k, int Tc);
    int (*pv_tile)(int k);
    int (*next_barrier)(int wg, int consumers);
    bool (*opens_first)(int wg, int consumers);
    bool (*hands_over)(int wg, int k, int Tc, int consumers);
    int (*s_wait_depth)(bool overlap, bool turn_has_pv);
};
const TurnSchedule kKernelTurns{ch9::turn_count,        ch9::turn_s_tile, ch9::turn_pv_tile, ch9::next_turn_barrier,
                                ch9::opens_first_turn, ch9::hands_over,  ch9::s_wait_depth};

// Step 6, persistent: how hopper_forward_kernel passes from one work item to the next, as a table
// for the same reason.
struct ItemProtocol {
    std::uint32_t (*q_parity)(int n);  // the phase of q_full item n waits for (of q_empty: item n + 1)
    bool wait_q_empty;                 // the producer waits on q_empty before the Q of item n >= 1
    bool arrive_after_store;           // a consumer arrives on q_empty after its TMA store, not before
    bool running_ring;                 // the ring's tile count runs on over the items (not from 0 again)
    bool reopen_turns;                 // the last consumer opens the turns at every item (not only the first)
};
const ItemProtocol kKernelItems{ch9::q_parity, true, true, true, true};

// One operation of a consumer warpgroup (in the order consume_in_turns, or step 3's loop, then
// store_o_tma run them) or of the producer.
enum class Op {
    kWaitQ, kWaitFull, kSync, kIssueS, kIssuePv, kArrive, kWaitGroups, kSoftmax, kRescaleO, kRelease, kPack,
    kStageO, kStoreO, kWaitStore, kArriveQEmpty,  // step 6: O through the Q tile; q_empty
    kLoadKv, kWaitQEmpty, kLoadQ                  // the producer's
};
struct Step {
    Op op;
    int arg;       // tile (counted over the block's items), item, barrier id, parity or wait_group depth
    int ring = 0;  // K/V operations: the ring index the code uses for the tile (its stage, parities)
};

// The programs of one block over work items of Tcs[n] key tiles: each consumer's (turns: the
// order of consume_in_turns with the schedule `ts`, step 4 with overlap false, steps 5–6 true;
// no turns: step 3's loop, each product waited for at once) and the producer's, passing from item
// to item as `ip` says. Step 4's softmax rescales O itself (kSoftmax then kRescaleO at once); step
// 5's rescale waits for the P̃·V.
struct Programs {
    std::vector<std::vector<Step>> consumer;
    std::vector<Step> producer;
};
Programs block_programs(int consumers, const std::vector<int>& Tcs, int stages, bool turns, bool overlap,
                        const TurnSchedule& ts, const ItemProtocol& ip) {
    Programs pr;
    pr.consumer.resize(static_cast<std::size_t>(consumers));
    int first = 0;  // the item's first tile, counted over the block's items
    for (int n = 0; n < int(Tcs.size()); ++n) {
        const int Tc = Tcs[static_cast<std::size_t>(n)], ring0 = ip.running_ring ? first : 0;
        auto tile = [&](Op op, int j) { return Step{op, first + j, ring0 + j}; };
        // the producer: from item 1 on, the first tiles of the item, then q_empty, then its Q
        const int ahead = n > 0 ? std::min(stages, Tc) : 0;
        for (int j = 0; j < ahead; ++j) pr.producer.push_back(tile(Op::kLoadKv, j));
        if (n > 0 && ip.wait_q_empty) pr.producer.push_back({Op::kWaitQEmpty, int(ip.q_parity(n - 1))});
        pr.producer.push_back({Op::kLoadQ, n});
        for (int j = ahead; j < Tc; ++j) pr.producer.push_back(tile(Op::kLoadKv, j));
        for (int wg = 0; wg < consumers; ++wg) {
            std::vector<Step>& prog = pr.consumer[static_cast<std::size_t>(wg)];
            prog.push_back({Op::kWaitQ, n});
            if (!turns) {
                for (int j = 0; j < Tc; ++j) {
                    prog.push_back(tile(Op::kWaitFull, j));
                    prog.push_back(tile(Op::kIssueS, j));
                    prog.push_back({Op::kWaitGroups, 0});
                    for (Op op : {Op::kSoftmax, Op::kRescaleO, Op::kPack, Op::kIssuePv}) prog.push_back(tile(op, j));
                    prog.push_back({Op::kWaitGroups, 0});
                    prog.push_back(tile(Op::kRelease, j));
                }
            } else {
                if (ts.opens_first(wg, consumers) && (n == 0 || ip.reopen_turns))
                    prog.push_back({Op::kArrive, ts.next_barrier(wg, consumers)});
                for (int k = 0; k < ts.count(Tc); ++k) {
                    const int j = ts.s_tile(k, Tc), jp = ts.pv_tile(k);
                    if (j >= 0) prog.push_back(tile(Op::kWaitFull, j));
                    prog.push_back({Op::kSync, ch9::turn_barrier(wg)});
                    if (j >= 0) prog.push_back(tile(Op::kIssueS, j));
                    if (jp >= 0) prog.push_back(tile(Op::kIssuePv, jp));
                    if (ts.hands_over(wg, k, Tc, consumers)) prog.push_back({Op::kArrive, ts.next_barrier(wg, consumers)});
                    if (j < 0) {
                        prog.push_back({Op::kWaitGroups, 0});
                        if (jp >= 0) prog.push_back(tile(Op::kRelease, jp));
                        continue;
                    }
                    if (!overlap) {
                        prog.push_back({Op::kWaitGroups, 0});
                        if (jp >= 0) prog.push_back(tile(Op::kRelease, jp));
                        prog.push_back(tile(Op::kSoftmax, j));
                        prog.push_back(tile(Op::kRescaleO, j));
                    } else {
                        prog.push_back({Op::kWaitGroups, ts.s_wait_depth(true, jp >= 0)});
                        prog.push_back(tile(Op::kSoftmax, j));
                        prog.push_back({Op::kWaitGroups, 0});
                        if (jp >= 0) prog.push_back(tile(Op::kRelease, jp));
                        prog.push_back(tile(Op::kRescaleO, j));
                    }
                    prog.push_back(tile(Op::kPack, j));
                }
            }
            // store_o_tma: O written over the warpgroup's rows of Q, the TMA store, its wait
            prog.push_back({Op::kStageO, n});
            prog.push_back({Op::kStoreO, n});
            if (ip.arrive_after_store) prog.push_back({Op::kWaitStore, n});
            prog.push_back({Op::kArriveQEmpty, n});
            if (!ip.arrive_after_store) prog.push_back({Op::kWaitStore, n});
        }
        first += Tc;
    }
    return pr;
}

// Runs the producer and the consumers of one block with the programs above in a random
// interleaving. The model: an mbarrier as in run_ring (full, empty per stage; q_full completes
// when Q's bytes land, q_empty when every consumer has arrived); a named barrier completes when
// 256 threads (two warpgroups' worth) have arrived, by bar.sync (which waits) or bar.arrive
// (which does not); each warpgroup's wgmma groups complete in commit order, the TMA's loads land
// and its stores complete, all at random later moments. Returns what went wrong, or an empty
// string when: every S reads the Q of its item, and a Q is loaded only when no consumer still
// reads the last one or has O staged in its place; every S is read only after its wgmma
// completed; O is rescaled and P̃ overwritten only when no P̃·V is in flight; every P̃·V reads the P̃
// of its tile; a buffer is released only after the products reading it completed, and overwritten
// only after every consumer released it; the turns go round 0, 1, 0, 1, ... (0, 1, 2, 0, ... with
// three consumers) and never overlap (over the items too); every tile's two products are issued
// and every item's O stored; nothing deadlocks and no arrival is left on a named barrier at the end.
std::string run_block(int stages, int consumers, const std::vector<int>& Tcs, bool turns, bool overlap,
                      std::uint32_t seed, const TurnSchedule& ts, const ItemProtocol& ip) {
    struct Mbar {
        int completed = 0, arrivals = 0;
        bool passed(std::uint32_t p) const { return std::uint32_t(completed & 1) != p; }
    };
    struct Group {
        bool pv;
        int tile;
    };
    struct Consumer {
        std::vector<Step> prog;
        std::size_t pc = 0;
        std::vector<Group> in_flight;  // committed wgmma groups, oldest first
        int packed = -1, s_tile = -1, issued_pv = 0, sync_gen = -1, item = -1, stored = 0;
        bool s_read = true, in_turn = false, uses_q = false, storing = false;
    };
    const auto sz = [](int i) { return static_cast<std::size_t>(i); };
    int tiles = 0;
    for (int Tc : Tcs) tiles += Tc;
    const Programs pr = block_programs(consumers, Tcs, stages, turns, overlap, ts, ip);
    std::vector<Mbar> full(sz(stages)), empty(sz(stages));
    Mbar q_full, q_empty;
    std::vector<int> holds(sz(stages), -1), released(sz(tiles), 0);
    std::vector<Step> landing;  // K/V tiles (arg, ring) and Q tiles (kLoadQ, item) on their way
    int q_holds = -1;           // the item whose Q is in the Q tile (−1: none, or one landing)
    std::size_t ppc = 0;        // the producer's next operation
    int named_arrived[16] = {}, named_gen[16] = {};
    std::vector<int> turn_order;
    std::vector<Consumer> c(sz(consumers));
    for (int wg = 0; wg < consumers; ++wg) c[sz(wg)].prog = pr.consumer[sz(wg)];
    std::uint32_t rng = seed * 2654435761u + 7;
    auto random = [&](int n) { rng = rng * 1664525u + 1013904223u; return int((rng >> 8) % std::uint32_t(n)); };
    auto named_arrive = [&](int id) {
        if (++named_arrived[id] == 2) named_arrived[id] = 0, ++named_gen[id];
    };
    auto in_flight_pv = [](const Consumer& x) {
        for (const Group& g : x.in_flight) if (g.pv) return true;
        return false;
    };
    auto reads_tile = [](const Consumer& x, int t) {
        for (const Group& g : x.in_flight) if (g.tile == t) return true;
        return false;
    };
    enum Kind { kProducer, kConsumer, kGroupDone, kStoreDone, kLands };
    struct Move {
        Kind kind;
        int who;
    };
    for (int steps = 0; steps < 400000; ++steps) {
        std::vector<Move> moves;
        if (ppc < pr.producer.size()) {
            const Step st = pr.producer[ppc];
            bool ready = true;
            if (st.op == Op::kLoadKv && st.ring >= stages)
                ready = empty[sz(ch9::ring_stage(st.ring, stages))].passed(ch9::empty_parity(st.ring, stages));
            else if (st.op == Op::kWaitQEmpty)
                ready = q_empty.passed(std::uint32_t(st.arg));
            if (ready) moves.push_back({kProducer, 0});
        }
        for (int wg = 0; wg < consumers; ++wg) {
            const Consumer& x = c[sz(wg)];
            if (!x.in_flight.empty()) moves.push_back({kGroupDone, wg});
            if (x.storing) moves.push_back({kStoreDone, wg});
            if (x.pc == x.prog.size()) continue;
            const Step st = x.prog[x.pc];
            bool ready = true;
            if (st.op == Op::kWaitQ)
                ready = q_full.passed(ip.q_parity(st.arg));
            else if (st.op == Op::kWaitFull)
                ready = full[sz(ch9::ring_stage(st.ring, stages))].passed(ch9::full_parity(st.ring, stages));
            else if (st.op == Op::kSync)
                ready = x.sync_gen >= 0 && named_gen[st.arg] > x.sync_gen;
            else if (st.op == Op::kWaitGroups)
                ready = int(x.in_flight.size()) <= st.arg;
            else if (st.op == Op::kWaitStore)
                ready = !x.storing;
            if (ready || (st.op == Op::kSync && x.sync_gen < 0)) moves.push_back({kConsumer, wg});
        }
        for (std::size_t k = 0; k < landing.size(); ++k) moves.push_back({kLands, int(k)});
        if (moves.empty()) {
            for (int wg = 0; wg < consumers; ++wg)
                if (c[sz(wg)].pc < c[sz(wg)].prog.size())
                    return "deadlock: consumer " + std::to_string(wg) + " stuck at operation " +
                           std::to_string(c[sz(wg)].pc);
            if (ppc < pr.producer.size()) return "deadlock: the producer waits";
            break;
        }
        const Move m = moves[sz(random(int(moves.size())))];
        if (m.kind == kProducer) {
            const Step st = pr.producer[ppc++];
            if (st.op == Op::kLoadKv) {
                const int s = ch9::ring_stage(st.ring, stages);
                if (holds[sz(s)] >= 0 && released[sz(holds[sz(s)])] < consumers)
                    return "tile " + std::to_string(st.arg) + " overwrites tile " + std::to_string(holds[sz(s)]) +
                           " before every consumer released it";
                landing.push_back(st);
            } else if (st.op == Op::kLoadQ) {
                for (int wg = 0; wg < consumers; ++wg)
                    if (c[sz(wg)].uses_q)
                        return "the Q of item " + std::to_string(st.arg) + " overwrites the Q tile while consumer " +
                               std::to_string(wg) + " still reads it or stores O from it (item " +
                               std::to_string(c[sz(wg)].item) + ")";
                q_holds = -1;
                landing.push_back(st);
            }
        } else if (m.kind == kLands) {
            const Step st = landing[sz(m.who)];
            landing.erase(landing.begin() + std::ptrdiff_t(m.who));
            if (st.op == Op::kLoadQ) {
                q_holds = st.arg;
                ++q_full.completed;
            } else {
                holds[sz(ch9::ring_stage(st.ring, stages))] = st.arg;
                ++full[sz(ch9::ring_stage(st.ring, stages))].completed;
            }
        } else if (m.kind == kGroupDone) {
            c[sz(m.who)].in_flight.erase(c[sz(m.who)].in_flight.begin());
        } else if (m.kind == kStoreDone) {
            Consumer& x = c[sz(m.who)];
            x.storing = false, x.uses_q = false;
            ++x.stored;
        } else {
            const int wg = m.who;
            Consumer& x = c[sz(wg)];
            const Step st = x.prog[x.pc];
            const std::string who = "consumer " + std::to_string(wg) + ", tile " + std::to_string(st.arg) + ": ";
            switch (st.op) {
                case Op::kWaitFull: case Op::kWaitGroups: case Op::kWaitStore: break;
                case Op::kWaitQ:
                    x.item = st.arg, x.uses_q = true;
                    break;
                case Op::kSync:
                    if (x.sync_gen < 0) {  // arrives, then waits for the barrier to complete
                        x.sync_gen = named_gen[st.arg];
                        named_arrive(st.arg);
                        continue;
                    }
                    x.sync_gen = -1;
                    for (int o = 0; o < consumers; ++o)
                        if (o != wg && c[sz(o)].in_turn)
                            return "consumer " + std::to_string(wg) + "'s turn began inside consumer " +
                                   std::to_string(o) + "'s";
                    if (turn_order.empty() && wg != 0)
                        return "consumer " + std::to_string(wg) + " took the first turn (consumer 0 goes first)";
                    if (!turn_order.empty() && wg != (turn_order.back() + 1) % consumers)
                        return "consumer " + std::to_string(wg) + " took a turn right after consumer " +
                               std::to_string(turn_order.back()) + "'s (the turns go round 0, 1, ...)";
                    turn_order.push_back(wg);
                    x.in_turn = true;
                    break;
                case Op::kIssueS:
                    if (turns && !x.in_turn) return who + "S issued outside a turn";
                    if (q_holds != x.item)
                        return who + "S of item " + std::to_string(x.item) + " reads the Q tile holding item " +
                               std::to_string(q_holds);
                    if (holds[sz(ch9::ring_stage(st.ring, stages))] != st.arg) return who + "K is not in its buffer";
                    if (!x.s_read) return who + "S overwritten before the softmax read it";
                    x.in_flight.push_back({false, st.arg});
                    x.s_tile = st.arg, x.s_read = false;
                    break;
                case Op::kIssuePv:
                    if (turns && !x.in_turn) return who + "P̃·V issued outside a turn";
                    if (x.packed != st.arg) return who + "P̃·V reads the P̃ of tile " + std::to_string(x.packed);
                    if (holds[sz(ch9::ring_stage(st.ring, stages))] != st.arg) return who + "V is not in its buffer";
                    x.in_flight.push_back({true, st.arg});
                    ++x.issued_pv;
                    break;
                case Op::kArrive:
                    x.in_turn = false;
                    named_arrive(st.arg);
                    break;
                case Op::kSoftmax:
                    if (x.s_tile != st.arg) return who + "the softmax reads the S of tile " + std::to_string(x.s_tile);
                    for (const Group& g : x.in_flight)
                        if (!g.pv) return who + "the softmax reads S while its wgmma is in flight";
                    x.s_read = true;
                    break;
                case Op::kRescaleO:
                    if (in_flight_pv(x)) return who + "O rescaled while a P̃·V writes it";
                    break;
                case Op::kRelease:
                    x.in_turn = false;  // the last consumer's last turn ends without an arrival
                    if (reads_tile(x, st.arg)) return who + "buffer released while a wgmma reads it";
                    ++released[sz(st.arg)];
                    if (++empty[sz(ch9::ring_stage(st.ring, stages))].arrivals == consumers)
                        empty[sz(ch9::ring_stage(st.ring, stages))].arrivals = 0,
                        ++empty[sz(ch9::ring_stage(st.ring, stages))].completed;
                    break;
                case Op::kPack:
                    if (in_flight_pv(x)) return who + "P̃ overwritten while a P̃·V reads it";
                    x.packed = st.arg;
                    break;
                case Op::kStageO:
                    if (!x.in_flight.empty()) return who + "O staged over Q while a wgmma is in flight";
                    if (x.in_turn) return who + "the epilogue inside a turn";
                    break;
                case Op::kStoreO:
                    x.storing = true;
                    break;
                case Op::kArriveQEmpty:
                    if (++q_empty.arrivals == consumers) q_empty.arrivals = 0, ++q_empty.completed;
                    break;
                case Op::kLoadKv: case Op::kWaitQEmpty: case Op::kLoadQ: break;  // the producer's
            }
            ++x.pc;
        }
    }
    for (int wg = 0; wg < consumers; ++wg) {
        const Consumer& x = c[sz(wg)];
        if (x.pc < x.prog.size() || ppc < pr.producer.size()) return "no end after 400000 moves";
        if (x.issued_pv != tiles)
            return "consumer " + std::to_string(wg) + " issued " + std::to_string(x.issued_pv) + " P̃·V products for " +
                   std::to_string(tiles) + " tiles";
        if (x.stored != int(Tcs.size()))
            return "consumer " + std::to_string(wg) + " stored O " + std::to_string(x.stored) + " times for " +
                   std::to_string(Tcs.size()) + " items";
    }
    for (int t = 0; t < tiles; ++t)
        if (released[sz(t)] != consumers) return "tile " + std::to_string(t) + " not released by every consumer";
    for (int id = 0; id < 16; ++id)
        if (named_arrived[id] != 0) return "an arrival is left on named barrier " + std::to_string(id);
    return "";
}

// Steps 4–6 for one block of Alg. 1: `consumers` warpgroups in turns over T_c tiles.
std::string run_turns(int stages, int Tc, bool overlap, std::uint32_t seed, const TurnSchedule& ts,
                      int consumers = 2) {
    return run_block(stages, consumers, {Tc}, true, overlap, seed, ts, kKernelItems);
}

}  // namespace

// ================================ [cpu] ==========================================================

TEST_CASE("128-byte swizzle: a bijection of each 8-row atom that keeps 16-byte chunks and rows whole", "[cpu][chapter9]") {
    std::set<int> seen;
    for (int r = 0; r < 8; ++r)
        for (int c = 0; c < kAtomCols; ++c) {
            const int o = sw128_offset(r, c);
            CHECK(o / 128 == r);                      // a row stays in its 128 bytes
            CHECK(o % 16 == (c % 8) * 2);             // a 16-byte chunk stays whole
            CHECK(seen.insert(o).second);             // no two elements share an address
        }
    CHECK(seen.size() == 8 * kAtomCols);
    CHECK(*seen.rbegin() == kAtomBytes - 2);
}

TEST_CASE("128-byte swizzle: TMA's rule (address bits 4-6 XOR bits 7-9) and conflict-free columns", "[cpu][chapter9]") {
    for (int r = 0; r < 64; ++r)
        for (int c = 0; c < kAtomCols; ++c) {
            const int linear = r * 128 + c * 2;
            const int tma = linear ^ (((linear >> 7) & 7) << 4);
            CHECK(sw128_offset(r, c) == tma);
        }
    // the 16-byte chunk of one column over 8 consecutive rows lands in 8 different chunk slots
    for (int c = 0; c < kAtomCols; c += 8) {
        std::set<int> slots;
        for (int r = 0; r < 8; ++r) slots.insert((sw128_offset(r, c) % 128) / 16);
        CHECK(slots.size() == 8);
    }
}

TEST_CASE("wgmma descriptor: every field where the PTX ISA puts it", "[cpu][chapter9]") {
    const std::uint64_t d = make_smem_desc(0x12340u, 2048, 1024, Swizzle::k128B);
    CHECK((d & 0x3FFF) == (0x12340u >> 4));
    CHECK(((d >> 16) & 0x3FFF) == 2048 / 16);
    CHECK(((d >> 32) & 0x3FFF) == 1024 / 16);
    CHECK(((d >> 49) & 7) == 0);  // base offset: tiles 1024-byte aligned
    CHECK((d >> 62) == 1);        // 128-byte swizzle
    CHECK((make_smem_desc(0, 0, 0, Swizzle::k64B) >> 62) == 2);
    CHECK((make_smem_desc(0, 0, 0, Swizzle::k32B) >> 62) == 3);
    CHECK(make_smem_desc(0, 0, 0, Swizzle::kNone) == 0);
    // the address field keeps bits 4..17 of a shared-memory address (228 KB fit)
    CHECK((make_smem_desc(0x3FFF0u, 0, 0, Swizzle::kNone) & 0x3FFF) == 0x3FFF);
    // K-major: SBO = 8 rows of 128 bytes; LBO unused (1); MN-major: LBO = one [rows][64] block
    CHECK(((kmajor_desc(0) >> 32) & 0x3FFF) == 64);
    CHECK(((kmajor_desc(0) >> 16) & 0x3FFF) == 1);
    CHECK((kmajor_desc(0) >> 62) == 1);
    CHECK((mnmajor_desc(0, 128) >> 62) == 1);
    CHECK(((mnmajor_desc(0, 128) >> 16) & 0x3FFF) == 128 * 128 / 16);
    CHECK(((mnmajor_desc(0, 128) >> 32) & 0x3FFF) == 64);
}

TEST_CASE("wgmma k-steps: K-major steps walk the 128-byte row then the next block; MN-major steps 16 rows", "[cpu][chapter9]") {
    // k-step kk covers columns 16kk..16kk+15: their unswizzled offset in the tile's [rows][64] blocks
    for (int rows : {64, 128})
        for (int kk = 0; kk < 8; ++kk) {
            const int col = 16 * kk;
            CHECK(int(kmajor_kstep_offset(kk, rows)) == (col / 64) * rows * 128 + (col % 64) * 2);
        }
    for (int kk = 0; kk < 8; ++kk) CHECK(int(mnmajor_kstep_offset(kk)) == 16 * kk * 128);
    CHECK(mnmajor_kstep_offset(1) % kAtomBytes == 0);  // 16 rows: the start stays 1024-byte aligned
}

TEST_CASE("TMA box: 3-D [B*H][N][D] map, 128-byte boxes, legal strides", "[cpu][chapter9]") {
    const TmaBox b = tma_box(6, 1023, 128, 128);
    CHECK(b.dims[0] == 128);
    CHECK(b.dims[1] == 1023);
    CHECK(b.dims[2] == 6);
    CHECK(b.strides[0] == 256);
    CHECK(b.strides[1] == 1023u * 256);
    CHECK(b.box[0] * 2 == 128);  // SWIZZLE_128B needs an inner box of at most 128 bytes
    CHECK(b.box[1] == 128);      // at most 256 rows per box
    CHECK(b.box[2] == 1);
    CHECK(b.strides[0] % 16 == 0);
    CHECK(b.strides[1] % 16 == 0);
    CHECK(b.bytes() == 128u * 128);
}

TEST_CASE("ring protocol (step 3): every interleaving tried reads each tile from its buffer, never overwrites "
          "an unreleased one, never deadlocks; wrong parities are caught", "[cpu][chapter9]") {
    const RingParities kernel{ch9::full_parity, ch9::empty_parity};
    for (int stages : {2, 3})
        for (int consumers : {1, 2})
            for (int tiles : {1, 2, 3, 5, 9})
                for (std::uint32_t seed = 0; seed < 200; ++seed) {
                    const std::string what = run_ring(stages, consumers, tiles, seed, kernel);
                    INFO("stages " << stages << " consumers " << consumers << " tiles " << tiles << " seed " << seed);
                    REQUIRE(what.empty());
                }
    // The same checker fails the two mistakes of exercise-style bugs: the full parity off by one
    // (consumers run ahead of the bytes) and the empty wait one lap early (overwrites).
    const RingParities full_off{[](int j, int s) { return ch9::full_parity(j, s) ^ 1u; }, ch9::empty_parity};
    const RingParities empty_early{ch9::full_parity, [](int j, int s) { return ch9::full_parity(j, s); }};
    for (const RingParities& wrong : {full_off, empty_early}) {
        bool caught = false;
        for (std::uint32_t seed = 0; seed < 200 && !caught; ++seed) caught = !run_ring(2, 2, 9, seed, wrong).empty();
        CHECK(caught);
    }
}

TEST_CASE("pingpong and overlap (steps 4-6): every interleaving tried keeps the turns going round, reads S and "
          "P̃ only when their wgmma allows, releases buffers after their last reader, ends with no arrival left; "
          "planted off-by-ones are caught", "[cpu][chapter9]") {
    for (int consumers : {2, 3})
        for (bool overlap : {false, true})
            for (int stages : {2, 3, 4})
                for (int Tc : {1, 2, 3, 4, 7})
                    for (std::uint32_t seed = 0; seed < 100; ++seed) {
                        const std::string what = run_turns(stages, Tc, overlap, seed, kKernelTurns, consumers);
                        INFO("consumers " << consumers << " step " << (overlap ? 5 : 4) << " stages " << stages
                                          << " T_c " << Tc << " seed " << seed << ": " << what);
                        REQUIRE(what.empty());
                    }
    // The schedule as hopper_config.h spells it: T_c + 1 turns, the first with S_0 alone, the last
    // with the last P̃·V alone; consumer 0 first (the last consumer opens); each hands over to the
    // next, round; the last consumer hands nothing over after its last turn.
    CHECK(ch9::turn_count(3) == 4);
    CHECK(ch9::turn_s_tile(0, 3) == 0);
    CHECK(ch9::turn_pv_tile(0) == -1);
    CHECK(ch9::turn_s_tile(3, 3) == -1);
    CHECK(ch9::turn_pv_tile(3) == 2);
    CHECK(ch9::opens_first_turn(1, 2));
    CHECK_FALSE(ch9::opens_first_turn(0, 2));
    CHECK(ch9::opens_first_turn(2, 3));
    CHECK_FALSE(ch9::opens_first_turn(1, 3));
    CHECK(ch9::next_turn_barrier(0, 2) == ch9::turn_barrier(1));
    CHECK(ch9::next_turn_barrier(1, 2) == ch9::turn_barrier(0));
    CHECK(ch9::next_turn_barrier(1, 3) == ch9::turn_barrier(2));
    CHECK(ch9::next_turn_barrier(2, 3) == ch9::turn_barrier(0));
    CHECK(ch9::hands_over(0, 3, 3, 2));
    CHECK_FALSE(ch9::hands_over(1, 3, 3, 2));
    CHECK(ch9::hands_over(1, 2, 3, 2));
    CHECK(ch9::hands_over(1, 3, 3, 3));
    CHECK_FALSE(ch9::hands_over(2, 3, 3, 3));
    CHECK(ch9::s_wait_depth(false, true) == 0);
    CHECK(ch9::s_wait_depth(true, true) == 1);
    CHECK(ch9::s_wait_depth(true, false) == 0);
    // Planted mistakes, each must make the checker fail in some interleaving: an arrival left
    // behind (the last consumer hands over after its last turn too), consumer 0 skipping its last
    // hand-over (the next consumer waits forever), wait_group 1 on the first turn (S_0 read in
    // flight), one turn too few (the last P̃·V never issued), the P̃·V of tile k in turn k (before
    // its softmax), every consumer opening (first turns overlap), consumer 0 opening (the turns
    // start with the last consumer), three consumers handing over to the one before (the turns
    // run backwards).
    TurnSchedule always_hands = kKernelTurns;
    always_hands.hands_over = [](int, int, int, int) { return true; };
    TurnSchedule wrong_skip = kKernelTurns;
    wrong_skip.hands_over = [](int wg, int k, int Tc, int) { return !(wg == 0 && k == ch9::turn_count(Tc) - 1); };
    TurnSchedule deep_first = kKernelTurns;
    deep_first.s_wait_depth = [](bool overlap, bool) { return overlap ? 1 : 0; };
    TurnSchedule short_turns = kKernelTurns;
    short_turns.count = [](int Tc) { return Tc; };
    TurnSchedule pv_early = kKernelTurns;
    pv_early.pv_tile = [](int k) { return k; };
    TurnSchedule all_open = kKernelTurns;
    all_open.opens_first = [](int, int) { return true; };
    TurnSchedule first_opens = kKernelTurns;
    first_opens.opens_first = [](int wg, int) { return wg == 0; };
    TurnSchedule backwards = kKernelTurns;
    backwards.next_barrier = [](int wg, int consumers) { return ch9::turn_barrier((wg + consumers - 1) % consumers); };
    struct Planted {
        const char* what;
        const TurnSchedule* ts;
        bool overlap;
        int consumers;
    };
    for (const Planted& bad : {Planted{"arrival left behind", &always_hands, false, 2},
                               Planted{"consumer 0 skips its last hand-over", &wrong_skip, false, 2},
                               Planted{"consumer 0 skips its last hand-over, 3 consumers", &wrong_skip, true, 3},
                               Planted{"wait_group 1 on the first turn", &deep_first, true, 2},
                               Planted{"one turn too few", &short_turns, true, 2},
                               Planted{"P̃·V of tile k in turn k", &pv_early, false, 2},
                               Planted{"every consumer opens", &all_open, true, 2},
                               Planted{"consumer 0 opens", &first_opens, true, 2},
                               Planted{"the turns run backwards", &backwards, true, 3}}) {
        bool caught = false;
        for (std::uint32_t seed = 0; seed < 200 && !caught; ++seed)
            caught = !run_turns(2, 4, bad.overlap, seed, *bad.ts, bad.consumers).empty();
        INFO(bad.what);
        CHECK(caught);
    }
}

TEST_CASE("persistent grid (step 6): the work items of every block cover each (query block, head, batch) once; "
          "causal work never increases along the order", "[cpu][chapter9]") {
    for (bool causal : {false, true})
        for (int Tr : {1, 2, 5, 17})
            for (int BH : {1, 3, 8}) {
                const int items = Tr * BH;
                for (int sms : {1, 4, 132}) {
                    const int blocks = ch9::persistent_blocks(sms, items);
                    INFO("causal " << causal << " T_r " << Tr << " B·H " << BH << " SMs " << sms);
                    CHECK(blocks == std::min(sms, items));
                    std::map<std::pair<int, int>, int> seen;  // (q_block, bh) -> times
                    for (int b = 0; b < blocks; ++b)
                        for (int w = b; w < items; w += blocks) {  // hopper_forward_kernel's loop
                            const ch9::WorkItem it = ch9::work_item(w, Tr, BH, causal);
                            CHECK((it.q_block >= 0 && it.q_block < Tr && it.bh >= 0 && it.bh < BH));
                            ++seen[{it.q_block, it.bh}];
                        }
                    CHECK(int(seen.size()) == items);
                    for (const auto& kv : seen) CHECK(kv.second == 1);
                }
                if (causal)  // the key tiles of item w (T_c grows with q_block) never grow with w
                    for (int w = 1; w < items; ++w)
                        CHECK(ch9::work_item(w, Tr, BH, true).q_block <= ch9::work_item(w - 1, Tr, BH, true).q_block);
            }
    STATIC_REQUIRE(ch9::work_item(0, 4, 3, true).q_block == 3);  // the heaviest first
    STATIC_REQUIRE(ch9::work_item(3, 4, 3, true).q_block == 2);  // after every head's last block
    STATIC_REQUIRE(ch9::work_item(1, 4, 3, false).q_block == 1);  // a head's blocks side by side
    STATIC_REQUIRE(ch9::q_parity(0) == 0 && ch9::q_parity(1) == 1 && ch9::q_parity(2) == 0);
}

TEST_CASE("persistent block (step 6): over items of different T_c the ring runs on, Q is reloaded only after "
          "every consumer read it and stored O from it, the turns balance per item; no deadlock; planted "
          "mistakes are caught", "[cpu][chapter9]") {
    const std::vector<std::vector<int>> blocks{{1}, {3, 1}, {4, 2, 1}, {2, 5, 1, 3}, {1, 1, 1, 1}, {7, 7}};
    struct Schedule {
        int consumers;
        bool turns, overlap;
    };
    const Schedule schedules[] = {{2, true, false}, {2, true, true}, {2, false, false}, {3, false, false},
                                  {3, true, true}};
    for (const Schedule& sc : schedules)
        for (int stages : {2, 3})
            for (const std::vector<int>& Tcs : blocks)
                for (std::uint32_t seed = 0; seed < 60; ++seed) {
                    const std::string what =
                        run_block(stages, sc.consumers, Tcs, sc.turns, sc.overlap, seed, kKernelTurns, kKernelItems);
                    INFO("consumers " << sc.consumers << (sc.turns ? " in turns" : "") << " overlap " << sc.overlap
                                      << " stages " << stages << " items " << Tcs.size() << " seed " << seed << ": "
                                      << what);
                    REQUIRE(what.empty());
                }
    // Planted mistakes, each must make the checker fail in some interleaving: the producer loads
    // the next Q without waiting on q_empty; consumers arrive on q_empty before their TMA store
    // has read O; every item waits for q_full's first phase; the ring counts from 0 at each item;
    // the last consumer opens the turns at the first item only.
    ItemProtocol no_wait = kKernelItems;
    no_wait.wait_q_empty = false;
    ItemProtocol early_arrive = kKernelItems;
    early_arrive.arrive_after_store = false;
    ItemProtocol stale_q = kKernelItems;
    stale_q.q_parity = [](int) { return 0u; };
    ItemProtocol ring_reset = kKernelItems;
    ring_reset.running_ring = false;
    ItemProtocol open_once = kKernelItems;
    open_once.reopen_turns = false;
    struct Planted {
        const char* what;
        const ItemProtocol* ip;
        Schedule sc;
    };
    for (const Planted& bad : {Planted{"no wait on q_empty", &no_wait, {2, true, true}},
                               Planted{"no wait on q_empty, 3 consumers", &no_wait, {3, false, false}},
                               Planted{"q_empty arrival before the store", &early_arrive, {3, false, false}},
                               Planted{"q_full's parity never alternates", &stale_q, {2, true, true}},
                               Planted{"the ring restarts at each item", &ring_reset, {2, false, false}},
                               Planted{"the last consumer opens only the first item", &open_once, {2, true, false}}}) {
        bool caught = false;
        for (std::uint32_t seed = 0; seed < 300 && !caught; ++seed)
            caught = !run_block(2, bad.sc.consumers, {3, 2, 1}, bad.sc.turns, bad.sc.overlap, seed, kKernelTurns,
                                *bad.ip)
                          .empty();
        INFO(bad.what);
        CHECK(caught);
    }
}

TEST_CASE("TMA store of O (step 6): 64 x 64 boxes staged in each consumer's own rows of the Q tile, where its S "
          "product read Q", "[cpu][chapter9]") {
    const TmaBox b = tma_box(6, 1023, 128, ch9::kOBoxRows);
    CHECK(b.box[0] == 64);
    CHECK(b.box[1] == 64);
    CHECK(b.box[2] == 1);
    CHECK(b.bytes() == 64u * 64 * 2);
    for (int D : {64, 128}) {
        constexpr int Br = 128;
        std::set<int> covered;
        for (int wg = 0; wg < 2; ++wg)
            for (int blk = 0; blk < D / kAtomCols; ++blk) {
                const int at = ch9::o_stage_offset(wg, blk, Br);  // elements from the Q tile's start
                CHECK((at * 2) % kAtomBytes == 0);                // the swizzle's 1024-byte period
                // the warpgroup's S product reads its 64 rows of Q's block blk from here (kernel:
                // q_addr = Q + 64·wg rows, plus the k-step offset of columns 64·blk)
                CHECK(at * 2 == int(kmajor_kstep_offset(4 * blk, Br)) + 64 * wg * 128);
                for (int e = 0; e < ch9::kOBoxRows * kAtomCols; ++e) CHECK(covered.insert(at + e).second);
            }
        CHECK(int(covered.size()) == Br * D);  // the two warpgroups' boxes tile Q exactly
        CHECK(*covered.rbegin() == Br * D - 1);
    }
    // named barriers: __syncthreads' 0 and a turn and a store barrier per consumer, all distinct, of
    // the 16
    std::set<int> ids{0};
    for (int wg = 0; wg < ch9::kMaxConsumers; ++wg) ids.insert(ch9::turn_barrier(wg)), ids.insert(ch9::store_barrier(wg));
    CHECK(int(ids.size()) == 1 + 2 * ch9::kMaxConsumers);
    CHECK(*ids.rbegin() < 16);
}

TEST_CASE("step configurations: threads, tiles, shared memory within the H100's 227 KB", "[cpu][chapter9]") {
    using S1 = ch9::HopperConfig<1, 128, 1>;
    using S2 = ch9::HopperConfig<2, 128, ch9::kLadderStages>;
    using S3 = ch9::HopperConfig<3, 128, ch9::kLadderStages>;
    STATIC_REQUIRE(S1::kThreads == 256);
    STATIC_REQUIRE(S2::kThreads == 256);
    STATIC_REQUIRE(S3::kThreads == 384);
    STATIC_REQUIRE(S3::kSmemBytes <= 227 * 1024);
    STATIC_REQUIRE(S3::kStageBytes == 2 * 2 * 128 * 128);
    STATIC_REQUIRE(S3::kProducerRegs * 128 + S3::kConsumerRegs * 256 <= 65536);
    STATIC_REQUIRE(S3::kProducerRegs % 8 == 0 && S3::kConsumerRegs % 8 == 0);
    STATIC_REQUIRE((S1::Br * 128 * 2) % kAtomBytes == 0);  // each tile starts 1024-byte aligned
    STATIC_REQUIRE((S1::Bc * 128 * 2) % kAtomBytes == 0);
    using S4 = ch9::HopperConfig<4, 128, ch9::kLadderStages>;
    using S5 = ch9::HopperConfig<5, 128, ch9::kLadderStages>;
    using S6 = ch9::HopperConfig<6, 128, 3>;
    using S6d64 = ch9::HopperConfig<6, 64, 3>;
    STATIC_REQUIRE(S4::kThreads == 384);
    STATIC_REQUIRE(S4::kPingpong && !S4::kOverlap && !S4::kTmaStore);
    STATIC_REQUIRE(S5::kPingpong && S5::kOverlap && !S5::kTmaStore);
    STATIC_REQUIRE(S6::kPingpong && S6::kOverlap && S6::kTmaStore);
    STATIC_REQUIRE(S2::kSmemBytes <= 227 * 1024);  // the ladder's three stages at D = 128
    STATIC_REQUIRE(ch9::HopperConfig<2, 128, ch9::kLadderStages + 1>::kSmemBytes > 227 * 1024);  // four do not fit
    STATIC_REQUIRE(S6d64::kSmemBytes <= 227 * 1024);
    STATIC_REQUIRE(ch9::kTurnThreads == 2 * 128);  // one consumer waiting, the one before it arriving
    for (int D : {64, 128}) {
        CHECK(ch9::tiles(1, D).stages == 1);
        for (int step = 2; step <= 5; ++step) {
            INFO("step " << step << " D " << D);
            CHECK(ch9::tiles(step, D).stages == ch9::kLadderStages);
            CHECK(ch9::tiles(step, D).consumers == 2);
            CHECK(ch9::tiles(step, D).turns == (step >= 4));
            CHECK(ch9::tiles(step, D).smem_bytes ==
                  2 * (128 * D + ch9::kLadderStages * 2 * 128 * D) + 8 * (2 * ch9::kLadderStages + 1) + 1024);
        }
    }
    CHECK(ch9::tiles(6, 128).stages == 3);
    CHECK(ch9::tiles(6, 128).turns);
    CHECK(ch9::tiles(6, 64).stages == 4);
    CHECK(ch9::tiles(6, 64).consumers == 3);  // the default at D = 64: B_r = 192, turns round the three
    CHECK(ch9::tiles(6, 64).turns);
    CHECK(ch9::tiles(4, 128).threads == 384);
    CHECK(ch9::tiles(6, 128).smem_bytes == S6::kSmemBytes);
}

TEST_CASE("step 6's tile candidates: each fits 227 KB and the register file, and says its tiles; "
          "candidate 0 is step 5's configuration; the persistent ones are the defaults' schedules", "[cpu][chapter9]") {
    STATIC_REQUIRE(ch9::fits_smem(ch9::Step6Tiles<64>::List{}));
    STATIC_REQUIRE(ch9::fits_smem(ch9::Step6Tiles<128>::List{}));
    STATIC_REQUIRE_FALSE(ch9::fits_smem(fa::ConfigList<ch9::HopperConfig<6, 64, 2>, ch9::HopperConfig<6, 128, 4>>{}));
    STATIC_REQUIRE_FALSE(ch9::fits_smem(fa::ConfigList<ch9::HopperConfig<6, 128, 3, 3, false>>{}));
    using Three = ch9::HopperConfig<6, 64, 3, 3, false>;
    STATIC_REQUIRE(Three::Br == 192);
    STATIC_REQUIRE(Three::kThreads == 512);
    STATIC_REQUIRE_FALSE(Three::kPingpong);
    STATIC_REQUIRE_FALSE(Three::kOverlap);
    STATIC_REQUIRE(128 * (Three::kProducerRegs + 3 * Three::kConsumerRegs) == 64 * 1024);
    STATIC_REQUIRE(Three::kConsumerRegs % 8 == 0 && Three::kProducerRegs % 8 == 0);  // setmaxnreg's unit
    using ThreeInTurns = ch9::HopperConfig<6, 64, 3, 3, true>;  // FlashAttention-3's D = 64 schedule
    STATIC_REQUIRE(ThreeInTurns::kPingpong && ThreeInTurns::kOverlap && ThreeInTurns::Br == 192);
    using Persistent = ch9::HopperConfig<6, 128, 3, 2, true, true>;
    STATIC_REQUIRE(Persistent::kPersistent && Persistent::kPingpong && Persistent::kOverlap);
    STATIC_REQUIRE(Persistent::kBarriers == ch9::HopperConfig<6, 128, 3>::kBarriers + 1);  // q_empty
    STATIC_REQUIRE_FALSE(ch9::HopperConfig<6, 128, 3>::kPersistent);
    struct Expected {
        int stages, consumers;
        bool turns, persistent = false;
    };
    // candidates 0-3 alike at both head dims: {3, 2} stages x {turns, free}, two consumers
    const std::map<int, std::vector<Expected>> expected{
        {64,
         {{3, 2, true}, {2, 2, true}, {3, 2, false}, {2, 2, false}, {3, 3, false}, {2, 3, false}, {3, 3, true},
          {4, 3, true}, {4, 3, true, true}}},
        {128, {{3, 2, true}, {2, 2, true}, {3, 2, false}, {2, 2, false}, {3, 2, true, true}}}};
    for (const auto& [D, want] : expected) {
        const std::vector<ch9::Tiles> c = ch9::tuning_candidates(D);
        REQUIRE(c.size() == want.size());
        for (std::size_t i = 0; i < c.size(); ++i) {
            const ch9::Tiles& t = c[i];
            INFO("D " << D << " candidate " << i << ": " << t.str());
            CHECK(t.stages == want[i].stages);
            CHECK(t.consumers == want[i].consumers);
            CHECK(t.turns == want[i].turns);
            CHECK(t.persistent == want[i].persistent);
            CHECK(t.Br == 64 * t.consumers);
            CHECK(t.Bc == 128);
            CHECK(t.threads == 128 * (t.consumers + 1));
            // Q, the ring of (K_j, V_j), the mbarriers (full and empty per stage, q_full, and q_empty
            // when persistent), 1 KB of slack
            CHECK(t.smem_bytes ==
                  2 * (t.Br * D + t.stages * 2 * 128 * D) + 8 * (2 * t.stages + 1 + (t.persistent ? 1 : 0)) + 1024);
            CHECK(t.smem_bytes <= ch9::kSmemOptIn);
            CHECK(t.str() == "B_r x B_c = " + std::to_string(t.Br) + " x 128, " + std::to_string(t.stages) +
                                 " stages, " + std::to_string(t.consumers) + " consumers" +
                                 (t.turns ? " in turns" : "") + (t.persistent ? ", persistent" : "") + ", " +
                                 std::to_string(t.threads) + " threads");
            CHECK(ch9::tiles(ch9::kTuned, D, int(i)).str() == t.str());
            CHECK(t.tag() == "s" + std::to_string(t.stages) + "-" + std::to_string(t.consumers) + "wg-" +
                                 (t.turns ? "turns" : "free") + (t.persistent ? "-persistent" : ""));
        }
        CHECK(c.at(std::size_t(ch9::tuned_candidate(D))).str() == ch9::tiles(ch9::kTuned, D).str());
        CHECK(c.front().str() == ch9::tiles(ch9::kOverlap, D).str());  // the ablation against step 5
        // the last candidate: the default's schedule on a persistent grid (the two set side by side)
        const ch9::Tiles& dflt = c.at(std::size_t(ch9::tuned_candidate(D)));
        CHECK(c.back().persistent);
        CHECK_FALSE(dflt.persistent);
        CHECK((c.back().stages == dflt.stages && c.back().consumers == dflt.consumers && c.back().turns == dflt.turns));
        const fa::AttnShape s = fa::make_shape(1, 2, 100, D, true);
        CHECK(ch9::unsupported_reason(ch9::kTuned, s, int(c.size()) - 1).empty());
        CHECK_THAT(ch9::unsupported_reason(ch9::kTuned, s, int(c.size())), Catch::Contains("candidates"));
        CHECK_THAT(ch9::unsupported_reason(ch9::kOverlap, s, 0), Catch::Contains("only kernel 6"));
    }
    CHECK(ch9::tuning_candidates(32).empty());
}

TEST_CASE("unsupported shapes, kernels and devices get one clear reason", "[cpu][chapter9]") {
    CHECK(ch9::unsupported_reason(1, fa::make_shape(1, 1, 17, 64, false)).empty());
    CHECK(ch9::unsupported_reason(3, fa::make_shape(2, 3, 1, 128, true)).empty());
    CHECK_FALSE(ch9::unsupported_reason(0, fa::make_shape(1, 1, 17, 64, false)).empty());
    CHECK(ch9::unsupported_reason(6, fa::make_shape(1, 1, 17, 64, true)).empty());
    CHECK_FALSE(ch9::unsupported_reason(7, fa::make_shape(1, 1, 17, 64, false)).empty());
    CHECK(ch9::unsupported_reason(1, fa::make_shape(1, 1, 17, 32, false)).find("head dim 32") != std::string::npos);
    for (auto [N_k, H_kv] : {std::pair<int, int>{40, 0}, {0, 1}})  // chapter 7's features, not chapter 9's
        CHECK(ch9::unsupported_reason(6, fa::with_kv(fa::make_shape(1, 2, 17, 64, true), N_k, H_kv))
                  .find("as many keys as queries") != std::string::npos);
    fa::DeviceInfo d;
    d.name = "A100";
    d.cc_major = 8, d.cc_minor = 0;
    CHECK(ch9::device_unsupported_reason(d).find("9.0") != std::string::npos);
    d.cc_major = 9;
    CHECK(ch9::device_unsupported_reason(d).empty());
    d.cc_major = 10;
    CHECK_FALSE(ch9::device_unsupported_reason(d).empty());
}

TEST_CASE("CPU mirror at the chapter's B_c = 128, unrounded, equals the float64 reference", "[cpu][chapter9]") {
    for (bool causal : {false, true})
        for (int N : {1, 130, 300}) {
            const fa::AttnShape s = fa::make_shape(1, 2, N, 64, causal);
            const fa::AttnProblem p = fa::make_problem(s, 3, 1.0);
            const ch7::MirrorErrors m = ch7::mirror_errors<float>(p, ch9::tiles(1, 64).Bc);
            INFO(s.str());
            CHECK(m.check.O.rel_l2 < 1e-5);
            CHECK(m.check.L.max_abs < 1e-4);
        }
}

// ================================ [gpu] ==========================================================

#define CHAPTER9_VARIANT_TESTS(K)                                                                        \
    TEST_CASE("kernel " #K " on N in {1,17,113,1023,4097,16384}, causal and not, D 64 and 128, fp16 and "  \
              "bf16, large scores: error at most 2x the mirror's", "[gpu][sm90][chapter9][v" #K "]") {           \
        REQUIRE(have_sm90());                                                                          \
        gpu_grid({{K}});                                                                               \
    }                                                                                                  \
    TEST_CASE("kernel " #K " quick: several K/V tiles and query blocks, causal and not, both head dims", \
              "[gpu][sm90][chapter9][v" #K "]") {                                                            \
        REQUIRE(have_sm90());                                                                          \
        quick_variant(K);                                                                              \
    }                                                                                                  \
    TEST_CASE("kernel " #K " writes all of O and L and nothing past their ends", "[gpu][sm90][chapter9][v" #K "]") { \
        REQUIRE(have_sm90());                                                                          \
        bounds_variant(K);                                                                             \
    }

TEST_CASE("every tile candidate of kernel 6 on N in {1,17,113,1023,4097}, causal and not, D 64 and 128, fp16 and "
          "bf16, large scores: error at most 2x the mirror's", "[gpu][sm90][chapter9][v6]") {
    REQUIRE(have_sm90());
    // small mode keeps one N whose 5 key tiles wrap every candidate's ring (2 to 4 stages)
    const std::vector<int> Ns = fa::test::small_shapes() ? std::vector<int>{1, 17, 113, 640}
                                                         : std::vector<int>{1, 17, 113, 1023, 4097};
    for (int D : {64, 128}) {
        std::vector<Kernel> kernels;
        for (int c = 0; c < int(ch9::tuning_candidates(D).size()); ++c) kernels.push_back({ch9::kTuned, c});
        std::vector<fa::AttnShape> shapes;
        for (bool causal : {false, true})
            for (int N : Ns) shapes.push_back(fa::make_shape(N >= 4097 ? 1 : 2, N >= 4097 ? 2 : 3, N, D, causal));
        check_rule_on<__nv_bfloat16>(shapes, kernels);
        check_rule_on<__half>(shapes, kernels);
        check_rule_on<__half>({fa::make_shape(1, 2, 257, D, true)}, kernels, 4.0);
        check_rule_on<__nv_bfloat16>({fa::make_shape(1, 2, 257, D, false)}, kernels, 4.0);
    }
}

TEST_CASE("kernel 6's persistent candidates with more work items than SMs: a block runs several items, of "
          "different lengths when causal; error at most 2x the mirror's", "[gpu][sm90][chapter9][v6]") {
    REQUIRE(have_sm90());
    const int sms = fa::sm_count(), N = fa::test::small_shapes() ? 300 : 1000;
    for (int D : {64, 128}) {
        const std::vector<ch9::Tiles> c = ch9::tuning_candidates(D);
        std::vector<Kernel> kernels;
        for (int i = 0; i < int(c.size()); ++i)
            if (c[std::size_t(i)].persistent) kernels.push_back({ch9::kTuned, i});
        REQUIRE_FALSE(kernels.empty());
        const int Tr = fa::ceil_div(N, c[std::size_t(kernels.front().candidate)].Br);
        std::vector<fa::AttnShape> shapes;
        for (bool causal : {false, true}) {
            // one query block of one key tile per head: 2·SMs + 3 items, two or three per block
            shapes.push_back(fa::make_shape(1, 2 * sms + 3, 113, D, causal));
            // T_r query blocks per head (of 1 to T_r key tiles when causal), at least 2·SMs + 3 items
            shapes.push_back(fa::make_shape(2, fa::ceil_div(fa::ceil_div(2 * sms + 3, Tr), 2), N, D, causal));
        }
        for (const fa::AttnShape& s : shapes) {
            INFO(s.str() << ": " << fa::ceil_div(s.N, c[std::size_t(kernels.front().candidate)].Br) * s.B * s.H
                         << " work items on " << sms << " SMs");
            REQUIRE(fa::ceil_div(s.N, c[std::size_t(kernels.front().candidate)].Br) * s.B * s.H > 2 * sms);
        }
        check_rule_on<__nv_bfloat16>(shapes, kernels);
        check_rule_on<__half>({shapes.back()}, kernels);
    }
}

TEST_CASE("wgmma peak: a finite, positive rate for fp16 and bf16", "[gpu][sm90][chapter9]") {
    REQUIRE(have_sm90());
    // A failed launch stops the program, and a kernel that does no work times at ~0 ms (an
    // infinite rate); the rate itself is a measurement (README), so no number is checked.
    const double fp16 = ch9::wgmma_tflops<__half>(3), bf16 = ch9::wgmma_tflops<__nv_bfloat16>(3);
    INFO("fp16 " << fp16 << " TF/s, bf16 " << bf16 << " TF/s");
    CHECK((std::isfinite(fp16) && fp16 > 0.0));
    CHECK((std::isfinite(bf16) && bf16 > 0.0));
}

CHAPTER9_VARIANT_TESTS(1)
CHAPTER9_VARIANT_TESTS(2)
CHAPTER9_VARIANT_TESTS(3)
CHAPTER9_VARIANT_TESTS(4)
CHAPTER9_VARIANT_TESTS(5)
CHAPTER9_VARIANT_TESTS(6)
static_assert(ch9::kFirstVariant == 1 && ch9::kLastVariant == 6, "one CHAPTER9_VARIANT_TESTS line per variant");
