// HybridReqToTokenPool: Mamba state slots per request, adopted slots, and
// ping-pong track slots in normal and lazy mode. Misuse throws and changes
// nothing; running out is a clean no-allocation.
#include "device_fault_support.hpp"
#include "req_table_test_support.hpp"
#include <kvpool/device_faults.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

TEST_CASE("hybrid req table: each request gets a Mamba slot, mapped on the device",
          "[req-table][hybrid]") {
    FreeListStates states(5);
    Hybrid h(Space(), 4, 8, states);
    const auto snap = [&] { return describe(h, states); };
    CHECK(*h.alloc(Space(), 2) == std::vector<index_t>{1, 2});
    CHECK(h.mamba_slot(1) == 1);
    CHECK(h.mamba_slot(2) == 2);
    CHECK(to_host(h.req_index_to_mamba_index()) == std::vector<index_t>{0, 1, 2, 0, 0});
    CHECK(h.req_index_to_mamba_ping_pong_track_buffer().extent(1) == 0);
    // Gather on the device; an index outside the table reads the padding row.
    IndexView out("test::mamba_indices", 4);
    h.get_mamba_indices(Space(), to_device({2, 1, 0, 99}), out);
    CHECK(to_host(out) == std::vector<index_t>{2, 1, 0, 0});
    CHECK_THROWS_AS(h.get_mamba_indices(Space(), to_device({1}), out), Error);

    // Request slots are there but state slots are short: nothing changes.
    CHECK(states.available_size() == 3);
    CHECK(*h.alloc(Space(), 1) == std::vector<index_t>{3});
    const std::string before = snap();
    FreeListStates few(1);
    Hybrid g(Space(), 4, 8, few);
    CHECK(g.alloc(Space(), 1).has_value());
    CHECK_FALSE(g.alloc(Space(), 2).has_value());
    CHECK(g.available_size() == 3);
    CHECK(few.available_size() == 0);
    CHECK(snap() == before);

    // The token rows work as in ReqToTokenPool.
    h.write(Space(), 3, 2, std::vector<index_t>{4, 5});
    CHECK(h.host_row(3) == std::vector<index_t>{unbound, unbound, 4, 5});
    CHECK(device_row(h.req_to_token(), 3) == std::vector<index_t>{0, 0, 4, 5, 0, 0, 0, 0});

    // free_mamba_cache first, then free; in the other order the state would leak.
    expect_error(
        ErrorCode::invalid_state, [&] { h.free(2); }, snap, "free_mamba_cache");
    expect_error(
        ErrorCode::invalid_state, [&] { h.free(std::vector<index_t>{2}); }, snap);
    CHECK(h.free_mamba_cache(Space(), 2) == unbound);
    CHECK(h.mamba_slot(2) == unbound);
    CHECK_FALSE(states.is_live(2));
    expect_error(
        ErrorCode::not_allocated, [&] { (void)h.free_mamba_cache(Space(), 2); }, snap,
        "double free");
    expect_error(
        ErrorCode::invalid_state,
        [&] {
            h.free(std::vector<index_t>{2, 1});
        },
        snap, "1");
    h.free(2);
    expect_error(
        ErrorCode::not_allocated, [&] { h.free(2); }, snap);
    expect_error(
        ErrorCode::not_allocated, [&] { (void)h.free_mamba_cache(Space(), 2); }, snap);
    expect_error(
        ErrorCode::out_of_range, [&] { (void)h.free_mamba_cache(Space(), 0); }, snap, "padding");
    expect_error(
        ErrorCode::out_of_range, [&] { h.free(5); }, snap);
    // Ping-pong calls need the extra buffer; a keep index does too.
    expect_error(
        ErrorCode::invalid_state, [&] { (void)h.mamba_next_track_idx(1); }, snap);
    expect_error(
        ErrorCode::invalid_state, [&] { (void)h.free_mamba_cache(Space(), 1, 0); }, snap);
    expect_error(
        ErrorCode::invalid_state, [&] { (void)h.donate_mamba_ping_pong_slot(Space(), 1, 5); },
        snap);
    // The freed request slot comes back with a fresh state slot.
    CHECK(*h.alloc(Space(), 1) == std::vector<index_t>{4});
    CHECK(*h.alloc(Space(), 1) == std::vector<index_t>{2});
    CHECK(h.mamba_slot(4) == 4);
    CHECK(h.mamba_slot(2) == 5);
    h.check_invariants(Space());
}

