// Request tables: ReqToTokenPool (slots, rows, writes) and
// HybridReqToTokenPool (Mamba state slots, ping-pong track slots in normal and
// lazy mode). Misuse throws and changes nothing; running out is a clean
// no-allocation. The randomised test runs the pool against a host model.
//
// Reproduce one seed: kvpool_tests_<backend> "[req-table][randomised]" --kvpool-seed N
#include "test_config.hpp"
#include "test_random.hpp"
#include "test_support.hpp"

#include <kvpool/hybrid_req_to_token_pool.hpp>
#include <kvpool/req_to_token_pool.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <optional>
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

using Table = ReqToTokenPool<Space>;
using Hybrid = HybridReqToTokenPool<Space>;

// The trivial state-slot allocator the tests wire in: FIFO free list of slots
// 1..size (0 stays the padding state), refusing double frees itself, so a pool
// that frees a slot twice fails here.
class FreeListStates : public StateSlotAllocator<Space> {
public:
    explicit FreeListStates(index_t size) : size_(size) { clear(Space()); }

    std::optional<std::vector<index_t>> alloc(const Space&, index_t n) override {
        if (n < 0) throw Error(ErrorCode::invalid_argument, "negative state alloc");
        if (n > available_size()) return std::nullopt;
        std::vector<index_t> out(free_.begin(), free_.begin() + n);
        free_.erase(free_.begin(), free_.begin() + n);
        for (const index_t s : out) live_.insert(s);
        return out;
    }
    void free(const Space&, const std::vector<index_t>& slots) override {
        std::set<index_t> named;
        for (const index_t s : slots)
            if (live_.count(s) == 0 || !named.insert(s).second)
                throw Error(ErrorCode::not_allocated,
                            "state slot " + std::to_string(s) + " is not allocated");
        for (const index_t s : slots) {
            live_.erase(s);
            free_.push_back(s);
        }
    }
    void clear(const Space&) override {
        free_.clear();
        live_.clear();
        for (index_t s = 1; s <= size_; ++s) free_.push_back(s);
    }

    index_t available_size() const { return static_cast<index_t>(free_.size()); }
    bool is_live(index_t s) const { return live_.count(s) != 0; }
    const std::set<index_t>& live() const { return live_; }

private:
    index_t size_;
    std::deque<index_t> free_;
    std::set<index_t> live_;
};

template <class View>
std::vector<index_t> device_row(const View& table, index_t row) {
    return to_host(Kokkos::subview(table, row, Kokkos::ALL()));
}

// The call must throw kvpool::Error with this code, naming `named` if given,
// and leave what `snapshot` describes as it was.
void expect_error(ErrorCode code, const std::function<void()>& call,
                  const std::function<std::string()>& snapshot, const std::string& named = "") {
    const std::string before = snapshot();
    try {
        call();
        FAIL("accepted");
    } catch (const Error& e) {
        INFO(e.what());
        CHECK(to_string(e.code()) == std::string(to_string(code)));
        if (!named.empty()) CHECK(std::string(e.what()).find(named) != std::string::npos);
    }
    CHECK(snapshot() == before);
}

std::string describe(const Table& t) {
    std::string s = t.state_string();
    for (index_t r = 1; r <= t.size(); ++r) s += t.is_allocated(r) ? " A" : " -";
    return s;
}

std::string describe(const Hybrid& h, const FreeListStates& states) {
    std::string s = fmt::format("{}; state slots free {}, live {};", h.state_string(),
                                states.available_size(), states.live());
    for (index_t r = 1; r <= h.size(); ++r) {
        if (!h.is_allocated(r)) {
            s += " -";
            continue;
        }
        s += fmt::format(" [{}: mamba {}", r, h.mamba_slot(r));
        if (h.options().enable_mamba_extra_buffer) {
            s += fmt::format(" tracks {}", h.mamba_ping_pong_track_buffer(r));
            if (h.mamba_slot(r) != unbound) s += fmt::format(" next {}", h.mamba_next_track_idx(r));
        }
        s += "]";
    }
    return s;
}

HybridReqToTokenPoolOptions extra_buffer(bool lazy, index_t size = 2) {
    HybridReqToTokenPoolOptions o;
    o.enable_mamba_extra_buffer = true;
    o.enable_mamba_extra_buffer_lazy = lazy;
    o.mamba_ping_pong_track_buffer_size = size;
    return o;
}

}  // namespace

// ============================================================== ReqToTokenPool

TEST_CASE("req table: alloc until full, then a clean no-allocation", "[req-table]") {
    Table t(Space(), 5, 16);
    CHECK(t.size() == 5);
    CHECK(t.available_size() == 5);
    CHECK(t.req_to_token().extent(0) == 6);
    CHECK(t.req_to_token().extent(1) == 16);
    CHECK(*t.alloc(2) == std::vector<index_t>{1, 2});
    CHECK(t.alloc(0)->empty());
    CHECK(*t.alloc(3) == std::vector<index_t>{3, 4, 5});
    CHECK(t.available_size() == 0);
    const std::string before = describe(t);
    CHECK_FALSE(t.alloc(1).has_value());
    CHECK(describe(t) == before);
    Table u(Space(), 3, 4);
    CHECK(*u.alloc(1) == std::vector<index_t>{1});
    CHECK_FALSE(u.alloc(3).has_value());  // all or nothing
    CHECK(u.available_size() == 2);
    CHECK(*u.alloc(2) == std::vector<index_t>{2, 3});
    expect_error(
        ErrorCode::invalid_argument, [&] { u.alloc(-1); }, [&] { return describe(u); });
    // The table starts zeroed, padding row included.
    for (index_t r = 0; r <= t.size(); ++r)
        CHECK(device_row(t.req_to_token(), r) == std::vector<index_t>(16, 0));
}

