// Pair-level speculative rollback: backup_state / restore_state / commit_state
// of the SWA and the Mamba pair, interleaved at random with the engine's other
// calls. A restore brings both sides back to the snapshot (ids, pages, free
// ids, device tables, data), a commit keeps everything, and a bad or stale
// snapshot is refused without changing either side.
#include <kvpool/completion_token.hpp>
#include <kvpool/mamba_pair.hpp>
#include <kvpool/swa_pair.hpp>

#include "test_config.hpp"
#include "test_random.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <type_traits>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;
using MambaPair = UnifiedMambaAllocator<Space>;

constexpr int full_tag = 0;
constexpr int peer_tag = 1;

// What a restore must bring back on one side. Holes are compared as a set
// with the pages awaiting reuse: a drain inside the window moves pages from
// one to the other, and reuse order is no part of the promise.
struct SideState {
    index_t watermark = 0;
    index_t live_pages = 0;
    std::vector<index_t> free_ids;
    std::vector<index_t> v2p;
    std::vector<index_t> idle_pages;

    bool operator==(const SideState& o) const {
        return watermark == o.watermark && live_pages == o.live_pages && free_ids == o.free_ids &&
               v2p == o.v2p && idle_pages == o.idle_pages;
    }
    std::string str() const {
        return fmt::format("watermark {}, live pages {}, free ids {}, v2p {}, idle pages {}",
                           watermark, live_pages, free_ids, v2p, idle_pages);
    }
};

SideState side_state(const Allocator& side) {
    const auto& core = side.core();
    SideState s;
    s.watermark = core.watermark();
    s.live_pages = core.live_pages();
    s.free_ids.assign(core.free_virtual_pages().begin(), core.free_virtual_pages().end());
    for (index_t v = 0; v < core.virtual_table_pages(); ++v)
        s.v2p.push_back(core.physical_page_of(v));
    s.idle_pages.assign(core.hole_list().begin(), core.hole_list().end());
    for (const auto& batch : core.pending_batches())
        s.idle_pages.insert(s.idle_pages.end(), batch.pages.begin(), batch.pages.end());
    std::sort(s.idle_pages.begin(), s.idle_pages.end());
    return s;
}

struct Request {
    std::vector<index_t> tokens;
    index_t swa_from = 0; // SWA pair: tokens before it left the window
};

// The engine's bookkeeping, saved with each snapshot.
struct Books {
    std::vector<Request> requests;
    std::vector<index_t> state_slots; // Mamba pair
};

template <class Pair> PoolLayout layout_for(index_t page_size) {
    if constexpr (std::is_same_v<Pair, SwaPair>)
        return PoolLayout(48 * 1024, {spec("full", 24, page_size, GrowDirection::up),
                                      spec("swa", 40, page_size, GrowDirection::down)});
    else
        return PoolLayout(40 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("mamba", 160, 1, GrowDirection::down)});
}

// The SWA side or the Mamba state side (const or not, as the pair).
template <class Pair> auto& peer_of(Pair& pair) {
    if constexpr (std::is_same_v<std::remove_const_t<Pair>, SwaPair>)
        return pair.swa();
    else
        return pair.state();
}

// A snapshot the test holds, with what the state was when it was taken.
struct Window {
    PairSnapshot snapshot;
    Books books;
    SideState full, peer;
};

