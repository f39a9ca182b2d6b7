// Handout zeroing (AllocatorOptions::zero_on_alloc): every page a side hands
// out reaches the engine with all its bytes zero, whether it is fresh, reused
// after a free (lazy holes) or vacated by compaction; the pages still held keep
// their bytes through every compaction, and a request's partly filled last page
// is not zeroed again when its tail tokens are handed out.
#include <kvpool/mamba_pair.hpp>
#include <kvpool/swa_pair.hpp>

#include "test_support.hpp"

#include <random>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;
using MambaPair = UnifiedMambaAllocator<Space>;

constexpr int full_tag = 0;
constexpr int swa_tag = 1;
// What the buffer holds before the first allocation: stale bytes everywhere.
constexpr std::uint8_t stale = 0xa5;

AllocatorOptions zeroing(CompactionMode mode, bool zero) {
    AllocatorOptions o;
    o.mode = mode;
    o.zero_on_alloc = zero;
    return o;
}

// Handed-out bytes that are not zero: of each token's entry, and of the whole
// page of each token that starts a page (a new page: a tail token never does).
struct Handout {
    std::size_t nonzero_tokens = 0;
    std::size_t nonzero_pages = 0;
};

Handout check_handout(const Pool& pool, const Allocator& side,
                      const std::vector<index_t>& virtual_tokens) {
    Handout found;
    if (virtual_tokens.empty())
        return found;
    DataCheckScratch scratch;
    const std::vector<index_t> physical = scratch.translate(side, virtual_tokens);
    const auto& bytes = scratch.download(pool);
    const index_t entry = side.geometry().spec.entry_bytes;
    const index_t page_size = side.page_size();
    const auto all_zero = [&](index_t first, index_t n) {
        return std::all_of(bytes.data() + first, bytes.data() + first + n,
                           [](std::uint8_t b) { return b == 0; });
    };
    for (std::size_t i = 0; i < virtual_tokens.size(); ++i) {
        REQUIRE(physical[i] > 0);
        if (!all_zero(physical[i] * entry, entry))
            ++found.nonzero_tokens;
        if (virtual_tokens[i] % page_size == 0 && !all_zero(physical[i] * entry, entry * page_size))
            ++found.nonzero_pages;
    }
    return found;
}

void fill_stale(Pool& pool) {
    Kokkos::deep_copy(pool.bytes(), stale);
    Kokkos::fence();
}

// A randomised run of an SWA pair: requests grow by alloc_extend (new ones and
// existing ones, across their partly filled last pages), alloc_decode and plain
// alloc, and are freed; each step checks the handout and every live stamp.
struct SwaRun {
    Pool pool;
    SwaPair pair;
    std::vector<std::vector<index_t>> requests;
    std::mt19937_64 rng;
    bool zero_full, zero_swa;
    std::size_t stale_full_tokens = 0, handed_out = 0, allocations = 0, frees = 0;

    SwaRun(CompactionMode mode, bool zero_full_side, bool zero_swa_side, index_t page_size,
           index_t full_entry, index_t swa_entry, index_t bytes, std::uint64_t seed)
        : pool(PoolLayout(bytes, {spec("full", full_entry, page_size, GrowDirection::up),
                                  spec("swa", swa_entry, page_size, GrowDirection::down)})),
          pair(pool, zeroing(mode, zero_full_side), zeroing(mode, zero_swa_side)), rng(seed),
          zero_full(zero_full_side), zero_swa(zero_swa_side) {
        fill_stale(pool);
    }

    std::vector<index_t> live() const {
        std::vector<index_t> all;
        for (const auto& r : requests)
            all.insert(all.end(), r.begin(), r.end());
        return all;
    }

    // The live tokens' stamps, but for the ones just handed out (not stamped yet).
    void check_live(const std::vector<index_t>& fresh = {}) {
        std::vector<index_t> all = live();
        all.erase(std::remove_if(all.begin(), all.end(),
                                 [&](index_t t) {
                                     return std::find(fresh.begin(), fresh.end(), t) != fresh.end();
                                 }),
                  all.end());
        REQUIRE_NOTHROW(pair.check_invariants());
        REQUIRE(check_stamps(pool, pair.full(), full_tag, all) == 0);
        REQUIRE(check_stamps(pool, pair.swa(), swa_tag, all) == 0);
    }

    // The tokens just handed out (already in requests): zero where the side
    // zeroes, every other live token intact; then they are stamped.
    void handed_out_tokens(const std::vector<index_t>& tokens) {
        const Handout full = check_handout(pool, pair.full(), tokens);
        const Handout swa = check_handout(pool, pair.swa(), tokens);
        if (zero_full) {
            REQUIRE(full.nonzero_tokens == 0);
            REQUIRE(full.nonzero_pages == 0);
        }
        if (zero_swa) {
            REQUIRE(swa.nonzero_tokens == 0);
            REQUIRE(swa.nonzero_pages == 0);
        }
        stale_full_tokens += full.nonzero_tokens;
        handed_out += tokens.size();
        ++allocations;
        check_live(tokens);
        stamp_tokens(pool, pair.full(), full_tag, tokens);
        stamp_tokens(pool, pair.swa(), swa_tag, tokens);
    }

