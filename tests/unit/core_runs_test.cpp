// The host core's run paths (issue #27): a free whose tokens are one run is
// checked with one pass over the v2p rows, and pages bound as one run on
// both sides have their table rows written as one stretch per table. Each
// is compared with the page-by-page path on the same pages (a repeated
// token, pieces shorter than a stretch) or, for an eager free's compaction,
// with the moves the reference makes (survivors at the frontier, ascending,
// into the freed pages inside the band, ascending).
#include <kvpool/swa_pair.hpp>

#include "test_config.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;

struct Twin {
    Pool pool;
    SwaPair pair;
    std::vector<std::vector<index_t>> requests;

    Twin(CompactionMode mode, index_t ps)
        : pool(PoolLayout(512 * 1024, {spec("full", 16, ps, GrowDirection::up),
                                       spec("swa", 8, ps, GrowDirection::down)})),
          pair(pool, mode) {}

    // Requests of the given page counts, each its own allocation: one run on
    // both sides while the band is fresh or dense.
    void admit(const std::vector<index_t>& pages) {
        for (index_t n : pages) {
            const auto ids = pair.alloc(Space(), n * pair.page_size());
            REQUIRE(ids);
            requests.push_back(to_host(*ids));
            stamp_tokens(pool, pair.full(), 0, requests.back());
            stamp_tokens(pool, pair.swa(), 1, requests.back());
        }
    }
    std::vector<index_t> live() const {
        std::vector<index_t> out;
        for (const auto& r : requests)
            out.insert(out.end(), r.begin(), r.end());
        return out;
    }
    void check() const {
        pair.full().check_invariants();
        pair.swa().check_invariants();
        const std::vector<index_t> tokens = live();
        check_all(pool, pair.full(), 0, tokens);
        check_all(pool, pair.swa(), 1, tokens);
    }
};

void check_same(const Twin& a, const Twin& b) {
    CHECK(a.pair.full().core().state_digest() == b.pair.full().core().state_digest());
    CHECK(a.pair.swa().core().state_digest() == b.pair.swa().core().state_digest());
    const auto& fa = a.pair.full().core();
    const auto& fb = b.pair.full().core();
    CHECK(std::vector<index_t>(fa.hole_list().begin(), fa.hole_list().end()) ==
          std::vector<index_t>(fb.hole_list().begin(), fb.hole_list().end()));
    CHECK(std::vector<index_t>(fa.free_virtual_pages().begin(), fa.free_virtual_pages().end()) ==
          std::vector<index_t>(fb.free_virtual_pages().begin(), fb.free_virtual_pages().end()));
}

std::vector<index_t> random_pages(std::mt19937_64& rng, int count) {
    std::vector<index_t> pages;
    for (int i = 0; i < count; ++i)
        pages.push_back(16 + static_cast<index_t>(rng() % 30));
    return pages;
}

// Both twins, having freed request r, forget it and admit one more: the same state before and
// after, and the new request placed alike (holes and free ids reused in the same order).
void forget_and_admit(Twin& a, Twin& b, std::size_t r, std::mt19937_64& rng) {
    a.requests.erase(a.requests.begin() + static_cast<std::ptrdiff_t>(r));
    b.requests.erase(b.requests.begin() + static_cast<std::ptrdiff_t>(r));
    check_same(a, b);
    const std::vector<index_t> more = random_pages(rng, 1);
    a.admit(more);
    b.admit(more);
    CHECK(a.requests.back() == b.requests.back());
    check_same(a, b);
}

// The same free forced onto the token-by-token walk: the tokens followed by
// more runs than the core takes as runs, each a repeat of a token already
// named (a repeat changes no page and no order: first occurrences count).
std::vector<index_t> walked(std::vector<index_t> tokens) {
    const index_t first = tokens.front();
    tokens.insert(tokens.end(), detail::max_free_runs + 1, first);
    return tokens;
}

// Forgets the pages the tokens lay on from the twin's requests.
void forget_pages(Twin& t, const std::vector<index_t>& tokens) {
    const index_t ps = t.pair.page_size();
    std::set<index_t> pages;
    for (index_t token : tokens)
        pages.insert(token / ps);
    for (auto& r : t.requests)
        r.erase(std::remove_if(r.begin(), r.end(), [&](index_t x) { return pages.count(x / ps); }),
                r.end());
    t.requests.erase(std::remove_if(t.requests.begin(), t.requests.end(),
                                    [](const std::vector<index_t>& r) { return r.empty(); }),
                     t.requests.end());
}

