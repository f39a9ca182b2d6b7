// Tensor-parallel ranks (issue #29): allocators built identically and driven
// with the same calls make the same decisions, which state_digest() shows.
//
// Randomised: three ranks of one kind (two sides bound as peers, the SWA
// pair, the tri-pool; eager or lazy, page size 1 to 4) run one random call
// sequence (alloc_extend, alloc_decode, whole-page allocs, frees and free
// groups, free_swa, state slots, the peer's own allocations, opportunistic
// and urgent flushes, forward tokens set, completed and drained, backup
// windows restored or committed). After every step each rank returned what
// rank 0 returned and every rank's digest is rank 0's. A fourth rank, driven
// alike, gets one call more (an allocation) at a random step: its digest
// differs at that step. Every rank ends in check_invariants() and the data check (each
// token's bytes stamped with its id, found through translate).
//
// Then the digest against known changes: a lazy free's holes, the flush that
// packs them, a backup window opened and committed, a forward token, a
// transfer gate, a different geometry or compaction mode.
//
// Reproduce one seed: kvpool_tests_<backend> "[tp-ranks]" --kvpool-seed N
#include "self_completing_token.hpp"
#include "test_config.hpp"
#include "test_random.hpp"
#include "tp_ranks_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::tp_ranks;

namespace {

// One seed of one kind: three ranks and a deviant driven by one call sequence.
class Driver {
public:
    Driver(Kind kind, std::uint64_t seed, int steps) : kind_(kind), rng_(seed), steps_(steps) {
        ps_ = rng_.uniform(1, 4);
        mode_ = rng_.chance(0.5) ? CompactionMode::lazy : CompactionMode::eager;
        // Small enough that allocations fall short now and then.
        const index_t bytes = (kind == Kind::tri ? 40 : 16) * 1024 + rng_.uniform(0, 4096);
        where_ = fmt::format("{} seed={} page_size={} mode={} bytes={}", name_of(kind), seed, ps_,
                             mode_ == CompactionMode::lazy ? "lazy" : "eager", bytes);
        for (int r = 0; r < 3; ++r)
            ranks_.push_back(make_rank(kind, ps_, bytes, mode_));
        deviant_ = make_rank(kind, ps_, bytes, mode_);
        deviant_step_ = static_cast<int>(rng_.uniform(1, steps - 1));
    }

    void run() {
        INFO(where_);
        check_digests("construction");
        for (step_ = 0; step_ < steps_; ++step_) {
            const std::string what = one_step();
            check_digests(what);
        }
        if (window_)
            on_all_void([](Rank& r) { r.commit(); });
        REQUIRE(diverged_at_ >= 0);
        for (auto& rank : ranks_)
            REQUIRE(rank->check(book_) == 0);
    }

private:
    // Runs call on every rank still driven; each must return what rank 0 did.
    template <class Call> auto on_all(const Call& call) {
        auto result = call(*ranks_[0]);
        for (std::size_t r = 1; r < ranks_.size(); ++r)
            REQUIRE(call(*ranks_[r]) == result);
        if (deviant_)
            REQUIRE(call(*deviant_) == result);
        return result;
    }
    template <class Call> void on_all_void(const Call& call) {
        on_all([&](Rank& r) {
            call(r);
            return true;
        });
    }

    void check_digests(const std::string& what) {
        INFO("step " << step_ << ": " << what);
        const std::uint64_t d = ranks_[0]->digest();
        for (std::size_t r = 1; r < ranks_.size(); ++r)
            REQUIRE(ranks_[r]->digest() == d);
        if (!deviant_)
            return;
        if (step_ < deviant_step_ || deviant_->available() < ps_) {
            REQUIRE(deviant_->digest() == d);
            deviant_step_ = std::max(deviant_step_, step_ + 1);
            return;
        }
        // The one different call: the deviant allocates a page the others do not.
        REQUIRE(deviant_->alloc(ps_).has_value());
        REQUIRE(deviant_->digest() != d);
        diverged_at_ = step_;
        deviant_.reset();
    }

    std::vector<std::size_t> pick(std::size_t n, index_t most) {
        std::vector<std::size_t> all(n);
        for (std::size_t i = 0; i < n; ++i)
            all[i] = i;
        std::vector<std::size_t> chosen;
        while (!all.empty() && static_cast<index_t>(chosen.size()) < most) {
            const auto k = static_cast<std::size_t>(rng_.uniform(0, index_t(all.size()) - 1));
            chosen.push_back(all[k]);
            all.erase(all.begin() + static_cast<std::ptrdiff_t>(k));
        }
        return chosen;
    }

