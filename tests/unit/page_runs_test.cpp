// New pages handed to the alloc-bind kernels as runs instead of lists, and the
// staging slabs that successive calls share.
#include <kvpool/detail/staging.hpp>
#include <kvpool/kernels/dispatch.hpp>
#include <kvpool/kernels/page_runs.hpp>

#include "device_delay.hpp"
#include "kernel_inputs.hpp"
#include "stepped_stretches.hpp"
#include "test_config.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <numeric>
#include <random>

using namespace kvpool;
using namespace kvpool::test;

namespace {

// Page lists of the given run lengths, each list's ids in a run going up or
// down by one (a band growing down binds its pages downward) and never
// repeating: a run takes the ids past the list's last ones, with a gap in one
// list at least, so that no two runs merge (the other lists may go on).
struct Lists {
    std::vector<index_t> virtual_pages, physical_pages, follower_pages;
};
Lists lists_of_runs(const std::vector<index_t>& lengths, std::mt19937_64& rng) {
    Lists l;
    std::vector<index_t>* const lists[3] = {&l.virtual_pages, &l.physical_pages, &l.follower_pages};
    index_t unused[3]; // each list's ids from here on are unused
    for (index_t& id : unused)
        id = static_cast<index_t>(rng() % 50);
    for (index_t n : lengths) {
        // Which list breaks the run: any one of them is enough.
        const auto breaks = rng() % 3;
        for (std::size_t i = 0; i < 3; ++i) {
            const index_t low = unused[i] + (i == breaks ? 2 + static_cast<index_t>(rng() % 5) : 0);
            const bool down = rng() % 3 == 0;
            for (index_t k = 0; k < n; ++k)
                lists[i]->push_back(down ? low + n - 1 - k : low + k);
            unused[i] = low + n;
        }
    }
    return l;
}

} // namespace

TEST_CASE(
    "page runs: the joint runs of the lists, each stepping up or down by one, give back every "
    "page",
    "[page-runs][randomised]") {
    for (const std::uint64_t seed : randomised_config().seed_list()) {
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        int runs_down = 0;
        for (int trial = 0; trial < 200; ++trial) {
            const std::vector<index_t> lengths = random_run_lengths(rng, 1);
            const auto run_count = static_cast<int>(lengths.size());
            const Lists l = lists_of_runs(lengths, rng);
            const index_t n = static_cast<index_t>(l.virtual_pages.size());
            const bool with_follower = rng() % 2 == 0;
            // The fewest runs: as many as the walk page by page finds, never
            // more than the lengths (each a run).
            std::vector<const std::vector<index_t>*> listed{&l.virtual_pages, &l.physical_pages};
            if (with_follower)
                listed.push_back(&l.follower_pages);
            const auto expected = static_cast<int>(stepped_stretches(listed).size());
            CHECK(expected <= run_count);
            INFO("trial " << trial << ", " << expected << " runs, follower " << with_follower);
            const kernels::PageRuns runs = runs_of(l.virtual_pages, l.physical_pages,
                                                   with_follower ? &l.follower_pages : nullptr);
            if (expected > kernels::PageRuns::max_runs) {
                CHECK(runs.count == 0);
                continue;
            }
            REQUIRE(runs.count == expected);
            CHECK(runs.pages == n);
            for (int j = 0; j < runs.count; ++j)
                runs_down += runs.virtual_down[j] || runs.physical_down[j] ||
                                     (with_follower && runs.follower_down[j])
                                 ? 1
                                 : 0;
            for (index_t k = 0; k < n; ++k) {
                const kernels::PageRuns::Page page = runs.at(k);
                const auto i = static_cast<std::size_t>(k);
                CHECK(page.virtual_page == l.virtual_pages[i]);
                CHECK(page.physical_page == l.physical_pages[i]);
                if (with_follower)
                    CHECK(page.follower_page == l.follower_pages[i]);
            }
        }
        // Runs going down were found and given back, not only runs going up.
        CHECK(runs_down > 0);
    }
    CHECK(runs_of({}, {}, nullptr).count == 0);
}

