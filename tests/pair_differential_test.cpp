// Differential test of the two allocator pairs against the host reference
// model (reference_model.hpp: ReferenceSwaPair, ReferenceMambaPair). Random
// operation mixes on an SWA pair and on a Mamba pair; after every step the
// library is compared with the model (composite and per-side sizes, live
// virtual ids and their physical pages on each side, the exact ids every
// allocation returns, the SWA tombstones), check_invariants() runs on both
// sides, and the KV data check (each side's bytes stamped with their virtual
// id and side) runs after every step that can compact and every 50th step.
//
// Reproduce one seed: kvpool_tests_<backend> "[pair-differential]" --kvpool-seed N
// (--kvpool-ops N changes the operations per seed, --kvpool-seeds K the count).
#include "reference_model.hpp"
#include "test_config.hpp"
#include "side_comparison.hpp"
#include "test_random.hpp"
#include "test_support.hpp"

#include <kvpool/mamba_pair.hpp>
#include <kvpool/swa_pair.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

#ifndef KVPOOL_TEST_BACKEND_NAME
#define KVPOOL_TEST_BACKEND_NAME "backend"
#endif

using SwaPair = UnifiedSWAAllocator<Space>;
using MambaPair = UnifiedMambaAllocator<Space>;
using Int32View = Kokkos::View<std::int32_t*, Space::memory_space>;

// Stamp tags: the two sides' bytes of one virtual id differ.
constexpr int full_tag = 0;
constexpr int other_tag = 1;

// A failed comparison; carries the full context.
struct Mismatch : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Config {
    CompactionMode mode;
    index_t page_size;
    std::string name() const { return fmt::format("{}/page_size={}", to_string(mode), page_size); }
};

// A running request: its virtual token ids in position order. Its first token
// starts a page, so position i lies on the request's page i / page_size.
struct Request {
    std::vector<index_t> tokens;
    index_t swa_from = 0;   // SWA pair: tokens [0, swa_from) left the window
    index_t slot = unbound; // Mamba pair: its state slot
};

// What both runs share: the generator, the step loop, the report and the
// per-side comparison.
class PairRun {
public:
    virtual ~PairRun() = default;

    // Runs every step; throws Mismatch (with context) on the first difference.
    void run() {
        compare();
        for (step_ = 1; step_ <= ops_; ++step_) {
            if ((step_ - 1) % 400 == 0)
                regime_ = static_cast<int>(rng_.uniform(0, 2));
            data_check_due_ = step_ % 50 == 0;
            try {
                one_step();
                compare();
                if (data_check_due_)
                    data_check();
            } catch (const Mismatch&) {
                throw;
            } catch (const std::exception& e) {
                fail(fmt::format("exception: {}", e.what()));
            }
        }
    }

protected:
    PairRun(std::string tag, std::uint64_t seed, const Config& config, int ops, std::uint64_t salt)
        : tag_(std::move(tag)), seed_(seed), config_(config), ops_(ops),
          rng_(seed ^ salt ^
               (config.mode == CompactionMode::lazy ? 0x51ull : 0x17ull) * 0x100000001b3ull ^
               static_cast<std::uint64_t>(config.page_size) * 0x9e37ull) {}

    virtual void one_step() = 0;
    virtual void compare() = 0;
    virtual void data_check() = 0;
    // Both sides of the library and of the model, for the report.
    virtual std::string states() const = 0;

    double uniform01() { return static_cast<double>(rng_.next() >> 11) * 0x1.0p-53; }

    // An operation kind drawn with the current regime's weights.
    int pick_kind(const double* weights, int kinds) {
        double total = 0;
        for (int k = 0; k < kinds; ++k)
            total += weights[k];
        double x = uniform01() * total;
        int kind = 0;
        while (kind < kinds - 1 && x >= weights[kind])
            x -= weights[kind++];
        return kind;
    }

    // Up to max_count distinct indices of [0, n), in random order.
    std::vector<std::size_t> pick_distinct(std::size_t n, index_t max_count) {
        std::vector<std::size_t> all(n);
        for (std::size_t i = 0; i < n; ++i)
            all[i] = i;
        for (std::size_t i = n; i > 1; --i)
            std::swap(all[i - 1],
                      all[static_cast<std::size_t>(rng_.uniform(0, static_cast<index_t>(i) - 1))]);
        all.resize(std::min(n, static_cast<std::size_t>(max_count)));
        return all;
    }

    void begin_op(const std::string& description) {
        op_ = description;
        recent_.push_back(fmt::format("#{}: {}", step_, op_));
        if (recent_.size() > 12)
            recent_.pop_front();
    }

