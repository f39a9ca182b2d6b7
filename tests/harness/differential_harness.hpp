// What the differential tests share: the step loop and its failure report, the
// comparisons with the reference model, the engine's forward-done events, the
// probe of the lower bound that schedulable_available_size() promises, and the
// loop over seeds and configurations.
#pragma once

#include "reference_model.hpp"
#include "side_comparison.hpp"
#include "test_config.hpp"
#include "test_random.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifndef KVPOOL_TEST_BACKEND_NAME
#define KVPOOL_TEST_BACKEND_NAME "backend"
#endif

namespace kvpool::test {

// A forward-done marker the test completes. A GPU backend waits for an
// unfinished host token by polling it; the test completes every token the
// model waited for first, so a poll that never ends means the library waited
// where the reference does not: it fails instead of hanging.
class ForwardToken final : public CompletionToken {
public:
    bool is_complete() const override {
        if (done_.load())
            return true;
        if (++polls_ > max_polls)
            throw std::runtime_error("a wait for a forward token that nothing completes");
        return false;
    }
    void complete() { done_.store(true); }

private:
    static constexpr long max_polls = 50'000'000;
    std::atomic<bool> done_{false};
    mutable std::atomic<long> polls_{0};
};

// The engine's forward passes in flight: each launch is a new token; tokens
// complete oldest first or out of order, and a wait completes its token.
class ForwardEvents {
public:
    std::shared_ptr<ForwardToken> launch() {
        in_flight_.push_back(std::make_shared<ForwardToken>());
        ++launched_;
        return in_flight_.back();
    }
    void complete_one(Rng& rng) {
        if (in_flight_.empty())
            return;
        const std::size_t i =
            rng.chance(0.7) ? 0
                            : static_cast<std::size_t>(
                                  rng.uniform(0, static_cast<index_t>(in_flight_.size()) - 1));
        in_flight_[i]->complete();
        in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // The tokens the model waited for: the device waited, so they are done.
    void complete(const std::vector<CompletionTokenPtr>& waited) {
        for (const auto& token : waited)
            for (std::size_t i = 0; i < in_flight_.size(); ++i)
                if (in_flight_[i] == token) {
                    in_flight_[i]->complete();
                    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
                    ++waited_;
                    break;
                }
    }
    std::size_t in_flight() const { return in_flight_.size(); }
    long launched() const { return launched_; }
    long waited() const { return waited_; }

private:
    std::vector<std::shared_ptr<ForwardToken>> in_flight_;
    long launched_ = 0, waited_ = 0;
};

// Copies of two peers' host cores for the probes, which try allocations on them
// so that the run itself goes on unchanged. Kept across steps: assigning into
// them reuses their containers' storage, where a fresh copy allocates each anew.
struct CoreCopies {
    std::optional<detail::AllocatorCore> first, second;
    detail::PageBinding first_pages, second_pages;