TEST_CASE("page runs: the alloc-bind kernels bind and emit the same from runs as from lists",
          "[page-runs]") {
    const std::uint64_t seed = 8080;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const index_t page_size = 4, table_rows = 2048;
    const PrefillRequests req = random_prefill_requests(rng, 23, page_size, 9, 40, 900, 50);
    const index_t tokens = req.tokens, pages = req.pages;
    std::vector<index_t> lengths;
    for (index_t left = pages; left > 0;) {
        const index_t n = std::min(left, 1 + static_cast<index_t>(rng() % (pages / 3 + 1)));
        lengths.push_back(n);
        left -= n;
    }
    const Lists l = lists_of_runs(lengths, rng);
    const kernels::PageRuns runs = runs_of(l.virtual_pages, l.physical_pages, &l.follower_pages);
    REQUIRE(runs.count > 1);
    const Space space;
    using Follower = kernels::Follower<IndexView, IndexView>;
    const auto run = [&](bool as_runs) {
        const auto table = [&](const char* label) {
            IndexView t(std::string(label), table_rows);
            Kokkos::deep_copy(t, -1);
            return t;
        };
        IndexView v2p = table("v2p"), p2v = table("p2v"),
                  out("out", static_cast<std::size_t>(tokens)),
                  tokens_out("tokens_out", static_cast<std::size_t>(pages * page_size));
        const Follower follower{table("follower_v2p"), table("follower_p2v"),
                                as_runs ? IndexView() : to_device(l.follower_pages)};
        const IndexView vp = as_runs ? IndexView() : to_device(l.virtual_pages);
        const IndexView pp = as_runs ? IndexView() : to_device(l.physical_pages);
        const kernels::PageRuns given = as_runs ? runs : kernels::PageRuns{};
        const kernels::NewPages<IndexView, IndexView> new_pages{v2p,       p2v,      vp,   pp,
                                                                page_size, follower, given};
        kernels::alloc_extend_bind(
            space, kernels::AllocExtend{new_pages, to_device(req.prefix), to_device(req.seq),
                                        to_device(req.out_start), to_device(req.page_start),
                                        to_device(req.last), out});
        kernels::bind_pages_emit_tokens(space, kernels::AllocTokens{new_pages, tokens_out});
        // The decode step after the prefill.
        IndexView decode_out("decode_out", req.seq.size());
        kernels::PageRuns decode_runs = given;
        decode_runs.pages = req.decode_pages;
        const kernels::NewPages<IndexView, IndexView> decode_new_pages{
            table("decode_v2p"), table("decode_p2v"), vp, pp, page_size, Follower{}, decode_runs};
        kernels::alloc_decode_bind(space,
                                   kernels::AllocDecode{decode_new_pages, to_device(req.decode_seq),
                                                        to_device(req.decode_page_start),
                                                        to_device(req.last), decode_out});
        space.fence();
        return std::vector<std::vector<index_t>>{
            to_host(v2p),          to_host(p2v),
            to_host(out),          to_host(tokens_out),
            to_host(follower.v2p), to_host(follower.p2v),
            to_host(decode_out),   to_host(decode_new_pages.v2p)};
    };
    const auto from_lists = run(false), from_runs = run(true);
    for (std::size_t i = 0; i < from_lists.size(); ++i) {
        INFO("result " << i);
        CHECK(from_runs[i] == from_lists[i]);
    }
    // Every new page was bound, on both sides.
    CHECK(std::count_if(from_runs[0].begin(), from_runs[0].end(),
                        [](index_t p) { return p >= 0; }) == pages);
    CHECK(std::count_if(from_runs[4].begin(), from_runs[4].end(),
                        [](index_t p) { return p >= 0; }) == pages);
}