    [[noreturn]] void fail(const std::string& what) const {
        std::string recent;
        for (const auto& r : recent_)
            recent += "\n    " + r;
        throw Mismatch(
            fmt::format("pair differential mismatch: pair={} seed={} config={} step={} op=[{}]\n  "
                        "{}\n  geometry: {}\n{}  recent ops:{}\n  reproduce: kvpool_tests_{} "
                        "\"[pair-differential][{}]\" --kvpool-seed {}",
                        tag_, seed_, config_.name(), step_, op_, what, geometry_, states(), recent,
                        KVPOOL_TEST_BACKEND_NAME, tag_, seed_));
    }

    template <class A, class B>
    void expect_eq(const A& real, const B& model, const std::string& what) const {
        if (!(real == model))
            fail(fmt::format("{}: real {} != model {}", what, real, model));
    }

    void compare_side(const std::string& n, const Allocator& r, const ReferenceSide& m) const {
        if (const std::string difference = side_mismatch(n, r, m); !difference.empty()) fail(difference);
    }

    void expect_alloc_outcome(const std::string& what, bool real_ok,
                              const std::optional<std::vector<index_t>>& model,
                              const std::vector<index_t>& real_ids) const {
        if (real_ok != model.has_value())
            fail(fmt::format("{} {} in the library but {} in the model", what,
                             real_ok ? "succeeded" : "failed", model ? "succeeded" : "failed"));
        if (real_ok && real_ids != *model)
            fail(fmt::format("{} returned ids {} (library) vs {} (model)", what, real_ids, *model));
    }

    // The tokens the requests hold on a side cover exactly the model's live
    // pages, and read back their stamps through translate().
    void expect_live_data(const std::string& n, const Allocator& r, const ReferenceSide& m, int tag,
                          const std::vector<index_t>& tokens) const {
        std::set<index_t> pages;
        for (index_t t : tokens)
            pages.insert(t / r.page_size());
        std::set<index_t> live;
        for (const auto& [v, p] : m.live())
            live.insert(v);
        expect_eq(pages, live, n + ": pages the requests hold vs the model's live pages");
        const std::size_t bad = check_stamps(*pool_, r, tag, tokens);
        if (bad != 0)
            fail(fmt::format(
                "{}: {} live tokens lost their KV data (the first is in the UNSCOPED_INFO above)",
                n, bad));
    }

    // Drops finished requests from the bookkeeping.
    void forget(std::vector<std::size_t> finished) {
        std::sort(finished.rbegin(), finished.rend());
        for (std::size_t i : finished)
            requests_.erase(requests_.begin() + static_cast<std::ptrdiff_t>(i));
    }

    std::string tag_;
    std::uint64_t seed_;
    Config config_;
    int ops_;
    Rng rng_;
    std::unique_ptr<Pool> pool_;
    std::string geometry_;
    int step_ = 0;
    int regime_ = 0;
    bool data_check_due_ = false;
    std::string op_ = "initial state";
    std::deque<std::string> recent_;
    std::vector<Request> requests_;
};

// ---------------------------------------------------------------------- SWA pair

class SwaRun final : public PairRun {
public:
    SwaRun(std::uint64_t seed, const Config& config, int ops)
        : PairRun("swa", seed, config, ops, 0x5357415f50414952ull) {
        // Entry bytes small and not multiples of each other; now and then the
        // full side grows down, and a side capped below its bytes (a fixed
        // split's cap: the conservation views and the joint size's id caps).
        static const std::vector<std::pair<index_t, index_t>> entry_pairs = {
            {24, 40}, {40, 24}, {12, 20}, {36, 28}, {20, 13}, {17, 24}, {48, 30}, {9, 14}};
        const auto entries = rng_.pick(entry_pairs);
        const index_t ps = config.page_size;
        const index_t page_bytes_max = std::max(entries.first, entries.second) * ps;
        const index_t total =
            rng_.uniform(160, 320) * page_bytes_max + rng_.uniform(0, page_bytes_max - 1);
        const bool full_up = rng_.chance(0.7);
        SubPoolSpec full =
            spec("full", entries.first, ps, full_up ? GrowDirection::up : GrowDirection::down);
        SubPoolSpec swa =
            spec("swa", entries.second, ps, full_up ? GrowDirection::down : GrowDirection::up);
        if (rng_.chance(0.2))
            full.max_tokens = total / (entries.first * ps) * ps * 2 / 5;
        if (rng_.chance(0.2))
            swa.max_tokens = total / (entries.second * ps) * ps * rng_.uniform(2, 5) / 10;
        pool_ = std::make_unique<Pool>(PoolLayout(total, {full, swa}));
        pair_ = std::make_unique<SwaPair>(*pool_, config.mode);
        model_ = std::make_unique<ReferenceSwaPair>(pool_->layout().side("full"),
                                                    pool_->layout().side("swa"), total, config.mode,
                                                    AllocatorOptions().max_moves_per_flush);
        const auto& f = pool_->layout().side("full");
        const auto& s = pool_->layout().side("swa");
        geometry_ = fmt::format(
            "total_bytes={} full(entry={}, grows {}, pages={}, virtual_pages={}) "
            "swa(entry={}, grows {}, pages={}, virtual_pages={}) page_size={}",
            total, entries.first, to_string(f.grow()), f.num_physical_pages, f.num_virtual_pages,
            entries.second, to_string(s.grow()), s.num_physical_pages, s.num_virtual_pages, ps);
    }

private:
    enum class Size { random, beyond };

