// KV pools: store then read back for every pool kind, per-layer and
// page-major (the bytes land where the documented layout says, and every
// other byte keeps its poison), and the entry bytes of the model geometry.
#include "kv_pool_test_support.hpp"

#include <kvpool/storage/page_major_pools.hpp>
#include <kvpool/storage/per_layer_pools.hpp>

#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

TEST_CASE("kv layout: entry bytes from the model geometry", "[kv-layout]") {
    const MHAGeometry mha{2, 4, 64, 32, KVDtype::bf16};
    CHECK(mha.entry_bytes() == 2 * 4 * (64 + 32) * 2);
    CHECK(MHAGeometry{2, 4, 64, 0, KVDtype::fp8}.entry_bytes() == 2 * 4 * 128);
    const MLAGeometry mla{3, 512, 64, KVDtype::fp8};
    CHECK(mla.entry_bytes() == 3 * 576);
    // conv 3 x 3 bf16 = 18 bytes, padded to 20 for the fp32 temporal block of 2 x 2 x 3 x 4 = 48.
    const MambaStateGeometry mamba{2, 3, 3, KVDtype::bf16, 2, 2, 3, KVDtype::fp32};
    CHECK(mamba.conv_block_bytes() == 20);
    CHECK(mamba.temporal_block_bytes() == 48);
    CHECK(mamba.entry_bytes() == 2 * 68);
    const SubPoolSpec s = sub_pool_spec("full", mha, 16, GrowDirection::up);
    CHECK(s.entry_bytes == mha.entry_bytes());
    CHECK(s.page_size == 16);
    CHECK(dtype_size(KVDtype::fp32) == 4);
    CHECK(std::is_same<storage_t<KVDtype::bf16>, std::uint16_t>::value);
    CHECK(std::is_same<storage_t<KVDtype::fp8>, std::uint8_t>::value);
    CHECK(std::is_same<storage_t<KVDtype::fp32>, std::uint32_t>::value);
}

TEST_CASE("kv layout: MHA per-layer pool, V head dim != K head dim, store then read back",
          "[kv-layout]") {
    const MHAGeometry g{3, 2, 8, 4, KVDtype::fp16};
    const index_t slots = 40;
    MHAKVPool<Mem, u16> pool(g, slots);
    Kokkos::deep_copy(pool.k_buffers(), poison<u16>());
    Kokkos::deep_copy(pool.v_buffers(), poison<u16>());

    const std::vector<std::pair<index_t, std::vector<index_t>>> stores = {{1, {5, 17, 3, 39, 0}},
                                                                          {2, {6, 7}}};
    std::set<std::pair<index_t, index_t>> stored;
    for (const auto& s : stores) {
        const index_t layer = s.first;
        const std::vector<index_t> loc = s.second;
        const auto n = static_cast<index_t>(loc.size());
        auto k = make_source<u16>(n, 2, 8, [&](index_t i, index_t h, index_t d) {
            return pattern<u16>(0, layer, loc[i], h * 8 + d);
        });
        auto v = make_source<u16>(n, 2, 4, [&](index_t i, index_t h, index_t d) {
            return pattern<u16>(1, layer, loc[i], h * 4 + d);
        });
        if (layer == 2) {
            // The overload without an instance runs on the default one.
            pool.set_kv_buffer(layer, to_device(loc), k, v);
            Kokkos::fence();
        } else {
            pool.set_kv_buffer(Space(), layer, to_device(loc), k, v);
        }
        for (index_t t : loc)
            stored.insert({layer, t});
    }
    Space().fence();

    auto kh = on_host(pool.k_buffers());
    auto vh = on_host(pool.v_buffers());
    std::size_t bad = 0;
    for (index_t l = 0; l < 3; ++l)
        for (index_t t = 0; t < slots; ++t) {
            const bool written = stored.count({l, t}) > 0;
            for (index_t h = 0; h < 2; ++h) {
                for (index_t d = 0; d < 8; ++d)
                    bad += kh(l, t, h, d) !=
                           (written ? pattern<u16>(0, l, t, h * 8 + d) : poison<u16>());
                for (index_t d = 0; d < 4; ++d)
                    bad += vh(l, t, h, d) !=
                           (written ? pattern<u16>(1, l, t, h * 4 + d) : poison<u16>());
            }
        }
    CHECK(bad == 0);

    // The per-layer accessors are [slots][heads][dim] windows of the same bytes.
    auto k1 = on_host(pool.k_buffer(1));
    auto v2 = on_host(pool.v_buffer(2));
    CHECK(k1.extent(0) == 40);
    CHECK(k1.extent(2) == 8);
    CHECK(v2.extent(2) == 4);
    CHECK(k1(17, 1, 3) == pattern<u16>(0, 1, 17, 11));
    CHECK(v2(7, 1, 2) == pattern<u16>(1, 2, 7, 6));
}