    void copy(const detail::AllocatorCore& a, const detail::AllocatorCore& b) {
        if (first) {
            *first = a;
            *second = b;
        } else {
            first.emplace(a);
            second.emplace(b);
        }
        first->bind_peer(&*second);
        second->bind_peer(&*first);
        first_pages.clear();
        second_pages.clear();
    }
};

// Whether an allocation of schedulable_available_size() succeeds on this side
// (the lower bound it promises), tried on copies of both sides' host cores. An
// empty string, or what failed.
inline std::string schedulable_mismatch(const std::string& n, const Allocator& side,
                                        const Allocator& peer, CoreCopies& copies) {
    copies.copy(side.core(), peer.core());
    detail::AllocatorCore& mine = *copies.first;
    const index_t pages = side.schedulable_available_size() / side.page_size();
    bool ok;
    if (mine.options().is_id_owner) {
        ok = mine.alloc_pages(pages, copies.first_pages);
    } else {
        // A non-owner binds ids of its owner's space only (in its own pages,
        // ratio per owner page): as many as are unbound here.
        const index_t ratio = peer.page_size() % side.page_size() == 0
                                  ? peer.page_size() / side.page_size()
                                  : index_t(1);
        std::vector<index_t> ids;
        for (index_t v = peer.geometry().min_page_index * ratio;
             v < mine.virtual_table_pages() && static_cast<index_t>(ids.size()) < pages; ++v)
            if (mine.physical_page_of(v) == unbound)
                ids.push_back(v);
        ok = mine.bind_virtual_pages(ids.data(), static_cast<index_t>(ids.size()),
                                     copies.first_pages);
    }
    return ok ? std::string()
              : fmt::format("{}: an allocation of schedulable_available_size() = {} tokens failed",
                            n, pages * side.page_size());
}

// Counts that show what a run covered.
struct RunStats {
    long ops = 0, allocs = 0, failed_allocs = 0, beyond_schedulable = 0, peer_flushes = 0,
         flushes = 0, frees = 0, forwards = 0, waits = 0, pending_seen = 0, windows = 0,
         data_checks = 0, band_shifts = 0;
    void add(const RunStats& o) {
        ops += o.ops;
        allocs += o.allocs;
        failed_allocs += o.failed_allocs;
        beyond_schedulable += o.beyond_schedulable;
        peer_flushes += o.peer_flushes;
        flushes += o.flushes;
        frees += o.frees;
        forwards += o.forwards;
        waits += o.waits;
        pending_seen += o.pending_seen;
        windows += o.windows;
        data_checks += o.data_checks;
        band_shifts += o.band_shifts;
    }
    std::string str() const {
        return fmt::format("ops {}: allocations {} ok, {} failed, {} beyond "
                           "schedulable_available_size() that succeeded, "
                           "{} that flushed a peer; frees {}, flushes {}, forwards {} ({} waited "
                           "for), steps with pages "
                           "pending reuse {}, backup windows {}, data checks {}, band shifts {}",
                           ops, allocs, failed_allocs, beyond_schedulable, peer_flushes, frees,
                           flushes, forwards, waits, pending_seen, windows, data_checks,
                           band_shifts);
    }
};

// One randomised run: the step loop, the failure report and the comparisons.
class DifferentialRun {
public:
    virtual ~DifferentialRun() = default;

    // Runs every step; throws Mismatch (with context) on the first difference.
    void run() {
        compare();
        for (step_ = 1; step_ <= ops_ && !rng_.exhausted(); ++step_) {
            if ((step_ - 1) % 400 == 0)
                regime_ = static_cast<int>(rng_.uniform(0, 2));
            try {
                one_step();
                ++stats_.ops;
                compare();
                compare_buffer_bytes();
                // A fuzzer's run is small: it checks the KV data after every step.
                data_check_due_ = data_check_due_ || rng_.from_input();
                after_step();
            } catch (const Mismatch&) {
                throw;
            } catch (const std::exception& e) {
                fail(fmt::format("exception: {}", e.what()));
            }
        }
        finish();
        stats_.forwards = events_.launched();
        stats_.waits = events_.waited();
    }
    const RunStats& stats() const { return stats_; }

protected:
    DifferentialRun(std::string tag, std::uint64_t seed, std::string config, int ops,
                    std::uint64_t salt)
        : DifferentialRun(std::move(tag), seed, std::move(config), ops, Rng(seed ^ salt)) {}
    // Every decision drawn from rng (a fuzzer's input: the run ends where the input does).
    DifferentialRun(std::string tag, std::uint64_t seed, std::string config, int ops, Rng rng)
        : tag_(std::move(tag)), seed_(seed), config_(std::move(config)), ops_(ops), rng_(rng) {}

    virtual void one_step() = 0;
    // Every view and table against the model; the lower-bound probe.
    virtual void compare() = 0;
    // The KV data check and whatever else runs after a step.
    virtual void after_step() = 0;
    virtual void finish() {}

    // The model's call, then the tokens it waited for completed (the device
    // waited for them), then the library's call. Returns {library, model}.
    template <class ModelCall, class LibraryCall>
    auto replay(ModelCall&& model_call, LibraryCall&& library_call) {
        auto expected = model_call();
        for (ReferenceSide* side : model_sides())
            events_.complete(side->take_waits());
        auto real = library_call();
        return std::make_pair(std::move(real), std::move(expected));
    }
    // replay() of an allocation: where the model's returns no allocation, the
    // library's state just before its call is kept for after_allocation(), which
    // checks that a failed allocation changes nothing (only then: the string
    // costs more than the call).
    template <class ModelCall, class LibraryCall>
    auto replay_allocation(ModelCall&& model_call, LibraryCall&& library_call) {
        bool model_failed = false;
        return replay(
            [&] {
                auto expected = model_call();
                model_failed = !expected;
                return expected;
            },
            [&] {
                states_before_failure_ = model_failed ? real_states() : std::string();
                return library_call();
            });
    }
    template <class ModelCall, class LibraryCall>
    void replay_void(ModelCall&& model_call, LibraryCall&& library_call) {
        replay(
            [&] {
                model_call();
                return 0;
            },
            [&] {
                library_call();
                return 0;
            });
    }

