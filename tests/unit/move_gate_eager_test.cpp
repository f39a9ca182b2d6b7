// The move gate on eager sides, across the peer and on the pairs: an eager
// free whose compaction would move or overwrite a page under a transfer waits
// for the transfer on the stream where a stream wait can order it (an event
// token of a GPU backend), and is refused, changing nothing, where it cannot
// (the host backends, and tokens that are not events). The pairs gate both
// sides at once and check both before either changes.
#include "move_gate_support.hpp"
#include "test_support.hpp"
#include <kvpool/completion_token.hpp>
#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/mamba_pair.hpp>
#include <kvpool/swa_pair.hpp>

#include <algorithm>
#include <functional>
#include <memory>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;
using MambaPair = UnifiedMambaAllocator<Space>;

constexpr index_t entry_bytes = 16;

std::vector<index_t> take(Pool& pool, Allocator& a, int tag, index_t tokens) {
    const auto ids = a.alloc(Space(), tokens);
    REQUIRE(ids);
    const auto host = to_host(*ids);
    stamp_tokens(pool, a, tag, host);
    return host;
}

std::vector<index_t> slice(const std::vector<index_t>& v, index_t from, index_t to) {
    return {v.begin() + from, v.begin() + to};
}

std::vector<index_t> physical(const Allocator& a, const std::vector<index_t>& tokens) {
    return to_host(a.translate(Space(), to_device(tokens)));
}

// Runs call, which must be refused with code, and checks it changed nothing
// on the given sides (their state, gates and translations of live tokens).
void expect_refused(ErrorCode code, const std::vector<const Allocator*>& sides,
                    const std::vector<std::vector<index_t>>& live,
                    const std::function<void()>& call) {
    std::vector<std::string> before;
    std::vector<std::vector<index_t>> gated, where;
    for (std::size_t i = 0; i < sides.size(); ++i) {
        before.push_back(sides[i]->state_string());
        gated.push_back(sides[i]->core().gated_pages());
        where.push_back(physical(*sides[i], live[i]));
    }
    try {
        call();
        FAIL("accepted");
    } catch (const Error& e) {
        CHECK(e.code() == code);
    }
    for (std::size_t i = 0; i < sides.size(); ++i) {
        CHECK(sides[i]->state_string() == before[i]);
        CHECK(sides[i]->core().gated_pages() == gated[i]);
        CHECK(physical(*sides[i], live[i]) == where[i]);
    }
}

struct EagerPool {
    Pool pool;
    Allocator up;
    Allocator down;
    EagerPool(index_t page_size, CompactionMode up_mode, CompactionMode down_mode)
        : pool(PoolLayout(16 * 1024, {spec("full", entry_bytes, page_size, GrowDirection::up),
                                      spec("swa", entry_bytes, page_size, GrowDirection::down)})),
          up(pool, "full", options(up_mode)), down(pool, "swa", options(down_mode)) {
        up.bind_peer(down);
    }
};

// A token a test treats as a stream event: the core's policy, without a GPU.
struct StreamToken final : CompletionToken {
    bool is_complete() const override { return false; }
};

bool is_stream_token(const CompletionToken& token) {
    return dynamic_cast<const StreamToken*>(&token) != nullptr;
}

} // namespace

// A ManualToken is completed on the host: no stream wait can order work after
// it, on any backend, so these frees are refused until it completes. The
// stream-wait path: the core test below, and move_gate_overlap_test on a GPU.
TEST_CASE("move gate, eager: a free that would move a gated survivor is refused until the "
          "transfer completes",
          "[move-gate]") {
    for (const index_t ps : {index_t(1), index_t(4)}) {
        INFO("page size " << ps);
        EagerPool g(ps, CompactionMode::eager, CompactionMode::lazy);
        auto live = take(g.pool, g.up, 0, 8 * ps);
        // The transfer reads the last page: the survivor a free of page 2 moves into it.
        const auto sent = slice(live, 7 * ps, 8 * ps);
        const auto gone = slice(live, 2 * ps, 3 * ps);
        const auto token = std::make_shared<ManualToken>();
        g.up.gate_transfer(token, sent);
        REQUIRE(g.up.core().gated_pages().size() == 1);

        expect_refused(ErrorCode::invalid_state, {&g.up}, {live},
                       [&] { g.up.free(Space(), gone); });
        // The same inside a free group: refused at its end, the group kept.
        g.up.free_group_begin();
        g.up.free(Space(), gone);
        expect_refused(ErrorCode::invalid_state, {&g.up}, {live},
                       [&] { g.up.free_group_end(Space()); });
        CHECK(g.up.core().in_free_group());
        check_all(g.pool, g.up, 0, live);
        token->complete();
        g.up.free_group_end(Space());
        CHECK(g.up.core().gated_pages().empty());
        live = without(live, gone);
        CHECK(g.up.core().band_pages() == 7);
        check_all(g.pool, g.up, 0, live);
    }
}

