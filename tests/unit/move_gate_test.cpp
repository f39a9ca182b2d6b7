// The move gate on lazy sides: pages under an in-flight transfer (registered
// with a completion token) are neither moved nor reused by any lazy
// compaction path until the token completes, and an allocation that needs
// them fails as out of room. Eager sides and the pairs: move_gate_eager_test.
#include "device_fault_support.hpp"
#include "test_support.hpp"
#include <kvpool/completion_token.hpp>
#include <kvpool/device_faults.hpp>

#include <deque>
#include <functional>
#include <memory>

using namespace kvpool;
using namespace kvpool::test;

namespace {

struct GatePool {
    Pool pool;
    Allocator up;
    Allocator down;
    explicit GatePool(index_t page_size)
        : pool(PoolLayout(16 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("swa", 16, page_size, GrowDirection::down)})),
          up(pool, "full", options(CompactionMode::lazy)),
          down(pool, "swa", options(CompactionMode::lazy)) {
        up.bind_peer(down);
    }
};

// n pages on a side, stamped; returns their tokens page by page.
std::vector<std::vector<index_t>> take_pages(Pool& pool, Allocator& a, int tag, index_t n) {
    const index_t ps = a.page_size();
    const auto ids = a.alloc(Space(), n * ps);
    REQUIRE(ids);
    const auto tokens = to_host(*ids);
    stamp_tokens(pool, a, tag, tokens);
    std::vector<std::vector<index_t>> pages;
    for (index_t k = 0; k < n; ++k)
        pages.emplace_back(tokens.begin() + k * ps, tokens.begin() + (k + 1) * ps);
    return pages;
}

std::vector<index_t> join(const std::vector<std::vector<index_t>>& pages) {
    std::vector<index_t> all;
    for (const auto& p : pages)
        all.insert(all.end(), p.begin(), p.end());
    return all;
}

std::vector<index_t> physical(const Allocator& a, const std::vector<index_t>& tokens) {
    return to_host(a.translate(Space(), to_device(tokens)));
}

} // namespace

TEST_CASE("move gate: no flush moves a page under a transfer until its token completes",
          "[move-gate]") {
    for (const index_t ps : {index_t(1), index_t(16)}) {
        INFO("page size " << ps);
        GatePool g(ps);
        auto pages = take_pages(g.pool, g.up, 0, 8);
        // The transfer reads the three pages at the frontier: the first a flush would move.
        const std::vector<index_t> sent = join({pages[5], pages[6], pages[7]});
        auto token = std::make_shared<ManualToken>();
        g.up.gate_transfer(token, sent);
        const auto where = physical(g.up, sent);
        REQUIRE(g.up.core().gated_pages().size() == 3);
        g.up.free(Space(), join({pages[0], pages[1], pages[2]}));
        pages.erase(pages.begin(), pages.begin() + 3);

        CHECK(g.up.flush(Space(), false) == 0);
        CHECK(g.up.flush(Space(), true) == 0);
        CHECK(physical(g.up, sent) == where);
        CHECK(g.up.core().hole_pages() == 3);
        check_all(g.pool, g.up, 0, join(pages));

        token->complete();
        CHECK(g.up.flush(Space(), true) == 3);
        CHECK(g.up.core().hole_pages() == 0);
        CHECK(g.up.core().band_pages() == 5);
        CHECK(g.up.core().gated_pages().empty());
        check_all(g.pool, g.up, 0, join(pages));
    }
}

TEST_CASE("move gate: a freed page under a transfer is neither reused, moved into nor absorbed",
          "[move-gate]") {
    for (const index_t ps : {index_t(1), index_t(16)}) {
        INFO("page size " << ps);
        GatePool g(ps);
        auto pages = take_pages(g.pool, g.up, 0, 6);
        // The engine frees pages 1 and 5 (the frontier) while a transfer still reads them.
        const std::vector<index_t> sent = join({pages[1], pages[5]});
        const auto where = physical(g.up, sent);
        auto token = std::make_shared<ManualToken>();
        g.up.gate_transfer(token, sent);
        g.up.free(Space(), join({pages[1], pages[3], pages[5]}));
        const std::vector<std::vector<index_t>> kept{pages[0], pages[2], pages[4]};

        // Only hole 3 is reusable: one page reuses it.
        auto fresh = take_pages(g.pool, g.up, 0, 1);
        CHECK(g.up.core().band_pages() == 6);
        CHECK(g.up.core().hole_pages() == 2);
        // Neither hole under the transfer is moved into, nor is the one at the
        // frontier absorbed (the peer could take it over), by either flush.
        CHECK(g.up.flush(Space(), false) == 0);
        CHECK(g.up.flush(Space(), true) == 0);
        CHECK(g.up.core().hole_pages() == 2);
        CHECK(g.up.core().band_pages() == 6);
        // The next page extends the band past them.
        const auto more = take_pages(g.pool, g.up, 0, 1);
        fresh.push_back(more.front());
        CHECK(g.up.core().band_pages() == 7);
        for (index_t p : physical(g.up, join(fresh)))
            for (index_t q : where)
                CHECK(p / ps != q / ps);
        std::vector<index_t> live = join(kept);
        const auto fresh_tokens = join(fresh);
        live.insert(live.end(), fresh_tokens.begin(), fresh_tokens.end());
        check_all(g.pool, g.up, 0, live);

        token->complete();
        g.up.flush(Space(), true);
        CHECK(g.up.core().hole_pages() == 0);
        CHECK(g.up.core().band_pages() == 5);
        check_all(g.pool, g.up, 0, live);
    }
}

