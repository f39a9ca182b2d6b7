// One randomised run of a single allocator side and its peer against the reference model,
// driven by an Rng: shared by the differential test and the fuzz target.
#pragma once

#include "differential_harness.hpp"
#include <algorithm>
#include <map>
#include <set>

namespace kvpool::test::side_run {

struct Config {
    CompactionMode mode;
    index_t page_size;
    GrowDirection test_grow; // the side under test; the peer grows the other way
    std::string name() const {
        return fmt::format("{}/page_size={}/test_side_grows_{}", to_string(mode), page_size,
                           to_string(test_grow));
    }
};

// Both modes, page sizes 1 and 16, the side under test growing either way.
inline std::vector<Config> all_configs() {
    std::vector<Config> configs;
    for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t page_size : {index_t(1), index_t(16)})
            for (const GrowDirection grow : {GrowDirection::up, GrowDirection::down})
                configs.push_back({mode, page_size, grow});
    return configs;
}

// One sequence as the engine sees it: its live virtual token ids in position
// order and its logical length. Every live page belongs to exactly one request
// and holds at least one of its tokens.
struct Request {
    std::vector<index_t> tokens;
    index_t len = 0;
    bool growable = true; // its last token's page is still live
};

class SideRun final : public DifferentialRun {
public:
    // input: a fuzzer's bytes to draw every decision from, instead of the seed.
    SideRun(std::uint64_t seed, const Config& config, int ops, const Rng* input = nullptr)
        : DifferentialRun("differential", seed, config.name(), ops,
                          input ? *input : Rng(seed ^ salt(config))),
          mode_(config.mode) {
        // Geometry from the seed: entry bytes small and not multiples of each
        // other, the peer's page size equal or different, a virtual cap on the
        // side under test now and then, small opportunistic move caps.
        static const std::vector<std::pair<index_t, index_t>> entry_pairs = {
            {24, 40}, {40, 24}, {12, 20}, {36, 28}, {20, 13}, {17, 24}, {48, 30}, {9, 14}};
        const auto picked = rng_.pick(entry_pairs);
        const std::pair<index_t, index_t> entries(entry_bytes(picked.first),
                                                  entry_bytes(picked.second));
        const index_t ps = config.page_size;
        const index_t peer_ps = rng_.chance(0.5) ? ps : (ps == 1 ? 2 : 8);
        const index_t page_bytes_max = std::max(entries.first * ps, entries.second * peer_ps);
        const index_t total_bytes =
            pool_pages(160, 320) * page_bytes_max + rng_.uniform(0, page_bytes_max - 1);
        const GrowDirection peer_grow =
            config.test_grow == GrowDirection::up ? GrowDirection::down : GrowDirection::up;
        SubPoolSpec test_spec = spec("test", entries.first, ps, config.test_grow);
        SubPoolSpec peer_spec = spec("peer", entries.second, peer_ps, peer_grow);
        if (rng_.chance(0.25))
            test_spec.max_tokens = total_bytes / (entries.first * ps) * ps * 2 / 5;
        const AllocatorOptions o[2] = {side_options(mode_), side_options(mode_)};

        pool_ = std::make_unique<Pool>(PoolLayout(total_bytes, {test_spec, peer_spec}));
        for (int s = 0; s < 2; ++s) {
            real_[s] = std::make_unique<Allocator>(*pool_, s == 0 ? "test" : "peer", o[s]);
            model_[s] = std::make_unique<ReferenceSide>(
                pool_->layout().sub_pool(static_cast<std::size_t>(s)), total_bytes, o[s]);
        }
        real_[0]->bind_peer(*real_[1]);
        model_[0]->bind_peer(*model_[1]);
        add_side("test", *real_[0], *model_[0]);
        add_side("peer", *real_[1], *model_[1]);
        geometry_ = fmt::format(
            "total_bytes={} test(entry={}, page_size={}, pages={}, virtual_pages={}, "
            "max_moves_per_flush={}) "
            "peer(entry={}, page_size={}, pages={}, max_moves_per_flush={})",
            total_bytes, entries.first, ps, pool_->layout().sub_pool(0).num_physical_pages,
            pool_->layout().sub_pool(0).num_virtual_pages, o[0].max_moves_per_flush, entries.second,
            peer_ps, pool_->layout().sub_pool(1).num_physical_pages, o[1].max_moves_per_flush);
    }

private:
    static std::uint64_t salt(const Config& c) {
        return (c.mode == CompactionMode::lazy ? 0x51ull : 0x17ull) * 0x100000001b3ull +
               static_cast<std::uint64_t>(c.page_size) * 0x9e37ull +
               (c.test_grow == GrowDirection::up ? 0x1234567ull : 0x7654321ull);
    }

