// A kernel that keeps an execution-space instance busy for a while (tens of
// milliseconds on an H200), so that work queued after it there starts late.
#pragma once

#include <kvpool/kokkos_compat.hpp>
#include <kvpool/types.hpp>

#include <cstdint>

namespace kvpool::test {

template <class ExecutionSpace, class SinkView>
void delay(const ExecutionSpace& space, const SinkView& sink) {
    Kokkos::parallel_for(
        kk::range(space, 1), KOKKOS_LAMBDA(index_t) {
            std::uint64_t x = 1;
            for (int i = 0; i < (1 << 24); ++i)
                x = x * 6364136223846793005ull + 1442695040888963407ull;
            sink(0) = x;
        });
}

} // namespace kvpool::test
