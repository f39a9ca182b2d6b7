// An allocation's pages held as runs (PageRunList): the same ids as a per-page
// list through every way a binding is filled, paired runs that are the
// maximal stretches of the lists, the follower's pages scaled run by run, and
// the core's bindings (lazy holes, both grow directions) written to the host
// mirror and taken back a run at a time.
#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/detail/follower_pages.hpp>
#include <kvpool/detail/page_run_list.hpp>

#include "stepped_stretches.hpp"
#include "test_config.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <utility>

using namespace kvpool;
using namespace kvpool::test;
using kvpool::detail::PageRunList;

namespace {

void print_seed(const char* test, std::uint64_t seed) {
    std::printf(
        "[%s] seed %llu; reproduce: kvpool_tests_%s \"[page-run-list]\" --kvpool-seed %llu\n", test,
        static_cast<unsigned long long>(seed), KVPOOL_TEST_BACKEND_NAME,
        static_cast<unsigned long long>(seed));
    std::fflush(stdout);
}

// Appends to both a run list and its per-page model one of the ways a
// binding is filled: a run (free ids, the frontier), a descending run (a down
// band past drained holes), single ids (holes), or a list (alloc_with_virtual).
// Returns how many runs the step may add at most.
std::size_t append_some(PageRunList& runs, std::vector<index_t>& model, std::mt19937_64& rng) {
    const auto below = [&](index_t n) { return static_cast<index_t>(rng() % std::uint64_t(n)); };
    // Near the last id half the time, so that steps join runs.
    const index_t last = model.empty() ? 100 : model.back();
    const index_t first = rng() % 2 ? last + below(3) - 1 : below(400);
    const index_t count = below(6) == 0 ? 0 : 1 + below(rng() % 4 == 0 ? 200 : 8);
    switch (rng() % 4) {
    case 0:
        runs.append_run(first, count);
        for (index_t k = 0; k < count; ++k)
            model.push_back(first + k);
        return 1;
    case 1:
        runs.append_descending(first + count, count);
        for (index_t k = 0; k < count; ++k)
            model.push_back(first + count - k);
        return 1;
    case 2:
        for (index_t k = 0; k < count; ++k) {
            const index_t id = first + below(5) - 2;
            runs.push_back(id);
            model.push_back(id);
        }
        return static_cast<std::size_t>(count);
    default: {
        std::vector<index_t> ids;
        for (index_t k = 0; k < count; ++k)
            ids.push_back(rng() % 3 ? first + k : below(400));
        PageRunList listed;
        listed.assign(ids.data(), ids.size());
        for (index_t id : listed)
            runs.push_back(id);
        model.insert(model.end(), ids.begin(), ids.end());
        CHECK(listed.to_vector() == ids);
        return static_cast<std::size_t>(count);
    }
    }
}

void check_against(const PageRunList& runs, const std::vector<index_t>& model) {
    REQUIRE(runs.size() == model.size());
    CHECK(runs.empty() == model.empty());
    CHECK(runs.to_vector() == model);
    CHECK(std::vector<index_t>(runs.begin(), runs.end()) == model);
    std::size_t counted = 0;
    for (const detail::SteppedRun& r : runs.runs()) {
        CHECK(r.count >= 1);
        CHECK((r.step == 1 || (r.step == -1 && r.count >= 2)));
        counted += static_cast<std::size_t>(r.count);
    }
    CHECK(counted == model.size());
    // Ids that step by one are one run (a fresh or dense band's pages).
    if (!model.empty() && detail::consecutive(model.data(), model.size()))
        CHECK(runs.runs().size() == 1);
    if (!model.empty()) {
        CHECK(runs.front() == model.front());
        const std::size_t k = model.size() / 2;
        CHECK(runs[k] == model[k]);
    }
}

// A paired run as the checks compare it: first ids, steps (+1 for a run of
// one id, whose step means nothing) and count.
using Pairing = std::array<index_t, 5>;
Pairing pairing(index_t a, index_t step_a, index_t b, index_t step_b, index_t count) {
    return count == 1 ? Pairing{a, 1, b, 1, 1} : Pairing{a, step_a, b, step_b, count};
}

// The model's paired runs: the lists' stepped stretches, walked page by page.
std::vector<Pairing> paired_stretches(const std::vector<index_t>& a,
                                      const std::vector<index_t>& b) {
    std::vector<Pairing> stretches;
    for (const SteppedStretch& s : stepped_stretches({&a, &b}))
        stretches.push_back(
            pairing(a[s.first], s.steps[0], b[s.first], s.steps[1], static_cast<index_t>(s.count)));
    return stretches;
}

// The paired runs the walk finds, against the per-page walk's over the lists.
void check_paired(const PageRunList& a, const PageRunList& b) {
    const std::vector<index_t> va = a.to_vector(), vb = b.to_vector();
    std::vector<Pairing> from_runs;
    detail::for_each_paired_run(
        a, b, [&](const detail::SteppedRun& v, const detail::SteppedRun& p) {
            CHECK(v.count == p.count);
            from_runs.push_back(pairing(v.first, v.step, p.first, p.step, v.count));
        });
    CHECK(from_runs == paired_stretches(va, vb));
}

// Up to five stretches of 1 to 7 ids, each from stretch() = (first id,
// step), the ids stepping in two's complement (so a stretch may wrap).
template <class Stretch>
std::vector<index_t> random_stretches(std::mt19937_64& rng, const Stretch& stretch) {
    std::vector<index_t> ids;
    const int stretches = static_cast<int>(rng() % 6);
    for (int s = 0; s < stretches; ++s) {
        const auto [first, step] = stretch();
        const auto count = 1 + rng() % 7;
        for (std::uint64_t k = 0; k < count; ++k)
            ids.push_back(static_cast<index_t>(static_cast<std::uint64_t>(first) +
                                               k * static_cast<std::uint64_t>(step)));
    }
    return ids;
}

} // namespace

