// Page moves handed to the move kernels as runs (each id stepping by +1 or -1)
// instead of lists: found and expanded exactly, and the kernels move the same
// bytes and write the same tables from runs as from lists.
#include <kvpool/kernels/dispatch.hpp>
#include <kvpool/kernels/page_runs.hpp>

#include "kernel_inputs.hpp"
#include "test_config.hpp"
#include "test_support.hpp"

#include <numeric>
#include <random>

using namespace kvpool;
using namespace kvpool::test;

namespace {

// Moves in runs of the given lengths: sources taken from pages [0, half),
// destinations from [half, 2 * half), each run in a fresh stretch of its half
// walked up or down, and a gap after every run so that no two runs merge.
struct Moves {
    std::vector<index_t> src, dst;
};
Moves moves_in_runs(const std::vector<index_t>& lengths, index_t half, std::mt19937_64& rng) {
    Moves m;
    index_t src_next = 0, dst_next = half;
    for (index_t n : lengths) {
        const index_t src_step = rng() % 2 == 0 ? 1 : -1, dst_step = rng() % 2 == 0 ? 1 : -1;
        const index_t src_first = src_step > 0 ? src_next : src_next + n - 1;
        const index_t dst_first = dst_step > 0 ? dst_next : dst_next + n - 1;
        for (index_t k = 0; k < n; ++k) {
            m.src.push_back(src_first + k * src_step);
            m.dst.push_back(dst_first + k * dst_step);
        }
        src_next += n + 2;
        dst_next += n + 2;
    }
    return m;
}

index_t total(const std::vector<index_t>& lengths) {
    return std::accumulate(lengths.begin(), lengths.end(), index_t(0));
}

} // namespace

TEST_CASE("move runs: found where both ids step by one, and give back every move",
          "[move-runs][randomised]") {
    for (const std::uint64_t seed : randomised_config().seed_list()) {
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        for (int trial = 0; trial < 300; ++trial) {
            const std::vector<index_t> lengths = random_run_lengths(rng, 2);
            const auto run_count = static_cast<int>(lengths.size());
            const Moves m = moves_in_runs(lengths, total(lengths) + 3 * run_count, rng);
            const auto n = static_cast<index_t>(m.src.size());
            const kernels::MoveRuns runs = kernels::find_move_runs(m.src.data(), m.dst.data(), n);
            INFO("trial " << trial << ", " << run_count << " runs of " << n << " moves");
            if (run_count > kernels::MoveRuns::max_runs) {
                CHECK(runs.count == 0);
                continue;
            }
            REQUIRE(runs.count == run_count);
            CHECK(runs.moves == n);
            for (index_t k = 0; k < n; ++k) {
                const kernels::MoveRuns::Move move = runs.at(k);
                REQUIRE(move.src == m.src[static_cast<std::size_t>(k)]);
                REQUIRE(move.dst == m.dst[static_cast<std::size_t>(k)]);
            }
        }
    }
    // A lone move is a run of its own; the next one may start a run going
    // either way. No run at all for an empty list.
    const std::vector<index_t> src{5, 9, 8, 2}, dst{40, 41, 42, 60};
    const kernels::MoveRuns lone = kernels::find_move_runs(src.data(), dst.data(), 4);
    REQUIRE(lone.count == 3);
    for (index_t k = 0; k < 4; ++k) {
        CHECK(lone.at(k).src == src[static_cast<std::size_t>(k)]);
        CHECK(lone.at(k).dst == dst[static_cast<std::size_t>(k)]);
    }
    CHECK(kernels::find_move_runs(src.data(), dst.data(), 0).count == 0);
}