TEST_CASE("req table: freed slots are reused in free-list order", "[req-table]") {
    Table t(Space(), 4, 8);
    CHECK(*t.alloc(4) == std::vector<index_t>{1, 2, 3, 4});
    CHECK(t.generation(2) == 1);
    t.free(2);
    t.free(std::vector<index_t>{4, 1});
    CHECK(t.available_size() == 3);
    CHECK_FALSE(t.is_allocated(1));
    CHECK(t.is_allocated(3));
    CHECK(*t.alloc(2) == std::vector<index_t>{2, 4});
    CHECK(t.generation(2) == 2);
    CHECK(t.generation(3) == 1);
    CHECK(*t.alloc(1) == std::vector<index_t>{1});
    CHECK(t.available_size() == 0);
    t.free(std::vector<index_t>{});
    CHECK(t.available_size() == 0);
}

TEST_CASE("req table: double free, out of range and the padding row throw and change nothing",
          "[req-table]") {
    Table t(Space(), 4, 8);
    t.alloc(3);
    t.free(2);
    t.write(Space(), 1, 0, std::vector<index_t>{7, 8});
    const auto snap = [&] { return describe(t) + fmt::format(" row1 {}", t.host_row(1)); };
    expect_error(
        ErrorCode::not_allocated, [&] { t.free(2); }, snap, "2");
    expect_error(
        ErrorCode::not_allocated, [&] { t.free(4); }, snap, "4");  // never handed out
    expect_error(
        ErrorCode::out_of_range, [&] { t.free(5); }, snap, "5");
    expect_error(
        ErrorCode::out_of_range, [&] { t.free(-1); }, snap, "-1");
    expect_error(
        ErrorCode::out_of_range, [&] { t.free(0); }, snap, "padding");
    // A bad slot anywhere in the list frees none of them.
    expect_error(
        ErrorCode::out_of_range,
        [&] {
            t.free(std::vector<index_t>{1, 3, 0});
        },
        snap);
    expect_error(
        ErrorCode::not_allocated,
        [&] {
            t.free(std::vector<index_t>{3, 1, 2});
        },
        snap, "2");
    expect_error(
        ErrorCode::not_allocated,
        [&] {
            t.free(std::vector<index_t>{1, 3, 1});
        },
        snap, "twice");
    CHECK(t.available_size() == 2);
    CHECK(t.is_allocated(1));
    CHECK(t.is_allocated(3));
    t.check_invariants(Space());
    t.free(std::vector<index_t>{1, 3});
    CHECK(t.available_size() == 4);
}

