// Differential test: random operation mixes on a two-sided pool, every step
// compared with the naive host model in reference_model.hpp (sizes, live
// virtual ids, the exact ids every allocation returns, physical placement),
// check_invariants() after every step, and the KV data check (bytes stamped
// with their virtual id must survive every compaction).
//
// Reproduce one seed: kvpool_tests_<backend> "[differential]" --kvpool-seed N
// (--kvpool-ops N changes the operations per seed, --kvpool-seeds K the count).
#include "reference_model.hpp"
#include "test_config.hpp"
#include "side_comparison.hpp"
#include "test_random.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

#ifndef KVPOOL_TEST_BACKEND_NAME
#define KVPOOL_TEST_BACKEND_NAME "backend"
#endif


// A failed comparison; carries the full context.
struct Mismatch : std::runtime_error {
    using std::runtime_error::runtime_error;
};


struct Config {
    CompactionMode mode;
    index_t page_size;
    GrowDirection test_grow; // the side under test; the peer grows the other way
    std::string name() const {
        return fmt::format("{}/page_size={}/test_side_grows_{}", to_string(mode), page_size,
                           to_string(test_grow));
    }
};

// One sequence as the engine sees it: its live virtual token ids in position
// order and its logical length. Every live page belongs to exactly one request
// and holds at least one of its tokens.
struct Request {
    std::vector<index_t> tokens;
    index_t len = 0;
    bool growable = true; // its last token's page is still live
};

struct Stats {
    long ops = 0, allocs = 0, failed_allocs = 0, extends = 0, decodes = 0, frees = 0, flushes = 0;
    long peer_flush_allocs = 0, windows = 0, data_checks = 0;
    index_t pages_moved = 0;
    void add(const Stats& o) {
        ops += o.ops;
        allocs += o.allocs;
        failed_allocs += o.failed_allocs;
        extends += o.extends;
        decodes += o.decodes;
        frees += o.frees;
        flushes += o.flushes;
        peer_flush_allocs += o.peer_flush_allocs;
        windows += o.windows;
        data_checks += o.data_checks;
        pages_moved += o.pages_moved;
    }
};

class DifferentialRun {
public:
    DifferentialRun(std::uint64_t seed, const Config& config, int ops)
        : seed_(seed), config_(config), ops_(ops), rng_(seed ^ config_hash(config)) {
        // Geometry from the seed: entry bytes small and not multiples of each
        // other, the peer's page size equal or different, a virtual cap on
        // the side under test now and then, a small opportunistic move cap.
        static const std::vector<std::pair<index_t, index_t>> entry_pairs = {
            {24, 40}, {40, 24}, {12, 20}, {36, 28}, {20, 13}, {17, 24}, {48, 30}, {9, 14}};
        const auto entries = rng_.pick(entry_pairs);
        const index_t ps = config_.page_size;
        const index_t peer_ps = rng_.chance(0.5) ? ps : (ps == 1 ? 2 : 8);
        const index_t page_bytes_max = std::max(entries.first * ps, entries.second * peer_ps);
        const index_t total_bytes =
            rng_.uniform(160, 320) * page_bytes_max + rng_.uniform(0, page_bytes_max - 1);
        const GrowDirection peer_grow =
            config_.test_grow == GrowDirection::up ? GrowDirection::down : GrowDirection::up;
        SubPoolSpec test_spec = spec("test", entries.first, ps, config_.test_grow);
        SubPoolSpec peer_spec = spec("peer", entries.second, peer_ps, peer_grow);
        if (rng_.chance(0.25))
            test_spec.max_tokens = total_bytes / (entries.first * ps) * ps * 2 / 5;
        static const std::vector<index_t> caps = {1, 2, 3, 5, 8, 4096};
        max_moves_ = rng_.pick(caps);
        AllocatorOptions o = options(config_.mode);
        o.max_moves_per_flush = max_moves_;

        pool_ = std::make_unique<Pool>(PoolLayout(total_bytes, {test_spec, peer_spec}));
        real_[0] = std::make_unique<Allocator>(*pool_, "test", o);
        real_[1] = std::make_unique<Allocator>(*pool_, "peer", o);
        real_[0]->bind_peer(*real_[1]);
        for (int s = 0; s < 2; ++s)
            model_[s] =
                std::make_unique<ReferenceSide>(pool_->layout().side(static_cast<std::size_t>(s)),
                                                total_bytes, config_.mode, max_moves_);
        model_[0]->bind_peer(*model_[1]);
        geometry_ =
            fmt::format("total_bytes={} test(entry={}, page_size={}, pages={}, virtual_pages={}) "
                        "peer(entry={}, "
                        "page_size={}, pages={}) max_moves_per_flush={}",
                        total_bytes, entries.first, ps, pool_->layout().side(0).num_physical_pages,
                        pool_->layout().side(0).num_virtual_pages, entries.second, peer_ps,
                        pool_->layout().side(1).num_physical_pages, max_moves_);
    }

