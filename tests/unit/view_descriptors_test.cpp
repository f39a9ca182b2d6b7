// View descriptors (view_descriptors.hpp): every element a descriptor
// addresses is the byte the page-major pools' views address (MHA, MLA, the
// dense MLA views, the padded Mamba state, whose clear_slots zeroes exactly
// the descriptors' bytes), the paged views tile their pages exactly once, the
// SGLang-compatible Mamba slots follow their documented formula and tile the
// slots, and bad geometry is refused naming what is wrong.
#include "kv_pool_test_support.hpp"

#include <kvpool/storage/page_major_pools.hpp>
#include <kvpool/storage/view_descriptors.hpp>

#include <array>
#include <string>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

// Bytes from the pool's base to element i of a page-major pool's view.
template <class View> index_t view_byte(const View& v, const Pool& pool, std::array<index_t, 4> i) {
    std::size_t e = 0;
    for (std::size_t k = 0; k < i.size(); ++k)
        e += static_cast<std::size_t>(i[k]) * v.stride(k);
    return reinterpret_cast<const std::uint8_t*>(v.data() + e) - pool.bytes().data();
}

// The view's extents as the descriptor's shape.
template <class View> bool same_shape(const View& v, const ViewDescriptor& d) {
    if (d.ndim != 4)
        return false;
    for (std::size_t k = 0; k < 4; ++k)
        if (static_cast<index_t>(v.extent(k)) != d.shape[k])
            return false;
    return true;
}

// Calls f(index) for every index of the descriptor's shape.
template <class F> void for_each_index(const ViewDescriptor& d, F&& f) {
    std::array<index_t, max_view_dims> i{};
    for (int k = 0; k < d.ndim; ++k)
        if (d.shape[static_cast<std::size_t>(k)] == 0)
            return;
    for (;;) {
        f(i);
        int k = d.ndim - 1;
        for (; k >= 0; --k) {
            auto& x = i[static_cast<std::size_t>(k)];
            if (++x < d.shape[static_cast<std::size_t>(k)])
                break;
            x = 0;
        }
        if (k < 0)
            return;
    }
}

index_t element_byte(const ViewDescriptor& d, const std::array<index_t, max_view_dims>& i) {
    index_t e = 0;
    for (std::size_t k = 0; k < static_cast<std::size_t>(d.ndim); ++k)
        e += i[k] * d.strides[k];
    return d.offset + e * dtype_size(d.dtype);
}

// How many times the descriptors' elements cover each byte of [0, bytes).
std::vector<int> coverage(const std::vector<ViewDescriptor>& descriptors, index_t bytes) {
    std::vector<int> hits(static_cast<std::size_t>(bytes), 0);
    for (const ViewDescriptor& d : descriptors)
        for_each_index(d, [&](const auto& i) {
            const index_t at = element_byte(d, i);
            for (index_t b = 0; b < dtype_size(d.dtype); ++b)
                ++hits.at(static_cast<std::size_t>(at + b));
        });
    return hits;
}

std::size_t not_once(const std::vector<int>& hits, index_t from, index_t to) {
    std::size_t bad = 0;
    for (index_t b = 0; b < static_cast<index_t>(hits.size()); ++b)
        bad += hits[static_cast<std::size_t>(b)] != (b >= from && b < to ? 1 : 0);
    return bad;
}

