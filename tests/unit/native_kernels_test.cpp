// The native CUDA/HIP kernels against the portable Kokkos ones, same random
// input, every byte compared. On host backends there is no native version.
#include <kvpool/kernels/dispatch.hpp>

#include "kernel_inputs.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>
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
    for (std::size_t i = 0; i < n; ++i)
        host(i) = static_cast<std::uint8_t>(rng());
    Kokkos::deep_copy(bytes, host);
    return bytes;
}

bool same_bytes(const Bytes& a, const Bytes& b) {
    auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
    auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
    return std::equal(ha.data(), ha.data() + ha.extent(0), hb.data());
}

} // namespace

TEST_CASE("native: page move equals the portable move byte for byte", "[native]") {
    if (!has_native_kernels)
        SKIP("no native kernels for backend " KVPOOL_TEST_BACKEND_NAME);
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
        kernels::move_pages(space,
                            kernels::PageMoves{native, page_bytes, to_device(src), to_device(dst)});
        kernels::portable::move_pages(
            space, kernels::PageMoves{portable, page_bytes, to_device(src), to_device(dst)});
        space.fence();
        CHECK(same_bytes(native, portable));
    }
}

TEST_CASE("native: fused alloc-bind equals the portable kernels", "[native]") {
    if (!has_native_kernels)
        SKIP("no native kernels for backend " KVPOOL_TEST_BACKEND_NAME);
    const std::uint64_t seed = 424242;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const index_t page_size = 16, table_rows = 4096;
    const PrefillRequests req = random_prefill_requests(rng, 37, page_size, 100, 300, 1000, 500);
    const index_t tokens = req.tokens, pages = req.pages, decode_pages = req.decode_pages;
    std::vector<index_t> vpages(static_cast<std::size_t>(pages)), ppages(vpages.size());
    std::iota(vpages.begin(), vpages.end(), 5);
    std::iota(ppages.begin(), ppages.end(), 2000);
    std::shuffle(vpages.begin(), vpages.end(), rng);
    // The follower (SWA side) binds the same virtual pages to pages of its own.
    std::vector<index_t> follower_ppages(vpages.size());
    std::iota(follower_ppages.begin(), follower_ppages.end(), 100);
    std::shuffle(follower_ppages.begin(), follower_ppages.end(), rng);
    const Space space;
    using Follower = kernels::Follower<IndexView, IndexView>;
    auto run = [&](bool native) {
        IndexView v2p("v2p", table_rows), p2v("p2v", table_rows),
            out("out", static_cast<std::size_t>(tokens));
        IndexView decode_out("decode_out", req.seq.size()),
            plain_out("plain_out", vpages.size() * page_size);
        Kokkos::deep_copy(v2p, -1);
        Kokkos::deep_copy(p2v, -1);
        const auto vp = to_device(vpages), pp = to_device(ppages);
        const auto dvp =
            Kokkos::subview(vp, std::make_pair<std::size_t, std::size_t>(0, decode_pages));
        // Each kernel binds a follower of its own; the plain alloc binds none.
        std::vector<Follower> followers;
        for (int k = 0; k < 2; ++k) {
            followers.push_back({IndexView("follower_v2p", table_rows),
                                 IndexView("follower_p2v", table_rows),
                                 to_device(follower_ppages)});
            Kokkos::deep_copy(followers.back().v2p, -1);
            Kokkos::deep_copy(followers.back().p2v, -1);
        }
        const kernels::AllocExtend extend{
            kernels::NewPages{v2p, p2v, vp, pp, page_size, followers[0]},
            to_device(req.prefix),
            to_device(req.seq),
            to_device(req.out_start),
            to_device(req.page_start),
            to_device(req.last),
            out};
        const kernels::AllocDecode decode{
            kernels::NewPages{v2p, p2v, IndexView(dvp), IndexView(dvp), page_size, followers[1]},
            to_device(req.decode_seq), to_device(req.decode_page_start), to_device(req.last),
            decode_out};
        const kernels::AllocTokens plain{kernels::NewPages{v2p, p2v, vp, pp, page_size}, plain_out};
        if (native) {
            kernels::alloc_extend_bind(space, extend);
            kernels::alloc_decode_bind(space, decode);
            kernels::bind_pages_emit_tokens(space, plain);
        } else {
            kernels::portable::alloc_extend_bind(space, extend);
            kernels::portable::alloc_decode_bind(space, decode);
            kernels::portable::bind_pages_emit_tokens(space, plain);
        }
        space.fence();
        return std::vector<std::vector<index_t>>{to_host(v2p),
                                                 to_host(p2v),
                                                 to_host(out),
                                                 to_host(decode_out),
                                                 to_host(plain_out),
                                                 to_host(followers[0].v2p),
                                                 to_host(followers[0].p2v),
                                                 to_host(followers[1].v2p),
                                                 to_host(followers[1].p2v)};
    };
    const auto native = run(true), portable = run(false);
    for (std::size_t i = 0; i < native.size(); ++i)
        CHECK(native[i] == portable[i]);
    CHECK(tokens > 0);
    // The followers were bound: every new page of the extend is there.
    CHECK(std::count_if(native[5].begin(), native[5].end(), [](index_t p) { return p >= 0; }) ==
          pages);
}