    // Runs every step; throws Mismatch (with context) on the first difference.
    void run() {
        compare_all();
        for (step_ = 1; step_ <= ops_; ++step_) {
            if ((step_ - 1) % 400 == 0)
                regime_ = static_cast<int>(rng_.uniform(0, 2));
            check_sides_ = step_ % 50 == 0 ? 3 : 0; // both sides now and then
            try {
                one_step();
            } catch (const Mismatch&) {
                throw;
            } catch (const std::exception& e) {
                fail(fmt::format("exception during the operation: {}", e.what()));
            }
            ++stats_.ops;
            compare_all();
            if (check_sides_ != 0)
                data_check(check_sides_);
        }
        // Close the open windows so the closing state is a plain one.
        while (window_side_ >= 0) {
            ++step_;
            const bool restore = rng_.chance(0.5);
            begin_op(window_side_,
                     restore ? "restore_state() (end of run)" : "commit_state() (end of run)");
            close_window(restore);
            compare_all();
            data_check(3);
        }
    }

    // Pages the library moved on both sides (eager compaction and lazy flushes).
    index_t pages_moved() const {
        return real_[0]->counters().pages_moved + real_[1]->counters().pages_moved;
    }
    const Stats& stats() const { return stats_; }

private:
    static std::uint64_t config_hash(const Config& c) {
        return (c.mode == CompactionMode::lazy ? 0x51ull : 0x17ull) * 0x100000001b3ull +
               static_cast<std::uint64_t>(c.page_size) * 0x9e37ull +
               (c.test_grow == GrowDirection::up ? 0x1234567ull : 0x7654321ull);
    }

    // ------------------------------------------------------------------ reporting
    std::string side_name(int s) const { return s == 0 ? "test" : "peer"; }

    void begin_op(int side, const std::string& description) {
        op_ = fmt::format("{} on {} ({} grows {})", description, side_name(side), side_name(side),
                          to_string(real_[side]->geometry().grow()));
        recent_.push_back(fmt::format("#{}: {}", step_, op_));
        if (recent_.size() > 12)
            recent_.pop_front();
    }

    [[noreturn]] void fail(const std::string& what) const {
        std::string recent;
        for (const auto& r : recent_)
            recent += "\n    " + r;
        throw Mismatch(fmt::format("differential mismatch: seed={} config={} step={} op=[{}]\n  "
                                   "{}\n  geometry: {}\n  real test: {}\n  "
                                   "model test: {}\n  real peer: {}\n  model peer: {}\n  recent "
                                   "ops:{}\n  reproduce: kvpool_tests_{} "
                                   "\"[differential]\" --kvpool-seed {}",
                                   seed_, config_.name(), step_, op_, what, geometry_,
                                   real_[0]->state_string(), model_[0]->describe(),
                                   real_[1]->state_string(), model_[1]->describe(), recent,
                                   KVPOOL_TEST_BACKEND_NAME, seed_));
    }

    template <class A, class B>
    void expect_eq(const A& real, const B& model, const std::string& what) const {
        if (!(real == model))
            fail(fmt::format("{}: real {} != model {}", what, real, model));
    }

    // ------------------------------------------------------------------ comparison
    void compare_all() {
        compare_side(0);
        compare_side(1);
    }

    void compare_side(int s) {
        if (const std::string difference = side_mismatch(side_name(s), *real_[s], *model_[s]); !difference.empty())
            fail(difference);
    }

