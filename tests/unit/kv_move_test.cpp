// KV pools' all-layer moves: disjoint sets, overlapping sets rejected (a chain
// runs as two calls), the page-major whole-page move against the per-layer
// row moves, and a per-layer pool as the KV mover of an allocator.
#include "kv_pool_test_support.hpp"

#include <kvpool/kernels/dispatch.hpp>
#include <kvpool/storage/kv_mover.hpp>
#include <kvpool/storage/page_major_pools.hpp>
#include <kvpool/storage/per_layer_pools.hpp>

#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

// Per-layer MHA pool filled with pattern data, and its host model. V rows of
// 4 bytes: the row kernels copy them in 4-byte words.
struct FilledMHA {
    MHAGeometry g{2, 2, 4, 1, KVDtype::fp16};
    index_t slots = 48;
    MHAKVPool<Mem, u16> pool{g, slots};
    index_t kr = g.k_row_elements(), vr = g.v_row_elements();
    std::vector<u16> k, v; // [layer][slot][row element]

    FilledMHA() {
        k.resize(static_cast<std::size_t>(g.layers * slots * kr));
        v.resize(static_cast<std::size_t>(g.layers * slots * vr));
        auto kh = Kokkos::create_mirror_view(pool.k_buffers());
        auto vh = Kokkos::create_mirror_view(pool.v_buffers());
        for (index_t l = 0; l < g.layers; ++l)
            for (index_t t = 0; t < slots; ++t) {
                for (index_t e = 0; e < kr; ++e)
                    kh(l, t, e / g.head_dim, e % g.head_dim) = km(l, t, e) =
                        pattern<u16>(0, l, t, e);
                for (index_t e = 0; e < vr; ++e)
                    vh(l, t, e / g.v_head_dim, e % g.v_head_dim) = vm(l, t, e) =
                        pattern<u16>(1, l, t, e);
            }
        Kokkos::deep_copy(pool.k_buffers(), kh);
        Kokkos::deep_copy(pool.v_buffers(), vh);
    }
    u16& km(index_t l, index_t t, index_t e) {
        return k[static_cast<std::size_t>((l * slots + t) * kr + e)];
    }
    u16& vm(index_t l, index_t t, index_t e) {
        return v[static_cast<std::size_t>((l * slots + t) * vr + e)];
    }
    // The model of a parallel move: sources read before any destination is written.
    void move(const std::vector<index_t>& dst, const std::vector<index_t>& src) {
        const std::vector<u16> k0 = k, v0 = v;
        for (std::size_t i = 0; i < dst.size(); ++i)
            for (index_t l = 0; l < g.layers; ++l) {
                for (index_t e = 0; e < kr; ++e)
                    km(l, dst[i], e) = k0[at(l, src[i], e, kr)];
                for (index_t e = 0; e < vr; ++e)
                    vm(l, dst[i], e) = v0[at(l, src[i], e, vr)];
            }
    }
    std::size_t at(index_t l, index_t t, index_t e, index_t row) const {
        return static_cast<std::size_t>((l * slots + t) * row + e);
    }
    std::size_t mismatches() const {
        auto kh = on_host(pool.k_buffers());
        auto vh = on_host(pool.v_buffers());
        std::size_t bad = 0;
        for (index_t l = 0; l < g.layers; ++l)
            for (index_t t = 0; t < slots; ++t) {
                for (index_t e = 0; e < kr; ++e)
                    bad += kh(l, t, e / g.head_dim, e % g.head_dim) != k[at(l, t, e, kr)];
                for (index_t e = 0; e < vr; ++e)
                    bad += vh(l, t, e / g.v_head_dim, e % g.v_head_dim) != v[at(l, t, e, vr)];
            }
        return bad;
    }
};

} // namespace

TEST_CASE("kv layout: all-layer move with disjoint sets", "[kv-layout]") {
    FilledMHA f;
    const std::vector<index_t> dst = {10, 11, 2, 40}, src = {1, 20, 30, 47};
    f.pool.move_kv_cache(Space(), to_device(dst), to_device(src));
    f.move(dst, src);
    // One source copied to two destinations is not an overlap.
    const std::vector<index_t> dst2 = {41, 42}, src2 = {5, 5};
    f.pool.move_kv_cache(Space(), to_device(dst2), to_device(src2));
    f.move(dst2, src2);
    Space().fence();
    CHECK(f.mismatches() == 0);
}