    std::string one_step() {
        const index_t op = rng_.uniform(0, 99);
        // Short of room, the engine mostly finishes requests first.
        if (std::exchange(short_, false) && !window_ && op < 60)
            return op_free();
        if (op < 25)
            return op_extend();
        if (op < 45)
            return op_decode();
        if (op < 50)
            return op_alloc();
        if (op < 62 && !window_)
            return op_free();
        if (op < 70 && !window_ && kind_ != Kind::sides)
            return op_free_swa();
        if (op < 78 && !window_ && kind_ != Kind::swa)
            return kind_ == Kind::tri ? op_slots() : op_other();
        if (op < 86)
            return op_flush();
        if (op < 93)
            return op_forward();
        return op_window();
    }

    std::string op_extend() {
        Tokens prefix, seq, last;
        std::vector<std::ptrdiff_t> which; // a request, or -1: a new one
        for (std::size_t i : pick(book_.requests.size(), rng_.uniform(0, 2))) {
            const Tokens& t = book_.requests[i].tokens;
            prefix.push_back(static_cast<index_t>(t.size()));
            seq.push_back(prefix.back() + rng_.uniform(1, 2 * ps_ + 3));
            last.push_back(t.back());
            which.push_back(static_cast<std::ptrdiff_t>(i));
        }
        for (index_t n = rng_.uniform(which.empty() ? 1 : 0, 2); n > 0; --n) {
            prefix.push_back(0);
            seq.push_back(rng_.uniform(1, 4 * ps_ + 5));
            last.push_back(unbound);
            which.push_back(-1);
        }
        index_t tokens = 0;
        for (std::size_t b = 0; b < seq.size(); ++b)
            tokens += seq[b] - prefix[b];
        const auto [ok, ids] = on_all([&](Rank& r) {
            Tokens out(static_cast<std::size_t>(tokens));
            const bool done = r.extend(prefix, seq, last, out);
            return std::make_pair(done, done ? out : Tokens{});
        });
        short_ = !ok;
        if (ok) {
            auto next = ids.begin();
            for (std::size_t b = 0; b < seq.size(); ++b) {
                const auto n = static_cast<std::ptrdiff_t>(seq[b] - prefix[b]);
                Request& req = which[b] >= 0 ? book_.requests[static_cast<std::size_t>(which[b])]
                                             : book_.requests.emplace_back();
                req.tokens.insert(req.tokens.end(), next, next + n);
                req.in_window.insert(req.in_window.end(), next, next + n);
                next += n;
            }
        }
        return fmt::format("alloc_extend(prefix_lens={}, seq_lens={}) -> {}", prefix, seq, ok);
    }

    std::string op_decode() {
        if (book_.requests.empty())
            return op_extend();
        const auto chosen = pick(book_.requests.size(), rng_.uniform(1, 6));
        Tokens seq, last;
        for (std::size_t i : chosen) {
            seq.push_back(static_cast<index_t>(book_.requests[i].tokens.size()) + 1);
            last.push_back(book_.requests[i].tokens.back());
        }
        const auto [ok, ids] = on_all([&](Rank& r) {
            Tokens out(seq.size());
            const bool done = r.decode(seq, last, out);
            return std::make_pair(done, done ? out : Tokens{});
        });
        short_ = !ok;
        for (std::size_t k = 0; ok && k < chosen.size(); ++k) {
            book_.requests[chosen[k]].tokens.push_back(ids[k]);
            book_.requests[chosen[k]].in_window.push_back(ids[k]);
        }
        return fmt::format("alloc_decode(seq_lens={}) -> {}", seq, ok);
    }

    std::string op_alloc() {
        const index_t n = ps_ * rng_.uniform(1, 4);
        const auto ids = on_all([&](Rank& r) { return r.alloc(n); });
        short_ = !ids;
        if (ids)
            book_.requests.push_back({*ids, *ids});
        return fmt::format("alloc({}) -> {}", n, ids.has_value());
    }