template <class Pair> class RollbackRun {
public:
    static constexpr bool is_swa = std::is_same_v<Pair, SwaPair>;

    RollbackRun(std::uint64_t seed, CompactionMode mode, index_t page_size, int ops)
        : rng_(seed), ops_(ops), pool_(layout_for<Pair>(page_size)), pair_(pool_, mode),
          foreign_pool_(layout_for<Pair>(page_size)), foreign_pair_(foreign_pool_, mode),
          foreign_(foreign_pair_.backup_state()) {}

    void run() {
        for (step_ = 0; step_ < ops_; ++step_) {
            if (windows_.empty())
                step_outside();
            else
                step_inside();
            if (step_ % 25 == 0)
                check();
        }
        while (!windows_.empty())
            close(0, rng_.chance(0.5));
        check();
    }

    long windows() const { return windows_opened_; }
    long restores() const { return restores_; }
    long refusals() const { return refusals_; }

private:
    // ------------------------------------------------------------ the two phases
    void step_outside() {
        const double u = uniform01();
        if (u < 0.13)
            return op_alloc();
        if (u < 0.25)
            return op_extend();
        if (u < 0.37)
            return op_decode();
        if (u < 0.47)
            return op_free();
        if (u < 0.55)
            return is_swa ? op_free_swa() : op_state_alloc();
        if (u < 0.60)
            return is_swa ? op_free_group() : op_state_free();
        if (u < 0.66)
            return op_flush();
        if (u < 0.72)
            return op_forward();
        if (u < 0.77)
            return op_complete();
        if (u < 0.80)
            return pair_.drain_pending_reuse();
        return open_window();
    }

    void step_inside() {
        const double u = uniform01();
        if (u < 0.10)
            return close(windows_.size() - 1, true);
        if (u < 0.15)
            return close(pick_window(), true);
        if (u < 0.20)
            return close(windows_.size() - 1, false);
        if (u < 0.22)
            return close(0, false);
        if (u < 0.32 && windows_.size() < 4)
            return open_window();
        if (u < 0.42)
            return op_alloc();
        if (u < 0.52)
            return op_extend();
        if (u < 0.64)
            return op_decode();
        if (u < 0.69)
            return is_swa ? op_alloc() : op_state_alloc();
        if (u < 0.75)
            return refused_free();
        if (u < 0.79)
            return inert_flush();
        if (u < 0.83)
            return op_forward();
        if (u < 0.87)
            return op_complete();
        if (u < 0.90)
            return pair_.drain_pending_reuse();
        return bad_snapshot();
    }

    // ------------------------------------------------------------ allocations
    void op_alloc() {
        const index_t ps = pair_.full().page_size();
        before_allocation();
        const auto ids = pair_.alloc(Space(), rng_.uniform(1, 3) * ps);
        if (!ids)
            return;
        Request req;
        req.tokens = to_host(*ids);
        stamp(req.tokens);
        books_.requests.push_back(std::move(req));
    }

    void op_extend() {
        const index_t ps = pair_.full().page_size();
        std::vector<index_t> prefix, seq, last_loc;
        std::vector<std::ptrdiff_t> which; // request index, -1: a new request
        for (std::size_t i : pick_requests(rng_.uniform(0, 2))) {
            const Request& req = books_.requests[i];
            prefix.push_back(static_cast<index_t>(req.tokens.size()));
            seq.push_back(prefix.back() + rng_.uniform(1, 2 * ps + 1));
            last_loc.push_back(req.tokens.back());
            which.push_back(static_cast<std::ptrdiff_t>(i));
        }
        if (which.empty() || rng_.chance(0.5)) {
            prefix.push_back(0);
            seq.push_back(rng_.uniform(1, 2 * ps + 3));
            last_loc.push_back(unbound);
            which.push_back(-1);
        }
        index_t tokens = 0;
        for (std::size_t b = 0; b < seq.size(); ++b)
            tokens += seq[b] - prefix[b];
        auto out =
            kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
        before_allocation();
        if (!pair_.alloc_extend(Space(), prefix, seq, to_device(last_loc), out))
            return;
        const auto ids = to_host(out);
        stamp(ids);
        auto next = ids.begin();
        for (std::size_t b = 0; b < seq.size(); ++b) {
            const auto n = static_cast<std::ptrdiff_t>(seq[b] - prefix[b]);
            if (which[b] < 0)
                books_.requests.emplace_back();
            Request& req = which[b] < 0 ? books_.requests.back()
                                        : books_.requests[static_cast<std::size_t>(which[b])];
            req.tokens.insert(req.tokens.end(), next, next + n);
            next += n;
        }
    }

    void op_decode() {
        const auto chosen = pick_requests(rng_.uniform(1, 6));
        if (chosen.empty())
            return op_alloc();
        std::vector<index_t> seq, last_loc;
        for (std::size_t i : chosen) {
            seq.push_back(static_cast<index_t>(books_.requests[i].tokens.size()) + 1);
            last_loc.push_back(books_.requests[i].tokens.back());
        }
        auto out = kk::uninitialized<IndexView>("test::decode_out", seq.size());
        before_allocation();
        if (!pair_.alloc_decode(Space(), seq, to_device(last_loc), out))
            return;
        const auto ids = to_host(out);
        stamp(ids);
        for (std::size_t k = 0; k < chosen.size(); ++k)
            books_.requests[chosen[k]].tokens.push_back(ids[k]);
    }

    void op_state_alloc() {
        if constexpr (!is_swa) {
            before_allocation();
            const auto slots = pair_.alloc_state_slots(Space(), rng_.uniform(1, 3));
            if (!slots)
                return;
            const auto host = to_host(*slots);
            stamp_tokens(pool_, pair_.state(), peer_tag, host);
            books_.state_slots.insert(books_.state_slots.end(), host.begin(), host.end());
        }
    }

    // Outside a window, forwards the device waited for are done (the host
    // backends finish their work before returning; a GPU would wait for them).
    // An allocation may flush a lazy side urgently, an eager free waits for
    // the forward, and a GPU waits for a host token by polling it: the test
    // completes the tokens first.
    void before_allocation() {
        if (windows_.empty())
            complete_all();
    }
    void before_free() {
        if (!pair_.full().core().is_lazy() || !peer_of(pair_).core().is_lazy())
            complete_all();
    }

    // ------------------------------------------------------------ frees (outside windows)
    void op_free() {
        before_free();
        const auto chosen = pick_requests(rng_.uniform(1, 2));
        pair_.free(Space(), tokens_of(chosen));
        forget(chosen);
    }

    void op_free_group() {
        before_free();
        const auto chosen = pick_requests(rng_.uniform(1, 3));
        pair_.free_group_begin();
        for (std::size_t i : chosen)
            pair_.free(Space(), books_.requests[i].tokens);
        pair_.free_group_end(Space());
        forget(chosen);
    }

    void op_free_swa() {
        if constexpr (is_swa) {
            std::vector<index_t> tokens;
            const auto range = swa_range();
            if (!range)
                return;
            Request& req = books_.requests[range->request];
            tokens.assign(req.tokens.begin() + req.swa_from, req.tokens.begin() + range->to);
            before_free();
            pair_.free_swa(Space(), tokens);
            req.swa_from = range->to;
        }
    }

    void op_state_free() {
        if constexpr (!is_swa) {
            auto& slots = books_.state_slots;
            if (slots.empty())
                return;
            const auto n = static_cast<std::size_t>(
                rng_.uniform(1, std::min<index_t>(3, static_cast<index_t>(slots.size()))));
            const std::vector<index_t> gone(slots.end() - static_cast<std::ptrdiff_t>(n),
                                            slots.end());
            before_free();
            pair_.free_state_slots(Space(), gone);
            slots.resize(slots.size() - n);
        }
    }

    // SWA pages of one request that left the window: [swa_from, to), whole
    // pages, never its last page.
    struct SwaRange {
        std::size_t request;
        std::ptrdiff_t to;
    };
    std::optional<SwaRange> swa_range() {
        const index_t ps = pair_.full().page_size();
        for (std::size_t i : pick_requests(3)) {
            const Request& req = books_.requests[i];
            const index_t pages = (static_cast<index_t>(req.tokens.size()) + ps - 1) / ps;
            const index_t gone = req.swa_from / ps;
            if (gone + 1 < pages)
                return SwaRange{
                    i, static_cast<std::ptrdiff_t>(rng_.uniform(gone + 1, pages - 1) * ps)};
        }
        return std::nullopt;
    }

    // ------------------------------------------------------------ compaction and forwards
    void op_flush() {
        if (rng_.chance(0.6)) {
            pair_.flush_opportunistic(Space());
            return;
        }
        complete_all();
        pair_.full().flush(Space(), true);
        peer_of(pair_).flush(Space(), true);
    }

    void op_forward() {
        auto token = std::make_shared<ManualToken>();
        in_flight_.push_back(token);
        pair_.set_latest_forward_done(token);
        std::vector<index_t> written;
        for (std::size_t i : pick_requests(rng_.uniform(0, 3)))
            written.push_back(books_.requests[i].tokens.back());
        pair_.set_inflight_forward(token, written);
    }

    void op_complete() {
        if (in_flight_.empty())
            return;
        const auto i =
            static_cast<std::size_t>(rng_.uniform(0, static_cast<index_t>(in_flight_.size()) - 1));
        in_flight_[i]->complete();
        in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    }

    void complete_all() {
        for (const auto& token : in_flight_)
            token->complete();
        in_flight_.clear();
    }

    // ------------------------------------------------------------ windows
    void open_window() {
        Window w;
        w.snapshot = pair_.backup_state();
        const bool outermost = windows_.empty();
        REQUIRE(w.snapshot.full.opened_window == outermost);
        REQUIRE(w.snapshot.peer.opened_window == outermost);
        w.books = books_;
        w.full = side_state(pair_.full());
        w.peer = side_state(peer_of(pair_));
        windows_.push_back(std::move(w));
        ++windows_opened_;
    }

    // Restores (or commits) window i; the windows inside it end with it.
    void close(std::size_t i, bool restore) {
        const SideState full_before = side_state(pair_.full());
        const SideState peer_before = side_state(peer_of(pair_));
        const Window& w = windows_[i];
        if (restore) {
            pair_.restore_state(Space(), w.snapshot);
            books_ = w.books;
            expect_state(w.full, w.peer, "after restore_state");
            ++restores_;
        } else {
            pair_.commit_state(w.snapshot);
            expect_state(full_before, peer_before, "after commit_state");
        }
        const bool closes = i == 0;
        REQUIRE(pair_.full().core().backup_window_open() != closes);
        REQUIRE(peer_of(pair_).core().backup_window_open() != closes);
        // The windows inside i end with it. Their snapshots are stale on a
        // side whose records the restore undid, or when the window closed.
        for (std::size_t k = i; k < windows_.size(); ++k) {
            const PairSnapshot& inner = windows_[k].snapshot;
            const bool undone = restore && k > i;
            Stale stale{inner,
                        closes || (undone && inner.full.undo_depth > w.snapshot.full.undo_depth),
                        closes || (undone && inner.peer.undo_depth > w.snapshot.peer.undo_depth)};
            if (stale.full || stale.peer)
                stale_.push_back(stale);
        }
        windows_.resize(i);
        if (stale_.size() > 8)
            stale_.erase(stale_.begin(), stale_.end() - 8);
        check();
    }

    std::size_t pick_window() {
        return static_cast<std::size_t>(rng_.uniform(0, static_cast<index_t>(windows_.size()) - 1));
    }

    // ------------------------------------------------------------ calls refused inside a window
    void refused_free() {
        const auto chosen = pick_requests(1);
        if constexpr (is_swa) {
            if (rng_.chance(0.5)) {
                const auto range = swa_range();
                if (!range)
                    return;
                const Request& req = books_.requests[range->request];
                const std::vector<index_t> tokens(req.tokens.begin() + req.swa_from,
                                                  req.tokens.begin() + range->to);
                return expect_refused([&] { pair_.free_swa(Space(), tokens); });
            }
        } else {
            if (rng_.chance(0.5) && !books_.state_slots.empty()) {
                const std::vector<index_t> slot{rng_.pick(books_.state_slots)};
                return expect_refused([&] { pair_.free_state_slots(Space(), slot); });
            }
        }
        if (chosen.empty())
            return;
        const auto tokens = tokens_of(chosen);
        expect_refused([&] { pair_.free(Space(), tokens); });
    }

    void inert_flush() {
        const std::string before = states();
        if (rng_.chance(0.5)) {
            REQUIRE(pair_.flush_opportunistic(Space()) == 0);
        } else {
            REQUIRE(pair_.full().flush(Space(), true) == 0);
            REQUIRE(peer_of(pair_).flush(Space(), true) == 0);
        }
        REQUIRE(states() == before);
    }

    // A snapshot of a closed window, of an undone point, of another pair, a
    // half-valid mix of sides, or none at all: refused, neither side changes.
    void bad_snapshot() {
        const PairSnapshot& valid = windows_.back().snapshot;
        std::vector<PairSnapshot> bad{
            foreign_, PairSnapshot{}, {valid.full, foreign_.peer}, {foreign_.full, valid.peer}};
        // Those of the open window that a restore made stale, when there are
        // any, half the time: the subtle case (same window, records undone).
        std::vector<PairSnapshot> undone;
        for (const Stale& s : stale_) {
            auto& to = s.snapshot.full.window_id == valid.full.window_id ? undone : bad;
            to.push_back(s.snapshot);
            if (s.full)
                to.push_back({s.snapshot.full, valid.peer});
            if (s.peer)
                to.push_back({valid.full, s.snapshot.peer});
        }
        const PairSnapshot& s = rng_.pick(!undone.empty() && rng_.chance(0.5) ? undone : bad);

        if (rng_.chance(0.5))
            expect_refused([&] { pair_.restore_state(Space(), s); });
        else
            expect_refused([&] { pair_.commit_state(s); });
    }

    void expect_refused(const std::function<void()>& call) {
        const std::string before = states();
        try {
            call();
            FAIL("a call that must be refused was accepted (step " << step_ << ")");
        } catch (const Error& e) {
            REQUIRE(e.code() == ErrorCode::invalid_state);
        }
        REQUIRE(states() == before);
        ++refusals_;
    }

    // ------------------------------------------------------------ checks
    std::string states() const {
        return pair_.full().state_string() + " | " + peer_of(pair_).state_string();
    }

    void expect_state(const SideState& full, const SideState& peer, const char* when) {
        const SideState f = side_state(pair_.full()), p = side_state(peer_of(pair_));
        INFO("step " << step_ << ", " << when);
        INFO("full side now " << f.str() << "; expected " << full.str());
        REQUIRE(f == full);
        INFO("peer side now " << p.str() << "; expected " << peer.str());
        REQUIRE(p == peer);
    }

    // Invariants of both sides and the data check of every live token.
    void check() {
        INFO("step " << step_);
        REQUIRE_NOTHROW(pair_.check_invariants());
        std::vector<index_t> full_live, peer_live;
        for (const Request& req : books_.requests) {
            full_live.insert(full_live.end(), req.tokens.begin(), req.tokens.end());
            peer_live.insert(peer_live.end(), req.tokens.begin() + req.swa_from, req.tokens.end());
        }
        REQUIRE(check_stamps(pool_, pair_.full(), full_tag, full_live) == 0);
        if constexpr (is_swa)
            REQUIRE(check_stamps(pool_, pair_.swa(), peer_tag, peer_live) == 0);
        else
            REQUIRE(check_stamps(pool_, pair_.state(), peer_tag, books_.state_slots) == 0);
    }

    void stamp(const std::vector<index_t>& ids) {
        stamp_tokens(pool_, pair_.full(), full_tag, ids);
        if constexpr (is_swa)
            stamp_tokens(pool_, pair_.swa(), peer_tag, ids);
    }

    // ------------------------------------------------------------ helpers
    double uniform01() { return static_cast<double>(rng_.next() >> 11) * 0x1.0p-53; }

    std::vector<std::size_t> pick_requests(index_t n) {
        std::vector<std::size_t> all(books_.requests.size());
        for (std::size_t i = 0; i < all.size(); ++i)
            all[i] = i;
        for (std::size_t i = 0; i < all.size() && static_cast<index_t>(i) < n; ++i)
            std::swap(all[i], all[i + static_cast<std::size_t>(rng_.uniform(
                                          0, static_cast<index_t>(all.size() - i) - 1))]);
        all.resize(std::min(all.size(), static_cast<std::size_t>(std::max<index_t>(n, 0))));
        return all;
    }

    std::vector<index_t> tokens_of(const std::vector<std::size_t>& chosen) const {
        std::vector<index_t> tokens;
        for (std::size_t i : chosen)
            tokens.insert(tokens.end(), books_.requests[i].tokens.begin(),
                          books_.requests[i].tokens.end());
        return tokens;
    }

    void forget(std::vector<std::size_t> gone) {
        std::sort(gone.rbegin(), gone.rend());
        for (std::size_t i : gone)
            books_.requests.erase(books_.requests.begin() + static_cast<std::ptrdiff_t>(i));
    }

    Rng rng_;
    int ops_;
    int step_ = 0;
    Pool pool_;
    Pair pair_;
    Pool foreign_pool_;
    Pair foreign_pair_;
    PairSnapshot foreign_; // of another pair's open window
    Books books_;
    std::vector<Window> windows_; // outermost first
    // A snapshot a restore or a commit left behind, and which of its sides are stale.
    struct Stale {
        PairSnapshot snapshot;
        bool full, peer;
    };
    std::vector<Stale> stale_;
    std::vector<std::shared_ptr<ManualToken>> in_flight_;
    long windows_opened_ = 0, restores_ = 0, refusals_ = 0;
};