TEST_CASE("page run list: the same ids as a per-page list however filled; paired runs are the "
          "lists' maximal stretches; a follower's pages are the owner's scaled",
          "[page-run-list][randomised]") {
    for (const std::uint64_t seed : randomised_config().seed_list()) {
        print_seed("page-run-list", seed);
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        for (int trial = 0; trial < 300; ++trial) {
            PageRunList a, b;
            std::vector<index_t> ma, mb;
            std::size_t most_runs = 0;
            const int steps = 1 + static_cast<int>(rng() % 8);
            for (int s = 0; s < steps; ++s)
                most_runs += append_some(a, ma, rng);
            check_against(a, ma);
            // A run of ids costs one run, not an entry per id.
            CHECK(a.runs().size() <= most_runs);
            // A second list of the same length, for the pairs.
            while (mb.size() < ma.size())
                append_some(b, mb, rng);
            PageRunList cut;
            cut.assign(mb.data(), ma.size());
            mb.resize(ma.size());
            check_against(cut, mb);
            check_paired(a, cut);
            check_paired(a, a);
            // The follower's pages: ratio of its pages per owner page.
            const auto ratio = static_cast<index_t>(1 + rng() % 4);
            PageRunList scratch;
            const PageRunList& follower = detail::follower_pages(a, ratio, scratch);
            std::vector<index_t> scaled;
            for (index_t v : ma)
                for (index_t j = 0; j < ratio; ++j)
                    scaled.push_back(v * ratio + j);
            check_against(follower, scaled);
            CHECK(follower.runs().size() <=
                  (ratio == 1 ? a.runs().size() : std::max<std::size_t>(ma.size(), 1)));
            a.clear();
            CHECK(a.empty());
            CHECK(a.runs().empty());
        }
    }
}

TEST_CASE("page run list: the core's bindings (lazy holes, up and down bands, ids given as runs "
          "or as a list) bind and unbind the host mirror page for page",
          "[page-run-list][randomised]") {
    for (const std::uint64_t seed : randomised_config().seed_list()) {
        print_seed("page-run-list-core", seed);
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        const index_t page_size = 1 + static_cast<index_t>(rng() % 2);
        Pool pool(PoolLayout(64 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                         spec("swa", 24, page_size, GrowDirection::down)}));
        const char* side = rng() % 2 ? "full" : "swa";
        INFO("side " << side);
        AllocatorOptions lazy = options(CompactionMode::lazy);
        detail::AllocatorCore owner(pool.layout().sub_pool(side), pool.total_bytes(), lazy);
        lazy.is_id_owner = false;
        detail::AllocatorCore follower(pool.layout().sub_pool(side), pool.total_bytes(), lazy);
        std::vector<index_t> live; // owner's virtual pages
        for (int step = 0; step < 200; ++step) {
            if (rng() % 3 == 0 && !live.empty()) {
                // Free a scattered half: holes for the next allocation.
                std::vector<index_t> gone;
                std::vector<index_t> kept;
                for (index_t v : live)
                    (rng() % 2 ? gone : kept).push_back(v);
                std::vector<index_t> tokens;
                for (index_t v : gone)
                    tokens.push_back(v * page_size);
                owner.free_tokens(tokens.data(), static_cast<index_t>(tokens.size()));
                follower.free_tokens(tokens.data(), static_cast<index_t>(tokens.size()));
                live = kept;
                continue;
            }
            owner.plan().clear();
            follower.plan().clear();
            const std::uint64_t digest_before = owner.state_digest();
            const std::uint64_t follower_before = follower.state_digest();
            detail::PageBinding binding, bound;
            const auto n = static_cast<index_t>(1 + rng() % 40);
            if (!owner.alloc_pages(n, binding))
                continue;
            const std::vector<index_t> v = binding.virtual_pages.to_vector();
            const std::vector<index_t> p = binding.physical_pages.to_vector();
            REQUIRE(v.size() == static_cast<std::size_t>(n));
            REQUIRE(p.size() == v.size());
            for (std::size_t k = 0; k < v.size(); ++k)
                CHECK(owner.physical_page_of(v[k]) == p[k]);
            // Drained holes one run each at most, the extension one or two.
            CHECK(binding.physical_pages.runs().size() <= binding.drained_holes + 2);
            owner.check_invariants();
            // The follower binds the same ids given as runs, or as a list.
            const bool as_runs = rng() % 2 == 0;
            const bool bound_ok = as_runs
                                      ? follower.bind_virtual_pages(binding.virtual_pages, bound)
                                      : follower.bind_virtual_pages(v.data(), n, bound);
            REQUIRE(bound_ok);
            CHECK(bound.virtual_pages.to_vector() == v);
            for (index_t id : v)
                CHECK(follower.physical_page_of(id) != unbound);
            // Binding them again is refused whole, with the same message either way.
            std::string as_run_error, as_list_error;
            try {
                detail::PageBinding again;
                follower.bind_virtual_pages(binding.virtual_pages, again);
            } catch (const Error& e) {
                as_run_error = e.what();
            }
            try {
                detail::PageBinding again;
                follower.bind_virtual_pages(v.data(), n, again);
            } catch (const Error& e) {
                as_list_error = e.what();
            }
            CHECK(!as_run_error.empty());
            CHECK(as_run_error == as_list_error);
            follower.check_invariants();
            if (rng() % 4 == 0) {
                // Taken back: the state as before, page for page.
                follower.undo_allocation(bound);
                owner.undo_allocation(binding);
                CHECK(owner.state_digest() == digest_before);
                CHECK(follower.state_digest() == follower_before);
                owner.check_invariants();
                follower.check_invariants();
                continue;
            }
            live.insert(live.end(), v.begin(), v.end());
        }
        for (index_t id : live)
            CHECK(owner.physical_page_of(id) == follower.physical_page_of(id));
    }
}

