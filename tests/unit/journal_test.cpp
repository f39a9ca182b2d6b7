// The undo journal of the host core's tables: changes logged one by one,
// saved in stretches (a flush's batch of moves), filled, or reassigned, in any
// mix, are all taken back by a rollback, and reported as changed rows.
#include <kvpool/detail/journal.hpp>

#include "test_config.hpp"

#include "catch_macros.hpp"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <random>
#include <set>
#include <vector>

using namespace kvpool;
using kvpool::detail::JournaledTable;

TEST_CASE("journal: a rollback takes back single changes, stretches, fills and runs in any mix",
          "[journal][randomised]") {
    for (const std::uint64_t seed : test::randomised_config().seed_list()) {
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        constexpr std::size_t size = 3000;
        JournaledTable<index_t> table;
        table.assign(size, -1);
        std::vector<index_t> model(size, -1);
        for (int round = 0; round < 40; ++round) {
            INFO("round " << round);
            table.open();
            const std::vector<index_t> before = model;
            std::set<std::size_t> touched;
            bool reassigned = false;
            const int ops = 1 + static_cast<int>(rng() % 12);
            for (int op = 0; op < ops; ++op) {
                const auto kind = rng() % 10;
                if (kind < 4) {
                    const std::size_t i = rng() % size;
                    const auto v = static_cast<index_t>(rng() % 1000);
                    table.set(i, v);
                    model[i] = v;
                    touched.insert(i);
                } else if (kind < 8) {
                    // A batch: runs going up or down with gaps, or ids spread
                    // over the whole table (too scattered for stretches).
                    std::vector<index_t> at;
                    const bool scattered = kind == 7;
                    auto i = static_cast<index_t>(rng() % size);
                    const int n = 1 + static_cast<int>(rng() % 300);
                    for (int k = 0; k < n; ++k) {
                        at.push_back(i);
                        const auto step = static_cast<index_t>(rng() % 3 == 0 ? 1 + rng() % 20 : 1);
                        i = scattered ? static_cast<index_t>(rng() % size)
                                      : (i + (kind % 2 == 0 ? step : size - step)) %
                                            static_cast<index_t>(size);
                    }
                    const bool saved = table.save_stretches(at.data(), at.size());
                    for (index_t j : at) {
                        const auto v = static_cast<index_t>(rng() % 1000);
                        if (saved)
                            table.set_unlogged(static_cast<std::size_t>(j), v);
                        else
                            table.set(static_cast<std::size_t>(j), v);
                        model[static_cast<std::size_t>(j)] = v;
                        touched.insert(static_cast<std::size_t>(j));
                    }
                } else if (kind == 8) {
                    // A fill, or a run of values stepping up or down (pages bound).
                    const std::size_t first = rng() % size;
                    const std::size_t last = std::min(size, first + rng() % 200);
                    const auto v = static_cast<index_t>(rng() % 1000);
                    const index_t step = rng() % 2 == 0 ? 0 : rng() % 2 == 0 ? 1 : -1;
                    if (step == 0)
                        table.fill(first, last, v);
                    else
                        table.set_run(first, last - first, v, step);
                    for (std::size_t i = first; i < last; ++i) {
                        model[i] = v + static_cast<index_t>(i - first) * step;
                        touched.insert(i);
                    }
                } else {
                    const auto v = static_cast<index_t>(rng() % 1000);
                    table.assign(size, v);
                    model.assign(size, v);
                    reassigned = true;
                }
            }
            // Every changed entry is reported (a reassignment reports the whole table).
            std::set<std::size_t> reported;
            table.for_each_changed([&](std::size_t i) { reported.insert(i); });
            CHECK(table.all_changed() == reassigned);
            if (!reassigned)
                for (std::size_t i : touched)
                    REQUIRE(reported.count(i) == 1);
            for (std::size_t i = 0; i < size; ++i)
                REQUIRE(table[i] == model[i]);
            if (rng() % 2 == 0) {
                table.rollback();
                model = before;
            }
            table.close();
            for (std::size_t i = 0; i < size; ++i)
                REQUIRE(table[i] == model[i]);
        }
    }
}