    std::string side_name(int s) const { return s == 0 ? "test" : "peer"; }
    void begin_side_op(int s, const std::string& description) {
        begin_op(fmt::format("{} on {} (grows {})", description, side_name(s),
                             to_string(real_[s]->geometry().grow())));
    }

    void compare() override { compare_sides(); }

    void after_step() override {
        if (step_ % 50 == 0 || data_check_due_)
            data_check();
        data_check_due_ = false;
    }

    // Close the open windows so the closing state is a plain one.
    void finish() override {
        while (window_side_ >= 0) {
            ++step_;
            const bool restore = rng_.chance(0.5);
            begin_side_op(window_side_,
                          restore ? "restore_state() (end of run)" : "commit_state() (end of run)");
            close_window(restore);
            compare();
            data_check();
        }
    }

    // On both sides, the requests hold exactly the live pages, and every live
    // token's stamp is intact.
    void data_check() {
        for (int s = 0; s < 2; ++s) {
            std::vector<index_t> live;
            for (const auto& req : requests_[s])
                live.insert(live.end(), req.tokens.begin(), req.tokens.end());
            expect_live_data(side_name(s), *real_[s], *model_[s], s, live);
        }
    }

    // ------------------------------------------------------------------ bookkeeping
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

    const Request& any_request(int s) {
        return requests_[s][static_cast<std::size_t>(
            rng_.uniform(0, static_cast<index_t>(requests_[s].size()) - 1))];
    }

    // ------------------------------------------------------------------ operations
    void one_step() override {
        const int s = rng_.chance(0.65) ? 0 : 1;
        if (window_side_ >= 0)
            return window_step(s);
        // Weights per regime: 0 grow, 1 shrink, 2 churn.
        static const double weights[3][13] = {
            // alloc extend decode freereq freepages freemid freemixed group flush
            // beyond/window forward complete drain
            {30, 18, 14, 8, 4, 4, 3, 2, 8, 9, 7, 5, 2},
            {8, 6, 10, 24, 12, 10, 6, 4, 10, 10, 7, 5, 2},
            {18, 14, 16, 14, 8, 6, 4, 3, 9, 8, 7, 5, 2},
        };
        int kind = pick_kind(weights[regime_], 13);
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
        case 9:
            if (rng_.chance(0.5))
                return rng_.chance(0.5) ? op_beyond(s) : op_extend(s, true);
            return open_window(s);
        case 10:
            return op_forward();
        case 11:
            return op_complete();
        default:
            return op_drain();
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
        const double u = uniform01();
        if (u < 0.55) {
            pages = rng_.uniform(1, 4);
        } else if (u < 0.85) {
            pages = rng_.uniform(5, 16);
        } else if (u < 0.93) {
            pages =
                rng_.uniform(0, std::max<index_t>(avail_pages / 2, 1)); // the peer fills its end
        } else {
            pages = u < 0.97 ? sched_pages : avail_pages; // the lower bounds: must fit
            must_succeed = true;
        }
        alloc_pages(s, pages, fmt::format("alloc({} tokens = {} pages)", pages * ps, pages));
        if (must_succeed && last_alloc_failed_)
            fail("an allocation of at most schedulable_available_size() failed");
    }

    // An allocation beyond schedulable_available_size(): it may still succeed
    // (an urgent flush also reclaims the peer's pages pending reuse), exactly
    // when the model's does.
    void op_beyond(int s) {
        const index_t ps = real_[s]->page_size();
        const index_t pages = model_[s]->schedulable_available_size() / ps + rng_.uniform(1, 6);
        alloc_pages(s, pages, fmt::format("alloc({} tokens) beyond schedulable", pages * ps));
    }