TEST_CASE("hybrid req table: a request can adopt a state slot it already holds",
          "[req-table][hybrid]") {
    FreeListStates states(6);
    Hybrid h(Space(), 4, 8, states, extra_buffer(false));
    const auto snap = [&] { return describe(h, states); };
    // A prefix-cache hit: the caller copied cached state into slot 1 already.
    const index_t held = states.alloc(Space(), 1)->front();
    CHECK(*h.alloc_adopting_mamba(Space(), {unbound, held}) == std::vector<index_t>{1, 2});
    CHECK(h.mamba_slot(1) == 2);
    CHECK(h.mamba_ping_pong_track_buffer(1) == std::vector<index_t>{3, 4});
    CHECK(h.mamba_slot(2) == held);
    CHECK(h.mamba_ping_pong_track_buffer(2) == std::vector<index_t>{5, 6});
    expect_error(
        ErrorCode::invalid_argument, [&] { h.alloc_adopting_mamba(Space(), {held}); }, snap,
        "already held");
    expect_error(
        ErrorCode::invalid_argument, [&] { h.alloc_adopting_mamba(Space(), {-5}); }, snap);
    const std::string before = snap();
    CHECK_FALSE(h.alloc_adopting_mamba(Space(), {unbound}).has_value()); // no room for its tracks
    CHECK(snap() == before);
    h.check_invariants(Space());
    CHECK(to_host(h.req_index_to_mamba_index()) == std::vector<index_t>{0, 2, held, 0, 0});
    // The adopted slot is freed with the request's state.
    CHECK(h.free_mamba_cache(Space(), 2) == unbound);
    CHECK_FALSE(states.is_live(held));
}

TEST_CASE("hybrid req table: ping-pong tracking in normal mode", "[req-table][hybrid][ping-pong]") {
    FreeListStates states(10);
    Hybrid h(Space(), 3, 8, states, extra_buffer(false));
    const auto snap = [&] { return describe(h, states); };
    // Normal mode allocates the whole buffer up front, in the reference's
    // order: each request's Mamba slot, then its tracks.
    CHECK(*h.alloc(Space(), 2) == std::vector<index_t>{1, 2});
    CHECK(h.mamba_slot(1) == 1);
    CHECK(h.mamba_ping_pong_track_buffer(1) == std::vector<index_t>{2, 3});
    CHECK(h.mamba_slot(2) == 4);
    CHECK(h.mamba_ping_pong_track_buffer(2) == std::vector<index_t>{5, 6});
    auto tracks = h.req_index_to_mamba_ping_pong_track_buffer();
    CHECK(device_row(tracks, 1) == std::vector<index_t>{2, 3});
    CHECK(device_row(tracks, 2) == std::vector<index_t>{5, 6});

    // next_track_idx starts at 0; the state last tracked is at the other index.
    CHECK(h.mamba_next_track_idx(1) == 0);
    CHECK(h.get_mamba_ping_pong_other_idx(0) == 1);
    CHECK(h.get_mamba_ping_pong_other_idx(1) == 0);
    CHECK(h.get_mamba_ping_pong_keep_idx(1) == 1);
    h.set_mamba_next_track_idx(1, 1);
    CHECK(h.get_mamba_ping_pong_keep_idx(1) == 0);
    expect_error(
        ErrorCode::out_of_range, [&] { h.set_mamba_next_track_idx(1, 2); }, snap);
    expect_error(
        ErrorCode::out_of_range, [&] { (void)h.get_mamba_ping_pong_other_idx(-1); }, snap);

    // Donate the keep slot (index 0 now) to the cache, track on in a new slot.
    const index_t fresh = states.alloc(Space(), 1)->front();
    CHECK(h.donate_mamba_ping_pong_slot(Space(), 1, fresh) == 2);
    CHECK(h.mamba_ping_pong_track_buffer(1) == std::vector<index_t>{fresh, 3});
    CHECK(device_row(tracks, 1) == std::vector<index_t>{fresh, 3});
    CHECK(states.is_live(2)); // the cache holds it now
    // A slot a request holds cannot be put in twice.
    expect_error(
        ErrorCode::invalid_argument, [&] { (void)h.donate_mamba_ping_pong_slot(Space(), 1, 5); },
        snap, "already held");
    expect_error(
        ErrorCode::invalid_argument, [&] { (void)h.set_mamba_ping_pong_slot(Space(), 2, 0, 3); },
        snap);
    expect_error(
        ErrorCode::invalid_argument,
        [&] { (void)h.set_mamba_ping_pong_slot(Space(), 2, 0, unbound); }, snap, "lazy");
    expect_error(
        ErrorCode::invalid_state, [&] { (void)h.alloc_mamba_ping_pong_slot(Space(), 2, 1); }, snap);
    CHECK(h.set_mamba_ping_pong_slot(Space(), 2, 1, 6) == unbound); // already there: nothing passes
    h.check_invariants(Space());

    // Finish request 1 keeping the other track index: it passes to the caller.
    expect_error(
        ErrorCode::out_of_range, [&] { (void)h.free_mamba_cache(Space(), 1, 2); }, snap);
    CHECK(h.free_mamba_cache(Space(), 1, 1) == 3);
    CHECK(states.is_live(3));
    CHECK_FALSE(states.is_live(1));
    CHECK_FALSE(states.is_live(fresh));
    CHECK(h.mamba_ping_pong_track_buffer(1) == std::vector<index_t>{unbound, unbound});
    expect_error(
        ErrorCode::not_allocated, [&] { (void)h.free_mamba_cache(Space(), 1, 1); }, snap,
        "double free");
    expect_error(
        ErrorCode::not_allocated, [&] { (void)h.mamba_next_track_idx(1); }, snap);
    h.free(1);
    // Without a keep index everything goes back.
    CHECK(h.free_mamba_cache(Space(), 2) == unbound);
    CHECK(states.live() == std::set<index_t>{2, 3});
    h.free(2);
    h.check_invariants(Space());
}

