// Tests of chapter 11: the FlashAttention-2 backward on Hopper (wgmma, TMA, warp specialization,
// dQ by TMA reduce-add, overlap).
//
// [cpu]: the step configurations (threads, shared-memory layout within 227 KB, the setmaxnreg
// split), the query tiles a key block visits (causal skips exactly the tiles that see none of its
// keys), the pieces of dQ_i the two consumers compute (each 64 x 64 block once), the ring of
// Q_i/dO_i buffers and the hand-off of dQ_i to the dQ warp in random interleavings (every tile read
// from its buffer, nothing overwritten before it is read, every barrier balanced), and the
// argument checks; step 6's order of dQ's adds (every adder has one turn, a block waits only for
// blocks the hardware starts before it, and the order is the one the blocks arrive in).
// [gpu][sm90] (compute capability 9.0 only; elsewhere tests/main.cpp skips them visibly): every
// step on N ∈ {1, 97, 300, 1000, 4097} (small mode: 1, 97, 300), causal and not, D = 64 and 128, bf16 and
// fp16, B·H > 1, and large scores, against the float64 reference with the 2× rule (chapter 8's
// mirror) with outputs poisoned; step 6's gradients the same bit for bit over five runs. Every
// launch is waited for with a time limit (gpu_wait.h).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../chapters/08_tensor_core_backward/chapter8.h"
#include "../chapters/09_hopper/chapter9.h"
#include "../chapters/09_hopper/kernel/hopper_config.h"
#include "../chapters/09_hopper/kernel/hopper_layout.h"
#include "../chapters/11_hopper_backward/chapter11.h"
#include "../chapters/11_hopper_backward/kernel/bwd_hopper_config.h"
#include "../common/attention_gpu.h"
#include "../common/device.h"
#include "../common/dtype.h"
#include "gpu_wait.h"
#include "support.h"

namespace {

template <class Cfg>
void check_config() {
    INFO("step " << Cfg::kStep << " D " << Cfg::D << " B_r " << Cfg::Br);
    CHECK(Cfg::kSmemBytes <= ch11::kSmemOptIn);
    CHECK(Cfg::kThreads == (Cfg::kStep >= 3 ? 384 : 256));
    // the regions follow one another without overlap, swizzled tiles 1024-byte aligned
    CHECK(Cfg::kOffV == Cfg::kOffK + 2 * Cfg::Bc * Cfg::D);
    CHECK(Cfg::kOffQ == Cfg::kOffV + 2 * Cfg::Bc * Cfg::D);
    CHECK(Cfg::kOffDs == Cfg::kOffQ + Cfg::kStages * 4 * Cfg::Br * Cfg::D);
    CHECK(Cfg::kOffDq == Cfg::kOffDs + (Cfg::kStep >= 5 ? 2 : 1) * 2 * Cfg::Bc * Cfg::Br);  // step 5: two dSᵀ
    CHECK(Cfg::kOffLD == Cfg::kOffDq + (Cfg::kDqBulk ? Cfg::Br * Cfg::D * 4 : 0));
    CHECK(Cfg::kOffBars == Cfg::kOffLD + Cfg::kStages * 8 * Cfg::Br);
    for (int off : {Cfg::kOffK, Cfg::kOffV, Cfg::kOffQ, Cfg::kOffDs, Cfg::kOffDq}) CHECK(off % 1024 == 0);
    // the bytes of a stage: Q_i, dO_i (16-bit), and without a producer L_i, D_i (fp32) too
    CHECK(Cfg::kStageBytes == 2 * 2 * Cfg::Br * Cfg::D + (Cfg::kStep <= 2 ? 2 * 4 * Cfg::Br : 0));
}

// A counter of arrivals that a waiter consumes (a named barrier's or an mbarrier phase's count,
// reduced to what the protocol needs): wait() succeeds when one is there.
struct Tokens {
    int n = 0;
    bool take() { return n > 0 ? (--n, true) : false; }
};

}  // namespace