    index_t pick(index_t n) { return static_cast<index_t>(rng() % static_cast<std::uint64_t>(n)); }

    void free_one() {
        if (requests.empty())
            return;
        const index_t r = pick(static_cast<index_t>(requests.size()));
        pair.free(Space(), requests[r]);
        requests.erase(requests.begin() + r);
        ++frees;
        check_live();
    }

    // Some existing requests (distinct) grow and some new ones start.
    bool extend() {
        const index_t ps = pair.page_size();
        std::vector<index_t> which;
        for (index_t r = 0; r < static_cast<index_t>(requests.size()); ++r)
            if (rng() % 3 == 0)
                which.push_back(r);
        const index_t fresh = 1 + pick(2);
        std::vector<index_t> prefix, seq, last;
        for (index_t r : which) {
            const auto len = static_cast<index_t>(requests[r].size());
            prefix.push_back(len);
            seq.push_back(len + 1 + pick(2 * ps));
            last.push_back(requests[r].back());
        }
        for (index_t k = 0; k < fresh; ++k) {
            prefix.push_back(0);
            seq.push_back(1 + pick(3 * ps));
            last.push_back(-1);
        }
        index_t tokens = 0;
        for (std::size_t i = 0; i < seq.size(); ++i)
            tokens += seq[i] - prefix[i];
        IndexView out("out", static_cast<std::size_t>(tokens));
        if (!pair.alloc_extend(Space(), prefix, seq, to_device(last), out))
            return false;
        const std::vector<index_t> ids = to_host(out);
        std::size_t o = 0;
        for (std::size_t i = 0; i < seq.size(); ++i) {
            const auto n = static_cast<std::size_t>(seq[i] - prefix[i]);
            const std::vector<index_t> got(ids.begin() + o, ids.begin() + o + n);
            o += n;
            if (i < which.size())
                requests[which[i]].insert(requests[which[i]].end(), got.begin(), got.end());
            else
                requests.push_back(got);
        }
        handed_out_tokens(ids);
        return true;
    }

    bool decode() {
        if (requests.empty())
            return false;
        std::vector<index_t> seq, last;
        for (const auto& r : requests) {
            seq.push_back(static_cast<index_t>(r.size()) + 1);
            last.push_back(r.back());
        }
        IndexView out("out", requests.size());
        if (!pair.alloc_decode(Space(), seq, to_device(last), out))
            return false;
        const std::vector<index_t> ids = to_host(out);
        for (std::size_t i = 0; i < ids.size(); ++i)
            requests[i].push_back(ids[i]);
        handed_out_tokens(ids);
        return true;
    }

    bool alloc() {
        auto ids = pair.alloc(Space(), (1 + pick(3)) * pair.page_size());
        if (!ids)
            return false;
        requests.push_back(to_host(*ids));
        handed_out_tokens(requests.back());
        return true;
    }

    void run(int ops) {
        for (int op = 0; op < ops; ++op) {
            const auto choice = rng() % 8;
            bool ok = true;
            if (choice < 3)
                ok = extend();
            else if (choice < 5)
                ok = decode();
            else if (choice < 6)
                ok = alloc();
            else
                free_one();
            if (!ok)
                free_one();
            if (rng() % 5 == 0) {
                pair.full().flush_opportunistic(Space());
                pair.swa().flush_opportunistic(Space());
                check_live();
            }
        }
    }
};

struct Geometry {
    index_t page_size, full_entry, swa_entry, bytes;
};

} // namespace

TEST_CASE("zeroing: an SWA pair hands out zeroed pages, fresh or reused, and keeps live bytes",
          "[zeroing]") {
    // Unaligned small pages, 16-byte aligned ones, and pages of several zeroing chunks.
    const Geometry geometries[] = {
        {4, 24, 40, 48 * 1024}, {2, 64, 32, 24 * 1024}, {2, 8208, 4096, 400 * 1024}};
    for (const Geometry& g : geometries)
        for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
            const std::uint64_t seed = 0x5eed0000 + static_cast<std::uint64_t>(g.full_entry) +
                                       (mode == CompactionMode::lazy ? 1 : 0);
            INFO("seed " << seed << ", page size " << g.page_size << ", entries " << g.full_entry
                         << "/" << g.swa_entry << ", "
                         << (mode == CompactionMode::lazy ? "lazy" : "eager"));
            SwaRun run(mode, true, true, g.page_size, g.full_entry, g.swa_entry, g.bytes, seed);
            run.run(g.full_entry > 1000 ? 80 : 200);
            // The run reused pages: it allocated after freeing, many times over.
            CHECK(run.frees > 10);
            CHECK(run.allocations > 20);
        }
}