// A free of several runs: pieces of a few requests (whole, a middle stretch,
// reversed, or led by a token named before), in random order.
std::vector<index_t> several_runs(const Twin& t, std::mt19937_64& rng) {
    std::vector<index_t> tokens;
    const std::size_t pieces = 1 + rng() % 5;
    for (std::size_t k = 0; k < pieces; ++k) {
        const std::vector<index_t>& r = t.requests[rng() % t.requests.size()];
        std::size_t from = rng() % r.size();
        std::size_t to = from + 1 + rng() % (r.size() - from);
        if (rng() % 3 == 0) {
            from = 0;
            to = r.size();
        }
        std::vector<index_t> piece(r.begin() + static_cast<std::ptrdiff_t>(from),
                                   r.begin() + static_cast<std::ptrdiff_t>(to));
        if (rng() % 5 == 0)
            std::reverse(piece.begin(), piece.end());
        if (rng() % 5 == 0 && !tokens.empty())
            piece.insert(piece.begin(), tokens[rng() % tokens.size()]);
        tokens.insert(tokens.end(), piece.begin(), piece.end());
    }
    if (rng() % 8 == 0) // scattered: a token of every other page of a request
        for (std::size_t i = 0; i < t.requests[0].size(); i += 2 * t.pair.page_size())
            tokens.push_back(t.requests[0][i]);
    return tokens;
}

// Runs steps(a, b, rng, page_size) on twins for every seed, compaction mode
// and page size, both given the same random requests first and checked after.
template <class Steps> void on_twins(int requests, const Steps& steps) {
    for (const std::uint64_t seed : randomised_config().seed_list())
        for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
            for (index_t ps : {index_t(1), index_t(4)}) {
                INFO("seed " << seed << ", " << to_string(mode) << ", page size " << ps);
                std::mt19937_64 rng(seed);
                Twin a(mode, ps), b(mode, ps);
                const std::vector<index_t> pages = random_pages(rng, requests);
                a.admit(pages);
                b.admit(pages);
                steps(a, b, rng, ps);
                a.check();
                b.check();
            }
}

} // namespace

TEST_CASE("core runs: a free of several runs leaves what the token-by-token walk leaves",
          "[core-runs]") {
    on_twins(10, [](Twin& a, Twin& b, std::mt19937_64& rng, index_t ps) {
        for (int step = 0; step < 12; ++step) {
            std::vector<index_t> tokens = several_runs(a, rng);
            // Now and then a bad id among them: refused, nothing changed.
            const bool bad = rng() % 6 == 0;
            if (bad) {
                const index_t wrong[] = {-1 - static_cast<index_t>(rng() % 4), index_t(1) << 40,
                                         a.requests.back().back() + 4 * ps};
                tokens.insert(tokens.begin() + static_cast<std::ptrdiff_t>(rng() % tokens.size()),
                              wrong[rng() % 3]);
            }
            const auto before = a.pair.full().core().state_digest();
            bool a_threw = false, b_threw = false;
            ErrorCode a_code{}, b_code{};
            try {
                a.pair.free(Space(), tokens);
            } catch (const Error& e) {
                a_threw = true;
                a_code = e.code();
            }
            try {
                b.pair.free(Space(), walked(tokens));
            } catch (const Error& e) {
                b_threw = true;
                b_code = e.code();
            }
            REQUIRE(a_threw == b_threw);
            CHECK(a_threw == bad);
            if (a_threw) {
                CHECK(a_code == b_code);
                CHECK(a.pair.full().core().state_digest() == before);
            } else {
                forget_pages(a, tokens);
                forget_pages(b, tokens);
            }
            check_same(a, b);
            if (a.requests.size() < 4 || rng() % 2 == 0) {
                const std::vector<index_t> more = random_pages(rng, 2);
                a.admit(more);
                b.admit(more);
                CHECK(a.requests.back() == b.requests.back());
            }
            if (rng() % 3 == 0) {
                a.pair.flush_opportunistic(Space());
                b.pair.flush_opportunistic(Space());
            }
            check_same(a, b);
        }
    });
}

TEST_CASE("core runs: a free of a run of tokens leaves what the same tokens with a repeat leave",
          "[core-runs]") {
    on_twins(8, [](Twin& a, Twin& b, std::mt19937_64& rng, index_t) {
        for (int step = 0; step < 4; ++step) {
            const std::size_t r = rng() % a.requests.size();
            const std::vector<index_t> run = a.requests[r];
            // The same tokens, one repeated after itself, on the
            // token-by-token walk (repeats dropped).
            std::vector<index_t> repeated = run;
            const std::size_t at = rng() % run.size();
            repeated.insert(repeated.begin() + static_cast<std::ptrdiff_t>(at), run[at]);
            a.pair.free(Space(), run);
            b.pair.free(Space(), walked(repeated));
            forget_and_admit(a, b, r, rng);
        }
    });
}