    // The sides under test, each with its model, registered once by the run.
    void add_side(std::string name, Allocator& real, ReferenceSide& model) {
        names_.push_back(std::move(name));
        real_.push_back(&real);
        model_.push_back(&model);
    }
    // Both sides of the library and of the model, for the report.
    std::string states() const {
        std::string out;
        for (std::size_t i = 0; i < real_.size(); ++i)
            out += fmt::format("  real {}: {}\n  model {}: {}\n", names_[i],
                               real_[i]->state_string(), names_[i], model_[i]->describe());
        return out;
    }
    std::string real_states() const {
        std::string out;
        for (const Allocator* side : real_)
            out += side->state_string() + " | ";
        return out;
    }
    const std::vector<ReferenceSide*>& model_sides() const { return model_; }

    // Each side against its model, and the lower bound its schedulable size
    // promises (the peer is the other side).
    void compare_sides() {
        bool pending = false;
        for (std::size_t i = 0; i < real_.size(); ++i) {
            compare_side(names_[i], *real_[i], *model_[i]);
            probe_schedulable(names_[i], *real_[i], *real_[1 - i]);
            pending = pending || model_[i]->pending_pages() > 0;
        }
        stats_.pending_seen += pending;
    }

    // After an allocation (replay_allocation(), then expect_allocation()): one
    // that flushed a side may have moved its pages; a failure that flushed
    // nothing changed nothing.
    void after_allocation(bool flushed, bool ok) {
        if (flushed) {
            ++stats_.peer_flushes;
            data_check_due_ = true;
        } else if (!ok) {
            expect_eq(real_states(), states_before_failure_,
                      "state of both sides after a failed allocation");
        }
    }

    // The tokens whose pages are still live on the side.
    static std::vector<index_t> still_live(const std::vector<index_t>& tokens,
                                           const ReferenceSide& side) {
        std::vector<index_t> out;
        for (index_t t : tokens)
            if (side.physical_of_virtual(t / side.page_size()) != unbound)
                out.push_back(t);
        return out;
    }

    // A forward launched: its done token becomes the latest on every side, and
    // it writes written[i] on side i; now and then no forward is in flight
    // (the latest is none). library passes the same to the allocators.
    void forward(const std::vector<std::vector<index_t>>& written,
                 const std::function<void(const CompletionTokenPtr&)>& library) {
        if (rng_.chance(0.1)) {
            begin_op("no forward in flight (latest forward done: none)");
            for (ReferenceSide* side : model_)
                side->set_latest_forward_done(nullptr);
            library(nullptr);
            return;
        }
        const CompletionTokenPtr token = events_.launch();
        std::vector<std::size_t> counts;
        for (const auto& w : written)
            counts.push_back(w.size());
        begin_op(fmt::format("forward launched ({} in flight), writing {} tokens per side",
                             events_.in_flight(), counts));
        for (std::size_t i = 0; i < model_.size(); ++i) {
            model_[i]->set_latest_forward_done(token);
            model_[i]->set_inflight_forward(token, written[i]);
        }
        library(token);
    }

    void op_complete() {
        begin_op(fmt::format("a forward completes ({} in flight)", events_.in_flight()));
        events_.complete_one(rng_);
    }

    // drain_pending_reuse() on every side.
    void drain(const std::function<void()>& library) {
        std::vector<index_t> pending;
        for (const ReferenceSide* side : model_)
            pending.push_back(side->pending_pages());
        begin_op(fmt::format("drain_pending_reuse() [pages pending per side: {}]", pending));
        for (ReferenceSide* side : model_)
            side->drain_pending_reuse();
        library();
    }

    // flush_opportunistic() on every side.
    void flush_opportunistic(const std::function<index_t()>& library) {
        begin_op("flush_opportunistic()");
        auto [moved, expected] = replay(
            [&] {
                index_t sum = 0;
                for (ReferenceSide* side : model_)
                    sum += side->flush_opportunistic();
                return sum;
            },
            library);
        expect_eq(moved, expected, "pages moved by the flush");
        ++stats_.flushes;
        data_check_due_ = data_check_due_ || moved > 0;
    }