template <class T> void check_mha(const MHAGeometry& g, index_t ps, GrowDirection grow) {
    INFO("MHA layers " << g.layers << " heads " << g.heads << " head_dim " << g.head_dim
                       << " v_head_dim " << g.v_head_dim << " " << to_string(g.dtype)
                       << " page_size " << ps);
    const index_t page_bytes = g.entry_bytes() * ps;
    Pool upool(PoolLayout(page_bytes * 7 + 3, {sub_pool_spec("kv", g, ps, grow)}));
    PageMajorMHAPool<Mem, T> pool(upool, "kv", g);
    const auto descriptors = mha_layer_views(g, {ps, pool.num_pages(), 0});
    REQUIRE(descriptors.size() == static_cast<std::size_t>(2 * g.layers));
    std::size_t bad = 0, elements = 0;
    for (index_t l = 0; l < g.layers; ++l) {
        const ViewDescriptor& k = descriptors[static_cast<std::size_t>(2 * l)];
        const ViewDescriptor& v = descriptors[static_cast<std::size_t>(2 * l + 1)];
        CHECK((k.dtype == g.dtype && v.dtype == g.dtype));
        REQUIRE(same_shape(pool.k_buffer(l), k));
        REQUIRE(same_shape(pool.v_buffer(l), v));
        const auto check = [&](const ViewDescriptor& d, const auto& view) {
            for_each_index(d, [&](const auto& i) {
                ++elements;
                bad += element_byte(d, i) != view_byte(view, upool, {i[0], i[1], i[2], i[3]});
            });
        };
        check(k, pool.k_buffer(l));
        check(v, pool.v_buffer(l));
    }
    CHECK(elements ==
          static_cast<std::size_t>(pool.num_slots() * g.entry_bytes() / dtype_size(g.dtype)));
    CHECK(bad == 0);
    CHECK(not_once(coverage(descriptors, upool.total_bytes()), 0, pool.num_pages() * page_bytes) ==
          0);
}

template <class T> void check_mla(const MLAGeometry& g, index_t ps) {
    INFO("MLA layers " << g.layers << " row " << g.row_elements() << " " << to_string(g.dtype)
                       << " page_size " << ps);
    const index_t page_bytes = g.entry_bytes() * ps;
    Pool upool(PoolLayout(page_bytes * 5, {sub_pool_spec("mla", g, ps, GrowDirection::down)}));
    PageMajorMLAPool<Mem, T> pool(upool, "mla", g);
    const PagedRegion region{ps, pool.num_pages(), 0};
    const auto paged = mla_layer_views(g, region);
    const auto dense = mla_dense_layer_views(g, region);
    REQUIRE(paged.size() == static_cast<std::size_t>(g.layers));
    REQUIRE(dense.size() == paged.size());
    std::size_t bad = 0;
    for (index_t l = 0; l < g.layers; ++l) {
        const ViewDescriptor& d = paged[static_cast<std::size_t>(l)];
        const ViewDescriptor& flat = dense[static_cast<std::size_t>(l)];
        REQUIRE(same_shape(pool.kv_buffer(l), d));
        REQUIRE(flat.ndim == 3);
        CHECK(flat.shape[0] == pool.num_pages() * g.layers * ps);
        for_each_index(d, [&](const auto& i) {
            const index_t at = view_byte(pool.kv_buffer(l), upool, {i[0], i[1], i[2], i[3]});
            bad += element_byte(d, i) != at;
            // Token t = p * ps + s at dense row p * ps * layers + s, in every layer's view.
            bad += flat.byte_offset({i[0] * ps * g.layers + i[1], 0, i[3]}) != at;
        });
    }
    CHECK(bad == 0);
    CHECK(not_once(coverage(paged, upool.total_bytes()), 0, pool.num_pages() * page_bytes) == 0);
    // The last layer's dense view runs (layers - 1) * ps rows past the last page.
    CHECK(dense.back().end_byte() == (pool.num_pages() * g.layers + g.layers - 1) * ps *
                                         g.row_elements() * dtype_size(g.dtype));
}

// Element i of a (3- or 4-dim) pool view, in bytes from the pool's base.
template <class View>
index_t state_byte(const View& v, const Pool& pool, const std::array<index_t, max_view_dims>& i) {
    std::size_t e = 0;
    for (std::size_t k = 0; k < static_cast<std::size_t>(View::rank); ++k)
        e += static_cast<std::size_t>(i[k]) * v.stride(k);
    return reinterpret_cast<const std::uint8_t*>(v.data() + e) - pool.bytes().data();
}