TEST_CASE("req table: writes land in the row, read back through the device View", "[req-table]") {
    Table t(Space(), 3, 8);
    const auto slots = *t.alloc(3);
    REQUIRE(slots == std::vector<index_t>{1, 2, 3});
    t.write(Space(), 2, 0, std::vector<index_t>{10, 11, 12});
    t.write(Space(), 2, 5, to_device({15, 16}));  // device ids: the host mirror does not know them
    t.write(Space(), 1, 0, std::vector<index_t>{});
    CHECK(device_row(t.req_to_token(), 2) == std::vector<index_t>{10, 11, 12, 0, 0, 15, 16, 0});
    CHECK(t.row_length(2) == 7);
    CHECK(t.host_row(2) == std::vector<index_t>{10, 11, 12, unbound, unbound, unbound, unbound});
    CHECK(t.row_length(1) == 0);

    // One launch for several rows: a decode step's one token each, and two
    // disjoint segments of one row.
    t.write(Space(), {1, 2, 3, 3}, {0, 3, 0, 6}, {2, 1, 3, 2}, to_device({20, 21, 22, 30, 31, 32, 36, 37}));
    CHECK(device_row(t.req_to_token(), 1) == std::vector<index_t>{20, 21, 0, 0, 0, 0, 0, 0});
    CHECK(device_row(t.req_to_token(), 2) == std::vector<index_t>{10, 11, 12, 22, 0, 15, 16, 0});
    CHECK(device_row(t.req_to_token(), 3) == std::vector<index_t>{30, 31, 32, 0, 0, 0, 36, 37});
    CHECK(t.row_length(3) == 8);
    CHECK(device_row(t.req_to_token(), 0) == std::vector<index_t>(8, 0));  // the padding row is never written
    t.check_invariants(Space());

    // Bounds are checked on the host; nothing is written.
    const auto snap = [&] {
        Space().fence();
        std::string s = describe(t);
        for (index_t r = 0; r <= 3; ++r) s += fmt::format(" {}", device_row(t.req_to_token(), r));
        for (index_t r = 1; r <= 3; ++r)
            if (t.is_allocated(r)) s += fmt::format(" {}", t.host_row(r));
        return s;
    };
    expect_error(
        ErrorCode::out_of_range,
        [&] {
            t.write(Space(), 1, 7, std::vector<index_t>{1, 2});
        },
        snap, "[7, 9)");
    expect_error(
        ErrorCode::out_of_range, [&] { t.write(Space(), 1, -1, to_device({1})); }, snap);
    expect_error(
        ErrorCode::out_of_range, [&] { t.write(Space(), 1, 9, std::vector<index_t>{}); }, snap);
    expect_error(
        ErrorCode::out_of_range, [&] { t.write(Space(), 0, 0, std::vector<index_t>{1}); }, snap, "padding");
    expect_error(
        ErrorCode::out_of_range, [&] { t.write(Space(), 4, 0, to_device({1})); }, snap);
    t.free(3);
    expect_error(
        ErrorCode::not_allocated, [&] { t.write(Space(), 3, 0, std::vector<index_t>{1}); }, snap, "3");
    expect_error(
        ErrorCode::not_allocated, [&] { (void)t.host_row(3); }, snap);
    expect_error(
        ErrorCode::invalid_argument,
        [&] {
            t.write(Space(), {1, 2}, {0, 0}, {1, 1}, to_device({1, 2, 3}));
        },
        snap, "3");
    expect_error(
        ErrorCode::invalid_argument,
        [&] {
            t.write(Space(), {1, 2}, {0}, {1, 1}, to_device({1, 2}));
        },
        snap);
    expect_error(
        ErrorCode::invalid_argument,
        [&] {
            t.write(Space(), {2, 1, 2}, {4, 0, 2}, {2, 1, 3}, to_device({1, 2, 3, 4, 5, 6}));
        },
        snap, "overlap");
    expect_error(
        ErrorCode::out_of_range,
        [&] {
            t.write(Space(), {1, 2}, {0, 7}, {1, 2}, to_device({1, 2, 3}));
        },
        snap);
    expect_error(
        ErrorCode::not_allocated,
        [&] {
            t.write(Space(), {1, 3}, {0, 0}, {1, 1}, to_device({1, 2}));
        },
        snap);

    // A reused slot starts with an empty host row; the device row keeps the
    // last owner's ids until overwritten, as in the reference.
    CHECK(*t.alloc(1) == std::vector<index_t>{3});
    CHECK(t.row_length(3) == 0);
    CHECK(device_row(t.req_to_token(), 3) == std::vector<index_t>{30, 31, 32, 0, 0, 0, 36, 37});
    t.check_invariants(Space());
}

TEST_CASE("req table: clear frees every slot and resets generations", "[req-table]") {
    Table t(Space(), 3, 4);
    t.alloc(3);
    t.free(2);
    t.write(Space(), 1, 0, std::vector<index_t>{5});
    t.clear();
    CHECK(t.available_size() == 3);
    CHECK(t.generation(1) == 0);
    CHECK(*t.alloc(3) == std::vector<index_t>{1, 2, 3});
    CHECK(t.row_length(1) == 0);
    CHECK(device_row(t.req_to_token(), 1) == std::vector<index_t>{5, 0, 0, 0});  // the device is not touched
}

TEST_CASE("req table: bad construction", "[req-table]") {
    CHECK_THROWS_AS(Table(Space(), 0, 4), Error);
    CHECK_THROWS_AS(Table(Space(), 4, 0), Error);
    FreeListStates states(4);
    CHECK_THROWS_AS(Hybrid(Space(), 4, 4, states, extra_buffer(false, 3)), Error);
    HybridReqToTokenPoolOptions lazy_only;
    lazy_only.enable_mamba_extra_buffer_lazy = true;
    CHECK_THROWS_AS(Hybrid(Space(), 4, 4, states, lazy_only), Error);
}

// ============================================================== HybridReqToTokenPool

TEST_CASE("hybrid req table: each request gets a Mamba slot, mapped on the device", "[req-table][hybrid]") {
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
        ErrorCode::not_allocated, [&] { (void)h.free_mamba_cache(Space(), 2); }, snap, "double free");
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
        ErrorCode::invalid_state, [&] { (void)h.donate_mamba_ping_pong_slot(Space(), 1, 5); }, snap);
    // The freed request slot comes back with a fresh state slot.
    CHECK(*h.alloc(Space(), 1) == std::vector<index_t>{4});
    CHECK(*h.alloc(Space(), 1) == std::vector<index_t>{2});
    CHECK(h.mamba_slot(4) == 4);
    CHECK(h.mamba_slot(2) == 5);
    h.check_invariants(Space());
}