    void alloc_pages(int s, index_t pages, const std::string& what) {
        Allocator& r = *real_[s];
        ReferenceSide& m = *model_[s];
        const index_t need = pages * r.page_size();
        const bool beyond = need > m.schedulable_available_size();
        begin_side_op(
            s, fmt::format("{} [available {}, schedulable {}, peer holes {}, peer pending {}]",
                           what, m.available_size(), m.schedulable_available_size(),
                           model_[1 - s]->hole_count(), model_[1 - s]->pending_pages()));
        auto [got, expected] = replay_allocation([&] { return m.alloc(need); },
                                                 [&] { return r.alloc(Space(), need); });
        const std::vector<index_t> ids = got ? to_host(*got) : std::vector<index_t>{};
        expect_allocation("alloc", got.has_value(), expected, ids, beyond);
        after_allocation(model_[s]->last_alloc_flushed_peer(), got.has_value());
        last_alloc_failed_ = !got;
        if (!got || ids.empty())
            return;
        stamp_tokens(*pool_, r, s, ids, data_scratch_);
        last_allocated_[s] = ids;
        requests_[s].push_back({ids, need, true});
    }

    // alloc_extend over a batch of new (prefix 0) and growing (prefix > 0)
    // requests; oversize adds a new request longer than everything schedulable.
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
                last_loc.push_back(unbound);
                which.push_back(-1);
            }
        }
        if (oversize) {
            prefix.push_back(0);
            seq.push_back(m.schedulable_available_size() + rng_.uniform(1, 3 * ps));
            last_loc.push_back(unbound);
            which.push_back(-1);
        }
        index_t tokens = 0;
        for (std::size_t b = 0; b < seq.size(); ++b)
            tokens += seq[b] - prefix[b];
        const index_t pages = detail::pages_needed_for_extend(prefix.data(), seq.data(),
                                                              static_cast<index_t>(seq.size()), ps);
        const bool beyond = pages * ps > m.schedulable_available_size();
        begin_side_op(
            s,
            fmt::format("alloc_extend{}(prefix_lens={}, seq_lens={}, last_loc={}) [available {}, "
                        "schedulable {}]",
                        oversize ? " beyond schedulable" : "", prefix, seq, last_loc,
                        m.available_size(), m.schedulable_available_size()));
        auto out =
            kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
        auto [ok, expected] = replay_allocation(
            [&] { return m.alloc_extend(prefix, seq, last_loc); },
            [&] { return r.alloc_extend(Space(), prefix, seq, to_device(last_loc), out); });
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_allocation("alloc_extend", ok, expected, ids, beyond);
        after_allocation(model_[s]->last_alloc_flushed_peer(), ok);
        if (!ok)
            return;
        stamp_tokens(*pool_, r, s, ids, data_scratch_);
        last_allocated_[s] = ids;
        std::size_t o = 0;
        for (std::size_t b = 0; b < seq.size(); ++b) {
            const auto n = static_cast<std::ptrdiff_t>(seq[b] - prefix[b]);
            const auto from = ids.begin() + static_cast<std::ptrdiff_t>(o);
            if (which[b] < 0 && n > 0) {
                requests_[s].push_back({std::vector<index_t>(from, from + n), seq[b], true});
            } else if (which[b] >= 0) {
                Request& req = requests_[s][static_cast<std::size_t>(which[b])];
                req.tokens.insert(req.tokens.end(), from, from + n);
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
        begin_side_op(
            s, fmt::format("alloc_decode(seq_lens={}, last_loc={}) [available {}, schedulable {}]",
                           seq, last_loc, m.available_size(), m.schedulable_available_size()));
        auto out = kk::uninitialized<IndexView>("test::decode_out", seq.size());
        auto [ok, expected] = replay_allocation(
            [&] { return m.alloc_decode(seq, last_loc); },
            [&] { return r.alloc_decode(Space(), seq, to_device(last_loc), out); });
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_allocation("alloc_decode", ok, expected, ids);
        after_allocation(model_[s]->last_alloc_flushed_peer(), ok);
        if (!ok)
            return;
        stamp_tokens(*pool_, r, s, ids, data_scratch_);
        last_allocated_[s] = ids;
        for (std::size_t k = 0; k < growable.size(); ++k) {
            Request& req = requests_[s][growable[k]];
            req.tokens.push_back(ids[k]);
            req.len = seq[k];
        }
    }

    // Frees the tokens on both sides of the comparison; updates the bookkeeping.
    void do_free(int s, const std::vector<index_t>& tokens) {
        const auto pages = pages_of(s, tokens);
        replay_void([&] { model_[s]->free(tokens); }, [&] { real_[s]->free(Space(), tokens); });
        forget_pages(s, pages);
        ++stats_.frees;
        data_check_due_ = data_check_due_ || (!pages.empty() && mode_ == CompactionMode::eager);
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
        if (rng_.chance(0.2))
            for (std::size_t i = tokens.size(); i > 1; --i)
                std::swap(
                    tokens[i - 1],
                    tokens[static_cast<std::size_t>(rng_.uniform(0, static_cast<index_t>(i) - 1))]);
        begin_side_op(s,
                      fmt::format("free of {} whole request(s), {} tokens", count, tokens.size()));
        do_free(s, tokens);
    }

    // A random subset of one request's pages, named by one random token of each.
    void op_free_pages(int s) {
        const index_t ps = real_[s]->page_size();
        const Request& req = any_request(s);
        std::map<index_t, std::vector<index_t>> by_page;
        for (index_t t : req.tokens)
            by_page[t / ps].push_back(t);
        std::vector<index_t> tokens;
        for (const auto& [page, ts] : by_page)
            if (rng_.chance(0.35))
                tokens.push_back(rng_.pick(ts));
        if (tokens.empty())
            tokens.push_back(rng_.pick(req.tokens));
        begin_side_op(s, fmt::format("free of {} of a request's {} pages by one token each: {}",
                                     tokens.size(), by_page.size(), tokens));
        do_free(s, tokens);
    }

    // A run of tokens from the middle of a request, not page aligned.
    void op_free_middle(int s) {
        const Request& req = any_request(s);
        const index_t n = static_cast<index_t>(req.tokens.size());
        const index_t a = rng_.uniform(0, n - 1);
        const index_t b = rng_.uniform(a, std::min(n - 1, a + 2 * real_[s]->page_size() + 1));
        std::vector<index_t> tokens(req.tokens.begin() + a, req.tokens.begin() + b + 1);
        begin_side_op(s, fmt::format("free of tokens [{}, {}] of a request of {} tokens: {}", a, b,
                                     n, tokens));
        do_free(s, tokens);
    }

    // Random tokens of several requests in one call, with repeats.
    void op_free_mixed(int s) {
        std::vector<index_t> tokens;
        const index_t n = rng_.uniform(1, 6);
        for (index_t k = 0; k < n; ++k) {
            tokens.push_back(rng_.pick(any_request(s).tokens));
            if (rng_.chance(0.2))
                tokens.push_back(tokens.back());
        }
        begin_side_op(s, fmt::format("free of scattered tokens {}", tokens));
        do_free(s, tokens);
    }

    // free_group_begin, a few frees (the same page may be named twice), free_group_end.
    void op_free_group(int s) {
        std::vector<std::vector<index_t>> frees;
        std::vector<index_t> all;
        const index_t n = rng_.uniform(1, 3);
        for (index_t k = 0; k < n; ++k) {
            const Request& req = any_request(s);
            std::vector<index_t> part;
            if (rng_.chance(0.5))
                part = req.tokens;
            else
                part.push_back(rng_.pick(req.tokens));
            all.insert(all.end(), part.begin(), part.end());
            frees.push_back(std::move(part));
        }
        begin_side_op(s, fmt::format("free group of {} frees: {}", frees.size(), frees));
        const auto pages = pages_of(s, all);
        replay_void(
            [&] {
                model_[s]->free_group_begin();
                for (const auto& f : frees)
                    model_[s]->free(f);
                model_[s]->free_group_end();
            },
            [&] {
                real_[s]->free_group_begin();
                for (const auto& f : frees)
                    real_[s]->free(Space(), f);
                real_[s]->free_group_end(Space());
            });
        forget_pages(s, pages);
        ++stats_.frees;
        if (mode_ == CompactionMode::eager)
            data_check_due_ = true;
    }

    void op_flush(int s) {
        const bool urgent = rng_.chance(0.35);
        begin_side_op(s, urgent ? "flush(urgent)" : "flush_opportunistic()");
        auto [moved, expected] = replay(
            [&] { return urgent ? model_[s]->flush(true) : model_[s]->flush_opportunistic(); },
            [&] {
                return urgent ? real_[s]->flush(Space(), true)
                              : real_[s]->flush_opportunistic(Space());
            });
        expect_eq(moved, expected, "pages moved by the flush");
        ++stats_.flushes;
        data_check_due_ = true;
    }

    // ------------------------------------------------------------------ forward events
    // A forward launched over both pools writes the tokens of each side's last
    // allocation still live.
    void op_forward() {
        const std::vector<std::vector<index_t>> written = {
            still_live(last_allocated_[0], *model_[0]), still_live(last_allocated_[1], *model_[1])};
        forward(written, [&](const CompletionTokenPtr& token) {
            for (int s = 0; s < 2; ++s) {
                real_[s]->set_latest_forward_done(token);
                if (token)
                    real_[s]->set_inflight_forward(token, written[static_cast<std::size_t>(s)]);
            }
        });
    }

    void op_drain() {
        drain([&] {
            real_[0]->drain_pending_reuse();
            real_[1]->drain_pending_reuse();
        });
    }

    // ------------------------------------------------------------------ backup windows
    // backup_state() on one side (nested once now and then), then only
    // allocations there (and anything on the peer), then restore_state() (every
    // allocation since the snapshot undone) or commit_state() (kept) of the
    // innermost snapshot.
    void open_window(int s) {
        begin_side_op(s, snapshots_.empty() ? "backup_state()" : "backup_state() (nested)");
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
            last_allocated_[s].clear();
            data_check_due_ = true;
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
            const double u = uniform01();
            if (u < 0.25) {
                const bool restore = rng_.chance(0.6);
                const std::string what = restore ? "restore_state()" : "commit_state()";
                begin_side_op(w, snapshots_.size() > 1 ? what + " (inner)" : what);
                return close_window(restore);
            }
            if (u < 0.30 && snapshots_.size() < 2)
                return open_window(w);
            if (u < 0.45)
                return op_alloc(w);
            if (u < 0.60)
                return op_decode(w);
            if (u < 0.72)
                return op_extend(w, false);
            if (u < 0.78)
                return op_drain();
            if (u < 0.88) {
                begin_side_op(w, "flush(urgent) inside a backup window (must move nothing)");
                auto [moved, expected] = replay([&] { return model_[w]->flush(true); },
                                                [&] { return real_[w]->flush(Space(), true); });
                expect_eq(moved, expected, "pages moved by a flush inside a window");
                expect_eq(moved, index_t(0), "pages moved by a flush inside a window");
                return;
            }
            if (requests_[w].empty())
                return op_alloc(w);
            // A free inside the window is refused and changes nothing.
            const std::vector<index_t> tokens{rng_.pick(any_request(w).tokens)};
            begin_side_op(w,
                          fmt::format("free({}) inside a backup window (must be refused)", tokens));
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
        // The peer carries on as usual, frees, flushes and forwards included.
        const double u = uniform01();
        if (u < 0.25 || requests_[s].empty())
            return op_alloc(s);
        if (u < 0.4)
            return op_decode(s);
        if (u < 0.6)
            return op_free_requests(s);
        if (u < 0.7)
            return op_free_middle(s);
        if (u < 0.8)
            return op_forward();
        if (u < 0.9)
            return op_complete();
        return op_flush(s);
    }

    CompactionMode mode_;
    std::unique_ptr<Allocator> real_[2];
    std::unique_ptr<ReferenceSide> model_[2];
    std::vector<Request> requests_[2];
    std::vector<index_t> last_allocated_[2]; // what the next forward writes
    bool last_alloc_failed_ = false;

    int window_side_ = -1;                              // the side with open snapshots
    std::vector<AllocatorSnapshot> snapshots_;          // innermost last
    std::vector<std::vector<Request>> window_requests_; // its bookkeeping at each snapshot
};

} // namespace kvpool::test::side_run
