// Every installed header (every_header.hpp, generated), the class templates the
// library does not instantiate itself compiled for the default execution space,
// and a run of the smallest pool (allocate, free, check) that links against the
// allocator the installed library instantiates (detail/library_spaces.hpp).
#include "every_header.hpp"

#include <cstdio>

using Space = Kokkos::DefaultExecutionSpace;

template class kvpool::HostOffload<Space>;

namespace {

int run() {
    kvpool::UnifiedKVPool<Space::memory_space> pool(
        kvpool::PoolLayout(1 << 20, {{"full", 256, 4, kvpool::GrowDirection::up, 0}}));
    kvpool::MultiEndedAllocator<Space> full(pool, "full");
    const auto ids = full.alloc(Space(), 64);
    if (!ids || full.allocated_count() != 64)
        return 1;
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), *ids);
    full.free(Space(), std::vector<kvpool::index_t>(host.data(), host.data() + host.extent(0)));
    full.check_invariants(Space());
    return full.allocated_count() == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char* argv[]) {
    Kokkos::ScopeGuard kokkos(argc, argv);
    const int status = run();
    std::printf("kvpool install check: %s\n", status == 0 ? "ok" : "FAILED");
    return status;
}