TEST_CASE("hybrid req table: a request can adopt a state slot it already holds", "[req-table][hybrid]") {
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
        ErrorCode::invalid_argument, [&] { h.alloc_adopting_mamba(Space(), {held}); }, snap, "already held");
    expect_error(
        ErrorCode::invalid_argument, [&] { h.alloc_adopting_mamba(Space(), {-5}); }, snap);
    const std::string before = snap();
    CHECK_FALSE(h.alloc_adopting_mamba(Space(), {unbound}).has_value());  // no room for its tracks
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
    CHECK(states.is_live(2));  // the cache holds it now
    // A slot a request holds cannot be put in twice.
    expect_error(
        ErrorCode::invalid_argument, [&] { (void)h.donate_mamba_ping_pong_slot(Space(), 1, 5); }, snap,
        "already held");
    expect_error(
        ErrorCode::invalid_argument, [&] { (void)h.set_mamba_ping_pong_slot(Space(), 2, 0, 3); }, snap);
    expect_error(
        ErrorCode::invalid_argument, [&] { (void)h.set_mamba_ping_pong_slot(Space(), 2, 0, unbound); }, snap,
        "lazy");
    expect_error(
        ErrorCode::invalid_state, [&] { (void)h.alloc_mamba_ping_pong_slot(Space(), 2, 1); }, snap);
    CHECK(h.set_mamba_ping_pong_slot(Space(), 2, 1, 6) == unbound);  // already there: nothing passes
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
        ErrorCode::not_allocated, [&] { (void)h.free_mamba_cache(Space(), 1, 1); }, snap, "double free");
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