TEST_CASE("move gate, eager: freeing pages under a transfer, and frees that do not touch them",
          "[move-gate]") {
    for (const index_t ps : {index_t(1), index_t(4)}) {
        INFO("page size " << ps);
        EagerPool g(ps, CompactionMode::eager, CompactionMode::eager);
        auto live = take(g.pool, g.up, 0, 8 * ps);
        // The engine aborts a request whose pages 1 and 6 a transfer still reads.
        const auto sent = slice(live, 1 * ps, 2 * ps);
        const auto token = std::make_shared<ManualToken>();
        g.up.gate_transfer(token, sent);
        const auto sent_too = slice(live, 6 * ps, 7 * ps);
        g.up.gate_transfer(token, sent_too);
        REQUIRE(g.up.core().gated_pages().size() == 2);

        // Freeing page 3 moves page 7 into it: neither is gated.
        const auto gone = slice(live, 3 * ps, 4 * ps);
        g.up.free(Space(), gone);
        live = without(live, gone);
        CHECK(g.up.core().gated_pages().size() == 2);
        check_all(g.pool, g.up, 0, live);

        // Freeing the gated page 1 would move the frontier page into it (and a
        // free of page 0 now would move gated page 6, at the frontier).
        expect_refused(ErrorCode::invalid_state, {&g.up}, {live},
                       [&] { g.up.free(Space(), sent); });
        expect_refused(ErrorCode::invalid_state, {&g.up}, {live},
                       [&] { g.up.free(Space(), slice(live, 0, ps)); });
        // The peer takes the whole gap, and nothing of the side's band.
        const auto peer = take(g.pool, g.down, 1, g.down.available_size());
        for (index_t p : physical(g.down, peer))
            CHECK(p / ps >= g.up.core().watermark());
        check_all(g.pool, g.up, 0, live);
        check_all(g.pool, g.down, 1, peer);
        g.down.free(Space(), peer);
        token->complete();
        g.up.free(Space(), sent);
        live = without(live, sent);
        CHECK(g.up.core().gated_pages().empty());
        CHECK(g.up.core().band_pages() == 6);
        check_all(g.pool, g.up, 0, live);
        check_all(g.pool, g.down, 1, {});
    }
}

TEST_CASE("move gate, eager: the core waits on a stream token and settles its gate",
          "[move-gate]") {
    Pool pool(PoolLayout(4096, {spec("full", entry_bytes, 2, GrowDirection::up),
                                spec("swa", entry_bytes, 2, GrowDirection::down)}));
    detail::AllocatorCore core(pool.layout().sub_pool("full"), pool.total_bytes(),
                               options(CompactionMode::eager));
    core.set_stream_wait_check(&is_stream_token);
    detail::PageBinding binding;
    REQUIRE(core.alloc_pages(6, binding));
    const std::vector<index_t> pages = binding.virtual_pages.to_vector();
    core.plan().clear();
    const auto at = [&](index_t k) { return pages[static_cast<std::size_t>(k)] * 2; };

    const CompletionTokenPtr stream = std::make_shared<StreamToken>();
    const auto manual = std::make_shared<ManualToken>();
    const std::vector<index_t> streamed{at(5)}, held{at(3)};
    core.gate_transfer(stream, streamed.data(), 1);
    core.gate_transfer(manual, held.data(), 1);
    const index_t frontier = core.physical_page_of(pages[5]);

    // Freeing page 0 moves the frontier page (under the stream token) into it.
    const std::vector<index_t> gone{at(0)};
    core.free_tokens(gone.data(), 1);
    REQUIRE(core.plan().waits.size() == 1);
    CHECK(core.plan().waits.front() == stream);
    CHECK(core.plan().move_src == std::vector<index_t>{frontier});
    CHECK(core.gated_pages() == std::vector<index_t>{core.physical_page_of(pages[3])});
    core.plan().clear();

    // A free touching the page under the host-completed token is refused.
    const std::string before = core.state_string();
    CHECK_THROWS_AS(core.free_tokens(held.data(), 1), Error);
    CHECK(core.state_string() == before);
    CHECK(core.plan().empty());
    manual->complete();
    core.free_tokens(held.data(), 1);
    CHECK(core.plan().waits.empty());
    CHECK(core.gated_pages().empty());
    CHECK_NOTHROW(core.check_invariants());
}