TEST_CASE("core runs: a lazy free of a run leaves what its pieces freed one by one leave",
          "[core-runs]") {
    for (const std::uint64_t seed : randomised_config().seed_list())
        for (index_t ps : {index_t(1), index_t(4)}) {
            INFO("seed " << seed << ", page size " << ps);
            std::mt19937_64 rng(seed);
            Twin a(CompactionMode::lazy, ps), b(CompactionMode::lazy, ps);
            const std::vector<index_t> pages = random_pages(rng, 8);
            a.admit(pages);
            b.admit(pages);
            for (int step = 0; step < 4; ++step) {
                const std::size_t r = rng() % a.requests.size();
                const std::vector<index_t> run = a.requests[r];
                a.pair.free(Space(), run);
                // Pieces of fewer pages than a stretch: written page by page.
                const auto piece = static_cast<std::size_t>((1 + rng() % 15) * ps);
                for (std::size_t from = 0; from < run.size(); from += piece) {
                    const std::size_t to = std::min(run.size(), from + piece);
                    b.pair.free(Space(),
                                std::vector<index_t>(run.begin() + from, run.begin() + to));
                }
                forget_and_admit(a, b, r, rng);
            }
            a.check();
            b.check();
        }
}

TEST_CASE("core runs: an eager free of a run compacts as the reference does", "[core-runs]") {
    for (const std::uint64_t seed : randomised_config().seed_list())
        for (index_t ps : {index_t(1), index_t(4)}) {
            INFO("seed " << seed << ", page size " << ps);
            std::mt19937_64 rng(seed);
            Twin t(CompactionMode::eager, ps);
            t.admit(random_pages(rng, 8));
            for (int step = 0; step < 4; ++step) {
                const std::size_t r = rng() % t.requests.size();
                const std::vector<index_t> run = t.requests[r];
                // The expected binding of every live page, per side: the
                // freed pages unbound; the band shrinks at its frontier, whose
                // live pages (ascending) move into the freed pages that stay
                // inside the band (ascending).
                // The binding of every live request's pages, per side.
                const auto bindings = [&](const Allocator& side) {
                    std::map<index_t, index_t> v2p;
                    for (const auto& request : t.requests)
                        for (index_t token : request)
                            v2p[token / ps] = side.core().physical_page_of(token / ps);
                    return v2p;
                };
                std::vector<std::map<index_t, index_t>> expected;
                for (const Allocator* side : {&t.pair.full(), &t.pair.swa()}) {
                    std::map<index_t, index_t> v2p = bindings(*side);
                    std::vector<index_t> freed;
                    for (std::size_t i = 0; i < run.size(); i += static_cast<std::size_t>(ps))
                        freed.push_back(v2p.at(run[i] / ps));
                    std::sort(freed.begin(), freed.end());
                    index_t lo = v2p.begin()->second, hi = lo;
                    for (const auto& [v, p] : v2p) {
                        lo = std::min(lo, p);
                        hi = std::max(hi, p + 1);
                    }
                    const auto k = static_cast<index_t>(freed.size());
                    const bool up = side == &t.pair.full();
                    const index_t vacated_lo = up ? hi - k : lo;
                    const index_t vacated_hi = up ? hi : lo + k;
                    std::vector<index_t> holes;
                    for (index_t p : freed)
                        if (p < vacated_lo || p >= vacated_hi)
                            holes.push_back(p);
                    std::map<index_t, index_t> owner;
                    for (const auto& [v, p] : v2p)
                        owner[p] = v;
                    for (std::size_t i = 0; i < run.size(); i += static_cast<std::size_t>(ps))
                        v2p.erase(run[i] / ps);
                    std::size_t next = 0;
                    for (index_t p = vacated_lo; p < vacated_hi; ++p)
                        if (!std::binary_search(freed.begin(), freed.end(), p))
                            v2p[owner.at(p)] = holes.at(next++);
                    CHECK(next == holes.size());
                    expected.push_back(std::move(v2p));
                }
                t.pair.free(Space(), run);
                t.requests.erase(t.requests.begin() + static_cast<std::ptrdiff_t>(r));
                std::size_t s = 0;
                for (const Allocator* side : {&t.pair.full(), &t.pair.swa()}) {
                    CHECK(bindings(*side) == expected[s++]);
                    for (index_t token : run)
                        CHECK(side->core().physical_page_of(token / ps) == unbound);
                }
                t.check();
                t.admit(random_pages(rng, 1));
            }
        }
}