TEST_CASE("move runs: the plan kernels move the same bytes and write the same tables as from "
          "lists",
          "[move-runs][native][randomised]") {
    const Space space;
    for (const std::uint64_t seed : randomised_config().seed_list())
        for (const index_t page_bytes : {index_t(48), index_t(4096), index_t(6)}) {
            INFO("seed " << seed << ", page_bytes " << page_bytes);
            std::mt19937_64 rng(seed ^ static_cast<std::uint64_t>(page_bytes));
            std::vector<index_t> lengths;
            for (int j = 0; j < kernels::MoveRuns::max_runs; ++j)
                lengths.push_back(1 + static_cast<index_t>(rng() % 30));
            const index_t half = total(lengths) + 3 * kernels::MoveRuns::max_runs;
            const Moves m = moves_in_runs(lengths, half, rng);
            const auto n = static_cast<index_t>(m.src.size());
            const kernels::MoveRuns runs = kernels::find_move_runs(m.src.data(), m.dst.data(), n);
            REQUIRE(runs.count > 1);
            // Table writes as a compaction plan makes them: each destination
            // takes its source's virtual page, each source is unbound.
            std::vector<index_t> v2p_index, v2p_value, p2v_index, p2v_value;
            for (index_t k = 0; k < n; ++k) {
                const index_t s = m.src[static_cast<std::size_t>(k)],
                              d = m.dst[static_cast<std::size_t>(k)];
                v2p_index.push_back(1000 + s);
                v2p_value.push_back(d);
                p2v_index.insert(p2v_index.end(), {d, s});
                p2v_value.insert(p2v_value.end(), {1000 + s, -1});
            }
            const auto run = [&](bool as_runs, bool with_writes) {
                const auto pages = static_cast<std::size_t>(2 * half);
                kk::View<std::uint8_t*, Space::memory_space> bytes(
                    "test::bytes", pages * static_cast<std::size_t>(page_bytes));
                auto stamped = Kokkos::create_mirror_view(bytes);
                for (std::size_t i = 0; i < stamped.extent(0); ++i)
                    stamped(i) = static_cast<std::uint8_t>((i * 131 + 7) % 251);
                Kokkos::deep_copy(bytes, stamped);
                IndexView v2p("test::v2p", 2000 + pages), p2v("test::p2v", pages);
                Kokkos::deep_copy(v2p, -1);
                Kokkos::deep_copy(p2v, -1);
                const IndexView src = as_runs ? IndexView() : to_device(m.src);
                const IndexView dst = as_runs ? IndexView() : to_device(m.dst);
                const kernels::PageMoves moves{bytes, page_bytes, src, dst,
                                               as_runs ? runs : kernels::MoveRuns{}};
                if (with_writes)
                    kernels::apply_plan(
                        space, kernels::CompactionPlan{
                                   moves, kernels::TableWrites{
                                              v2p, to_device(v2p_index), to_device(v2p_value), p2v,
                                              to_device(p2v_index), to_device(p2v_value)}});
                else
                    kernels::move_pages(space, moves);
                space.fence();
                auto moved = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bytes);
                return std::make_tuple(
                    std::vector<std::uint8_t>(moved.data(), moved.data() + moved.extent(0)),
                    to_host(v2p), to_host(p2v));
            };
            for (const bool with_writes : {false, true}) {
                INFO("with table writes " << with_writes);
                const auto from_lists = run(false, with_writes), from_runs = run(true, with_writes);
                CHECK(std::get<0>(from_runs) == std::get<0>(from_lists));
                CHECK(std::get<1>(from_runs) == std::get<1>(from_lists));
                CHECK(std::get<2>(from_runs) == std::get<2>(from_lists));
                // Every destination holds its source's original bytes.
                const std::vector<std::uint8_t>& after = std::get<0>(from_runs);
                for (index_t k = 0; k < n; ++k)
                    for (index_t b = 0; b < page_bytes; ++b) {
                        const auto from = static_cast<std::size_t>(
                            m.src[static_cast<std::size_t>(k)] * page_bytes + b);
                        const auto to = static_cast<std::size_t>(
                            m.dst[static_cast<std::size_t>(k)] * page_bytes + b);
                        REQUIRE(after[to] == static_cast<std::uint8_t>((from * 131 + 7) % 251));
                    }
            }
        }
}
