// Mamba state pools, per-layer and page-major: views, clear_slots and
// copy_from against a host model; page-major padding keeps its poison.
#include "kv_pool_test_support.hpp"

#include <kvpool/storage/page_major_pools.hpp>
#include <kvpool/storage/per_layer_pools.hpp>

#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

// Host model of Mamba state: conv and temporal elements per (layer, slot).
struct MambaModel {
    MambaStateGeometry g;
    index_t slots;
    std::vector<u16> conv;
    std::vector<u32> temporal;
    MambaModel(const MambaStateGeometry& geometry, index_t n) : g(geometry), slots(n) {
        conv.resize(static_cast<std::size_t>(g.layers * slots * g.conv_elements()));
        temporal.resize(static_cast<std::size_t>(g.layers * slots * g.temporal_elements()));
        for (index_t l = 0; l < g.layers; ++l)
            for (index_t s = 0; s < slots; ++s) {
                for (index_t e = 0; e < g.conv_elements(); ++e)
                    c(l, s, e) = pattern<u16>(4, l, s, e);
                for (index_t e = 0; e < g.temporal_elements(); ++e)
                    t(l, s, e) = pattern<u32>(5, l, s, e);
            }
    }
    u16& c(index_t l, index_t s, index_t e) {
        return conv[static_cast<std::size_t>((l * slots + s) * g.conv_elements() + e)];
    }
    u32& t(index_t l, index_t s, index_t e) {
        return temporal[static_cast<std::size_t>((l * slots + s) * g.temporal_elements() + e)];
    }
    void clear(const std::vector<index_t>& ids) {
        for (index_t s : ids)
            for (index_t l = 0; l < g.layers; ++l) {
                for (index_t e = 0; e < g.conv_elements(); ++e)
                    c(l, s, e) = 0;
                for (index_t e = 0; e < g.temporal_elements(); ++e)
                    t(l, s, e) = 0;
            }
    }
    void copy(const std::vector<index_t>& src, const std::vector<index_t>& dst) {
        for (std::size_t i = 0; i < src.size(); ++i)
            for (index_t l = 0; l < g.layers; ++l) {
                for (index_t e = 0; e < g.conv_elements(); ++e)
                    c(l, dst[i], e) = c(l, src[i], e);
                for (index_t e = 0; e < g.temporal_elements(); ++e)
                    t(l, dst[i], e) = t(l, src[i], e);
            }
    }
};

// Writes the model's state through a pool's per-layer conv and temporal views.
template <class StatePool> void write_state_through_views(const StatePool& pool, MambaModel& m) {
    const MambaStateGeometry& g = m.g;
    for (index_t l = 0; l < g.layers; ++l) {
        kk::RightView<u16***, Mem> conv("test::conv", m.slots, g.conv_dim, g.conv_width);
        kk::RightView<u32****, Mem> temporal("test::temporal", m.slots, g.heads, g.head_dim,
                                             g.state_dim);
        auto ch = Kokkos::create_mirror_view(conv);
        auto th = Kokkos::create_mirror_view(temporal);
        for (index_t s = 0; s < m.slots; ++s) {
            for (index_t e = 0; e < g.conv_elements(); ++e)
                ch(s, e / g.conv_width, e % g.conv_width) = m.c(l, s, e);
            for (index_t e = 0; e < g.temporal_elements(); ++e)
                th(s, e / (g.head_dim * g.state_dim), e / g.state_dim % g.head_dim,
                   e % g.state_dim) = m.t(l, s, e);
        }
        Kokkos::deep_copy(conv, ch);
        Kokkos::deep_copy(temporal, th);
        Kokkos::deep_copy(pool.conv_state(l), conv);
        Kokkos::deep_copy(pool.temporal_state(l), temporal);
    }
}

const std::vector<index_t> cleared_slots = {2, 9};
const std::vector<index_t> copy_src = {1, 3, 7};
const std::vector<index_t> copy_dst = {4, 12, 8};

} // namespace

TEST_CASE("kv layout: Mamba state per-layer pool, clear_slots and copy_from", "[kv-layout]") {
    const index_t slots = 16;
    MambaStatePool<Mem, u16, u32> pool(mamba_geometry, slots);
    MambaModel model(mamba_geometry, slots);
    write_state_through_views(pool, model);

    pool.clear_slots(Space(), to_device(cleared_slots));
    pool.copy_from(Space(), to_device(copy_src), to_device(copy_dst));
    model.clear(cleared_slots);
    model.copy(copy_src, copy_dst);
    Space().fence();

    auto ch = on_host(pool.conv_buffers());
    auto th = on_host(pool.temporal_buffers());
    const MambaStateGeometry& g = mamba_geometry;
    std::size_t bad = 0;
    for (index_t l = 0; l < g.layers; ++l)
        for (index_t s = 0; s < slots; ++s) {
            for (index_t e = 0; e < g.conv_elements(); ++e)
                bad += ch(l, s, e / g.conv_width, e % g.conv_width) != model.c(l, s, e);
            for (index_t e = 0; e < g.temporal_elements(); ++e)
                bad += th(l, s, e / (g.head_dim * g.state_dim), e / g.state_dim % g.head_dim,
                          e % g.state_dim) != model.t(l, s, e);
        }
    CHECK(bad == 0);
    CHECK(model.c(1, 2, 4) == 0);
    CHECK(model.t(0, 12, 5) == pattern<u32>(5, 0, 3, 5));
}

TEST_CASE(
    "kv layout: Mamba state page-major, views, clear_slots and copy_from, padding keeps poison",
    "[kv-layout]") {
    const MambaStateGeometry& g = mamba_geometry;
    const index_t slots = 16;
    Pool upool(
        PoolLayout(g.entry_bytes() * slots, {sub_pool_spec("mamba", g, 1, GrowDirection::down)}));
    PageMajorMambaPool<Mem, u16, u32> pool(upool, "mamba", g);
    REQUIRE(pool.num_slots() == slots);
    Kokkos::deep_copy(upool.bytes(), poison_byte);
    MambaModel model(g, slots);
    write_state_through_views(pool, model);

    pool.clear_slots(Space(), to_device(cleared_slots));
    pool.copy_from(Space(), to_device(copy_src), to_device(copy_dst));
    model.clear(cleared_slots);
    model.copy(copy_src, copy_dst);
    Space().fence();

    // Slot s, layer l: conv elements at s * entry + l * layer_bytes, temporal
    // after the padded conv block; the 2 padding bytes keep the poison.
    Bytes expected(static_cast<std::size_t>(upool.total_bytes()), poison_byte);
    for (index_t s = 0; s < slots; ++s)
        for (index_t l = 0; l < g.layers; ++l) {
            const index_t base = s * g.entry_bytes() + l * g.layer_bytes();
            for (index_t e = 0; e < g.conv_elements(); ++e)
                put(expected, base + 2 * e, model.c(l, s, e));
            for (index_t e = 0; e < g.temporal_elements(); ++e)
                put(expected, base + g.conv_block_bytes() + 4 * e, model.t(l, s, e));
        }
    const Bytes actual = download(upool.bytes());
    CHECK(byte_mismatches(actual, expected) == 0);

    auto conv1 = strided_on_host(pool.conv_state(1));
    auto temporal0 = strided_on_host(pool.temporal_state(0));
    CHECK(conv1(12, 2, 1) == model.c(1, 12, 7));
    CHECK(temporal0(4, 1, 0, 2) == model.t(0, 4, 8));
}