TEST_CASE("kv layout: overlapping moves are rejected; a chain runs as two calls", "[kv-layout]") {
    FilledMHA f;
    // A chain 3 -> 4, 4 -> 5 in one call: 4 is both a source and a destination.
    const std::vector<index_t> chain_dst = {4, 5}, chain_src = {3, 4};
    expect_error(ErrorCode::invalid_argument, "4 (source entry 1) is also a destination",
                 [&] { f.pool.check_move(Space(), to_device(chain_dst), to_device(chain_src)); });
    expect_error(ErrorCode::invalid_argument, "destination 6 appears more than once", [&] {
        f.pool.check_move(Space(), to_device(std::vector<index_t>{6, 6}),
                          to_device(std::vector<index_t>{1, 2}));
    });
    expect_error(ErrorCode::invalid_argument, "9 (source entry 0) is also a destination", [&] {
        f.pool.check_move(Space(), to_device(std::vector<index_t>{9}),
                          to_device(std::vector<index_t>{9}));
    });
    if (kk::host_execution<Space>) {
        // On host backends every call checks, and a rejected call changes nothing.
        expect_error(ErrorCode::invalid_argument, "also a destination", [&] {
            f.pool.move_kv_cache(Space(), to_device(chain_dst), to_device(chain_src));
        });
        CHECK(f.mismatches() == 0);
    }
    // The same chain, read before write, as two calls: 4 -> 5 first, then 3 -> 4.
    f.pool.move_kv_cache(Space(), to_device(std::vector<index_t>{5}),
                         to_device(std::vector<index_t>{4}));
    f.pool.move_kv_cache(Space(), to_device(std::vector<index_t>{4}),
                         to_device(std::vector<index_t>{3}));
    f.move({5}, {4});
    f.move({4}, {3});
    Space().fence();
    CHECK(f.mismatches() == 0);
}

TEST_CASE("kv layout: page-major whole-page move equals the per-layer row moves", "[kv-layout]") {
    const MHAGeometry g{3, 2, 4, 2, KVDtype::bf16}; // 72 bytes per token
    const index_t ps = 4, pages = 10;
    const PoolLayout layout(g.entry_bytes() * ps * pages,
                            {sub_pool_spec("full", g, ps, GrowDirection::up)});
    const std::vector<index_t> src_pages = {7, 2, 9}, dst_pages = {1, 5, 3};
    std::vector<index_t> src_tokens, dst_tokens;
    for (std::size_t i = 0; i < src_pages.size(); ++i)
        for (index_t j = 0; j < ps; ++j) {
            src_tokens.push_back(src_pages[i] * ps + j);
            dst_tokens.push_back(dst_pages[i] * ps + j);
        }
    const Bytes initial = random_image(static_cast<std::size_t>(layout.total_bytes()), 7);

    // A: the allocator's page move, one contiguous copy per page.
    Pool a(layout);
    upload(a.bytes(), initial);
    kernels::move_pages(Space(), kernels::PageMoves{a.bytes(), layout.sub_pool(0).page_bytes,
                                                    to_device(src_pages), to_device(dst_pages)});
    // B: every layer's K and V rows of the same tokens.
    Pool b(layout);
    upload(b.bytes(), initial);
    PageMajorMHAPool<Mem, u16> pb(b, "full", g);
    pb.move_kv_cache(Space(), to_device(dst_tokens), to_device(src_tokens));
    // C: the row move of whole pages (what a page mover does).
    Pool c(layout);
    upload(c.bytes(), initial);
    PageMajorMHAPool<Mem, u16> pc(c, "full", g);
    pc.move_page_rows(Space(), to_device(dst_pages), to_device(src_pages), ps);
    Space().fence();

    Bytes expected = initial;
    const index_t page_bytes = layout.sub_pool(0).page_bytes;
    for (std::size_t i = 0; i < src_pages.size(); ++i)
        std::memcpy(&expected[static_cast<std::size_t>(dst_pages[i] * page_bytes)],
                    &initial[static_cast<std::size_t>(src_pages[i] * page_bytes)],
                    static_cast<std::size_t>(page_bytes));
    const Bytes after_a = download(a.bytes()), after_b = download(b.bytes()),
                after_c = download(c.bytes());
    CHECK(byte_mismatches(after_a, expected) == 0);
    CHECK(byte_mismatches(after_b, after_a) == 0);
    CHECK(byte_mismatches(after_c, after_a) == 0);

    // D: a per-layer pool holding the same KV, moved by the page mover, reads
    // back equal to the page-major pool element by element.
    MHAKVPool<Mem, u16> d(g, ps * pages);
    {
        // Fill D from the initial image through the documented offsets.
        const PageMajorMHAOffsets at{g, ps};
        auto kh = Kokkos::create_mirror_view(d.k_buffers());
        auto vh = Kokkos::create_mirror_view(d.v_buffers());
        for (index_t l = 0; l < g.layers; ++l)
            for (index_t t = 0; t < ps * pages; ++t)
                for (index_t h = 0; h < 2; ++h) {
                    for (index_t e = 0; e < 4; ++e)
                        kh(l, t, h, e) = get<u16>(initial, at.k(l, t, h * 4 + e));
                    for (index_t e = 0; e < 2; ++e)
                        vh(l, t, h, e) = get<u16>(initial, at.v(l, t, h * 2 + e));
                }
        Kokkos::deep_copy(d.k_buffers(), kh);
        Kokkos::deep_copy(d.v_buffers(), vh);
    }
    make_page_mover(d, ps)(Space(), to_device(src_pages), to_device(dst_pages));
    Space().fence();
    PageMajorMHAPool<Mem, u16> pa(a, "full", g);
    auto dk = on_host(d.k_buffers());
    auto dv = on_host(d.v_buffers());
    std::size_t bad = 0;
    for (index_t l = 0; l < g.layers; ++l) {
        auto k = strided_on_host(pa.k_buffer(l));
        auto v = strided_on_host(pa.v_buffer(l));
        for (index_t t = 0; t < ps * pages; ++t)
            for (index_t h = 0; h < 2; ++h) {
                for (index_t e = 0; e < 4; ++e)
                    bad += dk(l, t, h, e) != k(t / ps, t % ps, h, e);
                for (index_t e = 0; e < 2; ++e)
                    bad += dv(l, t, h, e) != v(t / ps, t % ps, h, e);
            }
    }
    CHECK(bad == 0);
}