template <class View> bool same_extents(const View& v, const ViewDescriptor& d) {
    if (d.ndim != static_cast<int>(View::rank))
        return false;
    for (std::size_t k = 0; k < static_cast<std::size_t>(d.ndim); ++k)
        if (static_cast<index_t>(v.extent(k)) != d.shape[k])
            return false;
    return true;
}

// PageMajorMambaPool's padded slots: each descriptor element is the byte the
// pool's view addresses; the views cover every byte of the slots at most once,
// leaving exactly the padding; clear_slots (the pool's kernel, over its own row
// map) zeroes exactly the descriptors' bytes of the slots it clears.
template <class TConv, class TTemporal>
void check_mamba_state(const MambaStateGeometry& g, GrowDirection grow) {
    INFO("Mamba state layers " << g.layers << " conv " << g.conv_dim << "x" << g.conv_width << " "
                               << to_string(g.conv_dtype) << ", temporal " << g.heads << "x"
                               << g.head_dim << "x" << g.state_dim << " "
                               << to_string(g.temporal_dtype));
    const index_t entry = g.entry_bytes();
    Pool upool(PoolLayout(entry * 6 + 5, {sub_pool_spec("mamba", g, 1, grow)}));
    PageMajorMambaPool<Mem, TConv, TTemporal> pool(upool, "mamba", g);
    const index_t slots = pool.num_slots();
    const auto descriptors = mamba_state_views(g, slots, 0);
    REQUIRE(descriptors.size() == static_cast<std::size_t>(2 * g.layers));
    std::size_t bad = 0;
    for (index_t l = 0; l < g.layers; ++l) {
        const ViewDescriptor& conv = descriptors[static_cast<std::size_t>(2 * l)];
        const ViewDescriptor& temporal = descriptors[static_cast<std::size_t>(2 * l + 1)];
        CHECK((conv.dtype == g.conv_dtype && temporal.dtype == g.temporal_dtype));
        REQUIRE(same_extents(pool.conv_state(l), conv));
        REQUIRE(same_extents(pool.temporal_state(l), temporal));
        for_each_index(conv, [&](const auto& i) {
            bad += element_byte(conv, i) != state_byte(pool.conv_state(l), upool, i);
        });
        for_each_index(temporal, [&](const auto& i) {
            bad += element_byte(temporal, i) != state_byte(pool.temporal_state(l), upool, i);
        });
    }
    CHECK(bad == 0);
    const std::vector<int> hits = coverage(descriptors, upool.total_bytes());
    std::size_t twice = 0, covered = 0, outside = 0;
    for (index_t b = 0; b < upool.total_bytes(); ++b) {
        const int h = hits[static_cast<std::size_t>(b)];
        twice += h > 1;
        covered += h == 1 && b < slots * entry;
        outside += h > 0 && b >= slots * entry;
    }
    CHECK(twice == 0);
    CHECK(outside == 0);
    const index_t rows = g.conv_row_bytes() + g.temporal_row_bytes();
    CHECK(covered == static_cast<std::size_t>(slots * g.layers * rows));

    // Clearing two slots zeroes their descriptors' bytes and nothing else.
    Kokkos::deep_copy(upool.bytes(), poison_byte);
    const std::vector<index_t> cleared = {1, slots - 1};
    pool.clear_slots(Space(), to_device(cleared));
    Space().fence();
    Bytes expected(static_cast<std::size_t>(upool.total_bytes()), poison_byte);
    for (const ViewDescriptor& d : descriptors)
        for_each_index(d, [&](const auto& i) {
            if (i[0] != cleared[0] && i[0] != cleared[1])
                return;
            for (index_t b = 0; b < dtype_size(d.dtype); ++b)
                expected[static_cast<std::size_t>(element_byte(d, i) + b)] = 0;
        });
    CHECK(byte_mismatches(download(upool.bytes()), expected) == 0);
}

} // namespace