TEST_CASE("kv layout: MLA per-layer pool, fused and split latent/rope stores", "[kv-layout]") {
    const MLAGeometry g{2, 12, 4, KVDtype::bf16};
    const index_t slots = 24, row = 16;
    MLAKVPool<Mem, u16> pool(g, slots);
    Kokkos::deep_copy(pool.kv_buffers(), poison<u16>());

    const std::vector<index_t> loc0 = {4, 9, 23};
    pool.set_kv_buffer(Space(), 0, to_device(loc0),
                       make_source<u16>(3, 1, row, [&](index_t i, index_t, index_t e) {
                           return pattern<u16>(2, 0, loc0[i], e);
                       }));
    const std::vector<index_t> loc1 = {9, 1};
    pool.set_mla_kv_buffer(Space(), 1, to_device(loc1),
                           make_source<u16>(2, 1, 12,
                                            [&](index_t i, index_t, index_t e) {
                                                return pattern<u16>(2, 1, loc1[i], e);
                                            }),
                           make_source<u16>(2, 1, 4, [&](index_t i, index_t, index_t e) {
                               return pattern<u16>(2, 1, loc1[i], 12 + e);
                           }));
    Space().fence();

    const std::set<std::pair<index_t, index_t>> stored = {{0, 4}, {0, 9}, {0, 23}, {1, 9}, {1, 1}};
    auto h = on_host(pool.kv_buffers());
    std::size_t bad = 0;
    for (index_t l = 0; l < 2; ++l)
        for (index_t t = 0; t < slots; ++t)
            for (index_t e = 0; e < row; ++e)
                bad += h(l, t, 0, e) !=
                       (stored.count({l, t}) ? pattern<u16>(2, l, t, e) : poison<u16>());
    CHECK(bad == 0);
    CHECK(on_host(pool.kv_buffer(1))(9, 0, 13) == pattern<u16>(2, 1, 9, 13));
}

TEST_CASE("kv layout: page-major MHA over the unified buffer, store then read back",
          "[kv-layout]") {
    const MHAGeometry g{2, 2, 4, 6, KVDtype::bf16}; // 80 bytes per token
    const index_t ps = 4;
    Pool upool(PoolLayout(80 * ps * 12 + 100, {sub_pool_spec("full", g, ps, GrowDirection::up)}));
    PageMajorMHAPool<Mem, u16> pool(upool, "full", g);
    REQUIRE(pool.num_pages() == 12);
    REQUIRE(pool.num_slots() == 48);
    Kokkos::deep_copy(upool.bytes(), poison_byte);

    const PageMajorMHAOffsets at{g, ps};
    Bytes expected(static_cast<std::size_t>(upool.total_bytes()), poison_byte);
    const std::vector<std::pair<index_t, std::vector<index_t>>> stores = {{0, {5, 17, 2, 40, 47}},
                                                                          {1, {5, 33}}};
    for (const auto& s : stores) {
        const index_t layer = s.first;
        const std::vector<index_t> loc = s.second;
        const auto n = static_cast<index_t>(loc.size());
        pool.set_kv_buffer(Space(), layer, to_device(loc),
                           make_source<u16>(n, 2, 4,
                                            [&](index_t i, index_t h, index_t d) {
                                                return pattern<u16>(0, layer, loc[i], h * 4 + d);
                                            }),
                           make_source<u16>(n, 2, 6, [&](index_t i, index_t h, index_t d) {
                               return pattern<u16>(1, layer, loc[i], h * 6 + d);
                           }));
        for (index_t t : loc) {
            for (index_t e = 0; e < 8; ++e)
                put(expected, at.k(layer, t, e), pattern<u16>(0, layer, t, e));
            for (index_t e = 0; e < 12; ++e)
                put(expected, at.v(layer, t, e), pattern<u16>(1, layer, t, e));
        }
    }
    Space().fence();
    const Bytes actual = download(upool.bytes());
    CHECK(byte_mismatches(actual, expected) == 0);

    // The strided per-layer views read the same bytes.
    for (index_t l = 0; l < 2; ++l) {
        auto k = strided_on_host(pool.k_buffer(l));
        auto v = strided_on_host(pool.v_buffer(l));
        REQUIRE(k.extent(0) == 12);
        REQUIRE(k.extent(1) == 4);
        REQUIRE(v.extent(3) == 6);
        std::size_t bad = 0;
        for (index_t p = 0; p < 12; ++p)
            for (index_t s = 0; s < ps; ++s)
                for (index_t h = 0; h < 2; ++h) {
                    for (index_t d = 0; d < 4; ++d)
                        bad += k(p, s, h, d) != get<u16>(actual, at.k(l, p * ps + s, h * 4 + d));
                    for (index_t d = 0; d < 6; ++d)
                        bad += v(p, s, h, d) != get<u16>(actual, at.v(l, p * ps + s, h * 6 + d));
                }
        CHECK(bad == 0);
    }
}