    // A side's options: its mode, and a flush cap drawn from the seed, often small.
    AllocatorOptions side_options(CompactionMode mode) {
        static const std::vector<index_t> caps = {1, 2, 3, 5, 8, 4096, 4096};
        AllocatorOptions o = options(mode);
        o.max_moves_per_flush = rng_.pick(caps);
        return o;
    }

    // A pool's size in pages (or state slots), drawn from [lo, hi]; a fuzzer's
    // input gets an eighth of that plus two (a few dozen pages, at least three
    // slots: a padding sink and two): it reaches full sides, both ends meeting
    // and compaction within its few dozen steps, and runs fast.
    index_t pool_pages(index_t lo, index_t hi) {
        return rng_.from_input() ? rng_.uniform(lo / 8 + 2, hi / 8 + 2) : rng_.uniform(lo, hi);
    }

    // A side's entry bytes; a fuzzer's input gets a quarter of them (at least 2):
    // its run checks the KV data after every step, at a cost in bytes.
    index_t entry_bytes(index_t bytes) const {
        return rng_.from_input() ? std::max<index_t>(bytes / 4, 2) : bytes;
    }

    double uniform01() { return static_cast<double>(rng_.next() >> 11) * 0x1.0p-53; }

    // An operation kind drawn with the given weights.
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
        throw Mismatch(fmt::format(
            "differential mismatch: {} seed={} config={} step={} op=[{}]\n  {}\n  geometry: "
            "{}\n{}  recent ops:{}\n  reproduce: kvpool_tests_{} \"[{}]\" --kvpool-seed {}",
            tag_, seed_, config_, step_, op_, what, geometry_, states(), recent,
            KVPOOL_TEST_BACKEND_NAME, tag_, seed_));
    }

    template <class A, class B>
    void expect_eq(const A& real, const B& model, const std::string& what) const {
        if (!(real == model))
            fail(fmt::format("{}: real {} != model {}", what, real, model));
    }

    // The whole buffer's byte account (check_invariants() checks that it adds
    // up): every side's account is the same, and each term is the model's.
    void compare_buffer_bytes() const {
        const detail::BufferBytes real = real_[0]->core().buffer_bytes();
        for (const Allocator* side : real_) {
            const detail::BufferBytes other = side->core().buffer_bytes();
            expect_eq(other.accounted(), real.accounted(), "buffer bytes seen from every side");
            expect_eq(other.gaps, real.gaps, "buffer gap bytes seen from every side");
        }
        std::vector<const ReferenceSide*> bands(model_.begin(), model_.end());
        std::sort(bands.begin(), bands.end(), [](const ReferenceSide* a, const ReferenceSide* b) {
            return a->geometry().position < b->geometry().position;
        });
        detail::BufferBytes model;
        const SubPoolGeometry& lowest = bands.front()->geometry();
        const SubPoolGeometry& highest = bands.back()->geometry();
        model.sink = lowest.sink_bytes;
        model.alignment = lowest.min_page_index * lowest.page_bytes - lowest.sink_bytes +
                          real.buffer - highest.num_physical_pages * highest.page_bytes;
        if (lowest.grow() != GrowDirection::up)
            model.gaps +=
                bands.front()->byte_low_frontier() - lowest.min_page_index * lowest.page_bytes;
        if (highest.grow() != GrowDirection::down)
            model.gaps += highest.num_physical_pages * highest.page_bytes -
                          bands.back()->byte_high_frontier();
        for (std::size_t i = 0; i < bands.size(); ++i) {
            const ReferenceSide& band = *bands[i];
            model.live += band.live_pages() * band.page_bytes();
            model.holes += band.hole_count() * band.page_bytes();
            model.pending += band.pending_pages() * band.page_bytes();
            if (i + 1 < bands.size())
                model.gaps += bands[i + 1]->byte_low_frontier() - band.byte_high_frontier();
        }
        expect_eq(real.live, model.live, "buffer bytes: live");
        expect_eq(real.holes, model.holes, "buffer bytes: holes");
        expect_eq(real.pending, model.pending, "buffer bytes: pending reuse");
        expect_eq(real.gaps, model.gaps, "buffer bytes: gaps");
        expect_eq(real.overlap, index_t(0), "buffer bytes: overlap");
        expect_eq(real.sink + real.alignment, model.sink + model.alignment,
                  "buffer bytes: sink and alignment");
        expect_eq(model.accounted(), real.buffer, "buffer bytes: the model's account");
    }