TEST_CASE("step configurations: threads, shared-memory regions in order and aligned, within 227 KB", "[cpu][chapter11]") {
    check_config<ch11::LadderConfig<1, 64>>();
    check_config<ch11::LadderConfig<2, 64>>();
    check_config<ch11::LadderConfig<3, 64>>();
    check_config<ch11::LadderConfig<4, 64>>();
    check_config<ch11::BwdConfig<5, 64, 128, 2, ch11::kAfterDk>>();
    check_config<ch11::BwdConfig<5, 64, 128, 2, ch11::kUnderNextSt>>();
    check_config<ch11::BwdConfig<5, 64, 128, 2, ch11::kBeforeDk>>();
    check_config<ch11::LadderConfig<1, 128>>();
    check_config<ch11::LadderConfig<2, 128>>();
    check_config<ch11::LadderConfig<3, 128>>();
    check_config<ch11::LadderConfig<4, 128>>();
    check_config<ch11::BwdConfig<5, 128, 64, 2, ch11::kAfterDk>>();
    check_config<ch11::BwdConfig<5, 128, 64, 2, ch11::kUnderNextSt>>();
    check_config<ch11::BwdConfig<5, 128, 64, 2, ch11::kBeforeDk>>();
    check_config<ch11::Step6Config<64>>();
    check_config<ch11::Step6Config<128>>();
    // setmaxnreg: the producer's and consumers' registers add up to what the block was launched with
    using C = ch11::LadderConfig<3, 128>;
    CHECK(128 * C::kProducerRegs + 256 * C::kConsumerRegs == 384 * 168);
    CHECK(C::kConsumerRegs % 8 == 0);
    CHECK(C::kProducerRegs % 8 == 0);
}

TEST_CASE("fp32 128-byte swizzle (dQ staging, step 4): a bijection onto the tile, TMA's rule, and a half-warp's "
          "float2 stores at most two to a bank slot", "[cpu][chapter11]") {
    using tc::hopper::sw128_offset_f32;
    for (int rows : {64, 128})
        for (int D : {64, 128}) {
            std::set<int> seen;
            for (int r = 0; r < rows; ++r)
                for (int col = 0; col < D; ++col) {
                    const int off = sw128_offset_f32(r, col, rows);
                    CHECK(off % 4 == 0);
                    CHECK(seen.insert(off).second);
                    // TMA's 128-byte swizzle inside a 1024-byte aligned block: address bits 4-6 XOR bits 7-9
                    const int in_block = off % (rows * 128), plain = r * 128 + col % 32 * 4;
                    CHECK(in_block == (plain ^ (((plain >> 7) & 7) << 4)));
                    CHECK(off / (rows * 128) == col / 32);
                }
            CHECK(int(seen.size()) == rows * D);
            CHECK(*seen.rbegin() == rows * D * 4 - 4);
        }
    // a half-warp (lanes 0..15: rows g = lane / 4, column pairs 2 (lane % 4)) of stage_dq's float2
    // stores at column block 8d: rows g and g ^ 1 swap the same two 16-byte chunks, so the 16
    // stores share 8 of the 16 8-byte slots of the 32 banks, two each (a 2-way conflict, the
    // price of storing in the layout the TMA reads; never worse)
    for (int d = 0; d < 8; ++d)
        for (int half = 0; half < 2; ++half) {
            std::map<int, int> per_slot;
            for (int lane = 16 * half; lane < 16 * half + 16; ++lane)
                ++per_slot[sw128_offset_f32(lane / 4 + 8 * half, 8 * d + 2 * (lane % 4), 64) % 128 / 8];
            CHECK(per_slot.size() == 8);
            for (const auto& [slot, lanes] : per_slot) CHECK(lanes == 2);
        }
}