TEST_CASE(
    "native: compaction plan (moves and table writes in one launch) equals the portable kernels",
    "[native]") {
    if (!has_native_kernels)
        SKIP("no native kernels for backend " KVPOOL_TEST_BACKEND_NAME);
    const std::uint64_t seed = 5151;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const index_t page_bytes = 65536, pages = 64, table_rows = 3000;
    std::vector<index_t> order(static_cast<std::size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const std::vector<index_t> src(order.begin(), order.begin() + 20),
        dst(order.begin() + 20, order.begin() + 40);
    // More table writes than page moves, so the table part spans several blocks.
    std::vector<index_t> rows(static_cast<std::size_t>(table_rows));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    const std::vector<index_t> v2p_index(rows.begin(), rows.begin() + 700),
        p2v_index(rows.begin() + 700, rows.end());
    std::vector<index_t> v2p_value, p2v_value;
    for (std::size_t i = 0; i < v2p_index.size(); ++i)
        v2p_value.push_back(static_cast<index_t>(rng() % 5000));
    for (std::size_t i = 0; i < p2v_index.size(); ++i)
        p2v_value.push_back(static_cast<index_t>(rng() % 5000));
    const Space space;
    auto run = [&](bool native) {
        Bytes bytes = random_bytes(static_cast<std::size_t>(pages * page_bytes), seed);
        IndexView v2p("v2p", table_rows), p2v("p2v", table_rows);
        Kokkos::deep_copy(v2p, -1);
        Kokkos::deep_copy(p2v, -1);
        const kernels::PageMoves moves{bytes, page_bytes, to_device(src), to_device(dst)};
        const kernels::TableWrites writes{v2p, to_device(v2p_index), to_device(v2p_value),
                                          p2v, to_device(p2v_index), to_device(p2v_value)};
        if (native)
            kernels::apply_plan(space, kernels::CompactionPlan{moves, writes});
        else {
            kernels::portable::move_pages(space, moves);
            kernels::portable::apply_table_writes(space, writes);
        }
        space.fence();
        auto host_bytes = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bytes);
        return std::make_tuple(
            std::vector<std::uint8_t>(host_bytes.data(), host_bytes.data() + host_bytes.extent(0)),
            to_host(v2p), to_host(p2v));
    };
    const auto native = run(true), portable = run(false);
    CHECK(std::get<0>(native) == std::get<0>(portable));
    CHECK(std::get<1>(native) == std::get<1>(portable));
    CHECK(std::get<2>(native) == std::get<2>(portable));
    CHECK(std::count(std::get<1>(native).begin(), std::get<1>(native).end(), -1) ==
          table_rows - 700);
}