TEST_CASE("journal: closed, stretches record nothing; a checkpoint keeps the changes before it",
          "[journal]") {
    JournaledTable<index_t> table;
    table.assign(100, 0);
    const std::vector<index_t> at{10, 11, 12, 13};
    CHECK(table.save_stretches(at.data(), at.size()));
    for (index_t i : at)
        table.set_unlogged(static_cast<std::size_t>(i), 5);
    table.open();
    std::size_t changed = 0;
    table.for_each_changed([&](std::size_t) { ++changed; });
    CHECK(changed == 0);
    REQUIRE(table.save_stretches(at.data(), at.size()));
    for (index_t i : at)
        table.set_unlogged(static_cast<std::size_t>(i), 7);
    table.checkpoint();
    table.fill(20, 30, 9);
    table.rollback();
    for (index_t i : at)
        CHECK(table[static_cast<std::size_t>(i)] == 7);
    for (std::size_t i = 20; i < 30; ++i)
        CHECK(table[i] == 0);
    table.close();
}

namespace {

// The queue cases' start: 1, 2, 3, opened.
struct OpenedQueue {
    const std::vector<index_t> start{1, 2, 3};
    kvpool::detail::JournaledDeque<index_t> queue;
    OpenedQueue() {
        queue.assign(start.begin(), start.end());
        queue.open();
    }
};

} // namespace

TEST_CASE("journal: a queue's rollback takes back a range inserted at the front among single "
          "changes",
          "[journal]") {
    OpenedQueue opened;
    auto& [start, queue] = opened;
    queue.push_back(4);
    const std::vector<index_t> run{10, 11, 12, 13};
    queue.insert_front(run.begin(), run.end());
    queue.erase_front(2);
    queue.push_front(9);
    queue.insert_front(run.begin(), run.begin());
    const std::vector<index_t> changed{9, 12, 13, 1, 2, 3, 4};
    CHECK(std::vector<index_t>(queue.begin(), queue.end()) == changed);
    queue.rollback();
    CHECK(std::vector<index_t>(queue.begin(), queue.end()) == start);
    queue.close();
    queue.insert_front(run.begin(), run.end());
    CHECK(queue.size() == start.size() + run.size());
    CHECK(queue[0] == 10);
}

TEST_CASE("journal: a queue rebuilt twice in one opening rolls back to its contents before the "
          "first",
          "[journal]") {
    OpenedQueue opened;
    auto& [start, queue] = opened;
    queue.push_back(4);
    queue.clear();
    queue.push_back(5);
    queue.push_front(6);
    queue.clear();
    queue.push_back(7);
    CHECK(std::vector<index_t>(queue.begin(), queue.end()) == std::vector<index_t>{7});
    queue.rollback();
    CHECK(std::vector<index_t>(queue.begin(), queue.end()) == start);
    queue.close();
}

namespace {

// Whether the run queue reads as the model, size and front included, and
// holds no empty run and no two neighbouring runs that continue each other.
bool same_as_model(const kvpool::detail::JournaledRuns<index_t>& runs,
                   const std::deque<index_t>& model, std::mt19937_64& rng) {
    if (runs.size() != model.size() ||
        !std::equal(runs.begin(), runs.end(), model.begin(), model.end()))
        return false;
    if (!model.empty()) {
        const std::size_t k = std::uniform_int_distribution<std::size_t>(0, model.size() - 1)(rng);
        if (runs.front() != model.front() || *(runs.begin() + k) != model[k])
            return false;
    }
    const auto& list = runs.runs();
    for (std::size_t i = 0; i < list.size(); ++i)
        if (list[i].count <= 0 || (i > 0 && list[i - 1].first + list[i - 1].count == list[i].first))
            return false;
    return true;
}

} // namespace

