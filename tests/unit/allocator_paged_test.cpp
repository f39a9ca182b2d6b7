// Paged allocation: alloc_extend / alloc_decode with tail-page reuse (page size 16).
#include "test_support.hpp"

#include <map>
#include <set>

using namespace kvpool;
using namespace kvpool::test;

namespace {

constexpr index_t page = 16;

struct PagedPool {
    Pool pool;
    Allocator full;
    Allocator peer;
    explicit PagedPool(CompactionMode mode)
        : pool(PoolLayout(256 * 1024, {spec("full", 24, page, GrowDirection::up),
                                       spec("swa", 8, page, GrowDirection::down)})),
          full(pool, "full", options(mode)), peer(pool, "swa", options(mode)) {
        full.bind_peer(peer);
    }
};

// Requests as the engine keeps them: the virtual token ids of each.
using Requests = std::vector<std::vector<index_t>>;

std::vector<index_t> extend(Allocator& a, Requests& reqs, const std::vector<index_t>& grow_by) {
    std::vector<index_t> prefix, seq, last;
    index_t total = 0;
    for (std::size_t r = 0; r < reqs.size(); ++r) {
        prefix.push_back(static_cast<index_t>(reqs[r].size()));
        seq.push_back(prefix.back() + grow_by[r]);
        last.push_back(reqs[r].empty() ? -1 : reqs[r].back());
        total += grow_by[r];
    }
    IndexView out("out", static_cast<std::size_t>(total));
    REQUIRE(a.alloc_extend(Space(), prefix, seq, to_device(last), out));
    auto ids = to_host(out);
    std::size_t k = 0;
    for (std::size_t r = 0; r < reqs.size(); ++r)
        for (index_t j = 0; j < grow_by[r]; ++j)
            reqs[r].push_back(ids[k++]);
    return ids;
}

std::vector<index_t> decode(Allocator& a, Requests& reqs) {
    std::vector<index_t> seq, last;
    for (auto& r : reqs) {
        seq.push_back(static_cast<index_t>(r.size()) + 1);
        last.push_back(r.back());
    }
    IndexView out("out", reqs.size());
    REQUIRE(a.alloc_decode(Space(), seq, to_device(last), out));
    auto ids = to_host(out);
    for (std::size_t r = 0; r < reqs.size(); ++r)
        reqs[r].push_back(ids[r]);
    return ids;
}

std::vector<index_t> all_tokens(const Requests& reqs) {
    std::vector<index_t> all;
    for (const auto& r : reqs)
        all.insert(all.end(), r.begin(), r.end());
    return all;
}

// Each request's tokens fill whole pages in order: token j sits at offset
// j % page_size of its page, and no two requests share a page.
void check_page_structure(const Requests& reqs, index_t page_size = page) {
    std::map<index_t, std::size_t> page_owner;
    for (std::size_t r = 0; r < reqs.size(); ++r)
        for (std::size_t j = 0; j < reqs[r].size(); ++j) {
            const index_t t = reqs[r][j];
            CHECK(t % page_size == static_cast<index_t>(j) % page_size);
            if (static_cast<index_t>(j) % page_size != 0)
                CHECK(t == reqs[r][j - 1] + 1);
            auto [it, inserted] = page_owner.emplace(t / page_size, r);
            CHECK(it->second == r);
        }
}

} // namespace

TEST_CASE("paged: alloc_extend fills the tail page first, then whole new pages", "[paged]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        PagedPool p(mode);
        Requests reqs(4);
        extend(p.full, reqs, {5, 16, 17, 40});
        // ceil(5/16) + 1 + 2 + 3 pages.
        CHECK(p.full.allocated_count() == (1 + 1 + 2 + 3) * page);
        check_page_structure(reqs);
        stamp_tokens(p.pool, p.full, 0, all_tokens(reqs));
        const index_t before = p.full.allocated_count();
        // Request 0 has 11 free slots in its tail page: 11 more need no page.
        // Requests 0 and 2 end exactly on a page; only request 3 (40 -> 49) needs one.
        auto ids = extend(p.full, reqs, {11, 0, 15, 9});
        CHECK(p.full.allocated_count() == before + 1 * page);
        check_page_structure(reqs);
        stamp_tokens(p.pool, p.full, 0, ids);
        check_all(p.pool, p.full, 0, all_tokens(reqs));
    }
}