    std::string op_free() {
        const auto chosen = pick(book_.requests.size(), rng_.uniform(1, 3));
        const bool group = rng_.chance(0.25);
        std::vector<Tokens> freed;
        for (std::size_t i : chosen)
            freed.push_back(book_.requests[i].tokens);
        on_all_void([&](Rank& r) { r.free(freed, group); });
        forget(book_.requests, chosen);
        return fmt::format("free of {} request(s){}", chosen.size(), group ? " in a group" : "");
    }

    // A request's oldest whole page leaves the window (never its last page).
    std::string op_free_swa() {
        for (std::size_t i : pick(book_.requests.size(), 1)) {
            Tokens& w = book_.requests[i].in_window;
            const auto page = static_cast<std::size_t>(ps_);
            // The window starts on a page boundary: whole pages leave it from the front.
            if (w.size() <= page)
                continue;
            const Tokens leaving(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(page));
            on_all_void([&](Rank& r) { r.free_swa(leaving); });
            w.erase(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(page));
            return fmt::format("free_swa({})", leaving);
        }
        return "free_swa of nothing";
    }

    // The tri-pool's state slots, or the peer side's own pages: allocate or free some.
    std::string op_slots() {
        if (!book_.slots.empty() && rng_.chance(0.45)) {
            Tokens freed;
            for (std::size_t i : pick(book_.slots.size(), rng_.uniform(1, 3)))
                freed.push_back(book_.slots[i]);
            on_all_void([&](Rank& r) { r.free_slots(freed); });
            for (index_t s : freed)
                book_.slots.erase(std::find(book_.slots.begin(), book_.slots.end(), s));
            return fmt::format("free_state_slots({})", freed);
        }
        const index_t n = rng_.uniform(1, 3);
        const auto ids = on_all([&](Rank& r) { return r.alloc_slots(n); });
        if (ids)
            book_.slots.insert(book_.slots.end(), ids->begin(), ids->end());
        return fmt::format("alloc_state_slots({}) -> {}", n, ids.has_value());
    }
    std::string op_other() {
        if (!book_.other.empty() && rng_.chance(0.45)) {
            const std::size_t i = pick(book_.other.size(), 1)[0];
            const Tokens freed = book_.other[i];
            on_all_void([&](Rank& r) { r.free_other(freed); });
            forget(book_.other, {i});
            return "free on the peer";
        }
        const index_t n = ps_ * rng_.uniform(1, 3);
        const auto ids = on_all([&](Rank& r) { return r.alloc_other(n); });
        if (ids)
            book_.other.push_back(*ids);
        return fmt::format("alloc({}) on the peer -> {}", n, ids.has_value());
    }

    std::string op_flush() {
        const bool urgent = rng_.chance(0.3);
        on_all_void([&](Rank& r) { r.flush(urgent); });
        return urgent ? "urgent flush" : "opportunistic flush";
    }

    // A forward is launched (its token, one per rank, writes a few requests'
    // last tokens); now and then the oldest forward completes, on every rank
    // at once, and pages awaiting it drain. A GPU backend that must move a
    // page the forward writes waits for it as for a real forward, which ends
    // on its own: the token completes itself when polled long enough.
    std::string op_forward() {
        if (!forwards_.empty() && rng_.chance(0.5)) {
            for (const auto& token : forwards_.front())
                token->complete();
            forwards_.erase(forwards_.begin());
            on_all_void([](Rank& r) { r.drain(); });
            return "a forward completes; drain";
        }
        Tokens writes;
        for (std::size_t i : pick(book_.requests.size(), rng_.uniform(0, 4)))
            writes.push_back(book_.requests[i].tokens.back());
        std::vector<std::shared_ptr<SelfCompletingToken>> tokens;
        const auto launch = [&](Rank& r) {
            tokens.push_back(std::make_shared<SelfCompletingToken>());
            r.forward(tokens.back(), writes);
        };
        for (auto& rank : ranks_)
            launch(*rank);
        if (deviant_)
            launch(*deviant_);
        forwards_.push_back(std::move(tokens));
        return fmt::format("forward writing {}", writes);
    }

    // Opens a backup window, or ends the open one by a restore (the book as
    // it was) or a commit.
    std::string op_window() {
        if (!window_) {
            on_all_void([](Rank& r) { r.backup(); });
            window_ = book_;
            return "backup_state";
        }
        if (rng_.chance(0.5)) {
            on_all_void([](Rank& r) { r.restore(); });
            book_ = *window_;
            window_.reset();
            return "restore_state";
        }
        on_all_void([](Rank& r) { r.commit(); });
        window_.reset();
        return "commit_state";
    }