TEST_CASE("query tiles of a key block: causal skips exactly the tiles that see none of its keys", "[cpu][chapter11]") {
    for (int Br : {64, 128})
        for (int N : {1, 63, 64, 65, 127, 128, 129, 200, 257, 1000})
            for (int k0 = 0; k0 < N; k0 += 128)
                for (bool causal : {false, true}) {
                    INFO("B_r " << Br << " N " << N << " k0 " << k0 << " causal " << causal);
                    const int first = ch11::first_query_tile(k0, Br, causal);
                    const int count = ch11::query_tiles(N, k0, Br, causal);
                    CHECK(count >= 1);
                    CHECK(first + count == (N + Br - 1) / Br);
                    for (int i = 0; i < (N + Br - 1) / Br; ++i) {
                        // does any query of tile i see any key of the block (key <= query when causal)?
                        bool sees = false;
                        for (int q = i * Br; q < std::min(N, (i + 1) * Br) && !sees; ++q)
                            sees = !causal || k0 <= q;
                        CHECK(sees == (i >= first));
                    }
                }
}

TEST_CASE("dQ pieces: the two consumers compute each 64 x 64 block of dQ_i once, as many each, and stage them in "
          "boxes of their own", "[cpu][chapter11]") {
    for (auto [Br, D] : std::vector<std::pair<int, int>>{{64, 128}, {128, 64}, {128, 128}}) {
        INFO("B_r " << Br << " D " << D);
        std::set<std::pair<int, int>> seen;
        std::set<int> staged;
        const int per = ch11::dq_pieces_per_consumer(Br, D);
        for (int c = 0; c < 2; ++c)
            for (int k = 0; k < per; ++k) {
                const int r = ch11::dq_piece_rows(c, k, Br, D), col = ch11::dq_piece_cols(c, k, Br, D);
                CHECK(r >= 0);
                CHECK(r < Br / 64);
                CHECK(col >= 0);
                CHECK(col < D / 64);
                CHECK(seen.insert({r, col}).second);
                // step 4's staging: each box (64 rows × 32 columns) starts 1024-byte aligned, as the
                // TMA's 128-byte swizzle needs; consumer c's pieces lie in its half of the buffer
                const int piece = c * per + k;
                for (int b = 0; b < 2; ++b) CHECK(ch11::dq_stage_offset(piece, 0, 32 * b) % 1024 == 0);
                int outside = 0;
                for (int row = 0; row < 64; ++row)
                    for (int j = 0; j < 64; ++j) {
                        const int off = ch11::dq_stage_offset(piece, row, j);
                        outside += off < c * Br * D * 2 || off >= (c + 1) * Br * D * 2;
                        staged.insert(off);
                    }
                CHECK(outside == 0);
            }
        CHECK(int(seen.size()) == (Br / 64) * (D / 64));
        CHECK(int(staged.size()) == Br * D);  // a bijection onto the B_r × D fp32 staging buffer
        CHECK(*staged.rbegin() == Br * D * 4 - 4);
    }
}