    std::string states() const override {
        return fmt::format("  real full: {}\n  model full: {}\n  real swa: {}\n  model swa: {}\n",
                           pair_->full().state_string(), model_->full().describe(),
                           pair_->swa().state_string(), model_->swa().describe());
    }
    std::string real_states() const {
        return pair_->full().state_string() + " | " + pair_->swa().state_string();
    }

    void compare() override {
        const ReferenceSwaPair& m = *model_;
        expect_eq(pair_->available_size(), m.available_size(), "available_size() (joint)");
        expect_eq(pair_->conserve_full_available_size(), m.conserve_full_available_size(),
                  "conserve_full_available_size()");
        expect_eq(pair_->conserve_swa_available_size(), m.conserve_swa_available_size(),
                  "conserve_swa_available_size()");
        expect_eq(pair_->schedulable_full_available_size(), m.full().schedulable_available_size(),
                  "schedulable_full_available_size()");
        expect_eq(pair_->schedulable_swa_available_size(), m.swa().schedulable_available_size(),
                  "schedulable_swa_available_size()");
        expect_eq(pair_->full_available_size(), m.full_available_size(), "full_available_size()");
        expect_eq(pair_->swa_available_size(), m.swa_available_size(), "swa_available_size()");
        compare_side("full", pair_->full(), m.full());
        compare_side("swa", pair_->swa(), m.swa());
        // The tombstones: the library's tables, the model and the windows the
        // requests' bookkeeping says have passed.
        std::set<index_t> real, booked;
        const auto& full = pair_->full().core();
        const auto& swa = pair_->swa().core();
        for (index_t v = 1; v < full.virtual_table_pages(); ++v)
            if (full.physical_page_of(v) != unbound && swa.physical_page_of(v) == unbound)
                real.insert(v);
        for (const auto& req : requests_)
            for (index_t i = 0; i < req.swa_from; ++i)
                booked.insert(req.tokens[static_cast<std::size_t>(i)] / pair_->page_size());
        const auto tombstones = m.tombstones();
        expect_eq(real, tombstones, "tombstones (live on full, released on swa)");
        expect_eq(booked, tombstones, "tombstones the requests' windows account for");
    }