    // Every request's tokens are live and no live page is unaccounted for; the
    // stamps of every live token are intact. sides: bit 0 test, bit 1 peer.
    void data_check(int sides) {
        ++stats_.data_checks;
        for (int s = 0; s < 2; ++s) {
            if ((sides & (1 << s)) == 0)
                continue;
            std::vector<index_t> live;
            const index_t ps = real_[s]->page_size();
            std::vector<char> held(static_cast<std::size_t>(real_[s]->geometry().num_virtual_pages),
                                   0);
            index_t held_pages = 0;
            for (const auto& req : requests_[s])
                for (index_t t : req.tokens) {
                    live.push_back(t);
                    char& h = held[static_cast<std::size_t>(t / ps)];
                    if (h == 0) {
                        h = 1;
                        ++held_pages;
                        if (model_[s]->physical_of_virtual(t / ps) == unbound)
                            fail(fmt::format(
                                "{}: test bookkeeping holds token {} whose page is not live",
                                side_name(s), t));
                    }
                }
            expect_eq(held_pages, model_[s]->live_pages(),
                      side_name(s) + ": pages held by requests vs live pages");
            const std::size_t bad = check_stamps(*pool_, *real_[s], s, live);
            if (bad != 0)
                fail(fmt::format("{}: {} live tokens lost their KV data (see the UNSCOPED_INFO "
                                 "above for the first)",
                                 side_name(s), bad));
        }
    }

    // ------------------------------------------------------------------ bookkeeping helpers
    std::vector<std::size_t> growable_requests(int s) const {
        std::vector<std::size_t> out;
        for (std::size_t i = 0; i < requests_[s].size(); ++i)
            if (requests_[s][i].growable)
                out.push_back(i);
        return out;
    }

    // Removes every token on the given virtual pages from the side's requests.
    void forget_pages(int s, const std::set<index_t>& pages) {
        const index_t ps = real_[s]->page_size();
        auto& reqs = requests_[s];
        for (auto& req : reqs) {
            if (req.tokens.empty())
                continue;
            if (pages.count(req.tokens.back() / ps))
                req.growable = false;
            req.tokens.erase(std::remove_if(req.tokens.begin(), req.tokens.end(),
                                            [&](index_t t) { return pages.count(t / ps) != 0; }),
                             req.tokens.end());
        }
        reqs.erase(std::remove_if(reqs.begin(), reqs.end(),
                                  [](const Request& r) { return r.tokens.empty(); }),
                   reqs.end());
    }

    std::set<index_t> pages_of(int s, const std::vector<index_t>& tokens) const {
        std::set<index_t> pages;
        for (index_t t : tokens)
            pages.insert(t / real_[s]->page_size());
        return pages;
    }

    void expect_alloc_outcome(bool real_ok, bool model_ok, const std::vector<index_t>& real_ids,
                              const std::vector<index_t>& model_ids, int s) {
        if (real_ok != model_ok)
            fail(fmt::format("allocation {} in the real allocator but {} in the model",
                             real_ok ? "succeeded" : "failed", model_ok ? "succeeded" : "failed"));
        if (real_ok && real_ids != model_ids) {
            std::size_t i = 0;
            while (i < real_ids.size() && i < model_ids.size() && real_ids[i] == model_ids[i])
                ++i;
            // The ids around the first difference.
            const auto around = [i](const std::vector<index_t>& ids) {
                const std::size_t from = i < 3 ? 0 : i - 3;
                const std::size_t to = std::min(ids.size(), i + 5);
                return std::vector<index_t>(ids.begin() +
                                                static_cast<std::ptrdiff_t>(std::min(from, to)),
                                            ids.begin() + static_cast<std::ptrdiff_t>(to));
            };
            fail(fmt::format("returned ids differ first at index {} (real {} ids, model {}); from "
                             "index {}: real {} "
                             "model {}",
                             i, real_ids.size(), model_ids.size(), i < 3 ? 0 : i - 3,
                             around(real_ids), around(model_ids)));
        }
        if (real_ok)
            ++stats_.allocs;
        else
            ++stats_.failed_allocs;
        if (model_[s]->last_alloc_flushed_peer()) {
            ++stats_.peer_flush_allocs;
            check_sides_ |= 1 << (1 - s);
        }
    }