TEST_CASE("move gate: a peer never takes over a gated page at a lazy side's frontier",
          "[move-gate]") {
    for (const auto peer_mode : {CompactionMode::eager, CompactionMode::lazy}) {
        EagerPool g(4, CompactionMode::lazy, peer_mode);
        auto live = take(g.pool, g.up, 0, 6 * 4);
        const auto sent = slice(live, 5 * 4, 6 * 4);
        const auto token = std::make_shared<ManualToken>();
        g.up.gate_transfer(token, sent);
        const index_t gated_page = g.up.core().gated_pages().front();
        g.up.free(Space(), sent);
        live = without(live, sent);
        g.up.flush(Space(), true);
        // Everything the peer can get, by allocation and the urgent flush it drives.
        std::vector<index_t> peer;
        while (const auto got = g.down.alloc(Space(), 4)) {
            const auto ids = to_host(*got);
            stamp_tokens(g.pool, g.down, 1, ids);
            peer.insert(peer.end(), ids.begin(), ids.end());
        }
        for (index_t p : physical(g.down, peer))
            CHECK(p / 4 != gated_page);
        CHECK(g.up.core().watermark() > gated_page);
        check_all(g.pool, g.up, 0, live);
        check_all(g.pool, g.down, 1, peer);

        token->complete();
        const auto more = g.down.alloc(Space(), 4);
        REQUIRE(more);
        const auto ids = to_host(*more);
        stamp_tokens(g.pool, g.down, 1, ids);
        peer.insert(peer.end(), ids.begin(), ids.end());
        check_all(g.pool, g.up, 0, live);
        check_all(g.pool, g.down, 1, peer);
    }
}

TEST_CASE("move gate: restore and clear with pages under a transfer", "[move-gate]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        EagerPool g(2, mode, CompactionMode::lazy);
        auto live = take(g.pool, g.up, 0, 6 * 2);
        const auto sent = slice(live, 4 * 2, 6 * 2);
        const auto token = std::make_shared<ManualToken>();
        g.up.gate_transfer(token, sent);
        const auto gated = g.up.core().gated_pages();
        const auto where = physical(g.up, sent);
        if (mode == CompactionMode::lazy) {
            g.up.free(Space(), slice(live, 0, 2));
            live = without(live, slice(live, 0, 2));
        }
        // Allocations inside a backup window, then a restore: the gate holds throughout.
        const AllocatorSnapshot window = g.up.backup_state();
        const auto spec_ids = take(g.pool, g.up, 0, 3 * 2);
        for (index_t p : physical(g.up, spec_ids))
            CHECK(std::find(gated.begin(), gated.end(), p / 2) == gated.end());
        g.up.restore_state(Space(), window);
        CHECK(g.up.core().gated_pages() == gated);
        CHECK(physical(g.up, sent) == where);
        g.up.flush(Space(), true);
        CHECK(physical(g.up, sent) == where);
        check_all(g.pool, g.up, 0, live);

        // clear() is the engine's reset: it drops every gate with every page.
        g.up.clear(Space());
        CHECK(g.up.core().gated_pages().empty());
        live = take(g.pool, g.up, 0, 4 * 2);
        g.up.free(Space(), slice(live, 0, 2));
        live = without(live, slice(live, 0, 2));
        g.up.flush(Space(), true);
        check_all(g.pool, g.up, 0, live);
    }
}