    void data_check() override {
        std::vector<index_t> full_live, swa_live, tombstoned;
        for (const auto& req : requests_) {
            const auto from = req.tokens.begin() + static_cast<std::ptrdiff_t>(req.swa_from);
            full_live.insert(full_live.end(), req.tokens.begin(), req.tokens.end());
            swa_live.insert(swa_live.end(), from, req.tokens.end());
            tombstoned.insert(tombstoned.end(), req.tokens.begin(), from);
        }
        expect_live_data("full", pair_->full(), model_->full(), full_tag, full_live);
        expect_live_data("swa", pair_->swa(), model_->swa(), other_tag, swa_live);
        if (tombstoned.empty())
            return;
        // Released SWA pages read the sink through the SWA layers' read path.
        Int32View physical("test::swa_physical", tombstoned.size());
        pair_->translate_swa(Space(), to_device(tombstoned), physical);
        auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), physical);
        for (std::size_t i = 0; i < tombstoned.size(); ++i)
            if (host(i) != 0)
                fail(fmt::format("swa: tombstoned token {} translates to {}, not the sink 0",
                                 tombstoned[i], host(i)));
    }

    void one_step() override {
        // Weights per regime: 0 grow, 1 shrink, 2 churn.
        static const double weights[3][7] = {
            // alloc extend decode free free_swa flush beyond
            {26, 20, 18, 8, 10, 8, 6},
            {8, 8, 12, 30, 22, 12, 6},
            {18, 14, 18, 16, 18, 8, 6},
        };
        int kind = pick_kind(weights[regime_], 7);
        if (requests_.empty() && (kind == 3 || kind == 4))
            kind = 0;
        switch (kind) {
        case 0:
            return op_alloc(Size::random);
        case 1:
            return op_extend(Size::random);
        case 2:
            return op_decode();
        case 3:
            return op_free();
        case 4:
            return op_free_swa();
        case 5:
            return op_flush();
        default:
            return rng_.chance(0.5) ? op_alloc(Size::beyond) : op_extend(Size::beyond);
        }
    }

    // After an allocation: what a failure must leave alone, and whether it
    // compacted (a lazy shortfall's urgent flushes).
    void after_alloc(bool ok, const std::string& before) {
        if (model_->last_alloc_flushed())
            data_check_due_ = true;
        else if (!ok)
            expect_eq(real_states(), before, "state of both sides after a failed allocation");
    }

    void stamp(const std::vector<index_t>& ids) {
        stamp_tokens(*pool_, pair_->full(), full_tag, ids);
        stamp_tokens(*pool_, pair_->swa(), other_tag, ids);
    }

    // alloc(n): a new request of whole pages. Beyond: more than even the
    // urgent flushes could make room for: it must fail.
    void op_alloc(Size size) {
        const index_t ps = pair_->page_size();
        const index_t available = model_->available_size() / ps;
        const index_t after_flush = model_->available_after_flush_size() / ps;
        index_t pages;
        bool must_succeed = false;
        const double u = uniform01();
        if (size == Size::beyond)
            pages = after_flush + rng_.uniform(1, 6);
        else if (u < 0.55)
            pages = rng_.uniform(1, 4);
        else if (u < 0.85)
            pages = rng_.uniform(5, 16);
        else if (u < 0.93)
            pages = rng_.uniform(0, std::max<index_t>(available / 2, 1));
        else {
            pages = u < 0.97 ? available : after_flush;
            must_succeed = true;
        }
        begin_op(fmt::format("alloc({} tokens){} [available {}, after flush {}]", pages * ps,
                             size == Size::beyond ? " beyond capacity" : "", available * ps,
                             after_flush * ps));
        const std::string before = real_states();
        auto got = pair_->alloc(Space(), pages * ps);
        auto expected = model_->alloc(pages * ps);
        const std::vector<index_t> ids = got ? to_host(*got) : std::vector<index_t>{};
        expect_alloc_outcome("alloc", got.has_value(), expected, ids);
        if (must_succeed && !got)
            fail("an allocation of at most available_size() (after the flush) failed");
        if (size == Size::beyond && got)
            fail("an allocation beyond what the flushes can free succeeded");
        after_alloc(got.has_value(), before);
        if (!got || ids.empty())
            return;
        stamp(ids);
        requests_.push_back({ids, 0, unbound});
    }

    // alloc_extend over new (prefix 0) and running (prefix > 0, last_loc their
    // last token) requests; beyond: plus a new request longer than everything.
    void op_extend(Size size) {
        const index_t ps = pair_->page_size();
        const index_t batch = rng_.chance(0.03) ? 0 : rng_.uniform(1, 4);
        std::vector<index_t> prefix, seq, last_loc;
        std::vector<std::ptrdiff_t> which; // request index, -1: a new request
        for (std::size_t i : pick_distinct(requests_.size(), rng_.uniform(0, batch))) {
            const Request& req = requests_[i];
            const auto len = static_cast<index_t>(req.tokens.size());
            prefix.push_back(len);
            seq.push_back(len + (rng_.chance(0.1) ? 0 : rng_.uniform(1, 2 * ps + 3)));
            last_loc.push_back(req.tokens.back());
            which.push_back(static_cast<std::ptrdiff_t>(i));
        }
        while (static_cast<index_t>(seq.size()) < batch) {
            prefix.push_back(0);
            seq.push_back(rng_.uniform(1, 3 * ps + 5));
            last_loc.push_back(unbound);
            which.push_back(-1);
        }
        if (size == Size::beyond) {
            prefix.push_back(0);
            seq.push_back(model_->available_after_flush_size() + rng_.uniform(1, 3 * ps));
            last_loc.push_back(unbound);
            which.push_back(-1);
        }
        index_t tokens = 0;
        for (std::size_t b = 0; b < seq.size(); ++b)
            tokens += seq[b] - prefix[b];
        begin_op(fmt::format("alloc_extend{}(prefix_lens={}, seq_lens={}, last_loc={}) [available "
                             "{}, after flush {}]",
                             size == Size::beyond ? " beyond capacity" : "", prefix, seq, last_loc,
                             model_->available_size(), model_->available_after_flush_size()));
        auto out =
            kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
        const std::string before = real_states();
        const bool ok = pair_->alloc_extend(Space(), prefix, seq, to_device(last_loc), out);
        auto expected = model_->alloc_extend(prefix, seq, last_loc);
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_alloc_outcome("alloc_extend", ok, expected, ids);
        if (size == Size::beyond && ok)
            fail("alloc_extend beyond what the flushes can free succeeded");
        after_alloc(ok, before);
        if (!ok)
            return;
        stamp(ids);
        auto next = ids.begin();
        for (std::size_t b = 0; b < seq.size(); ++b) {
            const auto n = static_cast<std::ptrdiff_t>(seq[b] - prefix[b]);
            if (which[b] >= 0) {
                auto& req = requests_[static_cast<std::size_t>(which[b])];
                req.tokens.insert(req.tokens.end(), next, next + n);
            } else if (n > 0) {
                requests_.push_back({std::vector<index_t>(next, next + n), 0, unbound});
            }
            next += n;
        }
    }

    // alloc_decode: one token for each of several running requests.
    void op_decode() {
        if (requests_.empty())
            return op_extend(Size::random);
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 8));
        std::vector<index_t> seq, last_loc;
        for (std::size_t i : chosen) {
            seq.push_back(static_cast<index_t>(requests_[i].tokens.size()) + 1);
            last_loc.push_back(requests_[i].tokens.back());
        }
        begin_op(fmt::format(
            "alloc_decode(seq_lens={}, last_loc={}) [available {}, after flush {}]", seq, last_loc,
            model_->available_size(), model_->available_after_flush_size()));
        auto out = kk::uninitialized<IndexView>("test::decode_out", seq.size());
        const std::string before = real_states();
        const bool ok = pair_->alloc_decode(Space(), seq, to_device(last_loc), out);
        auto expected = model_->alloc_decode(seq, last_loc);
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_alloc_outcome("alloc_decode", ok, expected, ids);
        after_alloc(ok, before);
        if (!ok)
            return;
        stamp(ids);
        for (std::size_t k = 0; k < chosen.size(); ++k)
            requests_[chosen[k]].tokens.push_back(ids[k]);
    }

    // Whole requests (their tombstoned SWA pages included), now and then as a
    // free group of one free per request.
    void op_free() {
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 3));
        const bool group = rng_.chance(0.2);
        std::vector<index_t> all;
        for (std::size_t i : chosen)
            all.insert(all.end(), requests_[i].tokens.begin(), requests_[i].tokens.end());
        if (rng_.chance(0.3))
            std::reverse(all.begin(), all.end());
        begin_op(fmt::format("free of {} whole request(s){}, {} tokens", chosen.size(),
                             group ? " in a free group" : "", all.size()));
        if (group) {
            pair_->free_group_begin();
            for (std::size_t i : chosen)
                pair_->free(Space(), requests_[i].tokens);
            pair_->free_group_end(Space());
        } else {
            pair_->free(Space(), all);
        }
        model_->free(all);
        forget(chosen);
        if (config_.mode == CompactionMode::eager)
            data_check_due_ = true;
    }

    // The oldest whole pages of a few requests leave the window (never the
    // page a decode appends to). Now and then the call names the pages that
    // left before again, which must be skipped.
    void op_free_swa() {
        const index_t ps = pair_->page_size();
        std::vector<index_t> tokens;
        std::vector<std::pair<std::size_t, index_t>> moves; // request, its new swa_from
        std::vector<std::string> ranges;
        for (std::size_t i : pick_distinct(requests_.size(), rng_.uniform(1, 3))) {
            const Request& req = requests_[i];
            const index_t pages = (static_cast<index_t>(req.tokens.size()) + ps - 1) / ps;
            const index_t gone = req.swa_from / ps;
            const index_t to =
                gone + 1 < pages ? rng_.uniform(gone + 1, pages - 1) * ps : req.swa_from;
            const index_t from = rng_.chance(0.3) ? 0 : req.swa_from;
            tokens.insert(tokens.end(), req.tokens.begin() + from, req.tokens.begin() + to);
            ranges.push_back(fmt::format("positions [{}, {}) of {}", from, to, req.tokens.size()));
            moves.emplace_back(i, to);
        }
        begin_op(fmt::format("free_swa of {} tokens: {}", tokens.size(), fmt::join(ranges, ", ")));
        pair_->free_swa(Space(), tokens);
        model_->free_swa(tokens);
        for (const auto& [i, to] : moves)
            requests_[i].swa_from = to;
        if (config_.mode == CompactionMode::eager)
            data_check_due_ = true;
    }

    void op_flush() {
        begin_op("flush_opportunistic()");
        expect_eq(pair_->flush_opportunistic(Space()), model_->flush_opportunistic(),
                  "pages moved by the flush");
        if (config_.mode == CompactionMode::lazy)
            data_check_due_ = true;
    }

    std::unique_ptr<SwaPair> pair_;
    std::unique_ptr<ReferenceSwaPair> model_;
};