    // ------------------------------------------------------------------ operations
    void one_step() {
        const int s = rng_.chance(0.65) ? 0 : 1;
        if (window_side_ >= 0)
            return window_step(s);
        // Weights per regime: 0 grow, 1 shrink, 2 churn.
        static const double weights[3][10] = {
            // alloc extend decode freereq freepages freemid freemixed group flush over/window
            {30, 18, 14, 8, 4, 4, 3, 2, 8, 9},
            {8, 6, 10, 24, 12, 10, 6, 4, 10, 10},
            {18, 14, 16, 14, 8, 6, 4, 3, 9, 8},
        };
        double total = 0;
        for (double w : weights[regime_])
            total += w;
        double x = static_cast<double>(rng_.next() >> 11) * 0x1.0p-53 * total;
        int kind = 0;
        while (kind < 9 && x >= weights[regime_][kind])
            x -= weights[regime_][kind++];
        if (requests_[s].empty() && kind >= 3 && kind <= 7)
            kind = 0;
        switch (kind) {
        case 0:
            return op_alloc(s);
        case 1:
            return op_extend(s, false);
        case 2:
            return op_decode(s);
        case 3:
            return op_free_requests(s);
        case 4:
            return op_free_pages(s);
        case 5:
            return op_free_middle(s);
        case 6:
            return op_free_mixed(s);
        case 7:
            return op_free_group(s);
        case 8:
            return op_flush(s);
        default:
            if (rng_.chance(0.5))
                return rng_.chance(0.5) ? op_over_alloc(s) : op_extend(s, true);
            return open_window(s);
        }
    }

    // alloc(n): a new request of n whole pages.
    void op_alloc(int s) {
        Allocator& r = *real_[s];
        ReferenceSide& m = *model_[s];
        const index_t ps = r.page_size();
        const index_t avail_pages = m.available_size() / ps;
        const index_t sched_pages = m.schedulable_available_size() / ps;
        index_t pages;
        bool must_succeed = false;
        const double u = static_cast<double>(rng_.next() >> 11) * 0x1.0p-53;
        if (u < 0.55) {
            pages = rng_.uniform(1, 4);
        } else if (u < 0.85) {
            pages = rng_.uniform(5, 16);
        } else if (u < 0.93) {
            pages =
                rng_.uniform(0, std::max<index_t>(avail_pages / 2, 1)); // the peer fills its end
        } else if (u < 0.97) {
            pages = sched_pages; // everything schedulable: must fit (after a peer flush)
            must_succeed = true;
        } else {
            pages = avail_pages;
            must_succeed = true;
        }
        const index_t need = pages * ps;
        begin_op(s, fmt::format("alloc({} tokens = {} pages) [available {}, schedulable {}]", need,
                                pages, m.available_size(), m.schedulable_available_size()));
        const std::string before = r.state_string();
        auto got = r.alloc(Space(), need);
        auto expected = m.alloc(need);
        std::vector<index_t> ids = got ? to_host(*got) : std::vector<index_t>{};
        expect_alloc_outcome(got.has_value(), expected.has_value(), ids, expected ? *expected : ids,
                             s);
        if (must_succeed && !got)
            fail("an allocation of at most schedulable_available_size() failed");
        if (!got && !m.last_alloc_flushed_peer())
            expect_eq(r.state_string(), before, "state after a failed alloc");
        if (!got || ids.empty())
            return;
        stamp_tokens(*pool_, r, s, ids);
        Request req;
        req.tokens = ids;
        req.len = need;
        requests_[s].push_back(std::move(req));
    }

    // An allocation one or more pages beyond what is schedulable: "no allocation".
    void op_over_alloc(int s) {
        Allocator& r = *real_[s];
        ReferenceSide& m = *model_[s];
        const index_t ps = r.page_size();
        const index_t pages = m.schedulable_available_size() / ps + rng_.uniform(1, 6);
        begin_op(s, fmt::format("alloc({} tokens) beyond capacity [available {}, schedulable {}]",
                                pages * ps, m.available_size(), m.schedulable_available_size()));
        const std::string before = r.state_string();
        const auto live_before = m.live();
        auto got = r.alloc(Space(), pages * ps);
        auto expected = m.alloc(pages * ps);
        if (got)
            fail("an allocation beyond schedulable_available_size() succeeded");
        if (expected)
            fail("the model allocated beyond schedulable_available_size() (test bug)");
        ++stats_.failed_allocs;
        if (m.last_alloc_flushed_peer()) {
            ++stats_.peer_flush_allocs;
            check_sides_ |= 1 << (1 - s);
        } else {
            expect_eq(r.state_string(), before, "state after a failed alloc");
        }
        if (m.live() != live_before)
            fail("a failed allocation changed the live set");
    }