    template <class T> static void forget(std::vector<T>& items, std::vector<std::size_t> gone) {
        std::sort(gone.rbegin(), gone.rend());
        for (std::size_t i : gone)
            items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
    }

    Kind kind_;
    Rng rng_;
    int steps_;
    index_t ps_ = 1;
    CompactionMode mode_ = CompactionMode::eager;
    std::string where_;
    std::vector<std::unique_ptr<Rank>> ranks_;
    std::unique_ptr<Rank> deviant_;
    int deviant_step_ = 0, diverged_at_ = -1, step_ = 0;
    bool short_ = false; // the last allocation found no room
    Book book_;
    std::optional<Book> window_; // the book at the open backup window
    std::vector<std::vector<std::shared_ptr<SelfCompletingToken>>> forwards_;
};

} // namespace

TEST_CASE("tp ranks: ranks driven with the same calls have the same digests after every step",
          "[tp-ranks][randomised]") {
    const auto& config = randomised_config();
    const int steps = std::max(config.ops / 10, 20);
    for (const std::uint64_t seed : config.seed_list()) {
        std::printf("[tp-ranks] seed %llu (%d steps x 3 kinds); reproduce: kvpool_tests_%s "
                    "\"[tp-ranks]\" --kvpool-seed %llu\n",
                    static_cast<unsigned long long>(seed), steps, KVPOOL_TEST_BACKEND_NAME,
                    static_cast<unsigned long long>(seed));
        std::fflush(stdout);
        for (Kind kind : {Kind::sides, Kind::swa, Kind::tri})
            Driver(kind, seed ^ (static_cast<std::uint64_t>(kind) << 48), steps).run();
    }
}

TEST_CASE("tp ranks: the digest follows the tables, not the history or the addresses",
          "[tp-ranks]") {
    const PoolLayout layout(48 * 1024, {spec("full", 24, 2, GrowDirection::up),
                                        spec("other", 40, 2, GrowDirection::down)});
    // Two ranks, a and b, of two lazy sides each.
    Pool pool_a(layout), pool_b(layout);
    Allocator a(pool_a, "full", options(CompactionMode::lazy)),
        a_peer(pool_a, "other", options(CompactionMode::lazy));
    Allocator b(pool_b, "full", options(CompactionMode::lazy)),
        b_peer(pool_b, "other", options(CompactionMode::lazy));
    a.bind_peer(a_peer);
    b.bind_peer(b_peer);
    const auto both = [&](const auto& call) {
        call(a);
        call(b);
    };
    const std::uint64_t empty = a.state_digest();
    REQUIRE(b.state_digest() == empty);
    REQUIRE(a_peer.state_digest() == b_peer.state_digest());
    REQUIRE(a_peer.state_digest() != empty);

    Tokens first, second;
    both([&](Allocator& s) { first = to_host(*s.alloc(Space(), 8)); });
    both([&](Allocator& s) { second = to_host(*s.alloc(Space(), 8)); });
    stamp_tokens(pool_a, a, full_tag, second);
    const std::uint64_t allocated = a.state_digest();
    CHECK(allocated != empty);
    CHECK(b.state_digest() == allocated);

    // A lazy free leaves holes awaiting a flush; the flush packs them.
    both([&](Allocator& s) { s.free(Space(), first); });
    const std::uint64_t pending = a.state_digest();
    CHECK(pending != allocated);
    CHECK(b.state_digest() == pending);
    REQUIRE(a.flush(Space(), true) > 0);
    const std::uint64_t flushed = a.state_digest();
    CHECK(flushed != pending);
    CHECK(b.state_digest() == pending);
    b.flush(Space(), true);
    CHECK(b.state_digest() == flushed);

    // An open backup window counts; closed with nothing allocated, the state
    // (and so the digest) is as before it, though window ids differ per rank.
    const AllocatorSnapshot window_a = a.backup_state(), window_b = b.backup_state();
    CHECK(window_a.window_id != window_b.window_id);
    CHECK(a.state_digest() != flushed);
    CHECK(b.state_digest() == a.state_digest());
    a.commit_state(window_a);
    b.commit_state(window_b);
    CHECK(a.state_digest() == flushed);

    // A forward token counts as set, whichever object it is and whether it completed.
    auto token_a = std::make_shared<ManualToken>();
    a.set_latest_forward_done(token_a);
    CHECK(a.state_digest() != flushed);
    b.set_latest_forward_done(std::make_shared<CompletedToken>());
    CHECK(b.state_digest() == a.state_digest());
    token_a->complete();
    CHECK(b.state_digest() == a.state_digest());

    // A transfer gate counts, with its pages.
    const std::uint64_t before_gate = a.state_digest();
    both([&](Allocator& s) {
        s.gate_transfer(std::make_shared<ManualToken>(),
                        Tokens(second.begin(), second.begin() + 2));
    });
    CHECK(a.state_digest() != before_gate);
    CHECK(b.state_digest() == a.state_digest());

    // The same calls on another geometry or compaction mode digest differently.
    const auto fresh = [](const PoolLayout& l, CompactionMode mode) {
        Pool pool(l);
        Allocator side(pool, "full", options(mode)), peer(pool, "other", options(mode));
        side.bind_peer(peer);
        side.alloc(Space(), 8);
        return side.state_digest();
    };
    const std::uint64_t lazy = fresh(layout, CompactionMode::lazy);
    CHECK(fresh(layout, CompactionMode::lazy) == lazy);
    CHECK(fresh(layout, CompactionMode::eager) != lazy);
    CHECK(fresh(PoolLayout(48 * 1024, {spec("full", 24, 4, GrowDirection::up),
                                       spec("other", 40, 4, GrowDirection::down)}),
                CompactionMode::lazy) != lazy);

    REQUIRE_NOTHROW(a.check_invariants());
    REQUIRE_NOTHROW(b.check_invariants());
    REQUIRE(check_stamps(pool_a, a, full_tag, second) == 0);
}