TEST_CASE("ring of Q_i, dO_i, L_i, D_i (steps 2-4) and dQ_i's hand-off (step 4, one consumer and its dQ warp): every "
          "interleaving tried reads "
          "each tile from its buffer, overwrites nothing unread, and leaves every barrier balanced",
          "[cpu][chapter11]") {
    std::mt19937 rng(5);
    for (int stages : {2, 3})
        for (int count : {1, 2, 3, 7})
            for (int trial = 0; trial < 200; ++trial) {
                INFO("stages " << stages << " query tiles " << count << " trial " << trial);
                // the ring: buffer contents, mbarrier phases completed per buffer (full: the
                // producer's bytes; empty: the consumers' releases)
                std::vector<int> buffer(std::size_t(stages), -1), full_done(std::size_t(stages), 0),
                    empty_done(std::size_t(stages), 0);
                int produced = 0, consumed = 0;  // tiles loaded, tiles released
                // the dQ hand-off: staging buffer contents and the two named barriers' arrivals
                int staged = -1, written = 0, consumer_dq = 0;
                Tokens dq_full, dq_free;
                bool staged_read = true;
                auto phase_done = [](int done, std::uint32_t parity) { return (done & 1) != int(parity); };
                int steps = 0;
                while (written < count) {
                    REQUIRE(++steps < 100000);  // a deadlock would spin here
                    switch (rng() % 3) {
                        case 0: {  // producer: load tile `produced` once its buffer is free
                            if (produced == count) break;
                            const int s = ch9::ring_stage(produced, stages);
                            if (produced >= stages && !phase_done(empty_done[std::size_t(s)], ch9::empty_parity(produced, stages)))
                                break;
                            CHECK((produced < stages || buffer[std::size_t(s)] == produced - stages));
                            buffer[std::size_t(s)] = produced;
                            ++full_done[std::size_t(s)];
                            ++produced;
                            break;
                        }
                        case 1: {  // consumers: compute tile `consumed`, release it, hand dQ over
                            if (consumed == count) break;
                            const int s = ch9::ring_stage(consumed, stages);
                            if (!phase_done(full_done[std::size_t(s)], ch9::full_parity(consumed, stages))) break;
                            if (ch11::consumer_waits_dq_free(consumer_dq) && !dq_free.n) break;
                            CHECK(buffer[std::size_t(s)] == consumed);
                            ++empty_done[std::size_t(s)];
                            if (ch11::consumer_waits_dq_free(consumer_dq)) CHECK(dq_free.take());
                            CHECK(staged_read);  // the dQ warp has read the last tile's staging
                            staged = consumed, staged_read = false;
                            ++dq_full.n;
                            ++consumer_dq;
                            ++consumed;
                            break;
                        }
                        default: {  // the dQ warp: add the staged tile, hand the buffer back
                            if (!dq_full.take()) break;
                            CHECK(staged == written);
                            staged_read = true;
                            if (ch11::dq_writer_frees(written, count)) ++dq_free.n;
                            ++written;
                        }
                    }
                }
                CHECK(consumed == count);
                CHECK(dq_full.n == 0);
                CHECK(dq_free.n == 0);  // no arrival left on a barrier after the block
            }
}

// Step 6's protocol, as the blocks run it: block x of a head takes key block key_block_of(x), visits
// its query tiles in order, and at each waits for its turn (dq_turn) on the tile's counter. Checked:
// the adders of a tile hold the turns 0..dq_adders − 1 once each; the block a turn waits for has a
// lower grid index (the hardware starts it earlier, so a waiting block never holds an SM its
// predecessor needs); and if every block ran one tile per unit of time from the start, the turns
// would be taken in the order the blocks arrive (no waiting in steady state).
TEST_CASE("step 6: every adder of a query tile has one turn, waits only for blocks started before it, in the order "
          "they arrive", "[cpu][chapter11]") {
    const int Bc = 128;
    for (int Br : {64, 128})
        for (int N : {1, 64, 65, 128, 129, 300, 1000, 4097})
            for (bool causal : {false, true}) {
                const int Tc = (N + Bc - 1) / Bc, Tr = (N + Br - 1) / Br;
                std::map<int, std::map<int, std::pair<int, int>>> by_turn;  // tile -> turn -> (grid index, arrival)
                for (int x = 0; x < Tc; ++x) {
                    const int j = ch11::key_block_of(x, Tc, causal);
                    const int first = ch11::first_query_tile(j * Bc, Br, causal);
                    for (int n = 0; n < ch11::query_tiles(N, j * Bc, Br, causal); ++n) {
                        const int i = first + n, turn = ch11::dq_turn(j, i, N, Br, Bc, causal);
                        INFO("B_r " << Br << " N " << N << " causal " << causal << " key block " << j << " tile " << i);
                        CHECK(by_turn[i].count(turn) == 0);
                        by_turn[i][turn] = {x, n};
                    }
                }
                for (int i = 0; i < Tr; ++i) {
                    INFO("B_r " << Br << " N " << N << " causal " << causal << " tile " << i);
                    const auto& turns = by_turn[i];
                    REQUIRE(int(turns.size()) == ch11::dq_adders(i, N, Br, Bc, causal));
                    int t = 0;
                    for (const auto& [turn, who] : turns) {
                        CHECK(turn == t);
                        if (t > 0) {
                            CHECK(turns.at(t - 1).first < who.first);    // waits for a block started earlier
                            CHECK(turns.at(t - 1).second <= who.second);  // which arrives no later
                        }
                        ++t;
                    }
                }
                // counters: one per (head, tile, consumer), distinct and dense
                std::set<int> seen;
                for (int bh = 0; bh < 3; ++bh)
                    for (int i = 0; i < Tr; ++i)
                        for (int c = 0; c < 2; ++c) seen.insert(ch11::dq_counter(bh, i, c, Tr));
                CHECK(int(seen.size()) == 3 * Tr * 2);
                CHECK(*seen.rbegin() == 3 * Tr * 2 - 1);
            }
}

