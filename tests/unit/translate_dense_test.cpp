// Dense ids (translate_dense): an MLA side read through per-layer dense views,
// where layer l of token t sits at row dense(t) of a view starting l * page_size
// rows into the buffer, so one block table serves every layer.
#include "test_support.hpp"

using namespace kvpool;
using namespace kvpool::test;

namespace {

constexpr index_t layers = 3;

// The row at which layer l's view finds physical token p in the page-major
// layout (page p / ps holds layers x ps rows, layer-major): what a dense id
// must equal.
index_t dense_of(index_t physical, index_t page_size) {
    return (physical / page_size) * page_size * layers + physical % page_size;
}

struct MLAWithState {
    Pool pool;
    Allocator kv;
    Allocator state;
    MLAWithState(CompactionMode mode, index_t page_size)
        : pool(PoolLayout(64 * 1024, {spec("full", layers * 16, page_size, GrowDirection::down),
                                      spec("mamba", 160, 1, GrowDirection::up)})),
          kv(pool, "full", options(mode)), state(pool, "mamba", options(mode)) {
        kv.bind_peer(state);
    }
};

void check_dense(const Allocator& a, const std::vector<index_t>& virtual_tokens) {
    const IndexView in = to_device(virtual_tokens);
    const auto physical = to_host(a.translate(Space(), in));
    IndexView dense("dense", virtual_tokens.size());
    a.translate_dense(Space(), in, dense, layers);
    const auto got = to_host(dense);
    for (std::size_t i = 0; i < virtual_tokens.size(); ++i) {
        INFO("virtual token " << virtual_tokens[i] << ", physical " << physical[i]);
        CHECK(got[i] == dense_of(physical[i], a.page_size()));
    }
}

} // namespace

TEST_CASE("translate_dense: page * page_size * layers + offset, following compaction",
          "[translate][dense]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        for (index_t page_size : {1, 4}) {
            INFO("page size " << page_size << (mode == CompactionMode::lazy ? " lazy" : " eager"));
            MLAWithState t(mode, page_size);
            auto a = t.kv.alloc(Space(), 4 * page_size);
            auto b = t.kv.alloc(Space(), 4 * page_size);
            auto c = t.kv.alloc(Space(), 4 * page_size);
            REQUIRE((a && b && c));
            std::vector<index_t> live = to_host(*a);
            const auto tail = to_host(*c);
            live.insert(live.end(), tail.begin(), tail.end());
            check_dense(t.kv, live);
            // Freeing the middle run moves c's pages into its place (eager at
            // once, lazy at the flush): dense ids follow the physical ones.
            t.kv.free(Space(), to_host(*b));
            if (mode == CompactionMode::lazy)
                t.kv.flush(Space(), true);
            CHECK(t.kv.counters().pages_moved > 0);
            check_dense(t.kv, live);
        }
    }
}

TEST_CASE("translate_dense: tombstones and padding clamp to 0; multiplier 1 is translate",
          "[translate][dense]") {
    MLAWithState t(CompactionMode::eager, 4);
    auto ids = t.kv.alloc(Space(), 8);
    REQUIRE(ids);
    const auto live = to_host(*ids);
    std::vector<index_t> gone(live.begin(), live.begin() + 4);
    t.kv.free(Space(), gone);
    gone.push_back(-1);
    IndexView dense("dense", gone.size());
    t.kv.translate_dense(Space(), to_device(gone), dense, layers);
    for (index_t d : to_host(dense))
        CHECK(d == 0);
    // In place, and multiplier 1 equals translate.
    std::vector<index_t> rest(live.begin() + 4, live.end());
    IndexView buffer = to_device(rest);
    const auto physical = to_host(t.kv.translate(Space(), buffer));
    t.kv.translate_dense(Space(), buffer, buffer, 1);
    CHECK(to_host(buffer) == physical);
}

TEST_CASE("translate_dense: a multiplier below 1 or a wrong length is refused, out untouched",
          "[translate][dense][bad-input]") {
    MLAWithState t(CompactionMode::eager, 4);
    auto ids = t.kv.alloc(Space(), 4);
    REQUIRE(ids);
    IndexView out = to_device({7, 7, 7, 7});
    CHECK_THROWS_AS(t.kv.translate_dense(Space(), *ids, out, 0), Error);
    CHECK(to_host(out) == std::vector<index_t>{7, 7, 7, 7});
    IndexView wrong = to_device({7, 7, 7});
    CHECK_THROWS_AS(t.kv.translate_dense(Space(), *ids, wrong, layers), Error);
    CHECK(to_host(wrong) == std::vector<index_t>{7, 7, 7});
}