    void compare_side(const std::string& n, const Allocator& real,
                      const ReferenceSide& model) const {
        if (const std::string difference = side_mismatch(n, real, model); !difference.empty())
            fail(difference);
    }
    void probe_schedulable(const std::string& n, const Allocator& side,
                           const Allocator& peer) const {
        if (const std::string difference = schedulable_mismatch(n, side, peer, probe_cores_);
            !difference.empty())
            fail(difference);
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

    // The tokens the requests hold on a side cover exactly the model's live
    // pages, and read back their stamps through translate(). unwritten: ids
    // not yet written whose pages the requests hold too (the rest of a
    // request's last full page, on a window side of smaller pages).
    void expect_live_data(const std::string& n, const Allocator& real, const ReferenceSide& model,
                          int tag, const std::vector<index_t>& tokens,
                          const std::vector<index_t>& unwritten = {}) {
        ++stats_.data_checks;
        // Sorted vectors, not sets, kept across calls: this runs after every step of a fuzzer's
        // run.
        std::vector<index_t>& pages = check_pages_;
        std::vector<index_t>& live = check_live_;
        pages.clear();
        live.clear();
        for (index_t t : tokens)
            pages.push_back(t / real.page_size());
        for (index_t t : unwritten)
            pages.push_back(t / real.page_size());
        std::sort(pages.begin(), pages.end());
        pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
        for (const auto& [v, p] : model.live())
            live.push_back(v);
        if (pages != live)
            fail(fmt::format("{}: pages the requests hold vs the model's live pages: real {} != "
                             "model {}",
                             n, pages, live));
        if (const std::size_t bad = check_stamps(*pool_, real, tag, tokens, data_scratch_);
            bad != 0)
            fail(fmt::format(
                "{}: {} live tokens lost their KV data (the first is in the UNSCOPED_INFO above)",
                n, bad));
    }

    // The outcome and the exact ids of an allocation; counts it. beyond: its
    // size exceeded schedulable_available_size() before the call.
    void expect_allocation(const std::string& what, bool real_ok,
                           const std::optional<std::vector<index_t>>& model,
                           const std::vector<index_t>& real_ids, bool beyond = false) {
        if (real_ok != model.has_value())
            fail(fmt::format("{} {} in the library but {} in the model", what,
                             real_ok ? "succeeded" : "failed", model ? "succeeded" : "failed"));
        if (real_ok && real_ids != *model) {
            std::size_t i = 0;
            while (i < real_ids.size() && i < model->size() && real_ids[i] == (*model)[i])
                ++i;
            const auto around = [i](const std::vector<index_t>& ids) {
                const std::size_t from = std::min(ids.size(), i < 3 ? 0 : i - 3),
                                  to = std::min(ids.size(), i + 5);
                return std::vector<index_t>(ids.begin() + static_cast<std::ptrdiff_t>(from),
                                            ids.begin() + static_cast<std::ptrdiff_t>(to));
            };
            fail(fmt::format(
                "{} returned ids that differ first at index {} ({} ids, model {}): around it "
                "{} (library) vs {} (model)",
                what, i, real_ids.size(), model->size(), around(real_ids), around(*model)));
        }
        ++(real_ok ? stats_.allocs : stats_.failed_allocs);
        stats_.beyond_schedulable += real_ok && beyond;
    }

    // ---- what the runs of a full side and a sliding-window side share (the SWA
    // pair, the tri-pool): requests hold `tokens` (positions in order, the
    // first starting a page) and `swa_from` (tokens [0, swa_from) left the window).

    // The oldest whole pages of a few requests leave the window (never the
    // page a decode appends to); now and then the pages that left before are
    // named again, and must be skipped. replay_free_swa(tokens) replays the call.
    template <class Request, class ReplayFreeSwa>
    void evict_from_window(std::vector<Request>& requests, index_t ps,
                           ReplayFreeSwa&& replay_free_swa) {
        std::vector<index_t> tokens;
        std::vector<std::pair<std::size_t, index_t>> moves; // request, its new swa_from
        std::vector<std::string> ranges;
        for (std::size_t i : pick_distinct(requests.size(), rng_.uniform(1, 3))) {
            const Request& req = requests[i];
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
        replay_free_swa(tokens);
        for (const auto& [i, to] : moves)
            requests[i].swa_from = to;
        ++stats_.frees;
    }

    // The tombstones (the window side's pages under pages live on the full
    // side, released on the window side; in the window side's pages) in the
    // library's tables, in the model and as the requests' windows say.
    template <class Request>
    void expect_tombstones(const detail::AllocatorCore& full, const detail::AllocatorCore& swa,
                           const std::set<index_t>& model,
                           const std::vector<Request>& requests) const {
        const index_t ratio = full.page_size() / swa.page_size();
        std::set<index_t> real, booked;
        for (index_t v = 1; v < full.virtual_table_pages(); ++v)
            if (full.physical_page_of(v) != unbound)
                for (index_t s = v * ratio; s < (v + 1) * ratio; ++s)
                    if (swa.physical_page_of(s) == unbound)
                        real.insert(s);
        for (const auto& req : requests)
            for (index_t i = 0; i < req.swa_from; ++i)
                booked.insert(req.tokens[static_cast<std::size_t>(i)] / swa.page_size());
        expect_eq(real, model, "tombstones (live on full, released on swa)");
        expect_eq(booked, model, "tombstones the requests' windows account for");
    }

    // The KV data check of both KV sides (each request's tokens on the full
    // side, those still in the window on the other); tombstoned tokens read
    // the sink through the window layers' path (translate_swa).
    template <class Request, class Composite>
    void expect_window_data(const Composite& c, const ReferenceSide& full_model,
                            const ReferenceSide& swa_model, int full_tag, int swa_tag,
                            const std::vector<Request>& requests) {
        std::vector<index_t> full_live, swa_live, swa_unwritten, tombstoned;
        const index_t full_page = c.full().page_size();
        for (const auto& req : requests) {
            const auto from = req.tokens.begin() + static_cast<std::ptrdiff_t>(req.swa_from);
            full_live.insert(full_live.end(), req.tokens.begin(), req.tokens.end());
            swa_live.insert(swa_live.end(), from, req.tokens.end());
            tombstoned.insert(tombstoned.end(), req.tokens.begin(), from);
            // The window side binds a full page's pages together.
            for (index_t t = req.tokens.back() + 1; t % full_page != 0; ++t)
                swa_unwritten.push_back(t);
        }
        expect_live_data("full", c.full(), full_model, full_tag, full_live);
        expect_live_data("swa", c.swa(), swa_model, swa_tag, swa_live, swa_unwritten);
        if (tombstoned.empty())
            return;
        // Uninitialised: every element is written (a fill would be a parallel
        // launch of the host space on every check).
        using Int32View = Kokkos::View<std::int32_t*, Space::memory_space>;
        const auto physical = kk::uninitialized<Int32View>("test::swa_physical", tombstoned.size());
        c.translate_swa(Space(), to_device(tombstoned), physical);
        auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), physical);
        for (std::size_t i = 0; i < tombstoned.size(); ++i)
            if (host(i) != 0)
                fail(fmt::format("swa: tombstoned token {} translates to {}, not the sink 0",
                                 tombstoned[i], host(i)));
    }