template <class Pair> void run_rollback(const char* tag) {
    const auto& settings = randomised_config();
    const int ops = std::max(settings.ops / 4, 1);
    long windows = 0, restores = 0, refusals = 0;
    for (const std::uint64_t seed : settings.seed_list()) {
        std::printf("[%s] seed %llu (%d ops x 4 configurations); reproduce: kvpool_tests_%s "
                    "\"[%s]\" --kvpool-seed %llu\n",
                    tag, static_cast<unsigned long long>(seed), ops, KVPOOL_TEST_BACKEND_NAME, tag,
                    static_cast<unsigned long long>(seed));
        std::fflush(stdout);
        for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy})
            for (const index_t page_size : {index_t(1), index_t(16)}) {
                INFO("seed " << seed << ", " << to_string(mode) << ", page size " << page_size);
                RollbackRun<Pair> run(seed, mode, page_size, ops);
                run.run();
                windows += run.windows();
                restores += run.restores();
                refusals += run.refusals();
            }
    }
    std::printf("[%s] %ld windows, %ld restores, %ld refused calls\n", tag, windows, restores,
                refusals);
    CHECK(restores > 0);
    CHECK(refusals > 0);
}

// What a directed test holds live: full tokens, and the peer's tokens (SWA) or slots (Mamba).
struct Live {
    std::vector<index_t> full, peer;
};