    // alloc_extend over a batch of new (prefix 0) and growing (prefix > 0) requests.
    void op_extend(int s, bool oversize) {
        Allocator& r = *real_[s];
        ReferenceSide& m = *model_[s];
        const index_t ps = r.page_size();
        const auto growable = growable_requests(s);
        const index_t batch =
            rng_.chance(0.02) ? 0 : rng_.uniform(1, 4); // an empty batch now and then
        std::vector<index_t> prefix, seq, last_loc;
        std::vector<std::ptrdiff_t> which; // request index, -1: a new request
        std::set<std::size_t> used;
        for (index_t b = 0; b < batch; ++b) {
            if (!growable.empty() && rng_.chance(0.6)) {
                const std::size_t i = rng_.pick(growable);
                if (!used.insert(i).second)
                    continue;
                const Request& req = requests_[s][i];
                prefix.push_back(req.len);
                seq.push_back(req.len + (rng_.chance(0.1) ? 0 : rng_.uniform(1, 2 * ps + 3)));
                last_loc.push_back(req.tokens.back());
                which.push_back(static_cast<std::ptrdiff_t>(i));
            } else {
                prefix.push_back(0);
                seq.push_back(rng_.uniform(1, 3 * ps + 5));
                last_loc.push_back(-1);
                which.push_back(-1);
            }
        }
        if (oversize) {
            // A new request longer than everything schedulable: "no allocation".
            prefix.push_back(0);
            seq.push_back(m.schedulable_available_size() + rng_.uniform(1, 3 * ps));
            last_loc.push_back(-1);
            which.push_back(-1);
        }
        index_t tokens = 0;
        for (std::size_t b = 0; b < seq.size(); ++b)
            tokens += seq[b] - prefix[b];
        begin_op(s, fmt::format(
                        "alloc_extend{}(prefix_lens={}, seq_lens={}, last_loc={}) [available {}, "
                        "schedulable {}]",
                        oversize ? " beyond capacity" : "", prefix, seq, last_loc,
                        m.available_size(), m.schedulable_available_size()));
        auto out =
            kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
        const std::string before = r.state_string();
        const bool ok = r.alloc_extend(Space(), prefix, seq, to_device(last_loc), out);
        auto expected = m.alloc_extend(prefix, seq, last_loc);
        std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_alloc_outcome(ok, expected.has_value(), ids, expected ? *expected : ids, s);
        ++stats_.extends;
        if (oversize && ok)
            fail("alloc_extend beyond schedulable_available_size() succeeded");
        if (!ok && !m.last_alloc_flushed_peer())
            expect_eq(r.state_string(), before, "state after a failed alloc_extend");
        if (!ok)
            return;
        stamp_tokens(*pool_, r, s, ids);
        std::size_t o = 0;
        for (std::size_t b = 0; b < seq.size(); ++b) {
            const index_t n = seq[b] - prefix[b];
            if (which[b] < 0) {
                if (n == 0)
                    continue;
                Request req;
                req.tokens.assign(ids.begin() + static_cast<std::ptrdiff_t>(o),
                                  ids.begin() + static_cast<std::ptrdiff_t>(o + n));
                req.len = seq[b];
                requests_[s].push_back(std::move(req));
            } else {
                Request& req = requests_[s][static_cast<std::size_t>(which[b])];
                req.tokens.insert(req.tokens.end(), ids.begin() + static_cast<std::ptrdiff_t>(o),
                                  ids.begin() + static_cast<std::ptrdiff_t>(o + n));
                req.len = seq[b];
            }
            o += static_cast<std::size_t>(n);
        }
    }