TEST_CASE("move gate: the SWA pair gates both sides, the SWA side where still bound",
          "[move-gate]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        Pool pool(PoolLayout(16 * 1024, {spec("full", entry_bytes, 2, GrowDirection::up),
                                         spec("swa", entry_bytes, 2, GrowDirection::down)}));
        SwaPair pair(pool, mode);
        auto live = to_host(*pair.alloc(Space(), 8 * 2));
        stamp_tokens(pool, pair.full(), 0, live);
        stamp_tokens(pool, pair.swa(), 1, live);
        // Page 0 left the window: the SWA side no longer holds it.
        pair.free_swa(Space(), slice(live, 0, 2));
        auto swa_live = without(live, slice(live, 0, 2));
        // Pages 0 and 1. The sides bind ascending from the anchor up and from
        // the frontier down: page 1 is now the SWA side's frontier page, and
        // page 7 the full side's.
        const auto sent = slice(live, 0, 2 * 2);
        const auto page1 = slice(live, 2, 2 * 2);
        const auto token = std::make_shared<ManualToken>();

        // Misuse on either side changes neither.
        expect_refused(ErrorCode::not_allocated, {&pair.full(), &pair.swa()}, {live, swa_live},
                       [&] {
                           pair.gate_transfer(token, {sent[0], 9999});
                       });
        const PairSnapshot window = pair.backup_state();
        expect_refused(ErrorCode::invalid_state, {&pair.full(), &pair.swa()}, {live, swa_live},
                       [&] { pair.gate_transfer(token, sent); });
        pair.commit_state(window);

        pair.gate_transfer(token, sent);
        CHECK(pair.full().core().gated_pages().size() == 2);
        CHECK(pair.swa().core().gated_pages().size() == 1);
        const auto full_where = physical(pair.full(), sent);
        const auto swa_where = physical(pair.swa(), page1);

        // Freeing page 3: the full side's compaction moves its page 7, the SWA
        // side's would move the gated page 1. Refused on both sides before
        // either changes.
        const auto gone = slice(live, 3 * 2, 4 * 2);
        if (mode == CompactionMode::eager) {
            expect_refused(ErrorCode::invalid_state, {&pair.full(), &pair.swa()}, {live, swa_live},
                           [&] { pair.free(Space(), gone); });
            pair.free_group_begin();
            pair.free(Space(), gone);
            expect_refused(ErrorCode::invalid_state, {&pair.full(), &pair.swa()}, {live, swa_live},
                           [&] { pair.free_group_end(Space()); });
            token->complete();
            pair.free_group_end(Space());
        } else {
            pair.free(Space(), gone);
            pair.flush_opportunistic(Space());
            CHECK(physical(pair.full(), sent) == full_where);
            CHECK(physical(pair.swa(), page1) == swa_where);
            token->complete();
        }
        live = without(live, gone);
        swa_live = without(swa_live, gone);
        pair.flush_opportunistic(Space());
        pair.check_invariants();
        REQUIRE(check_stamps(pool, pair.full(), 0, live) == 0);
        REQUIRE(check_stamps(pool, pair.swa(), 1, swa_live) == 0);
    }
}

TEST_CASE("move gate: the Mamba pair gates full tokens and state slots", "[move-gate]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        Pool pool(PoolLayout(16 * 1024, {spec("full", entry_bytes, 2, GrowDirection::up),
                                         spec("mamba", 64, 1, GrowDirection::down)}));
        MambaPair pair(pool, mode);
        auto tokens = to_host(*pair.alloc(Space(), 4 * 2));
        stamp_tokens(pool, pair.full(), 0, tokens);
        auto slots = to_host(*pair.alloc_state_slots(Space(), 6));
        stamp_tokens(pool, pair.state(), 1, slots);
        const auto token = std::make_shared<ManualToken>();

        // A bad slot refuses the whole call: the full side is not gated either.
        expect_refused(ErrorCode::not_allocated, {&pair.full(), &pair.state()}, {tokens, slots},
                       [&] {
                           pair.gate_transfer(token, slice(tokens, 0, 2), {slots[0], 4096});
                       });
        // Slot 0 sits at the state side's frontier (it binds from there down).
        pair.gate_transfer(token, slice(tokens, 0, 2), {slots[1], slots[0]});
        CHECK(pair.full().core().gated_pages().size() == 1);
        CHECK(pair.state().core().gated_pages().size() == 2);
        const auto where = physical(pair.state(), {slots[1], slots[0]});

        // The request of slot 1 finishes while its state is still being sent.
        if (mode == CompactionMode::eager) {
            expect_refused(ErrorCode::invalid_state, {&pair.state()}, {slots},
                           [&] { pair.free_state_slots(Space(), {slots[1]}); });
            // Slot 2's free moves slot 0 (gated, at the frontier): refused too.
            expect_refused(ErrorCode::invalid_state, {&pair.state()}, {slots},
                           [&] { pair.free_state_slots(Space(), {slots[2]}); });
            token->complete();
            pair.free_state_slots(Space(), {slots[1]});
        } else {
            pair.free_state_slots(Space(), {slots[1]});
            if (mode == CompactionMode::lazy) {
                // Neither reused nor moved into by a new slot, nor moved by a flush.
                const auto fresh = to_host(*pair.alloc_state_slots(Space(), 1));
                stamp_tokens(pool, pair.state(), 1, fresh);
                CHECK(physical(pair.state(), fresh).front() != where.front());
                pair.flush_opportunistic(Space());
                CHECK(physical(pair.state(), {slots[0]}).front() == where.back());
                slots.push_back(fresh.front());
            }
            token->complete();
        }
        slots = without(slots, {slots[1]});
        // The slot is reused once the transfer is done.
        pair.flush_opportunistic(Space());
        const auto again = to_host(*pair.alloc_state_slots(Space(), 1));
        stamp_tokens(pool, pair.state(), 1, again);
        slots.push_back(again.front());
        pair.check_invariants();
        REQUIRE(check_stamps(pool, pair.full(), 0, tokens) == 0);
        REQUIRE(check_stamps(pool, pair.state(), 1, slots) == 0);
    }
}