// One allocation on each side (the SWA pair's binds both at once), stamped.
template <class Pair> void grow(Pool& pool, Pair& pair, Live& live) {
    const index_t ps = pair.full().page_size();
    const auto ids = pair.alloc(Space(), ps);
    REQUIRE(ids);
    const auto host = to_host(*ids);
    stamp_tokens(pool, pair.full(), full_tag, host);
    live.full.insert(live.full.end(), host.begin(), host.end());
    std::vector<index_t> peer = host;
    if constexpr (std::is_same_v<Pair, MambaPair>) {
        const auto slots = pair.alloc_state_slots(Space(), 1);
        REQUIRE(slots);
        peer = to_host(*slots);
    }
    stamp_tokens(pool, peer_of(pair), peer_tag, peer);
    live.peer.insert(live.peer.end(), peer.begin(), peer.end());
}

template <class Pair> void check_live(const Pool& pool, const Pair& pair, const Live& live) {
    check_all(pool, pair.full(), full_tag, live.full);
    check_all(pool, peer_of(pair), peer_tag, live.peer);
}

// Each bad snapshot is refused by restore_state and by commit_state, and
// neither side changes.
template <class Pair>
void expect_all_refused(const Pool& pool, Pair& pair, const Live& live,
                        const std::vector<PairSnapshot>& bad) {
    for (std::size_t i = 0; i < bad.size(); ++i) {
        INFO("bad snapshot " << i);
        const std::string before =
            pair.full().state_string() + " | " + peer_of(pair).state_string();
        for (int commit = 0; commit < 2; ++commit) {
            try {
                if (commit)
                    pair.commit_state(bad[i]);
                else
                    pair.restore_state(Space(), bad[i]);
                FAIL("accepted by " << (commit ? "commit_state" : "restore_state"));
            } catch (const Error& e) {
                CHECK(e.code() == ErrorCode::invalid_state);
            }
            REQUIRE(pair.full().state_string() + " | " + peer_of(pair).state_string() == before);
        }
        check_live(pool, pair, live);
    }
}

