// The native CUDA/HIP kernels against the portable Kokkos ones, same random
// input, every byte compared. On host backends there is no native version.
#include <kokkos/dispatch.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <type_traits>

using namespace kvpool;
using namespace kvpool::test;

namespace {

constexpr bool has_native_kernels =
#if defined(KOKKOS_ENABLE_CUDA)
    std::is_same_v<Space, Kokkos::Cuda> ||
#endif
#if defined(KOKKOS_ENABLE_HIP)
    std::is_same_v<Space, kk::HIP> ||
#endif
    false;

using Bytes = Kokkos::View<std::uint8_t*, Space::memory_space>;

Bytes random_bytes(std::size_t n, std::uint64_t seed) {
    Bytes bytes("bytes", n);
    auto host = Kokkos::create_mirror_view(bytes);
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i < n; ++i) host(i) = static_cast<std::uint8_t>(rng());
    Kokkos::deep_copy(bytes, host);
    return bytes;
}

bool same_bytes(const Bytes& a, const Bytes& b) {
    auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
    auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
    return std::equal(ha.data(), ha.data() + ha.extent(0), hb.data());
}

}  // namespace

TEST_CASE("native: page move equals the portable move byte for byte", "[native]") {
    if (!has_native_kernels) SKIP("no native kernels for backend " KVPOOL_TEST_BACKEND_NAME);
    for (index_t page_bytes : {index_t(4096), index_t(131072 + 16), index_t(1000)}) {
        const std::uint64_t seed = 7000 + static_cast<std::uint64_t>(page_bytes);
        INFO("seed " << seed << ", page bytes " << page_bytes);
        const index_t pages = 96;
        std::vector<index_t> order(static_cast<std::size_t>(pages));
        std::iota(order.begin(), order.end(), 0);
        std::mt19937_64 rng(seed);
        std::shuffle(order.begin(), order.end(), rng);
        // Disjoint sources and destinations, in random pairs.
        std::vector<index_t> src(order.begin(), order.begin() + pages / 2);
        std::vector<index_t> dst(order.begin() + pages / 2, order.end());
        Bytes native = random_bytes(static_cast<std::size_t>(pages * page_bytes), seed);
        Bytes portable("portable", native.extent(0));
        Kokkos::deep_copy(portable, native);
        const Space space;
        kernels::move_pages(space, native, page_bytes, to_device(src), to_device(dst));
        kernels::move_pages_portable(space, portable, page_bytes, to_device(src), to_device(dst));
        space.fence();
        CHECK(same_bytes(native, portable));
    }
}

TEST_CASE("native: fused alloc-bind equals the portable kernels", "[native]") {
    if (!has_native_kernels) SKIP("no native kernels for backend " KVPOOL_TEST_BACKEND_NAME);
    const std::uint64_t seed = 424242;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const index_t page_size = 16, table_rows = 4096;
    std::vector<index_t> prefix, seq, last, out_start, page_start, decode_seq, decode_page_start;
    index_t tokens = 0, pages = 0, decode_pages = 0;
    for (int r = 0; r < 37; ++r) {
        const index_t p = static_cast<index_t>(rng() % 100), grow = static_cast<index_t>(rng() % 300);
        prefix.push_back(p);
        seq.push_back(p + grow);
        last.push_back(p == 0 ? -1 : 1000 + static_cast<index_t>(rng() % 500));
        out_start.push_back(tokens);
        page_start.push_back(pages);
        tokens += grow;
        pages += (p + grow + page_size - 1) / page_size - (p + page_size - 1) / page_size;
        decode_seq.push_back(p + grow + 1);
        decode_page_start.push_back(decode_pages);
        decode_pages += (p + grow) % page_size == 0 ? 1 : 0;
    }
    std::vector<index_t> vpages(static_cast<std::size_t>(pages)), ppages(vpages.size());
    std::iota(vpages.begin(), vpages.end(), 5);
    std::iota(ppages.begin(), ppages.end(), 2000);
    std::shuffle(vpages.begin(), vpages.end(), rng);
    const Space space;
    auto run = [&](bool native) {
        IndexView v2p("v2p", table_rows), p2v("p2v", table_rows), out("out", static_cast<std::size_t>(tokens));
        IndexView decode_out("decode_out", seq.size()), plain_out("plain_out", vpages.size() * page_size);
        Kokkos::deep_copy(v2p, -1);
        Kokkos::deep_copy(p2v, -1);
        const auto vp = to_device(vpages), pp = to_device(ppages);
        const auto dvp = Kokkos::subview(vp, std::make_pair<std::size_t, std::size_t>(0, decode_pages));
        if (native) {
            kernels::alloc_extend_bind(space, v2p, p2v, vp, pp, to_device(prefix), to_device(seq),
                                       to_device(out_start), to_device(page_start), to_device(last), page_size, out);
            kernels::alloc_decode_bind(space, v2p, p2v, IndexView(dvp), IndexView(dvp), to_device(decode_seq),
                                       to_device(decode_page_start), to_device(last), page_size, decode_out);
            kernels::bind_pages_emit_tokens(space, v2p, p2v, vp, pp, page_size, plain_out);
        } else {
            kernels::alloc_extend_bind_portable(space, v2p, p2v, vp, pp, to_device(prefix), to_device(seq),
                                                to_device(out_start), to_device(page_start), to_device(last),
                                                page_size, out);
            kernels::alloc_decode_bind_portable(space, v2p, p2v, IndexView(dvp), IndexView(dvp),
                                                to_device(decode_seq), to_device(decode_page_start),
                                                to_device(last), page_size, decode_out);
            kernels::bind_pages_emit_tokens_portable(space, v2p, p2v, vp, pp, page_size, plain_out);
        }
        space.fence();
        return std::vector<std::vector<index_t>>{to_host(v2p), to_host(p2v), to_host(out), to_host(decode_out),
                                                 to_host(plain_out)};
    };
    const auto native = run(true), portable = run(false);
    for (std::size_t i = 0; i < native.size(); ++i) CHECK(native[i] == portable[i]);
    CHECK(tokens > 0);
}