    // alloc_decode: one token for each of several growing requests.
    void op_decode(int s) {
        Allocator& r = *real_[s];
        ReferenceSide& m = *model_[s];
        auto growable = growable_requests(s);
        if (growable.empty())
            return op_extend(s, false);
        for (std::size_t i = growable.size(); i > 1; --i)
            std::swap(
                growable[i - 1],
                growable[static_cast<std::size_t>(rng_.uniform(0, static_cast<index_t>(i) - 1))]);
        growable.resize(static_cast<std::size_t>(std::min<index_t>(
            static_cast<index_t>(growable.size()), rng_.chance(0.02) ? 0 : rng_.uniform(1, 8))));
        std::vector<index_t> seq, last_loc;
        for (std::size_t i : growable) {
            seq.push_back(requests_[s][i].len + 1);
            last_loc.push_back(requests_[s][i].tokens.back());
        }
        begin_op(
            s, fmt::format("alloc_decode(seq_lens={}, last_loc={}) [available {}, schedulable {}]",
                           seq, last_loc, m.available_size(), m.schedulable_available_size()));
        auto out = kk::uninitialized<IndexView>("test::decode_out", seq.size());
        const std::string before = r.state_string();
        const bool ok = r.alloc_decode(Space(), seq, to_device(last_loc), out);
        auto expected = m.alloc_decode(seq, last_loc);
        std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_alloc_outcome(ok, expected.has_value(), ids, expected ? *expected : ids, s);
        ++stats_.decodes;
        if (!ok && !m.last_alloc_flushed_peer())
            expect_eq(r.state_string(), before, "state after a failed alloc_decode");
        if (!ok)
            return;
        stamp_tokens(*pool_, r, s, ids);
        for (std::size_t k = 0; k < growable.size(); ++k) {
            Request& req = requests_[s][growable[k]];
            req.tokens.push_back(ids[k]);
            req.len = seq[k];
        }
    }

    // Frees the tokens (both sides of the comparison), updates the bookkeeping.
    void do_free(int s, const std::vector<index_t>& tokens) {
        const auto pages = pages_of(s, tokens);
        real_[s]->free(Space(), tokens);
        model_[s]->free(tokens);
        forget_pages(s, pages);
        ++stats_.frees;
        if (!pages.empty() && config_.mode == CompactionMode::eager)
            check_sides_ |= 1 << s;
    }

    void op_free_requests(int s) {
        auto& reqs = requests_[s];
        const index_t count =
            std::min<index_t>(static_cast<index_t>(reqs.size()), rng_.uniform(1, 3));
        std::set<std::size_t> chosen;
        while (static_cast<index_t>(chosen.size()) < count)
            chosen.insert(
                static_cast<std::size_t>(rng_.uniform(0, static_cast<index_t>(reqs.size()) - 1)));
        std::vector<index_t> tokens;
        for (std::size_t i : chosen)
            tokens.insert(tokens.end(), reqs[i].tokens.begin(), reqs[i].tokens.end());
        if (rng_.chance(0.3))
            std::reverse(tokens.begin(), tokens.end());
        begin_op(s, fmt::format("free of {} whole request(s), {} tokens", count, tokens.size()));
        do_free(s, tokens);
    }

    // A random subset of one request's pages, named by one random token of each.
    void op_free_pages(int s) {
        const index_t ps = real_[s]->page_size();
        const Request& req = requests_[s][static_cast<std::size_t>(
            rng_.uniform(0, static_cast<index_t>(requests_[s].size()) - 1))];
        std::map<index_t, std::vector<index_t>> by_page;
        for (index_t t : req.tokens)
            by_page[t / ps].push_back(t);
        std::vector<index_t> tokens;
        for (const auto& [page, ts] : by_page)
            if (rng_.chance(0.35))
                tokens.push_back(rng_.pick(ts));
        if (tokens.empty())
            tokens.push_back(rng_.pick(req.tokens));
        begin_op(s, fmt::format("free of {} of a request's {} pages by one token each: {}",
                                tokens.size(), by_page.size(), tokens));
        do_free(s, tokens);
    }

    // A run of tokens from the middle of a request, not page aligned.
    void op_free_middle(int s) {
        const Request& req = requests_[s][static_cast<std::size_t>(
            rng_.uniform(0, static_cast<index_t>(requests_[s].size()) - 1))];
        const index_t n = static_cast<index_t>(req.tokens.size());
        const index_t a = rng_.uniform(0, n - 1);
        const index_t b = rng_.uniform(a, std::min(n - 1, a + 2 * real_[s]->page_size() + 1));
        std::vector<index_t> tokens(req.tokens.begin() + a, req.tokens.begin() + b + 1);
        begin_op(s, fmt::format("free of tokens [{}, {}] of a request of {} tokens: {}", a, b, n,
                                tokens));
        do_free(s, tokens);
    }

    // Random tokens of several requests in one call, with repeats.
    void op_free_mixed(int s) {
        std::vector<index_t> tokens;
        const index_t n = rng_.uniform(1, 6);
        for (index_t k = 0; k < n; ++k) {
            const Request& req = requests_[s][static_cast<std::size_t>(
                rng_.uniform(0, static_cast<index_t>(requests_[s].size()) - 1))];
            tokens.push_back(rng_.pick(req.tokens));
            if (rng_.chance(0.2))
                tokens.push_back(tokens.back());
        }
        begin_op(s, fmt::format("free of scattered tokens {}", tokens));
        do_free(s, tokens);
    }