TEST_CASE("kv layout: page-major MLA over the unified buffer, store then read back",
          "[kv-layout]") {
    const MLAGeometry g{3, 6, 2, KVDtype::fp8}; // 8-byte rows, 24 bytes per token
    const index_t ps = 2, row = 8;
    Pool upool(PoolLayout(24 * ps * 10, {sub_pool_spec("mla", g, ps, GrowDirection::down)}));
    PageMajorMLAPool<Mem, std::uint8_t> pool(upool, "mla", g);
    REQUIRE(pool.num_slots() == 20);
    Kokkos::deep_copy(upool.bytes(), poison_byte);

    const auto offset = [&](index_t layer, index_t t, index_t e) {
        return t / ps * ps * 24 + layer * ps * row + t % ps * row + e;
    };
    Bytes expected(static_cast<std::size_t>(upool.total_bytes()), poison_byte);
    const std::vector<index_t> loc = {3, 4, 19};
    pool.set_kv_buffer(Space(), 2, to_device(loc),
                       make_source<std::uint8_t>(3, 1, row, [&](index_t i, index_t, index_t e) {
                           return pattern<std::uint8_t>(3, 2, loc[i], e);
                       }));
    const std::vector<index_t> loc1 = {3, 10};
    pool.set_mla_kv_buffer(Space(), 0, to_device(loc1),
                           make_source<std::uint8_t>(2, 1, 6,
                                                     [&](index_t i, index_t, index_t e) {
                                                         return pattern<std::uint8_t>(3, 0, loc1[i],
                                                                                      e);
                                                     }),
                           make_source<std::uint8_t>(2, 1, 2, [&](index_t i, index_t, index_t e) {
                               return pattern<std::uint8_t>(3, 0, loc1[i], 6 + e);
                           }));
    for (index_t t : loc)
        for (index_t e = 0; e < row; ++e)
            expected[offset(2, t, e)] = pattern<std::uint8_t>(3, 2, t, e);
    for (index_t t : loc1)
        for (index_t e = 0; e < row; ++e)
            expected[offset(0, t, e)] = pattern<std::uint8_t>(3, 0, t, e);
    Space().fence();
    const Bytes actual = download(upool.bytes());
    CHECK(byte_mismatches(actual, expected) == 0);

    auto v2 = strided_on_host(pool.kv_buffer(2));
    REQUIRE(v2.extent(0) == 10);
    REQUIRE(v2.extent(2) == 1);
    std::size_t bad = 0;
    for (index_t p = 0; p < 10; ++p)
        for (index_t s = 0; s < ps; ++s)
            for (index_t e = 0; e < row; ++e)
                bad += v2(p, s, 0, e) != actual[offset(2, p * ps + s, e)];
    CHECK(bad == 0);
}