TEST_CASE("unsupported shapes, kernels and devices get one clear reason", "[cpu][chapter11]") {
    CHECK(ch11::unsupported_reason(1, fa::make_shape(1, 1, 100, 64, false)).empty());
    CHECK(ch11::unsupported_reason(4, fa::make_shape(2, 3, 1, 128, true)).empty());
    CHECK(ch11::unsupported_reason(0, fa::make_shape(1, 1, 100, 64, false)).find("does not exist") != std::string::npos);
    CHECK(ch11::unsupported_reason(6, fa::make_shape(1, 1, 100, 64, false)).empty());
    CHECK(ch11::unsupported_reason(7, fa::make_shape(1, 1, 100, 64, false)).find("does not exist") !=
          std::string::npos);
    CHECK(ch11::unsupported_reason(6, fa::make_shape(1, 1, 100, 64, false), 0).find("only kernel 5") !=
          std::string::npos);
    CHECK(ch11::unsupported_reason(4, fa::make_shape(1, 1, 100, 96, false)).find("head dim 96") != std::string::npos);
    CHECK(ch11::unsupported_reason(5, fa::make_shape(1, 1, 100, 64, false), 1).empty());
    CHECK(ch11::unsupported_reason(5, fa::make_shape(1, 1, 100, 64, false), 3).find("candidate 3") != std::string::npos);
    CHECK(ch11::unsupported_reason(4, fa::make_shape(1, 1, 100, 64, false), 0).find("only kernel 5") != std::string::npos);
    CHECK(ch11::tuning_candidates(64).size() == 3);
    CHECK(ch11::tuning_candidates(96).empty());
    for (int k = 0; k < 3; ++k) CHECK(ch11::tiles(5, 128, k).line15 == k);  // Step5Tiles lists Line15's places in order
    for (int D : {64, 128}) CHECK(ch11::tiles(6, D).line15 == ch11::tiles(5, D).line15);  // step 6: step 5's default
    CHECK(ch11::dq_counter_ints(fa::make_shape(2, 3, 129, 128, false)) == 2 * 3 * 3 * 2);  // B_r = 64: 3 tiles
    CHECK(ch11::dq_counter_ints(fa::make_shape(2, 3, 129, 64, true)) == 2 * 3 * 2 * 2);    // B_r = 128: 2 tiles
    fa::DeviceInfo ampere;
    ampere.name = "A100";
    ampere.cc_major = 8, ampere.cc_minor = 0;
    CHECK(ch11::device_unsupported_reason(ampere).find("compute capability 8.0") != std::string::npos);
    fa::DeviceInfo hopper = ampere;
    hopper.cc_major = 9;
    CHECK(ch11::device_unsupported_reason(hopper).empty());
}

