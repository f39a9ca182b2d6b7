// Builds a two-sided unified pool, allocates on both sides, frees from the
// middle, compacts, and prints the state after each step.
#include <kvpool/multi_ended_allocator.hpp>

#include <Kokkos_Core.hpp>
#include <fmt/core.h>

#include <vector>

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Allocator = kvpool::MultiEndedAllocator<Space>;

void print(const char* step, const Allocator& full, const Allocator& swa) {
    fmt::print("{}\n  {}\n  {}\n", step, full.state_string(), swa.state_string());
}

std::vector<kvpool::index_t> host_copy(const Allocator::index_view& ids) {
    auto mirror = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ids);
    return {mirror.data(), mirror.data() + mirror.extent(0)};
}

void run() {
    using kvpool::GrowDirection;
    kvpool::SubPoolSpec full_spec{"full", 128, 16, GrowDirection::up, 0};
    kvpool::SubPoolSpec swa_spec{"swa", 64, 16, GrowDirection::down, 0};
    kvpool::UnifiedKVPool<Space::memory_space> pool(
        kvpool::PoolLayout(8 << 20, {full_spec, swa_spec}));
    kvpool::AllocatorOptions lazy;
    lazy.mode = kvpool::CompactionMode::lazy;
    Allocator full(pool, "full");
    Allocator swa(pool, "swa", lazy);
    full.bind_peer(swa);
    const Space space;
    print("empty pool (8 MiB, full side eager, swa side lazy)", full, swa);

    std::vector<Allocator::index_view> requests;
    for (int r = 0; r < 8; ++r)
        requests.push_back(*full.alloc(space, 512));
    auto swa_tokens = *swa.alloc(space, 4096);
    print("8 requests of 512 tokens on full, 4096 tokens on swa", full, swa);

    full.free(space, host_copy(requests[2]));
    full.free(space, host_copy(requests[5]));
    print("freed requests 2 and 5 on full: eager compaction moved the survivors", full, swa);

    auto swa_ids = host_copy(swa_tokens);
    swa.free(space, std::vector<kvpool::index_t>(swa_ids.begin(), swa_ids.begin() + 2048));
    print("freed the first 2048 swa tokens: lazy mode left holes", full, swa);

    const auto moved = swa.flush(space, true);
    fmt::print("urgent flush moved {} pages\n", moved);
    print("after the flush", full, swa);

    full.check_invariants(space);
    swa.check_invariants(space);
    const auto& c = full.counters();
    fmt::print("full side: {} pages moved, {} bytes moved; swa side: {} pages moved, {} flushes\n",
               c.pages_moved, c.bytes_moved, swa.counters().pages_moved, swa.counters().flushes);
}

} // namespace

int main(int argc, char* argv[]) {
    Kokkos::ScopeGuard kokkos(argc, argv);
    run();
    return 0;
}