    // free_group_begin, a few frees (the same page may be named twice), free_group_end.
    void op_free_group(int s) {
        std::vector<std::vector<index_t>> frees;
        std::vector<index_t> all;
        const index_t n = rng_.uniform(1, 3);
        for (index_t k = 0; k < n; ++k) {
            const Request& req = requests_[s][static_cast<std::size_t>(
                rng_.uniform(0, static_cast<index_t>(requests_[s].size()) - 1))];
            std::vector<index_t> part;
            if (rng_.chance(0.5))
                part = req.tokens;
            else
                part.push_back(rng_.pick(req.tokens));
            all.insert(all.end(), part.begin(), part.end());
            frees.push_back(std::move(part));
        }
        begin_op(s, fmt::format("free group of {} frees: {}", frees.size(), frees));
        const auto pages = pages_of(s, all);
        real_[s]->free_group_begin();
        for (const auto& f : frees)
            real_[s]->free(Space(), f);
        real_[s]->free_group_end(Space());
        model_[s]->free(all);
        forget_pages(s, pages);
        ++stats_.frees;
        if (config_.mode == CompactionMode::eager)
            check_sides_ |= 1 << s;
    }

    void op_flush(int s) {
        const bool urgent = rng_.chance(0.35);
        begin_op(s, urgent ? "flush(urgent)" : "flush_opportunistic()");
        const index_t moved =
            urgent ? real_[s]->flush(Space(), true) : real_[s]->flush_opportunistic(Space());
        const index_t expected = model_[s]->flush(urgent);
        expect_eq(moved, expected, "pages moved by the flush");
        if (rng_.chance(0.2))
            real_[s]->drain_pending_reuse(); // nothing pending: a no-op
        ++stats_.flushes;
        check_sides_ |= 1 << s;
    }

    // ------------------------------------------------------------------ backup windows
    // backup_state() on one side (nested once now and then), then only
    // allocations there (and anything on the peer), then restore_state() (every
    // allocation since the snapshot undone) or commit_state() (kept) of the
    // innermost snapshot.
    void open_window(int s) {
        begin_op(s, snapshots_.empty() ? "backup_state()" : "backup_state() (nested)");
        const AllocatorSnapshot snapshot = real_[s]->backup_state();
        expect_eq(snapshot.opened_window, snapshots_.empty(), "snapshot.opened_window");
        snapshots_.push_back(snapshot);
        model_[s]->backup();
        window_side_ = s;
        window_requests_.push_back(requests_[s]);
        ++stats_.windows;
    }

    void close_window(bool restore) {
        const int s = window_side_;
        if (restore) {
            real_[s]->restore_state(Space(), snapshots_.back());
            model_[s]->restore();
            requests_[s] = window_requests_.back();
            check_sides_ |= 1 << s;
        } else {
            real_[s]->commit_state(snapshots_.back());
            model_[s]->commit();
        }
        snapshots_.pop_back();
        window_requests_.pop_back();
        if (snapshots_.empty())
            window_side_ = -1;
    }