// ---------------------------------------------------------------------- Mamba pair

class MambaRun final : public PairRun {
public:
    MambaRun(std::uint64_t seed, const Config& config, int ops)
        : PairRun("mamba", seed, config, ops, 0x4d414d4241504149ull) {
        // A state slot costs a few to many full tokens of gap, not a whole
        // number of them; the buffer holds a few hundred full pages and a few
        // dozen slots, so slots and KV starve each other in turn.
        static const std::vector<index_t> full_entries = {16, 12, 20, 24, 9};
        static const std::vector<index_t> slot_costs = {3, 7, 20, 45};
        const index_t ps = config.page_size;
        const index_t e_full = rng_.pick(full_entries);
        const index_t state_bytes = rng_.pick(slot_costs) * e_full - rng_.uniform(1, e_full - 1);
        const index_t total = rng_.uniform(120, 240) * e_full * ps +
                              rng_.uniform(8, 40) * state_bytes + rng_.uniform(0, state_bytes - 1);
        const bool full_up = rng_.chance(0.7);
        SubPoolSpec full =
            spec("full", e_full, ps, full_up ? GrowDirection::up : GrowDirection::down);
        SubPoolSpec state =
            spec("mamba", state_bytes, 1, full_up ? GrowDirection::down : GrowDirection::up);
        if (rng_.chance(0.2))
            full.max_tokens = total / (e_full * ps) * ps * 2 / 5;
        if (rng_.chance(0.2))
            state.max_tokens = rng_.uniform(4, 12);
        pool_ = std::make_unique<Pool>(PoolLayout(total, {full, state}));
        pair_ = std::make_unique<MambaPair>(*pool_, config.mode);
        model_ = std::make_unique<ReferenceMambaPair>(
            pool_->layout().side("full"), pool_->layout().side("mamba"), total, config.mode,
            AllocatorOptions().max_moves_per_flush);
        const auto& f = pool_->layout().side("full");
        const auto& s = pool_->layout().side("mamba");
        geometry_ = fmt::format(
            "total_bytes={} full(entry={}, page_size={}, grows {}, pages={}, virtual_pages={}) "
            "state(entry={}, grows {}, slots={}, virtual_slots={})",
            total, e_full, ps, to_string(f.grow()), f.num_physical_pages, f.num_virtual_pages,
            state_bytes, to_string(s.grow()), s.num_physical_pages, s.num_virtual_pages);
    }

private:
    std::string states() const override {
        return fmt::format(
            "  real full: {}\n  model full: {}\n  real state: {}\n  model state: {}\n",
            pair_->full().state_string(), model_->full().describe(), pair_->state().state_string(),
            model_->state().describe());
    }
    std::string real_states() const {
        return pair_->full().state_string() + " | " + pair_->state().state_string();
    }

