// ReqToTokenPool: request slots, rows and writes. Misuse throws and changes
// nothing; running out is a clean no-allocation.
#include "req_table_test_support.hpp"

#include <string>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

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
    CHECK_FALSE(u.alloc(3).has_value()); // all or nothing
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
        ErrorCode::not_allocated, [&] { t.free(4); }, snap, "4"); // never handed out
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
    t.write(Space(), 2, 5, to_device({15, 16})); // device ids: the host mirror does not know them
    t.write(Space(), 1, 0, std::vector<index_t>{});
    CHECK(device_row(t.req_to_token(), 2) == std::vector<index_t>{10, 11, 12, 0, 0, 15, 16, 0});
    CHECK(t.row_length(2) == 7);
    CHECK(t.host_row(2) == std::vector<index_t>{10, 11, 12, unbound, unbound, unbound, unbound});
    CHECK(t.row_length(1) == 0);

    // One launch for several rows: a decode step's one token each, and two
    // disjoint segments of one row.
    t.write(Space(), {1, 2, 3, 3}, {0, 3, 0, 6}, {2, 1, 3, 2},
            to_device({20, 21, 22, 30, 31, 32, 36, 37}));
    CHECK(device_row(t.req_to_token(), 1) == std::vector<index_t>{20, 21, 0, 0, 0, 0, 0, 0});
    CHECK(device_row(t.req_to_token(), 2) == std::vector<index_t>{10, 11, 12, 22, 0, 15, 16, 0});
    CHECK(device_row(t.req_to_token(), 3) == std::vector<index_t>{30, 31, 32, 0, 0, 0, 36, 37});
    CHECK(t.row_length(3) == 8);
    CHECK(device_row(t.req_to_token(), 0) ==
          std::vector<index_t>(8, 0)); // the padding row is never written
    t.check_invariants(Space());

    // Bounds are checked on the host; nothing is written.
    const auto snap = [&] {
        Space().fence();
        std::string s = describe(t);
        for (index_t r = 0; r <= 3; ++r)
            s += fmt::format(" {}", device_row(t.req_to_token(), r));
        for (index_t r = 1; r <= 3; ++r)
            if (t.is_allocated(r))
                s += fmt::format(" {}", t.host_row(r));
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
        ErrorCode::out_of_range, [&] { t.write(Space(), 0, 0, std::vector<index_t>{1}); }, snap,
        "padding");
    expect_error(
        ErrorCode::out_of_range, [&] { t.write(Space(), 4, 0, to_device({1})); }, snap);
    t.free(3);
    expect_error(
        ErrorCode::not_allocated, [&] { t.write(Space(), 3, 0, std::vector<index_t>{1}); }, snap,
        "3");
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
    CHECK(device_row(t.req_to_token(), 1) ==
          std::vector<index_t>{5, 0, 0, 0}); // the device is not touched
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