TEST_CASE("native: translate equals the portable kernel, int64 and int32 out", "[native]") {
    if (!has_native_kernels)
        SKIP("no native kernels for backend " KVPOOL_TEST_BACKEND_NAME);
    const std::uint64_t seed = 777;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const index_t page_size = 16, virtual_pages = 500;
    std::vector<index_t> table(static_cast<std::size_t>(virtual_pages));
    for (auto& p : table)
        p = rng() % 4 == 0 ? index_t(-1) : static_cast<index_t>(rng() % 10000);
    // Ids inside the table, past its end, and the -1 padding id.
    std::vector<index_t> ids;
    for (int i = 0; i < 20000; ++i)
        ids.push_back(static_cast<index_t>(rng() % (virtual_pages * page_size + 400)) - 1);
    const IndexView v2p = to_device(table), in = to_device(ids);
    using Int32View = Kokkos::View<std::int32_t*, Space::memory_space>;
    const Space space;
    IndexView native64("native64", ids.size()), portable64("portable64", ids.size());
    Int32View native32("native32", ids.size()), portable32("portable32", ids.size());
    kernels::translate_tokens(space, kernels::Translation{v2p, page_size, in, native64});
    kernels::portable::translate_tokens(space,
                                        kernels::Translation{v2p, page_size, in, portable64});
    kernels::translate_tokens(space, kernels::Translation{v2p, page_size, in, native32});
    kernels::portable::translate_tokens(space,
                                        kernels::Translation{v2p, page_size, in, portable32});
    space.fence();
    CHECK(to_host(native64) == to_host(portable64));
    auto n32 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), native32);
    auto p32 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), portable32);
    CHECK(std::equal(n32.data(), n32.data() + n32.extent(0), p32.data()));
    const auto host = to_host(native64);
    CHECK(std::count(host.begin(), host.end(), 0) > 0); // padding and unbound ids reach the sink
}