    void window_step(int s) {
        const int w = window_side_;
        if (s == w) {
            const double u = static_cast<double>(rng_.next() >> 11) * 0x1.0p-53;
            if (u < 0.25) {
                const bool restore = rng_.chance(0.6);
                const char* what = restore ? "restore_state()" : "commit_state()";
                begin_op(w, snapshots_.size() > 1 ? std::string(what) + " (inner)"
                                                  : std::string(what));
                return close_window(restore);
            }
            if (u < 0.30 && snapshots_.size() < 2)
                return open_window(w);
            if (u < 0.45)
                return op_alloc(w);
            if (u < 0.65)
                return op_decode(w);
            if (u < 0.80)
                return op_extend(w, false);
            if (u < 0.90) {
                begin_op(w, "flush(urgent) inside a backup window (must move nothing)");
                const index_t moved = real_[w]->flush(Space(), true);
                expect_eq(moved, model_[w]->flush(true), "pages moved by a flush inside a window");
                expect_eq(moved, index_t(0), "pages moved by a flush inside a window");
                return;
            }
            if (requests_[w].empty())
                return op_alloc(w);
            // A free inside the window is refused and changes nothing.
            const Request& req = requests_[w][static_cast<std::size_t>(
                rng_.uniform(0, static_cast<index_t>(requests_[w].size()) - 1))];
            const std::vector<index_t> tokens{rng_.pick(req.tokens)};
            begin_op(w, fmt::format("free({}) inside a backup window (must be refused)", tokens));
            const std::string before = real_[w]->state_string();
            try {
                real_[w]->free(Space(), tokens);
                fail("a free inside a backup window was accepted");
            } catch (const Error& e) {
                expect_eq(static_cast<int>(e.code()), static_cast<int>(ErrorCode::invalid_state),
                          "error code of a free inside a backup window");
            }
            expect_eq(real_[w]->state_string(), before, "state after a refused free");
            return;
        }
        // The peer carries on as usual, frees and flushes included.
        const double u = static_cast<double>(rng_.next() >> 11) * 0x1.0p-53;
        if (u < 0.3 || requests_[s].empty())
            return op_alloc(s);
        if (u < 0.45)
            return op_decode(s);
        if (u < 0.7)
            return op_free_requests(s);
        if (u < 0.85)
            return op_free_middle(s);
        return op_flush(s);
    }

    std::uint64_t seed_;
    Config config_;
    int ops_;
    Rng rng_;
    index_t max_moves_ = 0;
    std::unique_ptr<Pool> pool_;
    std::unique_ptr<Allocator> real_[2];
    std::unique_ptr<ReferenceSide> model_[2];
    std::vector<Request> requests_[2];
    std::string geometry_;

    int step_ = 0;
    int regime_ = 0;
    int check_sides_ = 0; // sides the KV data check runs on after this step
    std::string op_ = "initial state";
    std::deque<std::string> recent_;

    int window_side_ = -1;                              // the side with open snapshots
    std::vector<AllocatorSnapshot> snapshots_;          // innermost last
    std::vector<std::vector<Request>> window_requests_; // its bookkeeping at each snapshot

    Stats stats_;
};

void run_differential(CompactionMode mode) {
    const auto& config = randomised_config();
    const auto start = std::chrono::steady_clock::now();
    Stats total;
    int runs = 0, failures = 0;
    for (const std::uint64_t seed : config.seed_list()) {
        INFO("seed " << seed
                     << "; reproduce: kvpool_tests_" KVPOOL_TEST_BACKEND_NAME
                        " \"[differential]\" --kvpool-seed "
                     << seed);
        std::printf(
            "[differential] %s seed %llu (%d ops); reproduce: kvpool_tests_%s \"[differential]\" "
            "--kvpool-seed %llu\n",
            to_string(mode), static_cast<unsigned long long>(seed), config.ops,
            KVPOOL_TEST_BACKEND_NAME, static_cast<unsigned long long>(seed));
        std::fflush(stdout);
        for (const index_t page_size : {index_t(1), index_t(16)})
            for (const GrowDirection grow : {GrowDirection::up, GrowDirection::down}) {
                const Config c{mode, page_size, grow};
                DifferentialRun run(seed, c, config.ops);
                ++runs;
                try {
                    run.run();
                } catch (const Mismatch& e) {
                    ++failures;
                    std::printf("%s\n", e.what());
                    std::fflush(stdout);
                    FAIL_CHECK(e.what());
                }
                total.add(run.stats());
                total.pages_moved += run.pages_moved();
            }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[differential] %s: %d runs, %d failed, %.2f s; ops %ld: allocs ok %ld, failed %ld "
                "(with peer "
                "flush %ld), extends %ld, decodes %ld, frees %ld, flushes %ld, pages moved %lld, "
                "backup windows %ld, data checks %ld\n",
                to_string(mode), runs, failures, seconds, total.ops, total.allocs,
                total.failed_allocs, total.peer_flush_allocs, total.extends, total.decodes,
                total.frees, total.flushes, static_cast<long long>(total.pages_moved),
                total.windows, total.data_checks);
    std::fflush(stdout);
    CHECK(failures == 0);
}

} // namespace

TEST_CASE("differential: eager allocator against the reference model", "[differential][eager]") {
    run_differential(CompactionMode::eager);
}

TEST_CASE("differential: lazy allocator against the reference model", "[differential][lazy]") {
    run_differential(CompactionMode::lazy);
}