TEST_CASE("view descriptors: page-major MHA addresses what PageMajorMHAPool's views do",
          "[view-descriptors]") {
    check_mha<u16>({2, 2, 4, 6, KVDtype::bf16}, 4, GrowDirection::up);
    check_mha<u32>({3, 1, 8, 0, KVDtype::fp32}, 1, GrowDirection::down);
    check_mha<std::uint8_t>({1, 4, 2, 2, KVDtype::fp8}, 2, GrowDirection::up);
    check_mha<u16>({4, 2, 3, 5, KVDtype::fp16}, 8, GrowDirection::down);
}

TEST_CASE("view descriptors: page-major and dense MLA address what PageMajorMLAPool's views do",
          "[view-descriptors]") {
    check_mla<std::uint8_t>({3, 6, 2, KVDtype::fp8}, 2);
    check_mla<u16>({2, 8, 0, KVDtype::bf16}, 1);
    check_mla<u32>({4, 3, 2, KVDtype::fp32}, 4);
}

TEST_CASE("view descriptors: padded page-major Mamba state addresses what PageMajorMambaPool's "
          "views and clear_slots do",
          "[view-descriptors]") {
    // bf16 conv of 9 elements: 18 bytes padded to 20 before the fp32 temporal state.
    check_mamba_state<u16, u32>(mamba_geometry, GrowDirection::down);
    // fp32 conv, bf16 temporal of 3 elements: 6 bytes padded to 8.
    check_mamba_state<u32, u16>({3, 2, 2, KVDtype::fp32, 1, 3, 1, KVDtype::bf16},
                                GrowDirection::up);
    // fp8 conv of 5 bytes padded to 8; fp32 temporal.
    check_mamba_state<std::uint8_t, u32>({2, 5, 1, KVDtype::fp8, 1, 2, 2, KVDtype::fp32},
                                         GrowDirection::up);
    // Same element sizes: no padding.
    check_mamba_state<u16, u16>({1, 4, 3, KVDtype::fp16, 2, 2, 2, KVDtype::bf16},
                                GrowDirection::down);
}

TEST_CASE("view descriptors: the Mamba state views' slots start at the anchor",
          "[view-descriptors]") {
    const MambaStateGeometry& g = mamba_geometry;
    const auto at0 = mamba_state_views(g, 4, 0);
    const auto at = mamba_state_views(g, 4, 40);
    REQUIRE(at.size() == at0.size());
    for (std::size_t i = 0; i < at.size(); ++i) {
        CHECK(at[i].offset == at0[i].offset + 40);
        CHECK(at[i].strides == at0[i].strides);
        CHECK(at[i].strides[0] * dtype_size(at[i].dtype) == g.entry_bytes());
    }
}

TEST_CASE("view descriptors: an anchored region shifts every view by its anchor",
          "[view-descriptors]") {
    const MHAGeometry g{2, 2, 4, 0, KVDtype::bf16};
    const auto at0 = mha_layer_views(g, {4, 3, 0});
    const auto at = mha_layer_views(g, {4, 3, 96});
    REQUIRE(at.size() == at0.size());
    for (std::size_t i = 0; i < at.size(); ++i) {
        CHECK(at[i].offset == at0[i].offset + 96);
        CHECK(at[i].strides == at0[i].strides);
    }
}

