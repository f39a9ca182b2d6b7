#include <kvpool/error.hpp>
#include <kvpool/storage/pool_layout.hpp>

#include "test_support.hpp"

using namespace kvpool;
using kvpool::test::spec;

TEST_CASE("layout: sink covers page 0 of every side and pages index the whole buffer", "[layout]") {
    PoolLayout layout(1 << 20, {spec("full", 96, 16, GrowDirection::up),
                                spec("swa", 40, 16, GrowDirection::down)});
    // Slot 0's rows spread over its whole page (page-major), so the sink is
    // the larger page, not the larger slot.
    CHECK(layout.sink_bytes() == 96 * 16);
    const auto& full = layout.sub_pool("full");
    const auto& swa = layout.sub_pool("swa");
    CHECK(full.page_bytes == 96 * 16);
    CHECK(full.num_physical_pages == (1 << 20) / (96 * 16));
    CHECK(full.min_page_index * full.page_bytes >= layout.sink_bytes());
    CHECK(swa.min_page_index * swa.page_bytes >= layout.sink_bytes());
    CHECK(full.min_page_index == 1);
    CHECK(swa.num_virtual_pages == swa.num_physical_pages);
}

TEST_CASE("layout: bad specs are rejected with the value named", "[layout][bad-input]") {
    CHECK_THROWS_AS(PoolLayout(1024, {}), Error);
    CHECK_THROWS_AS(PoolLayout(1024, {spec("a", 0, 1, GrowDirection::up)}), Error);
    CHECK_THROWS_AS(PoolLayout(1024, {spec("a", 8, 0, GrowDirection::up)}), Error);
    CHECK_THROWS_AS(
        PoolLayout(1024, {spec("a", 8, 1, GrowDirection::up), spec("b", 8, 1, GrowDirection::up)}),
        Error);
    // A buffer that holds nothing beyond the sink is an impossible size.
    CHECK_THROWS_AS(PoolLayout(64, {spec("a", 64, 1, GrowDirection::up)}), Error);
    try {
        PoolLayout(1024, {spec("kv", -4, 1, GrowDirection::up)});
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK(std::string(e.what()).find("-4") != std::string::npos);
    }
}

TEST_CASE("layout: a fixed split caps each side at its share of the bytes", "[layout]") {
    const auto layout = PoolLayout::fixed_split(
        1 << 20, {spec("full", 64, 1, GrowDirection::up), spec("swa", 32, 1, GrowDirection::down)},
        0.25);
    const auto& full = layout.sub_pool("full");
    const auto& swa = layout.sub_pool("swa");
    CHECK(full.page_capacity() * 64 <= (1 << 18));
    CHECK(swa.page_capacity() * 32 <= (1 << 20) - (1 << 18));
    CHECK(full.page_capacity() * 64 + swa.page_capacity() * 32 <= (1 << 20));
    CHECK_THROWS_AS(PoolLayout::fixed_split(1 << 20,
                                            {spec("full", 64, 1, GrowDirection::up),
                                             spec("swa", 32, 1, GrowDirection::down)},
                                            1.5),
                    Error);
}