TEST_CASE("kv layout: a per-layer MHA pool as the allocator's KV mover follows compaction",
          "[kv-layout]") {
    const MHAGeometry g{2, 1, 4, 4, KVDtype::fp16}; // 32 bytes per token
    const index_t ps = 4;
    Pool upool(
        PoolLayout(g.entry_bytes() * ps * 16, {sub_pool_spec("full", g, ps, GrowDirection::up)}));
    Allocator alloc(upool, "full", options(CompactionMode::eager));
    MHAKVPool<Mem, u16> kv(g, alloc.geometry().num_physical_pages * ps);
    set_kv_mover(alloc, kv);

    // Three requests of two pages each; every token's K/V (all layers) tagged by its virtual id.
    std::vector<std::vector<index_t>> requests;
    for (int r = 0; r < 3; ++r)
        requests.push_back(to_host(*alloc.alloc(Space(), 2 * ps)));
    const auto store = [&](const std::vector<index_t>& virtual_tokens) {
        const auto physical = alloc.translate(Space(), to_device(virtual_tokens));
        const auto n = static_cast<index_t>(virtual_tokens.size());
        for (index_t l = 0; l < g.layers; ++l)
            kv.set_kv_buffer(Space(), l, physical,
                             make_source<u16>(n, 1, 4,
                                              [&](index_t i, index_t, index_t e) {
                                                  return pattern<u16>(0, l, virtual_tokens[i], e);
                                              }),
                             make_source<u16>(n, 1, 4, [&](index_t i, index_t, index_t e) {
                                 return pattern<u16>(1, l, virtual_tokens[i], e);
                             }));
    };
    for (const auto& r : requests)
        store(r);
    const auto physical_before = to_host(alloc.translate(Space(), to_device(requests[2])));

    // Free the middle request: eager compaction moves the last request's pages into the hole.
    alloc.free(Space(), requests[1]);
    REQUIRE(alloc.counters().pages_moved > 0);
    REQUIRE_NOTHROW(alloc.check_invariants());
    const auto physical_after = to_host(alloc.translate(Space(), to_device(requests[2])));
    CHECK(physical_after != physical_before);

    auto kh = on_host(kv.k_buffers());
    auto vh = on_host(kv.v_buffers());
    std::size_t bad = 0;
    for (const int r : {0, 2}) {
        const auto physical = to_host(alloc.translate(Space(), to_device(requests[r])));
        for (std::size_t i = 0; i < physical.size(); ++i)
            for (index_t l = 0; l < g.layers; ++l)
                for (index_t e = 0; e < 4; ++e) {
                    bad += kh(l, physical[i], 0, e) != pattern<u16>(0, l, requests[r][i], e);
                    bad += vh(l, physical[i], 0, e) != pattern<u16>(1, l, requests[r][i], e);
                }
    }
    CHECK(bad == 0);

    // A pool smaller than the side cannot serve as its mover.
    MHAKVPool<Mem, u16> small(g, ps);
    expect_error(ErrorCode::invalid_argument, "the pool holds 4 token slots",
                 [&] { set_kv_mover(alloc, small); });
}