TEST_CASE("hybrid req table: a ping-pong buffer of one (no overlap scheduler)",
          "[req-table][hybrid][ping-pong]") {
    FreeListStates states(6);
    Hybrid h(Space(), 2, 4, states, extra_buffer(false, 1));
    const auto snap = [&] { return describe(h, states); };
    CHECK(*h.alloc(Space(), 1) == std::vector<index_t>{1});
    CHECK(h.mamba_ping_pong_track_buffer(1) == std::vector<index_t>{2});
    CHECK(h.get_mamba_ping_pong_other_idx(0) == 0);
    CHECK(h.get_mamba_ping_pong_keep_idx(1) == 0);
    expect_error(
        ErrorCode::out_of_range, [&] { (void)h.free_mamba_cache(Space(), 1, 1); }, snap);
    // Keeping the only track slot frees just the Mamba slot.
    CHECK(h.free_mamba_cache(Space(), 1, 0) == 2);
    CHECK(states.live() == std::set<index_t>{2});
    h.check_invariants(Space());
}

TEST_CASE("hybrid req table: ping-pong tracking in lazy mode",
          "[req-table][hybrid][ping-pong][lazy]") {
    FreeListStates states(8);
    Hybrid h(Space(), 3, 8, states, extra_buffer(true));
    const auto snap = [&] { return describe(h, states); };
    // Lazy mode allocates one track slot; the second is empty until needed.
    CHECK(*h.alloc(Space(), 2) == std::vector<index_t>{1, 2});
    CHECK(h.mamba_slot(1) == 1);
    CHECK(h.mamba_ping_pong_track_buffer(1) == std::vector<index_t>{2, unbound});
    CHECK(h.mamba_slot(2) == 3);
    CHECK(h.mamba_ping_pong_track_buffer(2) == std::vector<index_t>{4, unbound});
    CHECK(device_row(h.req_index_to_mamba_ping_pong_track_buffer(), 2) ==
          std::vector<index_t>{4, unbound});
    // The tracked state stays at next_track_idx: no swap.
    CHECK(h.get_mamba_ping_pong_keep_idx(1) == 0);
    h.set_mamba_next_track_idx(1, 1);
    CHECK(h.get_mamba_ping_pong_keep_idx(1) == 1);
    // Donating from an empty entry is refused.
    expect_error(
        ErrorCode::invalid_state, [&] { (void)h.donate_mamba_ping_pong_slot(Space(), 1, 7); }, snap,
        "empty");
    // At a track boundary the empty entry is filled on demand.
    CHECK(h.alloc_mamba_ping_pong_slot(Space(), 1, 1));
    CHECK(h.mamba_ping_pong_track_buffer(1) == std::vector<index_t>{2, 5});
    expect_error(
        ErrorCode::invalid_state, [&] { (void)h.alloc_mamba_ping_pong_slot(Space(), 1, 1); }, snap,
        "holds slot 5");
    CHECK(h.donate_mamba_ping_pong_slot(Space(), 1, states.alloc(Space(), 1)->front()) == 5);
    CHECK(h.mamba_ping_pong_track_buffer(1) == std::vector<index_t>{2, 6});
    // Lazy mode may empty an entry again; the slot passes to the caller.
    CHECK(h.set_mamba_ping_pong_slot(Space(), 1, 0, unbound) == 2);
    CHECK(device_row(h.req_index_to_mamba_ping_pong_track_buffer(), 1) ==
          std::vector<index_t>{unbound, 6});
    h.check_invariants(Space());
    states.free(Space(), {2, 5});

    // Keeping an index frees the rest, skipping empty entries.
    CHECK(h.free_mamba_cache(Space(), 1, 1) == 6);
    CHECK(states.live() == std::set<index_t>{3, 4, 6});
    // Keeping an empty entry keeps nothing.
    CHECK(h.free_mamba_cache(Space(), 2, 1) == unbound);
    CHECK(states.live() == std::set<index_t>{6});
    h.free(std::vector<index_t>{1, 2});

    // Running out for the on-demand slot is a clean "no".
    FreeListStates two(2);
    Hybrid g(Space(), 2, 4, two, extra_buffer(true));
    CHECK(*g.alloc(Space(), 1) == std::vector<index_t>{1});
    const std::string before = describe(g, two);
    CHECK_FALSE(g.alloc_mamba_ping_pong_slot(Space(), 1, 1));
    CHECK(describe(g, two) == before);
    CHECK(g.free_mamba_cache(Space(), 1) == unbound);
    CHECK(two.available_size() == 2);
    g.check_invariants(Space());
}