TEST_CASE("alloc-bind with handout zeroing: exactly the new pages' bytes are zero, native and "
          "portable alike",
          "[native][zeroing]") {
    const std::uint64_t seed = 90210;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const index_t page_size = 16, table_rows = 4096;
    // The owner's pages span three zeroing chunks, 16-byte aligned; the
    // follower's are smaller and unaligned.
    const index_t own_bytes = 40000, follower_bytes = 1000, follower_first = 100;
    const PrefillRequests req = random_prefill_requests(rng, 9, page_size, 40, 60, 1000, 500);
    const Space space;
    using Follower = kernels::Follower<IndexView, IndexView>;
    enum class Kernel { extend, decode, plain };
    for (const Kernel kernel : {Kernel::extend, Kernel::decode, Kernel::plain})
        for (const bool as_runs : {false, true}) {
            const index_t n = kernel == Kernel::decode ? req.decode_pages : req.pages;
            INFO("kernel " << static_cast<int>(kernel) << ", runs " << as_runs << ", pages " << n);
            REQUIRE(n > 0);
            std::vector<index_t> vpages(static_cast<std::size_t>(n)), ppages(vpages.size()),
                fpages(vpages.size());
            std::iota(vpages.begin(), vpages.end(), 5);
            std::iota(ppages.begin(), ppages.end(), 1);
            std::iota(fpages.begin(), fpages.end(), follower_first);
            if (as_runs) {
                // Two runs: the second half's physical pages start further up;
                // the follower's pages go down, as a band growing down binds them.
                for (std::size_t k = vpages.size() / 2; k < vpages.size(); ++k)
                    ppages[k] += 3;
                std::reverse(fpages.begin(), fpages.end());
            } else {
                std::shuffle(vpages.begin(), vpages.end(), rng);
                std::shuffle(ppages.begin(), ppages.end(), rng);
                std::shuffle(fpages.begin(), fpages.end(), rng);
            }
            const kernels::PageRuns runs =
                as_runs ? runs_of(vpages, ppages, &fpages) : kernels::PageRuns{};
            REQUIRE((runs.count > 0) == as_runs);
            if (as_runs && n > 1)
                CHECK(runs.follower_down[0]);
            const index_t buffer =
                std::max((n + 4) * own_bytes, (follower_first + n + 1) * follower_bytes);
            const Bytes initial = random_bytes(static_cast<std::size_t>(buffer), seed + n);
            auto expected = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), initial);
            for (index_t k = 0; k < n; ++k) {
                std::fill_n(expected.data() + ppages[k] * own_bytes, own_bytes, 0);
                std::fill_n(expected.data() + fpages[k] * follower_bytes, follower_bytes, 0);
            }
            auto run = [&](bool native, bool zero) {
                Bytes bytes("bytes", initial.extent(0));
                Kokkos::deep_copy(bytes, initial);
                IndexView v2p("v2p", table_rows), p2v("p2v", table_rows);
                Follower follower{IndexView("follower_v2p", table_rows),
                                  IndexView("follower_p2v", table_rows),
                                  as_runs ? IndexView() : to_device(fpages)};
                Kokkos::deep_copy(v2p, -1);
                Kokkos::deep_copy(p2v, -1);
                Kokkos::deep_copy(follower.v2p, -1);
                Kokkos::deep_copy(follower.p2v, -1);
                kernels::NewPages pages{v2p,
                                        p2v,
                                        as_runs ? IndexView() : to_device(vpages),
                                        as_runs ? IndexView() : to_device(ppages),
                                        page_size,
                                        follower};
                pages.runs = runs;
                if (zero) {
                    pages.zero_bytes = bytes;
                    pages.zero_page_bytes = own_bytes;
                    pages.zero_follower_page_bytes = follower_bytes;
                }
                const index_t outs = kernel == Kernel::extend   ? req.tokens
                                     : kernel == Kernel::decode ? index_t(req.seq.size())
                                                                : n * page_size;
                IndexView out("out", static_cast<std::size_t>(outs));
                if (kernel == Kernel::extend) {
                    const kernels::AllocExtend op{pages,
                                                  to_device(req.prefix),
                                                  to_device(req.seq),
                                                  to_device(req.out_start),
                                                  to_device(req.page_start),
                                                  to_device(req.last),
                                                  out};
                    native ? kernels::alloc_extend_bind(space, op)
                           : kernels::portable::alloc_extend_bind(space, op);
                } else if (kernel == Kernel::decode) {
                    const kernels::AllocDecode op{pages, to_device(req.decode_seq),
                                                  to_device(req.decode_page_start),
                                                  to_device(req.last), out};
                    native ? kernels::alloc_decode_bind(space, op)
                           : kernels::portable::alloc_decode_bind(space, op);
                } else {
                    const kernels::AllocTokens op{pages, out};
                    native ? kernels::bind_pages_emit_tokens(space, op)
                           : kernels::portable::bind_pages_emit_tokens(space, op);
                }
                space.fence();
                auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bytes);
                return std::make_tuple(
                    std::vector<std::uint8_t>(host.data(), host.data() + host.extent(0)),
                    std::vector<std::vector<index_t>>{to_host(v2p), to_host(p2v), to_host(out),
                                                      to_host(follower.v2p),
                                                      to_host(follower.p2v)});
            };
            const std::vector<std::uint8_t> want(expected.data(),
                                                 expected.data() + expected.extent(0));
            const auto portable = run(false, true);
            CHECK(std::get<0>(portable) == want);
            // Zeroing changes nothing else the launch writes.
            CHECK(std::get<1>(portable) == std::get<1>(run(false, false)));
            if (has_native_kernels) {
                const auto native = run(true, true);
                CHECK(std::get<0>(native) == want);
                CHECK(std::get<1>(native) == std::get<1>(portable));
            }
        }
}