template <class Pair> void bad_snapshots_change_nothing() {
    for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t ps : {index_t(1), index_t(16)}) {
            INFO(to_string(mode) << ", page size " << ps);
            Pool pool(layout_for<Pair>(ps));
            Pair pair(pool, mode);
            Live live;
            grow(pool, pair, live);
            const PairSnapshot a = pair.backup_state();
            grow(pool, pair, live);
            const PairSnapshot b = pair.backup_state();
            const Live at_b = live;
            grow(pool, pair, live);
            const PairSnapshot c = pair.backup_state();
            grow(pool, pair, live);
            pair.restore_state(Space(), b);
            live = at_b;
            // Past c's depth again on both sides: only the records' serials
            // tell that c marks a point a restore undid.
            grow(pool, pair, live);
            grow(pool, pair, live);
            grow(pool, pair, live);
            check_live(pool, pair, live);
            Pool other_pool(layout_for<Pair>(ps));
            Pair other(other_pool, mode);
            const PairSnapshot foreign = other.backup_state();
            // Half-valid mixes: the valid side must not be restored either.
            expect_all_refused(pool, pair, live,
                               {c,
                                {c.full, b.peer},
                                {b.full, c.peer},
                                foreign,
                                {b.full, foreign.peer},
                                {foreign.full, b.peer},
                                PairSnapshot{}});
            // b still holds: it undoes the three allocations on both sides.
            pair.restore_state(Space(), b);
            live = at_b;
            check_live(pool, pair, live);
            // Committing a keeps what b left and closes the window on both sides.
            pair.commit_state(a);
            REQUIRE_FALSE(pair.full().core().backup_window_open());
            REQUIRE_FALSE(peer_of(pair).core().backup_window_open());
            expect_all_refused(pool, pair, live, {a, b, c});
            // Outside the window a free works again.
            pair.free(Space(), live.full);
            live.full.clear();
            if constexpr (std::is_same_v<Pair, SwaPair>)
                live.peer.clear();
            check_live(pool, pair, live);
        }
}

} // namespace

TEST_CASE("pair rollback: a bad or stale snapshot changes neither side",
          "[pair-rollback][errors]") {
    SECTION("SWA pair") {
        bad_snapshots_change_nothing<SwaPair>();
    }
    SECTION("Mamba pair") {
        bad_snapshots_change_nothing<MambaPair>();
    }
}

TEST_CASE("pair rollback: the SWA pair's backup windows, at random",
          "[pair-rollback][swa-rollback]") {
    run_rollback<SwaPair>("swa-rollback");
}

TEST_CASE("pair rollback: the Mamba pair's backup windows, at random",
          "[pair-rollback][mamba-rollback]") {
    run_rollback<MambaPair>("mamba-rollback");
}