// ================================ [gpu][sm90] ====================================================

namespace {

bool have_sm90() {
    if (fa::cuda_device_count() == 0) return false;
    const std::string why = ch11::device_unsupported_reason(fa::device_info());
    if (!why.empty()) WARN(why);
    return why.empty();
}

// One problem on the device: inputs rounded to T, O and L from chapter 9's forward, the float64
// reference at sampled rows and chapter 8's CPU mirror (the 2× rule's baseline).
template <class T>
struct GpuCase {
    fa::AttnProblem p;
    std::vector<float> dO;
    fa::DeviceBuffer<T> Q, K, V, dOd, O, dQ, dK, dV;
    fa::DeviceBuffer<float> L, ws;
    fa::DeviceBuffer<int> counters;  // step 6
    ch6::SampledBackward ref;
    ch8::MirrorErrors mirror;
    GpuCase(const fa::AttnShape& s, std::uint64_t seed, double magnitude)
        : p(fa::make_problem(s, seed, magnitude)), dO(ch6::make_upstream_gradient(s, seed)), Q(s.elements()),
          K(s.elements()), V(s.elements()), dOd(s.elements()), O(s.elements()), dQ(s.elements()), dK(s.elements()),
          dV(s.elements()), L(s.rows()), ws(ch8::workspace_floats(s, ch8::kAtomic)),
          counters(ch11::dq_counter_ints(s)) {
        fa::round_inputs_to<T>(p);
        fa::round_to<T>(dO);
        Q.upload(fa::convert_from_float<T>(p.Q)), K.upload(fa::convert_from_float<T>(p.K));
        V.upload(fa::convert_from_float<T>(p.V)), dOd.upload(fa::convert_from_float<T>(dO));
        O.poison(), L.poison();  // (step 6 of chapter 9 writes O by TMA stores)
        ch9::forward<T>(ch9::kTuned, s, Q.get(), K.get(), V.get(), O.get(), L.get());
        fa::test::finish_or_stop("chapter11_test", "chapter 9's forward");
        ref = ch6::sampled_backward_reference(p, dO.data());
        mirror = ch8::mirror_errors<T>(p, dO, fa::convert_to_float(O.download()), L.download(), ref);
    }
    /// The backward by `variant`, its outputs and workspace poisoned first (the counters too: the
    /// preprocess must zero them); dQ, dK, dV as floats.
    std::vector<std::vector<float>> gradients(int variant, int candidate) {
        const fa::AttnShape& s = p.shape;
        dQ.poison(), dK.poison(), dV.poison(), ws.poison(), counters.poison();
        const ch8::BwdTensors<T> t{Q.get(), K.get(), V.get(), O.get(), dOd.get(), L.get(), dQ.get(), dK.get(), dV.get()};
        ch11::backward<T>(variant, s, t, ch8::split_workspace(ws.get(), s, ch8::kAtomic), candidate, counters.get());
        fa::test::finish_or_stop("chapter11_test", "kernel " + ch11::variant_name(variant) + " candidate " +
                                                       std::to_string(candidate) + " on " + s.str());
        return {fa::convert_to_float(dQ.download()), fa::convert_to_float(dK.download()),
                fa::convert_to_float(dV.download())};
    }
    ch7::RuleVerdict run(int variant, int candidate) {
        const std::vector<std::vector<float>> g = gradients(variant, candidate);
        const std::vector<float>&q = g[0], &k = g[1], &v = g[2];
        return ch8::low_precision_rule(ch6::check_backward(ref, q.data(), k.data(), v.data(), ch8::rule_tolerance(mirror)),
                                       mirror);
    }
};

// The chapter's grid: N ∈ {1, 97, 300, 1000, 4097} (small mode: 1, 97, 300), causal and not,
// D = 64 and 128, B·H ∈ {1·1, 2·3}; magnitude 8: large scores. N = 300 keeps the small mode honest:
// below 128 every tile is a tail tile and gets masked anyway, at 300 some tiles are no tail on
// either side and still cross the causal diagonal (tiles the mask must not skip).
template <class T>
void check_steps(const std::vector<int>& variants, double magnitude = 1.0) {
    const bool small = fa::test::small_shapes();
    for (bool causal : {false, true})
        for (int D : {64, 128})
            for (int N : small ? std::vector<int>{1, 97, 300} : std::vector<int>{1, 97, 300, 1000, 4097})
                for (auto [B, H] : std::vector<std::pair<int, int>>{{1, 1}, {2, 3}}) {
                    const fa::AttnShape s = fa::make_shape(B, H, N, D, causal);
                    GpuCase<T> c(s, 13 + std::uint64_t(N), magnitude);
                    for (int v : variants)
                        for (int k = 0; k < (v == ch11::kOverlap ? int(ch11::tuning_candidates(D).size()) : 1); ++k) {
                            const int candidate = v == ch11::kOverlap ? k : -1;  // step 5: every candidate
                            const ch7::RuleVerdict verdict = c.run(v, candidate);
                            INFO(fa::dtype_name<T>() << " " << s.str() << " magnitude " << magnitude << " kernel "
                                                     << ch11::variant_name(v) << " candidate " << candidate << "\n"
                                                     << verdict.text);
                            CHECK(verdict.ok);
                        }
                }
}

}  // namespace