TEST_CASE("id runs: for_each_run finds the maximal ascending stretches of any ids, wrapping "
          "ones included, and stops where its function says",
          "[page-run-list][randomised]") {
    constexpr index_t most = std::numeric_limits<index_t>::max();
    constexpr index_t least = std::numeric_limits<index_t>::min();
    for (const std::uint64_t seed : randomised_config().seed_list()) {
        print_seed("id-runs", seed);
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        for (int trial = 0; trial < 500; ++trial) {
            // Ids near 0 or near either end, in stretches that step by one
            // (wrapping from the largest id to the smallest) or jump.
            const std::vector<index_t> ids = random_stretches(rng, [&] {
                const index_t bases[] = {static_cast<index_t>(rng() % 50), most - 3, least};
                return std::pair{bases[rng() % 3], index_t(1)};
            });
            // The model: a stretch ends where the next id is not the last
            // one plus one, two's complement.
            std::vector<std::pair<std::size_t, std::size_t>> model;
            for (std::size_t k = 0; k < ids.size(); ++k)
                if (k > 0 && static_cast<std::uint64_t>(ids[k]) ==
                                 static_cast<std::uint64_t>(ids[k - 1]) + 1)
                    ++model.back().second;
                else
                    model.emplace_back(k, 1);
            std::vector<std::pair<std::size_t, std::size_t>> found;
            CHECK(detail::for_each_run(ids.data(), ids.size(), [&](std::size_t i, std::size_t n) {
                found.emplace_back(i, n);
            }));
            CHECK(found == model);
            // Stopped at the stop-th stretch (0: never): the last one called.
            const std::size_t stop = rng() % (model.size() + 1);
            found.clear();
            const bool finished =
                detail::for_each_run(ids.data(), ids.size(), [&](std::size_t i, std::size_t n) {
                    found.emplace_back(i, n);
                    return found.size() != stop;
                });
            CHECK(finished == (stop == 0));
            if (stop != 0)
                model.resize(stop);
            CHECK(found == model);
        }
    }
}

TEST_CASE("id runs: for_each_stepped_run finds the maximal stretches going up or down by one, "
          "and for_each_row_range the rows they cover",
          "[page-run-list][randomised]") {
    for (const std::uint64_t seed : randomised_config().seed_list()) {
        print_seed("stepped-runs", seed);
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        for (int trial = 0; trial < 500; ++trial) {
            // Small ids in stretches going up or down, clipped at 0.
            std::vector<index_t> ids = random_stretches(rng, [&] {
                return std::pair{static_cast<index_t>(rng() % 40), index_t(rng() % 2 ? 1 : -1)};
            });
            for (index_t& id : ids)
                id = std::max<index_t>(0, id);
            // The model, entry by entry (a stretch of one entry goes up).
            const std::vector<SteppedStretch> model = stepped_stretches({&ids});
            std::vector<SteppedStretch> found;
            detail::for_each_stepped_run(ids.data(), ids.size(),
                                         [&](std::size_t i, std::size_t n, index_t step) {
                                             found.push_back({i, n, {step}});
                                         });
            CHECK(found == model);
            std::vector<std::pair<index_t, std::size_t>> rows, model_rows;
            for (const SteppedStretch& s : model)
                model_rows.emplace_back(std::min(ids[s.first], ids[s.first + s.count - 1]),
                                        s.count);
            detail::for_each_row_range(ids.data(), ids.size(), [&](index_t lowest, std::size_t n) {
                rows.emplace_back(lowest, n);
            });
            CHECK(rows == model_rows);
        }
    }
}