TEST_CASE("hybrid req table: ping-pong tracking in lazy mode", "[req-table][hybrid][ping-pong][lazy]") {
    FreeListStates states(8);
    Hybrid h(Space(), 3, 8, states, extra_buffer(true));
    const auto snap = [&] { return describe(h, states); };
    // Lazy mode allocates one track slot; the second is empty until needed.
    CHECK(*h.alloc(Space(), 2) == std::vector<index_t>{1, 2});
    CHECK(h.mamba_slot(1) == 1);
    CHECK(h.mamba_ping_pong_track_buffer(1) == std::vector<index_t>{2, unbound});
    CHECK(h.mamba_slot(2) == 3);
    CHECK(h.mamba_ping_pong_track_buffer(2) == std::vector<index_t>{4, unbound});
    CHECK(device_row(h.req_index_to_mamba_ping_pong_track_buffer(), 2) == std::vector<index_t>{4, unbound});
    // The tracked state stays at next_track_idx: no swap.
    CHECK(h.get_mamba_ping_pong_keep_idx(1) == 0);
    h.set_mamba_next_track_idx(1, 1);
    CHECK(h.get_mamba_ping_pong_keep_idx(1) == 1);
    // Donating from an empty entry is refused.
    expect_error(
        ErrorCode::invalid_state, [&] { (void)h.donate_mamba_ping_pong_slot(Space(), 1, 7); }, snap, "empty");
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
    CHECK(device_row(h.req_index_to_mamba_ping_pong_track_buffer(), 1) == std::vector<index_t>{unbound, 6});
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

TEST_CASE("hybrid req table: clear resets slots, state allocator and device maps", "[req-table][hybrid]") {
    FreeListStates states(9);
    Hybrid h(Space(), 3, 4, states, extra_buffer(false));
    h.alloc(Space(), 3);
    CHECK(states.available_size() == 0);
    CHECK(h.free_mamba_cache(Space(), 2, 0) == 5);
    h.clear(Space());
    CHECK(h.available_size() == 3);
    CHECK(states.available_size() == 9);  // the kept slot too, as the reference's clear
    CHECK(to_host(h.req_index_to_mamba_index()) == std::vector<index_t>(4, 0));
    CHECK(device_row(h.req_index_to_mamba_ping_pong_track_buffer(), 1) == std::vector<index_t>{0, 0});
    CHECK(*h.alloc(Space(), 1) == std::vector<index_t>{1});
    CHECK(h.mamba_slot(1) == 1);
    CHECK(h.mamba_next_track_idx(1) == 0);
    h.check_invariants(Space());
}

// ============================================================== randomised

namespace {


struct Mismatch : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The host model: FIFO free lists of request and state slots, what each
// request holds, the state slots the "prefix cache" holds, and the device
// table's contents (never reset, like the real one).
struct ModelRequest {
    index_t mamba = unbound;
    std::vector<index_t> tracks;
    index_t next_track = 0;
    std::vector<index_t> host_row;
};

struct RandomStats {
    long allocs = 0, failed_allocs = 0, adoptions = 0, finished = 0, kept = 0, donations = 0, on_demand = 0,
         writes = 0, rejected = 0, clears = 0;
    void add(const RandomStats& o) {
        allocs += o.allocs;
        failed_allocs += o.failed_allocs;
        adoptions += o.adoptions;
        finished += o.finished;
        kept += o.kept;
        donations += o.donations;
        on_demand += o.on_demand;
        writes += o.writes;
        rejected += o.rejected;
        clears += o.clears;
    }
};

struct RandomConfig {
    const char* name;
    HybridReqToTokenPoolOptions options;
};

// FNV-1a: portable, unlike std::hash, so a seed means the same run everywhere.
std::uint64_t name_hash(const std::string& name) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return h;
}

class RandomRun {
public:
    static constexpr index_t num_reqs = 12, context = 24, num_states = 40;

    RandomRun(std::uint64_t seed, const RandomConfig& config, int ops)
        : seed_(seed),
          config_(config),
          ops_(ops),
          rng_(seed ^ name_hash(config.name)),
          states_(num_states),
          pool_(Space(), num_reqs, context, states_, config.options),
          columns_(config.options.enable_mamba_extra_buffer ? config.options.mamba_ping_pong_track_buffer_size
                                                            : 0),
          device_(static_cast<std::size_t>(num_reqs + 1), std::vector<index_t>(context, 0)) {
        for (index_t s = 1; s <= num_reqs; ++s) free_reqs_.push_back(s);
        for (index_t s = 1; s <= num_states; ++s) free_states_.push_back(s);
    }

    void run() {
        for (step_ = 0; step_ < ops_; ++step_) {
            const double u = static_cast<double>(rng_.next() >> 11) * 0x1.0p-53;
            if (u < 0.18)
                op_alloc();
            else if (u < 0.30)
                op_finish();
            else if (u < 0.42)
                op_write();
            else if (u < 0.50)
                op_track();
            else if (u < 0.58)
                op_donate();
            else if (u < 0.64)
                op_lazy_fill();
            else if (u < 0.72)
                op_evict();
            else if (u < 0.92)
                op_misuse();
            else if (u < 0.925)
                op_clear();
            else
                op_write_batch();
            compare();
            if (step_ % 16 == 0) check_device();
        }
        check_device();
    }
    const RandomStats& stats() const { return stats_; }

private:
    bool extra() const { return columns_ > 0; }
    bool lazy() const { return config_.options.enable_mamba_extra_buffer_lazy; }

    [[noreturn]] void fail(const std::string& what) const {
        throw Mismatch(
            fmt::format("req-table randomised mismatch: seed={} config={} step={} op=[{}]\n  {}\n  pool: {}\n"
                        "  reproduce: kvpool_tests_{} \"[req-table][randomised]\" --kvpool-seed {}",
                        seed_, config_.name, step_, op_, what, describe(pool_, states_),
                        KVPOOL_TEST_BACKEND_NAME, seed_));
    }
    template <class A, class B>
    void expect_eq(const A& actual, const B& expected, const char* what) const {
        if (!(actual == expected)) fail(fmt::format("{}: got {}, expected {}", what, actual, expected));
    }

    std::vector<index_t> take_states(std::size_t n) {
        std::vector<index_t> out(free_states_.begin(), free_states_.begin() + static_cast<std::ptrdiff_t>(n));
        free_states_.erase(free_states_.begin(), free_states_.begin() + static_cast<std::ptrdiff_t>(n));
        return out;
    }
    void give_states(const std::vector<index_t>& slots) {
        for (const index_t s : slots) free_states_.push_back(s);
    }

    void op_alloc() {
        const index_t n = rng_.uniform(0, 4);
        // Now and then a request adopts a state slot taken from the cache.
        std::vector<index_t> adopt(static_cast<std::size_t>(n), unbound);
        if (n > 0 && !cache_.empty() && rng_.chance(0.3)) adopt[0] = rng_.pick(cache_);
        op_ = fmt::format("alloc(mamba {})", adopt);
        const index_t first = lazy() ? 1 : columns_;
        const auto fresh = static_cast<index_t>(std::count(adopt.begin(), adopt.end(), unbound)) + n * first;
        const bool fits = n <= static_cast<index_t>(free_reqs_.size()) &&
                          (fresh == 0 || fresh <= static_cast<index_t>(free_states_.size()));
        const bool adopting = n > 0 && adopt[0] != unbound;
        const auto got = adopting ? pool_.alloc_adopting_mamba(Space(), adopt) : pool_.alloc(Space(), n);
        expect_eq(got.has_value(), fits, "allocation outcome");
        ++(fits ? stats_.allocs : stats_.failed_allocs);
        if (!fits) return;
        stats_.adoptions += adopting;
        std::vector<index_t> reqs(free_reqs_.begin(), free_reqs_.begin() + n);
        free_reqs_.erase(free_reqs_.begin(), free_reqs_.begin() + n);
        expect_eq(*got, reqs, "request slots");
        const std::vector<index_t> slots = take_states(static_cast<std::size_t>(fresh));
        std::size_t k = 0;
        for (index_t i = 0; i < n; ++i) {
            ModelRequest r;
            r.mamba = adopt[static_cast<std::size_t>(i)] != unbound ? adopt[static_cast<std::size_t>(i)]
                                                                    : slots[k++];
            if (adopt[static_cast<std::size_t>(i)] != unbound) cache_.erase(r.mamba);
            r.tracks.assign(static_cast<std::size_t>(columns_), unbound);
            for (index_t j = 0; j < first; ++j) r.tracks[static_cast<std::size_t>(j)] = slots[k++];
            live_[reqs[static_cast<std::size_t>(i)]] = r;
        }
    }

    // A finished request: free_mamba_cache (keeping a track slot for the
    // cache now and then), then free. Sometimes several at once.
    void op_finish() {
        if (live_.empty()) return;
        std::vector<index_t> done{pick_live()};
        for (const auto& entry : live_)
            if (entry.first != done.front() && rng_.chance(0.2)) done.push_back(entry.first);
        for (const index_t slot : done) {
            ModelRequest& r = live_[slot];
            if (r.mamba == unbound) continue;
            std::optional<index_t> keep;
            if (extra() && rng_.chance(0.6)) keep = rng_.uniform(0, columns_ - 1);
            op_ = fmt::format("free_mamba_cache({}, keep {})", slot, keep ? *keep : -1);
            const index_t kept = pool_.free_mamba_cache(Space(), slot, keep);
            std::vector<index_t> freed{r.mamba};
            index_t expected_kept = unbound;
            for (index_t j = 0; j < columns_; ++j) {
                const index_t t = r.tracks[static_cast<std::size_t>(j)];
                if (keep && *keep == j)
                    expected_kept = t;
                else if (t != unbound)
                    freed.push_back(t);
            }
            expect_eq(kept, expected_kept, "kept track slot");
            give_states(freed);
            if (kept != unbound) cache_.insert(kept);
            stats_.kept += kept != unbound;
        }
        stats_.finished += static_cast<long>(done.size());
        op_ = fmt::format("free({})", done);
        pool_.free(done);
        for (const index_t slot : done) {
            live_.erase(slot);
            free_reqs_.push_back(slot);
        }
    }

    void op_write() {
        if (live_.empty()) return;
        const index_t slot = pick_live();
        const index_t start = rng_.uniform(0, context);
        const index_t n = rng_.uniform(0, context - start);
        std::vector<index_t> ids(static_cast<std::size_t>(n));
        for (auto& id : ids) id = rng_.uniform(0, 1 << 20);
        const bool from_host = rng_.chance(0.5);
        op_ = fmt::format("write(slot {}, start {}, {} ids from the {})", slot, start, n,
                          from_host ? "host" : "device");
        if (from_host)
            pool_.write(Space(), slot, start, ids);
        else
            pool_.write(Space(), slot, start, to_device(ids));
        record(slot, start, ids, from_host);
        ++stats_.writes;
    }

    void op_write_batch() {
        if (live_.empty()) return;
        std::vector<index_t> slots, starts, lengths, ids;
        for (const auto& entry : live_) {
            if (!rng_.chance(0.5)) continue;
            const index_t start = rng_.uniform(0, context - 1);
            slots.push_back(entry.first);
            starts.push_back(start);
            lengths.push_back(rng_.uniform(0, std::min<index_t>(3, context - start)));
        }
        for (const index_t len : lengths)
            for (index_t i = 0; i < len; ++i) ids.push_back(rng_.uniform(0, 1 << 20));
        op_ = fmt::format("write(slots {}, starts {}, lengths {})", slots, starts, lengths);
        pool_.write(Space(), slots, starts, lengths, to_device(ids));
        std::size_t at = 0;
        for (std::size_t r = 0; r < slots.size(); ++r) {
            const std::vector<index_t> seg(ids.begin() + static_cast<std::ptrdiff_t>(at),
                                           ids.begin() + static_cast<std::ptrdiff_t>(at) + lengths[r]);
            record(slots[r], starts[r], seg, false);
            at += static_cast<std::size_t>(lengths[r]);
        }
        ++stats_.writes;
    }

    void record(index_t slot, index_t start, const std::vector<index_t>& ids, bool from_host) {
        auto& row = live_[slot].host_row;
        const auto end = static_cast<std::size_t>(start) + ids.size();
        if (!ids.empty() && row.size() < end) row.resize(end, unbound);
        for (std::size_t i = 0; i < ids.size(); ++i) {
            row[static_cast<std::size_t>(start) + i] = from_host ? ids[i] : unbound;
            device_[static_cast<std::size_t>(slot)][static_cast<std::size_t>(start) + i] = ids[i];
        }
    }

    // The scheduler's step: advance next_track_idx as normal mode swaps it.
    void op_track() {
        const index_t slot = pick_with_state();
        if (slot == unbound || !extra()) return;
        const index_t idx = rng_.uniform(0, columns_ - 1);
        op_ = fmt::format("set_mamba_next_track_idx({}, {})", slot, idx);
        pool_.set_mamba_next_track_idx(slot, idx);
        live_[slot].next_track = idx;
    }

    void op_donate() {
        const index_t slot = pick_with_state();
        if (slot == unbound || !extra() || free_states_.empty()) return;
        ModelRequest& r = live_[slot];
        const index_t keep = lazy() ? r.next_track : (columns_ == 2 ? 1 - r.next_track : r.next_track);
        const index_t fresh = states_.alloc(Space(), 1)->front();
        expect_eq(fresh, take_states(1).front(), "state slot for the donation");
        op_ = fmt::format("donate_mamba_ping_pong_slot({}, {}) [keep index {}]", slot, fresh, keep);
        expect_eq(pool_.get_mamba_ping_pong_keep_idx(slot), keep, "keep index");
        if (r.tracks[static_cast<std::size_t>(keep)] == unbound) {
            expect_rejected(ErrorCode::invalid_state,
                            [&] { (void)pool_.donate_mamba_ping_pong_slot(Space(), slot, fresh); });
            states_.free(Space(), {fresh});
            give_states({fresh});
            return;
        }
        expect_eq(pool_.donate_mamba_ping_pong_slot(Space(), slot, fresh),
                  r.tracks[static_cast<std::size_t>(keep)], "donated slot");
        cache_.insert(r.tracks[static_cast<std::size_t>(keep)]);
        r.tracks[static_cast<std::size_t>(keep)] = fresh;
        ++stats_.donations;
    }

    // Lazy mode: fill an empty track entry at a track boundary.
    void op_lazy_fill() {
        const index_t slot = pick_with_state();
        if (slot == unbound || !lazy()) return;
        ModelRequest& r = live_[slot];
        const index_t idx = rng_.uniform(0, columns_ - 1);
        op_ = fmt::format("alloc_mamba_ping_pong_slot({}, {})", slot, idx);
        if (r.tracks[static_cast<std::size_t>(idx)] != unbound) {
            expect_rejected(ErrorCode::invalid_state,
                            [&] { (void)pool_.alloc_mamba_ping_pong_slot(Space(), slot, idx); });
            return;
        }
        const bool ok = pool_.alloc_mamba_ping_pong_slot(Space(), slot, idx);
        expect_eq(ok, !free_states_.empty(), "on-demand track slot");
        if (ok) r.tracks[static_cast<std::size_t>(idx)] = take_states(1).front();
        stats_.on_demand += ok;
    }

    // The prefix cache evicts: its slots go back to the state allocator.
    void op_evict() {
        if (cache_.empty()) return;
        const index_t slot = rng_.pick(cache_);
        op_ = fmt::format("evict cached state slot {}", slot);
        states_.free(Space(), {slot});
        cache_.erase(slot);
        give_states({slot});
    }

    void op_clear() {
        op_ = "clear()";
        ++stats_.clears;
        pool_.clear(Space());
        live_.clear();
        cache_.clear();
        free_reqs_.clear();
        free_states_.clear();
        for (index_t s = 1; s <= num_reqs; ++s) free_reqs_.push_back(s);
        for (index_t s = 1; s <= num_states; ++s) free_states_.push_back(s);
    }

    // Misuse of every kind: must throw with the right code and change nothing.
    void op_misuse() {
        const index_t kind = rng_.uniform(0, 7);
        std::set<index_t> free_set(free_reqs_.begin(), free_reqs_.end());
        switch (kind) {
        case 0:
            if (free_set.empty()) return;
            op_ = "free of a free request slot";
            return expect_rejected(ErrorCode::not_allocated, [&] { pool_.free(rng_.pick(free_set)); });
        case 1: {
            op_ = "free of the padding row or out of range";
            const index_t bad = rng_.pick(std::set<index_t>{0, -1, num_reqs + 1, 1 << 20});
            return expect_rejected(ErrorCode::out_of_range, [&] { pool_.free(bad); });
        }
        case 2: {
            const index_t slot = pick_with_state();
            if (slot == unbound) return;
            op_ = fmt::format("free({}) before free_mamba_cache", slot);
            return expect_rejected(ErrorCode::invalid_state, [&] { pool_.free(std::vector<index_t>{slot}); });
        }
        case 3:
            if (live_.empty()) return;
            op_ = "free_mamba_cache of a request without state";
            for (const auto& [slot, r] : live_)
                if (r.mamba == unbound)
                    return expect_rejected(ErrorCode::not_allocated,
                                           [&, s = slot] { (void)pool_.free_mamba_cache(Space(), s); });
            if (free_set.empty()) return;
            return expect_rejected(ErrorCode::not_allocated,
                                   [&] { (void)pool_.free_mamba_cache(Space(), rng_.pick(free_set)); });
        case 4: {
            if (live_.empty()) return;
            const index_t slot = pick_live();
            const index_t start = rng_.uniform(context - 2, context + 2);
            op_ = fmt::format("write past the row end at {}", start);
            return expect_rejected(ErrorCode::out_of_range, [&] {
                pool_.write(Space(), slot, start, std::vector<index_t>{1, 2, 3});
            });
        }
        case 5: {
            // Frees that keep a request's state in the request table: the
            // engine releases the state of a request it keeps (e.g. a retract).
            const index_t slot = pick_with_state();
            if (slot == unbound) return;
            op_ = fmt::format("free_mamba_cache({}) keeping the request slot", slot);
            ModelRequest& r = live_[slot];
            std::vector<index_t> freed{r.mamba};
            for (const index_t t : r.tracks)
                if (t != unbound) freed.push_back(t);
            expect_eq(pool_.free_mamba_cache(Space(), slot), unbound, "kept slot without a keep index");
            give_states(freed);
            r.mamba = unbound;
            r.tracks.assign(static_cast<std::size_t>(columns_), unbound);
            r.next_track = 0;
            return;
        }
        case 6: {
            // Donating or adopting a slot a request already holds.
            const index_t slot = pick_with_state();
            if (slot == unbound || !extra()) return;
            const index_t other = pick_with_state();
            op_ = fmt::format("donate to {} the Mamba slot of {}", slot, other);
            const ModelRequest& r = live_[slot];
            const index_t keep = lazy() ? r.next_track : (columns_ == 2 ? 1 - r.next_track : r.next_track);
            const bool empty = r.tracks[static_cast<std::size_t>(keep)] == unbound;
            return expect_rejected(empty ? ErrorCode::invalid_state : ErrorCode::invalid_argument, [&] {
                (void)pool_.donate_mamba_ping_pong_slot(Space(), slot, live_[other].mamba);
            });
        }
        default: {
            if (live_.empty()) return;
            const index_t slot = pick_live();
            op_ = fmt::format("free of {} twice in one call", slot);
            return expect_rejected(
                live_[slot].mamba != unbound ? ErrorCode::invalid_state : ErrorCode::not_allocated, [&] {
                    pool_.free(std::vector<index_t>{slot, slot});
                });
        }
        }
    }

    template <class F>
    void expect_rejected(ErrorCode code, F&& call) {
        const std::string before = describe(pool_, states_);
        try {
            call();
            fail("accepted");
        } catch (const Error& e) {
            if (e.code() != code)
                fail(fmt::format("error code {} ({}), expected {}", to_string(e.code()), e.what(),
                                 to_string(code)));
        }
        expect_eq(describe(pool_, states_), before, "state after a rejected call");
        ++stats_.rejected;
    }

    index_t pick_live() {
        std::set<index_t> slots;
        for (const auto& entry : live_) slots.insert(entry.first);
        return rng_.pick(slots);
    }
    index_t pick_with_state() {
        std::set<index_t> slots;
        for (const auto& [slot, r] : live_)
            if (r.mamba != unbound) slots.insert(slot);
        return slots.empty() ? unbound : rng_.pick(slots);
    }

    void compare() {
        expect_eq(pool_.available_size(), static_cast<index_t>(free_reqs_.size()), "available_size");
        expect_eq(states_.available_size(), static_cast<index_t>(free_states_.size()), "free state slots");
        for (index_t s = 1; s <= num_reqs; ++s) {
            const auto it = live_.find(s);
            expect_eq(pool_.is_allocated(s), it != live_.end(), "is_allocated");
            if (it == live_.end()) continue;
            const ModelRequest& r = it->second;
            expect_eq(pool_.mamba_slot(s), r.mamba, "Mamba slot");
            expect_eq(pool_.host_row(s), r.host_row, "host row");
            if (!extra()) continue;
            expect_eq(pool_.mamba_ping_pong_track_buffer(s), r.tracks, "track slots");
            if (r.mamba != unbound)
                expect_eq(pool_.mamba_next_track_idx(s), r.next_track, "next track index");
        }
    }

    void check_device() {
        try {
            pool_.check_invariants(Space());
        } catch (const Error& e) {
            fail(e.what());
        }
        for (index_t s = 0; s <= num_reqs; ++s)
            expect_eq(device_row(pool_.req_to_token(), s), device_[static_cast<std::size_t>(s)],
                      "device row");
    }

    std::uint64_t seed_;
    RandomConfig config_;
    int ops_;
    Rng rng_;
    FreeListStates states_;
    Hybrid pool_;
    index_t columns_;
    std::deque<index_t> free_reqs_;
    std::deque<index_t> free_states_;
    std::map<index_t, ModelRequest> live_;
    std::set<index_t> cache_;
    std::vector<std::vector<index_t>> device_;
    int step_ = 0;
    std::string op_ = "initial state";
    RandomStats stats_;
};

}  // namespace