    void compare() override {
        const ReferenceMambaPair& m = *model_;
        expect_eq(pair_->state_slot_full_token_cost(), m.state_slot_full_token_cost(),
                  "state_slot_full_token_cost()");
        expect_eq(pair_->available_size(), m.available_size(), "available_size()");
        expect_eq(pair_->state_slots_available(), m.state_slots_available(),
                  "state_slots_available()");
        expect_eq(pair_->state_slot_starved(), m.state_slot_starved(), "state_slot_starved()");
        compare_side("full", pair_->full(), m.full());
        compare_side("state", pair_->state(), m.state());
    }

    void data_check() override {
        std::vector<index_t> tokens, slots;
        for (const auto& req : requests_) {
            tokens.insert(tokens.end(), req.tokens.begin(), req.tokens.end());
            slots.push_back(req.slot);
        }
        expect_live_data("full", pair_->full(), model_->full(), full_tag, tokens);
        expect_live_data("state", pair_->state(), model_->state(), other_tag, slots);
    }

    void one_step() override {
        // Weights per regime: 0 grow, 1 shrink, 2 churn.
        static const double weights[3][6] = {
            // admit extend decode free flush beyond
            {30, 18, 18, 12, 10, 6},
            {10, 8, 12, 40, 14, 6},
            {22, 14, 18, 24, 12, 6},
        };
        int kind = pick_kind(weights[regime_], 6);
        if (requests_.empty() && kind >= 1 && kind <= 3)
            kind = 0;
        switch (kind) {
        case 0:
            return op_admit();
        case 1:
            return op_extend();
        case 2:
            return op_decode();
        case 3:
            return op_free();
        case 4:
            return op_flush();
        default:
            return rng_.chance(0.5) ? op_slots_beyond() : op_kv_beyond();
        }
    }

    // A lazy allocation that fell short flushed its peer: pages may have moved.
    void after_alloc(const ReferenceSide& side, bool ok, const std::string& before,
                     const char* what) {
        if (side.last_alloc_flushed_peer())
            data_check_due_ = true;
        else if (!ok)
            expect_eq(real_states(), before,
                      std::string("state of both sides after a failed ") + what);
    }