    std::string tag_;
    std::uint64_t seed_;
    std::string config_;
    int ops_;
    Rng rng_;
    std::unique_ptr<Pool> pool_;
    std::string geometry_;
    int step_ = 0;
    int regime_ = 0;
    std::string op_ = "initial state";
    std::deque<std::string> recent_;
    ForwardEvents events_;
    RunStats stats_;
    bool data_check_due_ = false;       // the KV data check runs after this step
    std::string states_before_failure_; // see replay_allocation()
    mutable CoreCopies probe_cores_;    // the probes' scratch copies of two cores
    DataCheckScratch data_scratch_;     // the data check's and the stamps' buffers

private:
    std::vector<index_t> check_pages_, check_live_; // expect_live_data's buffers
    std::vector<std::string> names_;
    std::vector<Allocator*> real_;
    std::vector<ReferenceSide*> model_;
};

// A pair's configuration: each side's compaction mode, the full side's page size.
struct PairConfig {
    CompactionMode full_mode, other_mode;
    index_t page_size;
    // The other side's page size where it differs (the SWA pair's decoupled
    // pages: a divisor of page_size); 0: page_size.
    index_t other_page_size = 0;
    std::string name(const char* other) const {
        return fmt::format("full {}/{} {}/page_size={}{}", to_string(full_mode), other,
                           to_string(other_mode), page_size,
                           other_page_size ? fmt::format("/{}_page_size={}", other, other_page_size)
                                           : std::string());
    }
    std::uint64_t salt() const {
        return (full_mode == CompactionMode::lazy ? 0x51ull : 0x17ull) * 0x100000001b3ull ^
               (other_mode == CompactionMode::lazy ? 0x2bull : 0x0dull) * 0x9e3779b97f4a7c15ull ^
               static_cast<std::uint64_t>(page_size) * 0x9e37ull ^
               static_cast<std::uint64_t>(other_page_size) * 0x5bd1e995ull;
    }
    bool any_eager() const {
        return full_mode == CompactionMode::eager || other_mode == CompactionMode::eager;
    }
};

// Both modes on page sizes 1 and 16, and each side its own mode once each way
// (a kvpool option: the reference has one mode per pair).
inline std::vector<PairConfig> pair_configs() {
    std::vector<PairConfig> configs;
    for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t page_size : {index_t(1), index_t(16)})
            configs.push_back({mode, mode, page_size});
    configs.push_back({CompactionMode::lazy, CompactionMode::eager, 1});
    configs.push_back({CompactionMode::eager, CompactionMode::lazy, 16});
    return configs;
}