TEST_CASE("journal: the free-id runs read as a queue of single ids through every change, and a "
          "rollback takes them back",
          "[journal][randomised]") {
    using kvpool::detail::JournaledRuns;
    for (const std::uint64_t seed : test::randomised_config().seed_list()) {
        std::printf("[journal-runs] seed %llu; reproduce: kvpool_tests_%s \"[journal]\" "
                    "--kvpool-seed %llu\n",
                    static_cast<unsigned long long>(seed), KVPOOL_TEST_BACKEND_NAME,
                    static_cast<unsigned long long>(seed));
        std::fflush(stdout);
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        const auto below = [&](std::size_t n) {
            return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
        };
        constexpr index_t ids = 400;
        JournaledRuns<index_t> runs;
        std::deque<index_t> model;
        // Ids not in the queue, a stretch of them (runs and single ids mixed,
        // in order, reversed or shuffled).
        const auto absent_ids = [&] {
            std::vector<index_t> absent;
            for (index_t v = 0; v < ids; ++v)
                if (std::find(model.begin(), model.end(), v) == model.end())
                    absent.push_back(v);
            if (absent.empty())
                return absent;
            const std::size_t first = below(absent.size());
            const std::size_t n = 1 + below(std::min<std::size_t>(absent.size() - first, 60));
            std::vector<index_t> out(absent.begin() + static_cast<std::ptrdiff_t>(first),
                                     absent.begin() + static_cast<std::ptrdiff_t>(first + n));
            if (below(3) == 0)
                std::reverse(out.begin(), out.end());
            else if (below(3) == 0)
                std::shuffle(out.begin(), out.end(), rng);
            return out;
        };
        for (int round = 0; round < 60; ++round) {
            INFO("round " << round);
            runs.open();
            const std::deque<index_t> before = model;
            for (int step = 0; step < 12; ++step) {
                const std::size_t op = below(6);
                INFO("step " << step << ", op " << op);
                if (op == 0) {
                    const auto add = absent_ids();
                    runs.insert_back(add.data(), add.data() + add.size());
                    model.insert(model.end(), add.begin(), add.end());
                } else if (op == 1) {
                    const auto add = absent_ids();
                    runs.insert_front(add.data(), add.data() + add.size());
                    model.insert(model.begin(), add.begin(), add.end());
                } else if (op == 2) {
                    auto add = absent_ids();
                    std::sort(add.begin(), add.end());
                    const auto run_end = std::adjacent_find(
                        add.begin(), add.end(), [](index_t a, index_t b) { return b != a + 1; });
                    const auto n = static_cast<std::size_t>(
                        run_end == add.end() ? add.size() : run_end - add.begin() + 1);
                    if (n > 0)
                        runs.insert_back_run(add[0], n);
                    model.insert(model.end(), add.begin(),
                                 add.begin() + static_cast<std::ptrdiff_t>(n));
                } else if (op == 3 && !model.empty()) {
                    const std::size_t n = 1 + below(model.size());
                    std::vector<index_t> out{-7};
                    runs.take_front(n, out);
                    std::vector<index_t> expected{-7};
                    expected.insert(expected.end(), model.begin(),
                                    model.begin() + static_cast<std::ptrdiff_t>(n));
                    CHECK(out == expected);
                    model.erase(model.begin(), model.begin() + static_cast<std::ptrdiff_t>(n));
                } else if (op == 4 && !model.empty()) {
                    const std::size_t n = 1 + below(model.size());
                    runs.erase_back(n);
                    model.erase(model.end() - static_cast<std::ptrdiff_t>(n), model.end());
                } else if (op == 5 && below(4) == 0) {
                    runs.clear();
                    model.clear();
                }
                REQUIRE(same_as_model(runs, model, rng));
            }
            if (below(2) == 0) {
                runs.rollback();
                model = before;
            }
            runs.close();
            REQUIRE(same_as_model(runs, model, rng));
        }
    }
}