TEST_CASE("hybrid req table: randomised operations against a host model", "[req-table][randomised]") {
    const auto& config = randomised_config();
    const std::vector<RandomConfig> configs = {
        {"no-extra-buffer", {}},
        {"normal-2", extra_buffer(false, 2)},
        {"normal-1", extra_buffer(false, 1)},
        {"lazy-2", extra_buffer(true, 2)},
    };
    int failures = 0;
    std::map<std::string, RandomStats> totals;
    for (const std::uint64_t seed : config.seed_list()) {
        std::printf("[req-table] seed %llu (%d ops); reproduce: kvpool_tests_%s "
                    "\"[req-table][randomised]\" "
                    "--kvpool-seed %llu\n",
                    static_cast<unsigned long long>(seed), config.ops, KVPOOL_TEST_BACKEND_NAME,
                    static_cast<unsigned long long>(seed));
        std::fflush(stdout);
        for (const auto& c : configs) {
            RandomRun run(seed, c, config.ops);
            try {
                run.run();
            } catch (const Mismatch& e) {
                ++failures;
                std::printf("%s\n", e.what());
                std::fflush(stdout);
                FAIL_CHECK(e.what());
            }
            totals[c.name].add(run.stats());
        }
    }
    for (const auto& [name, t] : totals)
        std::printf("[req-table] %s: allocs ok %ld, failed %ld, adopting %ld; finished %ld (track "
                    "slot kept %ld); "
                    "donations %ld; on-demand track slots %ld; writes %ld; misuse rejected %ld; "
                    "clears %ld\n",
                    name.c_str(), t.allocs, t.failed_allocs, t.adoptions, t.finished, t.kept, t.donations,
                    t.on_demand, t.writes, t.rejected, t.clears);
    std::fflush(stdout);
    CHECK(failures == 0);
}