#define FA_CH11_STEP_TEST(K)                                                                                  \
    TEST_CASE("kernel " #K " on N in {1,97,300,1000,4097}, causal and not, D 64 and 128, bf16 and fp16 (2x rule)", \
              "[gpu][sm90][chapter11][v" #K "]") {                                                             \
        REQUIRE(have_sm90());                                                                                  \
        check_steps<__nv_bfloat16>({K});                                                                       \
        check_steps<__half>({K});                                                                              \
    }
FA_CH11_STEP_TEST(1)
FA_CH11_STEP_TEST(2)
FA_CH11_STEP_TEST(3)
FA_CH11_STEP_TEST(4)
FA_CH11_STEP_TEST(5)  // every candidate
FA_CH11_STEP_TEST(6)

TEST_CASE("every kernel with large scores (magnitude 8), bf16 and fp16 (2x rule)", "[gpu][sm90][chapter11]") {
    REQUIRE(have_sm90());
    check_steps<__nv_bfloat16>({1, 2, 3, 4, 5, 6}, 8.0);
    check_steps<__half>({1, 2, 3, 4, 5, 6}, 8.0);
}

// Step 6's promise: dQ the same bit for bit in every run, on shapes where many key blocks add to
// each query tile (and, causal, to different numbers of tiles), with B·H > 1.
TEST_CASE("kernel 6: dQ, dK, dV the same bit for bit in five runs, causal and not, D 64 and 128",
          "[gpu][sm90][chapter11][v6]") {
    REQUIRE(have_sm90());
    const bool small = fa::test::small_shapes();
    for (bool causal : {false, true})
        for (int D : {64, 128}) {
            const fa::AttnShape s = fa::make_shape(2, 3, small ? 1000 : 4097, D, causal);
            GpuCase<__nv_bfloat16> c(s, 29, 1.0);
            const std::vector<std::vector<float>> first = c.gradients(ch11::kDeterministic, -1);
            for (int run = 1; run < 5; ++run) {
                const std::vector<std::vector<float>> again = c.gradients(ch11::kDeterministic, -1);
                for (int g = 0; g < 3; ++g) {
                    INFO(s.str() << " run " << run << " gradient " << "QKV"[g]);
                    CHECK(std::memcmp(first[g].data(), again[g].data(), first[g].size() * sizeof(float)) == 0);
                }
            }
        }
}