TEST_CASE("paged: alloc_decode takes a page only when a request crosses a boundary", "[paged]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        PagedPool p(mode);
        Requests reqs(3);
        stamp_tokens(p.pool, p.full, 0, extend(p.full, reqs, {15, 16, 1}));
        const index_t pages_before = p.full.allocated_count() / page;
        // Request 0 fills its page, request 1 starts a new one, request 2 reuses its tail.
        stamp_tokens(p.pool, p.full, 0, decode(p.full, reqs));
        CHECK(p.full.allocated_count() / page == pages_before + 1);
        stamp_tokens(p.pool, p.full, 0, decode(p.full, reqs));
        CHECK(p.full.allocated_count() / page == pages_before + 2); // request 0 crossed now
        check_page_structure(reqs);
        auto v2p = to_host(p.full.virtual_to_physical());
        for (index_t t : all_tokens(reqs))
            CHECK(v2p[t / page] > 0);
        check_all(p.pool, p.full, 0, all_tokens(reqs));
    }
}

TEST_CASE("paged: decode_opens_page is the reference's new-page count at any page size",
          "[paged]") {
    // The reference: ceil(seq_len / page) - ceil((seq_len - 1) / page).
    for (index_t page_size : {1, 2, 3, 12, 16, 48, 64, 100, 1024})
        for (index_t seq_len = 1; seq_len <= 5000; ++seq_len) {
            const index_t reference =
                (seq_len + page_size - 1) / page_size - (seq_len - 1 + page_size - 1) / page_size;
            INFO("page size " << page_size << ", seq_len " << seq_len);
            REQUIRE(detail::decode_opens_page(seq_len, page_size) == (reference == 1));
        }
    const index_t huge = index_t(1) << 40;
    CHECK(detail::decode_opens_page(huge + 1, 1024));
    CHECK_FALSE(detail::decode_opens_page(huge, 1024));
    CHECK(detail::decode_opens_page(3 * huge + 1, 3));
    CHECK_FALSE(detail::decode_opens_page(3 * huge + 2, 3));
}

TEST_CASE("paged: alloc_decode at page sizes that are no power of two", "[paged]") {
    for (index_t page_size : {3, 12})
        for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
            INFO("page size " << page_size << ", mode " << static_cast<int>(mode));
            Pool pool(PoolLayout(256 * 1024, {spec("full", 24, page_size, GrowDirection::up),
                                              spec("swa", 8, page_size, GrowDirection::down)}));
            Allocator full(pool, "full", options(mode)), peer(pool, "swa", options(mode));
            full.bind_peer(peer);
            Requests reqs(4);
            stamp_tokens(pool, full, 0, extend(full, reqs, {1, page_size - 1, page_size, 5}));
            for (int step = 0; step < 2 * static_cast<int>(page_size) + 1; ++step) {
                stamp_tokens(pool, full, 0, decode(full, reqs));
                index_t pages = 0;
                for (const auto& r : reqs)
                    pages += (static_cast<index_t>(r.size()) + page_size - 1) / page_size;
                REQUIRE(full.allocated_count() == pages * page_size);
            }
            check_page_structure(reqs, page_size);
            check_all(pool, full, 0, all_tokens(reqs));
            REQUIRE_NOTHROW(peer.check_invariants());
        }
}

TEST_CASE("paged: freeing a request from the middle keeps everyone's data", "[paged]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        PagedPool p(mode);
        Requests reqs(6);
        stamp_tokens(p.pool, p.full, 0, extend(p.full, reqs, {33, 70, 16, 5, 64, 100}));
        for (int step = 0; step < 20; ++step)
            stamp_tokens(p.pool, p.full, 0, decode(p.full, reqs));
        p.full.free(Space(), reqs[1]);
        p.full.free(Space(), reqs[3]);
        reqs.erase(reqs.begin() + 3);
        reqs.erase(reqs.begin() + 1);
        check_all(p.pool, p.full, 0, all_tokens(reqs));
        p.full.flush(Space(), true);
        CHECK(p.full.core().band_pages() == p.full.allocated_count() / page);
        // Decoding goes on correctly after the relocation.
        for (int step = 0; step < 20; ++step)
            stamp_tokens(p.pool, p.full, 0, decode(p.full, reqs));
        check_page_structure(reqs);
        check_all(p.pool, p.full, 0, all_tokens(reqs));
    }
}

TEST_CASE("paged: an extend that does not fit returns no allocation and changes nothing",
          "[paged]") {
    PagedPool p(CompactionMode::eager);
    Requests reqs(1);
    stamp_tokens(p.pool, p.full, 0, extend(p.full, reqs, {20}));
    const std::string before = p.full.state_string();
    // The free tail of the request's last page holds 12 tokens beyond available_size().
    const index_t too_many = p.full.available_size() + (page - 20 % page) + 1;
    IndexView out("out", static_cast<std::size_t>(too_many));
    CHECK_FALSE(
        p.full.alloc_extend(Space(), {20}, {20 + too_many}, to_device({reqs[0].back()}), out));
    CHECK(p.full.state_string() == before);
    check_all(p.pool, p.full, 0, reqs[0]);
}