    // New requests, as the engine admits them: their state slots first, then
    // their prompts' KV (alloc_extend from prefix 0, or alloc of whole pages);
    // without room for the prompts the slots go back.
    void op_admit() {
        const index_t ps = pair_->full().page_size();
        const index_t k = rng_.uniform(1, 3);
        const bool whole_pages = k == 1 && rng_.chance(0.3);
        std::vector<index_t> seq;
        for (index_t i = 0; i < k; ++i)
            seq.push_back(whole_pages ? rng_.uniform(1, 6) * ps : rng_.uniform(1, 3 * ps + 5));
        begin_op(fmt::format("admit {} request(s) of {} tokens{} [slots available {}, full "
                             "available {}, starved {}]",
                             k, seq, whole_pages ? " (alloc)" : " (alloc_extend)",
                             model_->state_slots_available(), model_->full().available_size(),
                             model_->state_slot_starved()));
        std::string before = real_states();
        auto got_slots = pair_->alloc_state_slots(Space(), k);
        auto expected_slots = model_->state().alloc(k);
        const std::vector<index_t> slots = got_slots ? to_host(*got_slots) : std::vector<index_t>{};
        expect_alloc_outcome("alloc_state_slots", got_slots.has_value(), expected_slots, slots);
        after_alloc(model_->state(), got_slots.has_value(), before, "alloc_state_slots");
        if (!got_slots)
            return;
        stamp_tokens(*pool_, pair_->state(), other_tag, slots);

        before = real_states();
        std::vector<index_t> ids;
        bool ok;
        std::optional<std::vector<index_t>> expected;
        if (whole_pages) {
            auto got = pair_->alloc(Space(), seq[0]);
            expected = model_->full().alloc(seq[0]);
            ok = got.has_value();
            if (ok)
                ids = to_host(*got);
        } else {
            const std::vector<index_t> prefix(seq.size(), 0), last_loc(seq.size(), unbound);
            index_t tokens = 0;
            for (index_t s : seq)
                tokens += s;
            auto out =
                kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
            ok = pair_->alloc_extend(Space(), prefix, seq, to_device(last_loc), out);
            expected = model_->full().alloc_extend(prefix, seq, last_loc);
            if (ok)
                ids = to_host(out);
        }
        expect_alloc_outcome(whole_pages ? "alloc" : "alloc_extend", ok, expected, ids);
        after_alloc(model_->full(), ok, before, "KV allocation");
        if (!ok) {
            pair_->free_state_slots(Space(), slots);
            model_->state().free(slots);
            if (config_.mode == CompactionMode::eager)
                data_check_due_ = true;
            return;
        }
        stamp_tokens(*pool_, pair_->full(), full_tag, ids);
        auto next = ids.begin();
        for (index_t i = 0; i < k; ++i) {
            const auto n = static_cast<std::ptrdiff_t>(seq[static_cast<std::size_t>(i)]);
            requests_.push_back(
                {std::vector<index_t>(next, next + n), 0, slots[static_cast<std::size_t>(i)]});
            next += n;
        }
    }

