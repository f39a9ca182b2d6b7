// The pool's byte fill: 8-byte words in the middle, single bytes at both
// unaligned edges, nothing outside the range.
#include <kvpool/kernels/portable/fill_bytes.hpp>

#include "test_support.hpp"

using namespace kvpool;
using namespace kvpool::test;

TEST_CASE("fill_bytes: every byte of an unaligned range, and only those", "[kernels]") {
    using Bytes = Kokkos::View<std::uint8_t*, Space::memory_space>;
    Bytes buffer("buffer", 1000);
    Kokkos::deep_copy(buffer, std::uint8_t(0xA5));
    for (std::size_t begin : {0, 1, 3, 8, 13})
        for (std::size_t end : {std::size_t(14), std::size_t(64), std::size_t(999)}) {
            INFO("range [" << begin << ", " << end << ")");
            Kokkos::deep_copy(buffer, std::uint8_t(0xA5));
            kernels::portable::fill_bytes(
                Space(), Kokkos::subview(buffer, std::make_pair(begin, end)), std::uint8_t(0x3C));
            Space().fence();
            auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), buffer);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < host.extent(0); ++i)
                wrong += host(i) != ((i >= begin && i < end) ? 0x3C : 0xA5);
            CHECK(wrong == 0);
        }
}

TEST_CASE("fill_bytes: a new pool reads as zeros", "[kernels]") {
    Pool pool(PoolLayout(4096 + 5, {spec("full", 24, 1, GrowDirection::up)}));
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pool.bytes());
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < host.extent(0); ++i)
        nonzero += host(i) != 0;
    CHECK(nonzero == 0);
}