TEST_CASE("view descriptors: SGLang's Mamba slots, conv tensors then temporal, every layer",
          "[view-descriptors]") {
    struct Case {
        MambaTensorsGeometry g;
        index_t slots, anchor;
    };
    const std::vector<Case> cases = {
        {{2, {{4, 3}}, KVDtype::fp16, {2, 4, 4}, KVDtype::fp32}, 5, 0},
        {{3, {{4, 3}, {2}}, KVDtype::fp32, {2, 2, 2}, KVDtype::fp32}, 4, 64},
        {{1, {{6}, {1, 2, 2, 2}}, KVDtype::bf16, {}, KVDtype::bf16}, 3, 2},
    };
    for (const Case& c : cases) {
        const MambaTensorsGeometry& g = c.g;
        const index_t entry = g.entry_bytes();
        const auto views = mamba_tensor_views(g, c.slots, c.anchor);
        INFO("layers " << g.layers << ", " << g.conv_shapes.size() << " conv tensors, entry "
                       << entry);
        REQUIRE(views.size() == g.conv_shapes.size() + 1);
        // Tensor j's block of every layer follows the blocks before it in the slot.
        index_t block = c.anchor;
        std::size_t bad = 0;
        for (std::size_t j = 0; j < views.size(); ++j) {
            const bool conv = j < g.conv_shapes.size();
            const auto& shape = conv ? g.conv_shapes[j] : g.temporal_shape;
            const index_t size = dtype_size(conv ? g.conv_dtype : g.temporal_dtype);
            index_t inner = 1;
            for (index_t x : shape)
                inner *= x;
            const ViewDescriptor& d = views[j];
            REQUIRE(d.ndim == static_cast<int>(shape.size()) + 2);
            CHECK((d.shape[0] == g.layers && d.shape[1] == c.slots));
            for_each_index(d, [&](const auto& i) {
                index_t flat = 0;
                for (std::size_t k = 0; k < shape.size(); ++k)
                    flat = flat * shape[k] + i[k + 2];
                bad += element_byte(d, i) != block + i[1] * entry + (i[0] * inner + flat) * size;
            });
            block += g.layers * inner * size;
        }
        CHECK(bad == 0);
        CHECK(block == c.anchor + entry);
        CHECK(not_once(coverage(views, c.anchor + c.slots * entry + 8), c.anchor,
                       c.anchor + c.slots * entry) == 0);
    }
}

TEST_CASE("view descriptors: bad geometry is refused, naming what is wrong", "[view-descriptors]") {
    const auto invalid = ErrorCode::invalid_argument;
    expect_error(invalid, "heads", [] { mha_layer_views({2, 0, 4, 0, KVDtype::bf16}, {1, 4, 0}); });
    expect_error(invalid, "page_size", [] {
        mha_layer_views({2, 2, 4, 0, KVDtype::bf16}, {0, 4, 0});
    });
    expect_error(invalid, "num_pages", [] {
        mla_layer_views({2, 4, 0, KVDtype::bf16}, {1, -1, 0});
    });
    expect_error(invalid, "anchor_bytes 3", [] {
        mla_dense_layer_views({2, 4, 0, KVDtype::fp32}, {1, 4, 3});
    });
    expect_error(invalid, "conv_state_shapes", [] {
        mamba_tensor_views({1, {}, KVDtype::bf16, {2}, KVDtype::fp32}, 2, 0);
    });
    // A 3-byte fp8 conv block puts the fp32 temporal state at byte 3.
    expect_error(invalid, "misaligned", [] {
        mamba_tensor_views({1, {{3}}, KVDtype::fp8, {2}, KVDtype::fp32}, 2, 0);
    });
    expect_error(invalid, "at most 4", [] {
        mamba_tensor_views({1, {{1, 1, 1, 1, 1}}, KVDtype::bf16, {2}, KVDtype::fp32}, 2, 0);
    });
    expect_error(invalid, "extent 0", [] {
        mamba_tensor_views({1, {{4, 0}}, KVDtype::bf16, {2}, KVDtype::fp32}, 2, 0);
    });
    expect_error(invalid, "state_dim", [] {
        mamba_state_views({1, 2, 2, KVDtype::bf16, 1, 2, 0, KVDtype::fp32}, 2, 0);
    });
    expect_error(invalid, "slots must be >= 0", [] { mamba_state_views(mamba_geometry, -1, 0); });
    // bf16 conv, fp32 temporal: the slots must start 4-byte aligned.
    expect_error(invalid, "anchor_bytes 2", [] { mamba_state_views(mamba_geometry, 2, 2); });
    const ViewDescriptor d = mha_layer_views({1, 1, 2, 0, KVDtype::bf16}, {1, 2, 0})[0];
    expect_error(ErrorCode::out_of_range, "outside its extent", [&] {
        d.byte_offset({2, 0, 0, 0});
    });
    expect_error(ErrorCode::out_of_range, "indexed with 3", [&] { d.byte_offset({0, 0, 0}); });
}