TEST_CASE("tp ranks: a composite's digest follows each of its sides", "[tp-ranks]") {
    const PoolLayout layout(48 * 1024, {spec("full", 24, 2, GrowDirection::up),
                                        spec("swa", 40, 2, GrowDirection::down)});
    Pool pool_a(layout), pool_b(layout);
    SwaPair a(pool_a, CompactionMode::eager), b(pool_b, CompactionMode::eager);
    const Tokens ids = to_host(*a.alloc(Space(), 8));
    REQUIRE(to_host(*b.alloc(Space(), 8)) == ids);
    stamp_tokens(pool_a, a.full(), full_tag, ids);
    CHECK(a.state_digest() == b.state_digest());
    // The window's oldest page leaves the SWA side only: the full side is as before.
    const std::uint64_t full_before = a.full().state_digest(), pair_before = a.state_digest();
    a.free_swa(Space(), Tokens(ids.begin(), ids.begin() + 2));
    CHECK(a.full().state_digest() == full_before);
    CHECK(a.swa().state_digest() != b.swa().state_digest());
    CHECK(a.state_digest() != pair_before);
    b.free_swa(Space(), Tokens(ids.begin(), ids.begin() + 2));
    CHECK(a.state_digest() == b.state_digest());

    // The tri-pool: a state slot changes the state side's digest and the tri-pool's.
    const PoolLayout tri_layout(96 * 1024, {spec("mamba", 256, 1, GrowDirection::up),
                                            floating_spec("swa", 16, 2, 0.5),
                                            spec("full", 32, 2, GrowDirection::down)});
    Pool tri_pool_a(tri_layout), tri_pool_b(tri_layout);
    TriPool tri_a(tri_pool_a, CompactionMode::lazy), tri_b(tri_pool_b, CompactionMode::lazy);
    CHECK(tri_a.state_digest() == tri_b.state_digest());
    const Tokens slots = to_host(*tri_a.alloc_state_slots(Space(), 2));
    stamp_tokens(tri_pool_a, tri_a.state(), other_tag, slots);
    CHECK(tri_a.state().state_digest() != tri_b.state().state_digest());
    CHECK(tri_a.full().state_digest() == tri_b.full().state_digest());
    CHECK(tri_a.state_digest() != tri_b.state_digest());
    REQUIRE(to_host(*tri_b.alloc_state_slots(Space(), 2)) == slots);
    CHECK(tri_a.state_digest() == tri_b.state_digest());

    REQUIRE_NOTHROW(a.check_invariants());
    REQUIRE_NOTHROW(tri_a.check_invariants());
    REQUIRE(check_stamps(pool_a, a.full(), full_tag, ids) == 0);
    REQUIRE(check_stamps(tri_pool_a, tri_a.state(), other_tag, slots) == 0);
}