TEST_CASE("staging: successive calls share a slab and each call reads back its own arrays",
          "[staging][randomised]") {
    for (const std::uint64_t seed : randomised_config().seed_list()) {
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        detail::Staging<Space> staging;
        const Space space;
        for (int call = 0; call < 300; ++call) {
            INFO("call " << call);
            // Mostly small arrays (decode steps), now and then one that
            // outgrows the slab in the middle of the call (a prefill).
            std::vector<std::vector<index_t>> arrays;
            std::vector<std::size_t> offsets;
            const int count = 1 + static_cast<int>(rng() % 4);
            for (int a = 0; a < count; ++a) {
                const std::size_t n =
                    rng() % 16 == 0 ? 20000 + rng() % 60000 : static_cast<std::size_t>(rng() % 600);
                std::vector<index_t> values(n);
                for (index_t& v : values)
                    v = static_cast<index_t>(rng());
                offsets.push_back(staging.add(values));
                arrays.push_back(std::move(values));
            }
            staging.upload(space);
            for (int a = 0; a < count; ++a) {
                const auto slice = staging.slice(offsets[static_cast<std::size_t>(a)],
                                                 arrays[static_cast<std::size_t>(a)].size());
                auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), slice);
                CHECK(std::equal(host.data(), host.data() + host.extent(0),
                                 arrays[static_cast<std::size_t>(a)].begin(),
                                 arrays[static_cast<std::size_t>(a)].end()));
            }
        }
    }
}

TEST_CASE("staging: a repeated call pattern stops taking page-locked memory", "[staging]") {
    // A small call, then one that fills the rest of the slab and more: the
    // slab it outgrows must not be replaced by one of the same size each time.
    const Space space;
    for (const std::size_t big : {std::size_t(4096), std::size_t(6000), std::size_t(40000)}) {
        INFO("big call of " << big << " entries");
        detail::Staging<Space> staging;
        const std::vector<index_t> small(4, 1), large(big, 2);
        std::size_t held_after_warm_up = 0;
        for (int step = 0; step < 200; ++step) {
            staging.add(small);
            staging.upload(space);
            const std::size_t at = staging.add(large);
            staging.upload(space);
            space.fence();
            if (step == 10)
                held_after_warm_up = staging.held_entries();
            if (step == 199) {
                const auto host = Kokkos::create_mirror_view_and_copy(
                    Kokkos::HostSpace(), staging.slice(at, large.size()));
                CHECK(std::all_of(host.data(), host.data() + host.extent(0),
                                  [](index_t v) { return v == 2; }));
            }
        }
        CHECK(staging.held_entries() == held_after_warm_up);
        CHECK(held_after_warm_up < 64 * big);
    }
}

#if defined(KOKKOS_ENABLE_CUDA)
TEST_CASE("staging: a slab read on a stream held back is not reused by calls on another",
          "[staging]") {
    if (!std::is_same_v<Space, Kokkos::Cuda>)
        SKIP("one stream only on backend " KVPOOL_TEST_BACKEND_NAME);
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    {
        const Kokkos::Cuda held(stream), other;
        kk::View<std::uint64_t*, Kokkos::CudaSpace> sink("test::delay", 1);
        detail::Staging<Kokkos::Cuda> staging;
        // The held stream reads its array only after the delay.
        std::vector<index_t> expected(500);
        std::iota(expected.begin(), expected.end(), 7);
        const std::size_t at = staging.add(expected);
        staging.upload(held);
        IndexView copied("test::copied", expected.size());
        delay(held, sink);
        Kokkos::deep_copy(held, copied, staging.slice(at, expected.size()));
        // Meanwhile the other stream's calls go round the ring many times,
        // each writing slabs the ring reuses once their readers are done.
        for (int call = 0; call < 200; ++call) {
            std::vector<index_t> junk(40000, -call);
            staging.add(junk);
            staging.upload(other);
        }
        Kokkos::fence();
        CHECK(to_host(copied) == expected);
    }
    REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}
#endif