    // alloc_extend over running requests (prefix > 0, last_loc their last token).
    void op_extend() {
        const index_t ps = pair_->full().page_size();
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 4));
        std::vector<index_t> prefix, seq, last_loc;
        index_t tokens = 0;
        for (std::size_t i : chosen) {
            const auto len = static_cast<index_t>(requests_[i].tokens.size());
            prefix.push_back(len);
            seq.push_back(len + (rng_.chance(0.1) ? 0 : rng_.uniform(1, 2 * ps + 3)));
            last_loc.push_back(requests_[i].tokens.back());
            tokens += seq.back() - len;
        }
        begin_op(fmt::format(
            "alloc_extend(prefix_lens={}, seq_lens={}, last_loc={}) [full available {}]", prefix,
            seq, last_loc, model_->full().available_size()));
        auto out =
            kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
        const std::string before = real_states();
        const bool ok = pair_->alloc_extend(Space(), prefix, seq, to_device(last_loc), out);
        auto expected = model_->full().alloc_extend(prefix, seq, last_loc);
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_alloc_outcome("alloc_extend", ok, expected, ids);
        after_alloc(model_->full(), ok, before, "alloc_extend");
        if (!ok)
            return;
        stamp_tokens(*pool_, pair_->full(), full_tag, ids);
        auto next = ids.begin();
        for (std::size_t b = 0; b < chosen.size(); ++b) {
            const auto n = static_cast<std::ptrdiff_t>(seq[b] - prefix[b]);
            auto& req = requests_[chosen[b]];
            req.tokens.insert(req.tokens.end(), next, next + n);
            next += n;
        }
    }

    void op_decode() {
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 8));
        std::vector<index_t> seq, last_loc;
        for (std::size_t i : chosen) {
            seq.push_back(static_cast<index_t>(requests_[i].tokens.size()) + 1);
            last_loc.push_back(requests_[i].tokens.back());
        }
        begin_op(fmt::format("alloc_decode(seq_lens={}, last_loc={}) [full available {}]", seq,
                             last_loc, model_->full().available_size()));
        auto out = kk::uninitialized<IndexView>("test::decode_out", seq.size());
        const std::string before = real_states();
        const bool ok = pair_->alloc_decode(Space(), seq, to_device(last_loc), out);
        auto expected = model_->full().alloc_decode(seq, last_loc);
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_alloc_outcome("alloc_decode", ok, expected, ids);
        after_alloc(model_->full(), ok, before, "alloc_decode");
        if (!ok)
            return;
        stamp_tokens(*pool_, pair_->full(), full_tag, ids);
        for (std::size_t k = 0; k < chosen.size(); ++k)
            requests_[chosen[k]].tokens.push_back(ids[k]);
    }

    // Finished requests: their KV and their state slots, either first.
    void op_free() {
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 3));
        std::vector<index_t> tokens, slots;
        for (std::size_t i : chosen) {
            tokens.insert(tokens.end(), requests_[i].tokens.begin(), requests_[i].tokens.end());
            slots.push_back(requests_[i].slot);
        }
        const bool slots_first = rng_.chance(0.5);
        begin_op(fmt::format("free of {} request(s): {} KV tokens, state slots {}{}", chosen.size(),
                             tokens.size(), slots, slots_first ? " (slots first)" : ""));
        if (slots_first) {
            pair_->free_state_slots(Space(), slots);
            model_->state().free(slots);
        }
        pair_->free(Space(), tokens);
        model_->full().free(tokens);
        if (!slots_first) {
            pair_->free_state_slots(Space(), slots);
            model_->state().free(slots);
        }
        forget(chosen);
        if (config_.mode == CompactionMode::eager)
            data_check_due_ = true;
    }

    void op_flush() {
        begin_op("flush_opportunistic()");
        expect_eq(pair_->flush_opportunistic(Space()), model_->flush_opportunistic(),
                  "pages moved by the flush");
        if (config_.mode == CompactionMode::lazy)
            data_check_due_ = true;
    }

    // More state slots than even compacting the full side makes room for.
    void op_slots_beyond() {
        const index_t count = model_->state().schedulable_available_size() + rng_.uniform(1, 3);
        begin_op(fmt::format(
            "alloc_state_slots({}) beyond capacity [slots available {}, after flush {}]", count,
            model_->state_slots_available(), model_->state().schedulable_available_size()));
        const std::string before = real_states();
        auto got = pair_->alloc_state_slots(Space(), count);
        auto expected = model_->state().alloc(count);
        expect_alloc_outcome("alloc_state_slots", got.has_value(), expected,
                             got ? to_host(*got) : std::vector<index_t>{});
        if (got)
            fail("alloc_state_slots beyond what compacting the full side frees succeeded");
        after_alloc(model_->state(), false, before, "alloc_state_slots");
    }

    // More full KV than even compacting the state side makes room for.
    void op_kv_beyond() {
        const index_t ps = pair_->full().page_size();
        const index_t need = (model_->available_size() / ps + rng_.uniform(1, 4)) * ps;
        begin_op(fmt::format("alloc({} tokens) beyond capacity [available_size() {}]", need,
                             model_->available_size()));
        const std::string before = real_states();
        auto got = pair_->alloc(Space(), need);
        auto expected = model_->full().alloc(need);
        expect_alloc_outcome("alloc", got.has_value(), expected,
                             got ? to_host(*got) : std::vector<index_t>{});
        if (got)
            fail("alloc beyond available_size() succeeded");
        after_alloc(model_->full(), false, before, "alloc");
    }

    std::unique_ptr<MambaPair> pair_;
    std::unique_ptr<ReferenceMambaPair> model_;
};

template <class Run> void run_pair(const char* tag) {
    const auto& config = randomised_config();
    int failures = 0;
    for (const std::uint64_t seed : config.seed_list()) {
        std::printf(
            "[pair-differential] %s seed %llu (%d ops x eager/lazy x page size 1/16); reproduce: "
            "kvpool_tests_%s \"[pair-differential][%s]\" --kvpool-seed %llu\n",
            tag, static_cast<unsigned long long>(seed), config.ops, KVPOOL_TEST_BACKEND_NAME, tag,
            static_cast<unsigned long long>(seed));
        std::fflush(stdout);
        for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy})
            for (const index_t page_size : {index_t(1), index_t(16)}) {
                Run run(seed, Config{mode, page_size}, config.ops);
                try {
                    run.run();
                } catch (const Mismatch& e) {
                    ++failures;
                    FAIL_CHECK(e.what());
                }
            }
    }
    CHECK(failures == 0);
}

} // namespace

TEST_CASE("pair differential: SWA pair against the reference model", "[pair-differential][swa]") {
    run_pair<SwaRun>("swa");
}

TEST_CASE("pair differential: Mamba pair against the reference model",
          "[pair-differential][mamba]") {
    run_pair<MambaRun>("mamba");
}