TEST_CASE("zeroing: the option is per side; a side without it hands out stale bytes", "[zeroing]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        const std::uint64_t seed = 0x5eed1000 + (mode == CompactionMode::lazy ? 1 : 0);
        INFO("seed " << seed);
        SwaRun run(mode, false, true, 4, 24, 40, 48 * 1024, seed);
        run.run(150);
        // The full side's handouts kept what the buffer held (the SWA side's were zero).
        CHECK(run.stale_full_tokens > 0);
        CHECK(run.stale_full_tokens <= run.handed_out);
    }
}

TEST_CASE("zeroing: state slots are zeroed when handed out, live slots keep their bytes",
          "[zeroing]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        const std::uint64_t seed = 0x5eed2000 + (mode == CompactionMode::lazy ? 1 : 0);
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        Pool pool(PoolLayout(64 * 1024, {spec("full", 32, 4, GrowDirection::up),
                                         spec("mamba", 1000, 1, GrowDirection::down)}));
        MambaPair pair(pool, zeroing(mode, false), zeroing(mode, true));
        fill_stale(pool);
        std::vector<index_t> live;
        std::size_t handouts = 0;
        for (int op = 0; op < 120; ++op) {
            if (rng() % 3 != 0 || live.empty()) {
                auto slots = pair.alloc_state_slots(Space(), 1 + static_cast<index_t>(rng() % 4));
                if (slots) {
                    const std::vector<index_t> got = to_host(*slots);
                    const Handout h = check_handout(pool, pair.state(), got);
                    REQUIRE(h.nonzero_tokens == 0);
                    REQUIRE(h.nonzero_pages == 0);
                    REQUIRE(check_stamps(pool, pair.state(), swa_tag, live) == 0);
                    stamp_tokens(pool, pair.state(), swa_tag, got);
                    live.insert(live.end(), got.begin(), got.end());
                    handouts += got.size();
                    continue;
                }
            }
            if (live.empty())
                continue;
            std::shuffle(live.begin(), live.end(), rng);
            const std::size_t n = 1 + rng() % std::min<std::size_t>(live.size(), 3);
            pair.free_state_slots(Space(), std::vector<index_t>(live.end() - n, live.end()));
            live.resize(live.size() - n);
            if (rng() % 2 == 0)
                pair.state().flush_opportunistic(Space());
            REQUIRE_NOTHROW(pair.check_invariants());
            REQUIRE(check_stamps(pool, pair.state(), swa_tag, live) == 0);
        }
        // More slots were handed out than the side holds: slots were reused.
        CHECK(handouts > static_cast<std::size_t>(pair.state().geometry().page_capacity()));
    }
}

TEST_CASE("zeroing: a non-owner side's alloc_with_virtual zeroes the pages it binds", "[zeroing]") {
    Pool pool(PoolLayout(32 * 1024, {spec("full", 24, 2, GrowDirection::up),
                                     spec("swa", 40, 2, GrowDirection::down)}));
    Allocator full(pool, "full", zeroing(CompactionMode::lazy, false));
    AllocatorOptions swa_options = zeroing(CompactionMode::lazy, true);
    swa_options.is_id_owner = false;
    Allocator swa(pool, "swa", swa_options);
    full.bind_peer(swa);
    fill_stale(pool);
    std::vector<index_t> kept;
    for (int round = 0; round < 4; ++round) {
        const std::vector<index_t> ids = to_host(*full.alloc(Space(), 6));
        REQUIRE(swa.alloc_with_virtual(Space(), full.last_allocated_virtual_pages()));
        const Handout h = check_handout(pool, swa, ids);
        CHECK(h.nonzero_tokens == 0);
        CHECK(h.nonzero_pages == 0);
        REQUIRE(check_stamps(pool, swa, swa_tag, kept) == 0);
        stamp_tokens(pool, swa, swa_tag, ids);
        // Keep one page of each round, free the rest on both sides: the next
        // round reuses the freed pages.
        kept.insert(kept.end(), ids.begin(), ids.begin() + 2);
        const std::vector<index_t> freed(ids.begin() + 2, ids.end());
        swa.free(Space(), freed);
        full.free(Space(), freed);
    }
    REQUIRE_NOTHROW(swa.check_invariants());
    CHECK(check_stamps(pool, swa, swa_tag, kept) == 0);
}

TEST_CASE("zeroing: a side that zeroes refuses a move callback, changing nothing", "[zeroing]") {
    Pool pool(PoolLayout(16 * 1024, {spec("full", 24, 1, GrowDirection::up),
                                     spec("swa", 40, 1, GrowDirection::down)}));
    Allocator zeroed(pool, "full", zeroing(CompactionMode::eager, true));
    Allocator plain(pool, "swa", zeroing(CompactionMode::eager, false));
    const auto callback = [](const Space&, const Allocator::page_list_view&,
                             const Allocator::page_list_view&) {};
    try {
        zeroed.set_move_callback(callback);
        FAIL("set_move_callback was accepted");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK(std::string(e.what()).find("zero_on_alloc") != std::string::npos);
    }
    // Clearing a callback, and a side without zeroing, stay allowed.
    CHECK_NOTHROW(zeroed.set_move_callback(nullptr));
    CHECK_NOTHROW(plain.set_move_callback(callback));
}