// What the two pair runs share: the composite and its model, and the tokens
// of the last allocation (what the next forward writes).
template <class Pair, class ModelPair> class PairRun : public DifferentialRun {
protected:
    // rng: a fuzzer's input, or Rng(seed ^ the run's salt ^ config.salt()).
    PairRun(std::string tag, std::uint64_t seed, const PairConfig& config, const char* other,
            int ops, Rng rng)
        : DifferentialRun(std::move(tag), seed, config.name(other), ops, rng),
          eager_(config.any_eager()) {}

    // A forward writes the full side's tokens of the last allocation still
    // live; the other side is written at the same virtual ids, or (other_writes
    // false: Mamba state, written by the Mamba kernels) gets no write set.
    void op_forward(bool other_writes) {
        const std::vector<index_t> written = still_live(last_allocated_, model_->full());
        forward({written, other_writes ? written : std::vector<index_t>{}},
                [&](const CompletionTokenPtr& token) {
                    pair_->set_latest_forward_done(token);
                    if (token)
                        pair_->set_inflight_forward(token, written);
                });
    }

    std::unique_ptr<Pair> pair_;
    std::unique_ptr<ModelPair> model_;
    std::vector<index_t> last_allocated_;
    bool eager_; // a side compacts on every free
};

// Runs make_run(seed, config)->run() for every seed and configuration; prints
// each seed's reproduce line, each mismatch and the totals.
template <class Config, class MakeRun>
void run_differential(const char* tag, const std::vector<Config>& configs, MakeRun&& make_run) {
    const auto& settings = randomised_config();
    RunStats total;
    int runs = 0, failures = 0;
    for (const std::uint64_t seed : settings.seed_list()) {
        std::printf(
            "[%s] seed %llu (%d ops x %zu configurations); reproduce: kvpool_tests_%s \"[%s]\" "
            "--kvpool-seed %llu\n",
            tag, static_cast<unsigned long long>(seed), settings.ops, configs.size(),
            KVPOOL_TEST_BACKEND_NAME, tag, static_cast<unsigned long long>(seed));
        std::fflush(stdout);
        for (const Config& config : configs) {
            auto run = make_run(seed, config, settings.ops);
            ++runs;
            try {
                run->run();
            } catch (const Mismatch& e) {
                ++failures;
                std::printf("%s\n", e.what());
                std::fflush(stdout);
                FAIL_CHECK(e.what());
            }
            total.add(run->stats());
        }
    }
    std::printf("[%s] %d runs, %d failed; %s\n", tag, runs, failures, total.str().c_str());
    std::fflush(stdout);
    CHECK(failures == 0);
}

// Every pair configuration of a Run(seed, PairConfig, ops).
template <class Run> void run_pair_differential(const char* tag) {
    run_differential(tag, pair_configs(), [](std::uint64_t seed, const PairConfig& c, int ops) {
        return std::make_unique<Run>(seed, c, ops);
    });
}

} // namespace kvpool::test