TEST_CASE("move gate: an allocation taken back leaves reused holes between the gated ones again",
          "[move-gate][device-faults]") {
    // Holes of pages 1, 2, 3, 5 and 6 with 2 and 5 under a transfer: an
    // allocation of three pages takes 1, 3 and 6 from between them. Undone by a
    // device failure's rollback or by restore_state, the hole list is as before.
    struct Gated {
        GatePool g;
        std::shared_ptr<ManualToken> token = std::make_shared<ManualToken>();
        std::deque<index_t> holes_before;
        explicit Gated(index_t ps) : g(ps) {
            const auto pages = take_pages(g.pool, g.up, 0, 8);
            g.up.gate_transfer(token, join({pages[2], pages[5]}));
            g.up.free(Space(), join({pages[1], pages[2], pages[3], pages[5], pages[6]}));
            holes_before = g.up.core().hole_list();
        }
        void alloc() { REQUIRE(g.up.alloc(Space(), 3 * g.up.page_size())); }
        void check_unchanged() {
            CHECK(g.up.core().hole_list() == holes_before);
            g.up.check_invariants(Space());
        }
    };
    for (const index_t ps : {index_t(1), index_t(16)}) {
        INFO("page size " << ps);
        {
            Gated s(ps);
            const AllocatorSnapshot snapshot = s.g.up.backup_state();
            s.alloc();
            CHECK(s.g.up.core().hole_pages() == 2);
            s.g.up.restore_state(Space(), snapshot);
            s.check_unchanged();
        }
        const auto dry_run = [ps] {
            Gated dry(ps);
            device_faults::reset();
            dry.alloc();
        };
        const std::uint64_t tried =
            for_each_device_fault(dry_run, [ps](DeviceOp op, std::uint64_t n, std::uint64_t ops) {
                INFO(to_string(op) << " " << n << " of " << ops);
                Gated s(ps);
                device_faults::fail_nth(op, n);
                CHECK_THROWS_AS(s.g.up.alloc(Space(), 3 * ps), Error);
                device_faults::reset();
                s.check_unchanged();
            });
        CHECK(tried > 0);
    }
}

TEST_CASE("move gate: an allocation that needs gated pages moved fails as out of room",
          "[move-gate]") {
    for (const index_t ps : {index_t(1), index_t(16)}) {
        INFO("page size " << ps);
        GatePool g(ps);
        const index_t all = g.up.available_size() / ps;
        auto pages = take_pages(g.pool, g.up, 0, all);
        REQUIRE(g.down.available_size() == 0);
        // Half the full side's pages are holes; the survivor at the frontier is under a transfer.
        std::vector<index_t> gone, live;
        for (index_t k = 0; k < all; ++k) {
            auto& to = k % 2 == 0 && k + 1 < all ? gone : live;
            to.insert(to.end(), pages[k].begin(), pages[k].end());
        }
        g.up.free(Space(), gone);
        auto token = std::make_shared<ManualToken>();
        g.up.gate_transfer(token, pages[all - 1]);
        CHECK(g.down.schedulable_available_size() == 0);
        const std::string before = g.up.state_string() + " | " + g.down.state_string();
        CHECK_FALSE(g.down.alloc(Space(), ps));
        CHECK(g.up.state_string() + " | " + g.down.state_string() == before);
        check_all(g.pool, g.up, 0, live);

        token->complete();
        const auto got = g.down.alloc(Space(), ps);
        REQUIRE(got);
        stamp_tokens(g.pool, g.down, 1, to_host(*got));
        check_all(g.pool, g.up, 0, live);
        check_all(g.pool, g.down, 1, to_host(*got));
    }
}

TEST_CASE("move gate: misuse is refused and changes nothing", "[move-gate][errors]") {
    GatePool g(4);
    const auto pages = take_pages(g.pool, g.up, 0, 3);
    const auto expect_refused = [&](Allocator& a, ErrorCode code,
                                    const std::function<void()>& call) {
        const std::string before = a.state_string();
        try {
            call();
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(e.code() == code);
        }
        CHECK(a.state_string() == before);
        CHECK(a.core().gated_pages().empty());
    };
    auto token = std::make_shared<ManualToken>();
    expect_refused(g.up, ErrorCode::invalid_argument,
                   [&] { g.up.gate_transfer(nullptr, pages[0]); });
    expect_refused(g.up, ErrorCode::not_allocated, [&] {
        g.up.gate_transfer(token, {pages[0][0], pages[2].back() + 4});
    });
    expect_refused(g.up, ErrorCode::not_allocated, [&] { g.up.gate_transfer(token, {-1}); });
    const AllocatorSnapshot window = g.up.backup_state();
    expect_refused(g.up, ErrorCode::invalid_state, [&] { g.up.gate_transfer(token, pages[1]); });
    g.up.commit_state(window);

    // A transfer already done gates nothing.
    token->complete();
    g.up.gate_transfer(token, pages[0]);
    CHECK(g.up.core().gated_pages().empty());
    check_all(g.pool, g.up, 0, join(pages));
}