TEST_CASE("hybrid req table: clear resets slots, state allocator and device maps",
          "[req-table][hybrid]") {
    FreeListStates states(9);
    Hybrid h(Space(), 3, 4, states, extra_buffer(false));
    h.alloc(Space(), 3);
    CHECK(states.available_size() == 0);
    CHECK(h.free_mamba_cache(Space(), 2, 0) == 5);
    h.clear(Space());
    CHECK(h.available_size() == 3);
    CHECK(states.available_size() == 9); // the kept slot too, as the reference's clear
    CHECK(to_host(h.req_index_to_mamba_index()) == std::vector<index_t>(4, 0));
    CHECK(device_row(h.req_index_to_mamba_ping_pong_track_buffer(), 1) ==
          std::vector<index_t>{0, 0});
    CHECK(*h.alloc(Space(), 1) == std::vector<index_t>{1});
    CHECK(h.mamba_slot(1) == 1);
    CHECK(h.mamba_next_track_idx(1) == 0);
    h.check_invariants(Space());
}

namespace {

// Each device operation of call, of each kind in turn, fails on a table whose
// two requests hold state: the call throws Error(device) and changes nothing
// (host state, generations, the device maps check_invariants reads), and the
// table stays usable: the same call then leaves it as a twin that saw no fault.
void expect_device_faults_change_nothing(bool lazy, const std::function<void(Hybrid&)>& call) {
    const auto dry_run = [&] {
        FreeListStates states(12);
        Hybrid h(Space(), 6, 8, states, extra_buffer(lazy));
        REQUIRE(h.alloc(Space(), 2));
        device_faults::reset();
        call(h);
    };
    const std::uint64_t tried =
        for_each_device_fault(dry_run, [&](DeviceOp op, std::uint64_t n, std::uint64_t ops) {
            INFO(to_string(op) << " " << n << " of " << ops);
            FreeListStates states(12), twin_states(12);
            Hybrid h(Space(), 6, 8, states, extra_buffer(lazy));
            Hybrid twin(Space(), 6, 8, twin_states, extra_buffer(lazy));
            REQUIRE(h.alloc(Space(), 2));
            REQUIRE(twin.alloc(Space(), 2));
            const auto snapshot = [&] {
                std::string s = describe(h, states);
                for (index_t r = 1; r <= h.size(); ++r)
                    s += fmt::format(" g{}", h.generation(r));
                return s;
            };
            const std::string before = snapshot();
            device_faults::fail_nth(op, n);
            try {
                call(h);
                FAIL("the call succeeded");
            } catch (const Error& e) {
                INFO(e.what());
                CHECK(e.code() == ErrorCode::device);
            }
            device_faults::reset();
            CHECK(snapshot() == before);
            h.check_invariants();
            call(h);
            call(twin);
            CHECK(describe(h, states) == describe(twin, twin_states));
            h.check_invariants();
        });
    CHECK(tried > 0);
}

} // namespace

TEST_CASE("hybrid req table: a device failure in alloc or a track slot changes nothing",
          "[req-table][hybrid][device-faults]") {
    for (const bool lazy : {false, true}) {
        INFO((lazy ? "lazy" : "normal") << " ping-pong buffer");
        // The call allocates two more requests (or, lazy, a track slot of request 1).
        expect_device_faults_change_nothing(lazy, [lazy](Hybrid& h) {
            if (lazy) {
                if (!h.alloc_mamba_ping_pong_slot(Space(), 1, 1))
                    FAIL("no track slot");
            } else if (!h.alloc(Space(), 2)) {
                FAIL("no allocation");
            }
        });
    }
}

TEST_CASE("hybrid req table: a device failure in clear changes nothing",
          "[req-table][hybrid][device-faults]") {
    for (const bool lazy : {false, true}) {
        INFO((lazy ? "lazy" : "normal") << " ping-pong buffer");
        expect_device_faults_change_nothing(lazy, [](Hybrid& h) {
            h.clear(Space());
            CHECK(h.available_size() == h.size());
            CHECK(to_host(h.req_index_to_mamba_index()) ==
                  std::vector<index_t>(static_cast<std::size_t>(h.size()) + 1, 0));
        });
    }
}
