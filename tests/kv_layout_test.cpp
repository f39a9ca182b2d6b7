// KV storage layouts: store then read back for every layout (the bytes land
// where the documented layout says, and every other byte keeps its poison),
// all-layer moves with disjoint and overlapping sets, page-major page move
// against per-layer row moves, Mamba state clear/copy, a per-layer pool as the
// KV mover of an allocator, and bad input.
#include "test_support.hpp"

#include <kvpool/kv_layout.hpp>

#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using Mem = Space::memory_space;
using Bytes = std::vector<std::uint8_t>;
using u16 = std::uint16_t;
using u32 = std::uint32_t;

constexpr std::uint8_t poison_byte = 0xA5;

std::uint64_t mix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The element a test writes for (kind, layer, token, element index).
template <class T>
T pattern(index_t kind, index_t layer, index_t token, index_t e) {
    return static_cast<T>(mix(static_cast<std::uint64_t>(((kind * 131 + layer) * 8191 + token) * 65537 + e)));
}

template <class T>
T poison() {
    T x;
    std::memset(&x, poison_byte, sizeof(T));
    return x;
}

// A [n][d1][d2] device View with f(i, x, y) in it.
template <class T>
kk::RightView<T***, Mem> make_source(index_t n, index_t d1, index_t d2,
                                     const std::function<T(index_t, index_t, index_t)>& f) {
    kk::RightView<T***, Mem> v("test::source", n, d1, d2);
    auto h = Kokkos::create_mirror_view(v);
    for (index_t i = 0; i < n; ++i)
        for (index_t x = 0; x < d1; ++x)
            for (index_t y = 0; y < d2; ++y) h(i, x, y) = f(i, x, y);
    Kokkos::deep_copy(v, h);
    return v;
}

template <class View>
auto on_host(const View& v) {
    return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
}

// Any-layout View (e.g. a strided page-major layer view) copied into a host LayoutRight one.
template <class View>
auto strided_on_host(const View& v) {
    using T = typename View::non_const_value_type;
    if constexpr (View::rank == 3) {
        kk::RightView<T***, Mem> flat("test::flat", v.extent(0), v.extent(1), v.extent(2));
        Kokkos::deep_copy(flat, v);
        return on_host(flat);
    } else {
        kk::RightView<T****, Mem> flat("test::flat", v.extent(0), v.extent(1), v.extent(2), v.extent(3));
        Kokkos::deep_copy(flat, v);
        return on_host(flat);
    }
}

Bytes download(const Pool::bytes_view& bytes) {
    auto h = on_host(bytes);
    return Bytes(h.data(), h.data() + h.extent(0));
}

void upload(const Pool::bytes_view& bytes, const Bytes& image) {
    auto h = Kokkos::create_mirror_view(bytes);
    std::memcpy(h.data(), image.data(), image.size());
    Kokkos::deep_copy(bytes, h);
}

template <class T>
void put(Bytes& image, index_t offset, T value) {
    std::memcpy(&image[static_cast<std::size_t>(offset)], &value, sizeof(T));
}
template <class T>
T get(const Bytes& image, index_t offset) {
    T value;
    std::memcpy(&value, &image[static_cast<std::size_t>(offset)], sizeof(T));
    return value;
}

// Number of differing bytes; the first one is reported.
std::size_t byte_mismatches(const Bytes& actual, const Bytes& expected) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
        if (actual[i] != expected[i] && bad++ == 0)
            UNSCOPED_INFO("byte " << i << ": got " << int(actual[i]) << ", expected " << int(expected[i]));
    return bad;
}

Bytes random_image(std::size_t n, std::uint64_t seed) {
    Bytes image(n);
    for (std::size_t i = 0; i < n; ++i) image[i] = static_cast<std::uint8_t>(mix(seed * 1000003 + i));
    return image;
}

template <class F>
void expect_error(ErrorCode code, const std::string& named, F&& call) {
    try {
        call();
        FAIL("accepted");
    } catch (const Error& e) {
        CHECK(e.code() == code);
        INFO(e.what());
        CHECK(std::string(e.what()).find(named) != std::string::npos);
    }
}

// Byte offsets of the documented page-major MHA layout.
struct PageMajorMHAOffsets {
    MHAGeometry g;
    index_t page_size;
    index_t size() const { return dtype_size(g.dtype); }
    index_t layer_block() const { return page_size * (g.k_row_elements() + g.v_row_elements()) * size(); }
    index_t page_start(index_t t) const { return t / page_size * page_size * g.entry_bytes(); }
    index_t k(index_t layer, index_t t, index_t e) const {
        return page_start(t) + layer * layer_block() + (t % page_size) * g.k_row_elements() * size() +
               e * size();
    }
    index_t v(index_t layer, index_t t, index_t e) const {
        return page_start(t) + layer * layer_block() + page_size * g.k_row_elements() * size() +
               (t % page_size) * g.v_row_elements() * size() + e * size();
    }
};

}  // namespace

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
        for (index_t t : loc) stored.insert({layer, t});
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
                    bad += kh(l, t, h, d) != (written ? pattern<u16>(0, l, t, h * 8 + d) : poison<u16>());
                for (index_t d = 0; d < 4; ++d)
                    bad += vh(l, t, h, d) != (written ? pattern<u16>(1, l, t, h * 4 + d) : poison<u16>());
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
                           make_source<u16>(2, 1, 12, [&](index_t i, index_t, index_t e) {
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
                bad += h(l, t, 0, e) != (stored.count({l, t}) ? pattern<u16>(2, l, t, e) : poison<u16>());
    CHECK(bad == 0);
    CHECK(on_host(pool.kv_buffer(1))(9, 0, 13) == pattern<u16>(2, 1, 9, 13));
}

TEST_CASE("kv layout: page-major MHA over the unified buffer, store then read back", "[kv-layout]") {
    const MHAGeometry g{2, 2, 4, 6, KVDtype::bf16};  // 80 bytes per token
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
        pool.set_kv_buffer(
            Space(), layer, to_device(loc),
            make_source<u16>(n, 2, 4, [&](index_t i, index_t h, index_t d) {
                return pattern<u16>(0, layer, loc[i], h * 4 + d);
            }),
            make_source<u16>(n, 2, 6, [&](index_t i, index_t h, index_t d) {
                return pattern<u16>(1, layer, loc[i], h * 6 + d);
            }));
        for (index_t t : loc) {
            for (index_t e = 0; e < 8; ++e) put(expected, at.k(layer, t, e), pattern<u16>(0, layer, t, e));
            for (index_t e = 0; e < 12; ++e) put(expected, at.v(layer, t, e), pattern<u16>(1, layer, t, e));
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

TEST_CASE("kv layout: page-major MLA over the unified buffer, store then read back", "[kv-layout]") {
    const MLAGeometry g{3, 6, 2, KVDtype::fp8};  // 8-byte rows, 24 bytes per token
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
                           make_source<std::uint8_t>(2, 1, 6, [&](index_t i, index_t, index_t e) {
                               return pattern<std::uint8_t>(3, 0, loc1[i], e);
                           }),
                           make_source<std::uint8_t>(2, 1, 2, [&](index_t i, index_t, index_t e) {
                               return pattern<std::uint8_t>(3, 0, loc1[i], 6 + e);
                           }));
    for (index_t t : loc)
        for (index_t e = 0; e < row; ++e) expected[offset(2, t, e)] = pattern<std::uint8_t>(3, 2, t, e);
    for (index_t t : loc1)
        for (index_t e = 0; e < row; ++e) expected[offset(0, t, e)] = pattern<std::uint8_t>(3, 0, t, e);
    Space().fence();
    const Bytes actual = download(upool.bytes());
    CHECK(byte_mismatches(actual, expected) == 0);

    auto v2 = strided_on_host(pool.kv_buffer(2));
    REQUIRE(v2.extent(0) == 10);
    REQUIRE(v2.extent(2) == 1);
    std::size_t bad = 0;
    for (index_t p = 0; p < 10; ++p)
        for (index_t s = 0; s < ps; ++s)
            for (index_t e = 0; e < row; ++e) bad += v2(p, s, 0, e) != actual[offset(2, p * ps + s, e)];
    CHECK(bad == 0);
}

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
                for (index_t e = 0; e < g.conv_elements(); ++e) c(l, s, e) = pattern<u16>(4, l, s, e);
                for (index_t e = 0; e < g.temporal_elements(); ++e) t(l, s, e) = pattern<u32>(5, l, s, e);
            }
    }
    u16& c(index_t l, index_t s, index_t e) { return conv[static_cast<std::size_t>((l * slots + s) * g.conv_elements() + e)]; }
    u32& t(index_t l, index_t s, index_t e) {
        return temporal[static_cast<std::size_t>((l * slots + s) * g.temporal_elements() + e)];
    }
    void clear(const std::vector<index_t>& ids) {
        for (index_t s : ids)
            for (index_t l = 0; l < g.layers; ++l) {
                for (index_t e = 0; e < g.conv_elements(); ++e) c(l, s, e) = 0;
                for (index_t e = 0; e < g.temporal_elements(); ++e) t(l, s, e) = 0;
            }
    }
    void copy(const std::vector<index_t>& src, const std::vector<index_t>& dst) {
        for (std::size_t i = 0; i < src.size(); ++i)
            for (index_t l = 0; l < g.layers; ++l) {
                for (index_t e = 0; e < g.conv_elements(); ++e) c(l, dst[i], e) = c(l, src[i], e);
                for (index_t e = 0; e < g.temporal_elements(); ++e) t(l, dst[i], e) = t(l, src[i], e);
            }
    }
};

// Writes the model's state through a pool's per-layer conv and temporal views.
template <class StatePool>
void write_state_through_views(const StatePool& pool, MambaModel& m) {
    const MambaStateGeometry& g = m.g;
    for (index_t l = 0; l < g.layers; ++l) {
        kk::RightView<u16***, Mem> conv("test::conv", m.slots, g.conv_dim, g.conv_width);
        kk::RightView<u32****, Mem> temporal("test::temporal", m.slots, g.heads, g.head_dim, g.state_dim);
        auto ch = Kokkos::create_mirror_view(conv);
        auto th = Kokkos::create_mirror_view(temporal);
        for (index_t s = 0; s < m.slots; ++s) {
            for (index_t e = 0; e < g.conv_elements(); ++e) ch(s, e / g.conv_width, e % g.conv_width) = m.c(l, s, e);
            for (index_t e = 0; e < g.temporal_elements(); ++e)
                th(s, e / (g.head_dim * g.state_dim), e / g.state_dim % g.head_dim, e % g.state_dim) = m.t(l, s, e);
        }
        Kokkos::deep_copy(conv, ch);
        Kokkos::deep_copy(temporal, th);
        Kokkos::deep_copy(pool.conv_state(l), conv);
        Kokkos::deep_copy(pool.temporal_state(l), temporal);
    }
}

const MambaStateGeometry mamba_geometry{2, 3, 3, KVDtype::bf16, 2, 2, 3, KVDtype::fp32};
const std::vector<index_t> cleared_slots = {2, 9};
const std::vector<index_t> copy_src = {1, 3, 7};
const std::vector<index_t> copy_dst = {4, 12, 8};

}  // namespace

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
                bad += th(l, s, e / (g.head_dim * g.state_dim), e / g.state_dim % g.head_dim, e % g.state_dim) !=
                       model.t(l, s, e);
        }
    CHECK(bad == 0);
    CHECK(model.c(1, 2, 4) == 0);
    CHECK(model.t(0, 12, 5) == pattern<u32>(5, 0, 3, 5));
}

TEST_CASE("kv layout: Mamba state page-major, views, clear_slots and copy_from, padding keeps poison",
          "[kv-layout]") {
    const MambaStateGeometry& g = mamba_geometry;
    const index_t slots = 16;
    Pool upool(PoolLayout(g.entry_bytes() * slots, {sub_pool_spec("mamba", g, 1, GrowDirection::down)}));
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
            for (index_t e = 0; e < g.conv_elements(); ++e) put(expected, base + 2 * e, model.c(l, s, e));
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

namespace {

// Per-layer MHA pool filled with pattern data, and its host model. V rows of
// 4 bytes: the row kernels copy them in 4-byte words.
struct FilledMHA {
    MHAGeometry g{2, 2, 4, 1, KVDtype::fp16};
    index_t slots = 48;
    MHAKVPool<Mem, u16> pool{g, slots};
    index_t kr = g.k_row_elements(), vr = g.v_row_elements();
    std::vector<u16> k, v;  // [layer][slot][row element]

    FilledMHA() {
        k.resize(static_cast<std::size_t>(g.layers * slots * kr));
        v.resize(static_cast<std::size_t>(g.layers * slots * vr));
        auto kh = Kokkos::create_mirror_view(pool.k_buffers());
        auto vh = Kokkos::create_mirror_view(pool.v_buffers());
        for (index_t l = 0; l < g.layers; ++l)
            for (index_t t = 0; t < slots; ++t) {
                for (index_t e = 0; e < kr; ++e)
                    kh(l, t, e / g.head_dim, e % g.head_dim) = km(l, t, e) = pattern<u16>(0, l, t, e);
                for (index_t e = 0; e < vr; ++e)
                    vh(l, t, e / g.v_head_dim, e % g.v_head_dim) = vm(l, t, e) = pattern<u16>(1, l, t, e);
            }
        Kokkos::deep_copy(pool.k_buffers(), kh);
        Kokkos::deep_copy(pool.v_buffers(), vh);
    }
    u16& km(index_t l, index_t t, index_t e) { return k[static_cast<std::size_t>((l * slots + t) * kr + e)]; }
    u16& vm(index_t l, index_t t, index_t e) { return v[static_cast<std::size_t>((l * slots + t) * vr + e)]; }
    // The model of a parallel move: sources read before any destination is written.
    void move(const std::vector<index_t>& dst, const std::vector<index_t>& src) {
        const std::vector<u16> k0 = k, v0 = v;
        for (std::size_t i = 0; i < dst.size(); ++i)
            for (index_t l = 0; l < g.layers; ++l) {
                for (index_t e = 0; e < kr; ++e) km(l, dst[i], e) = k0[at(l, src[i], e, kr)];
                for (index_t e = 0; e < vr; ++e) vm(l, dst[i], e) = v0[at(l, src[i], e, vr)];
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
                for (index_t e = 0; e < kr; ++e) bad += kh(l, t, e / g.head_dim, e % g.head_dim) != k[at(l, t, e, kr)];
                for (index_t e = 0; e < vr; ++e)
                    bad += vh(l, t, e / g.v_head_dim, e % g.v_head_dim) != v[at(l, t, e, vr)];
            }
        return bad;
    }
};

}  // namespace

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
        f.pool.check_move(Space(), to_device(std::vector<index_t>{6, 6}), to_device(std::vector<index_t>{1, 2}));
    });
    expect_error(ErrorCode::invalid_argument, "9 (source entry 0) is also a destination", [&] {
        f.pool.check_move(Space(), to_device(std::vector<index_t>{9}), to_device(std::vector<index_t>{9}));
    });
    if (kk::host_execution<Space>) {
        // On host backends every call checks, and a rejected call changes nothing.
        expect_error(ErrorCode::invalid_argument, "also a destination",
                     [&] { f.pool.move_kv_cache(Space(), to_device(chain_dst), to_device(chain_src)); });
        CHECK(f.mismatches() == 0);
    }
    // The same chain, read before write, as two calls: 4 -> 5 first, then 3 -> 4.
    f.pool.move_kv_cache(Space(), to_device(std::vector<index_t>{5}), to_device(std::vector<index_t>{4}));
    f.pool.move_kv_cache(Space(), to_device(std::vector<index_t>{4}), to_device(std::vector<index_t>{3}));
    f.move({5}, {4});
    f.move({4}, {3});
    Space().fence();
    CHECK(f.mismatches() == 0);
}

TEST_CASE("kv layout: page-major whole-page move equals the per-layer row moves", "[kv-layout]") {
    const MHAGeometry g{3, 2, 4, 2, KVDtype::bf16};  // 72 bytes per token
    const index_t ps = 4, pages = 10;
    const PoolLayout layout(g.entry_bytes() * ps * pages, {sub_pool_spec("full", g, ps, GrowDirection::up)});
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
    kernels::move_pages(Space(), a.bytes(), layout.side(0).page_bytes, to_device(src_pages), to_device(dst_pages));
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
    const index_t page_bytes = layout.side(0).page_bytes;
    for (std::size_t i = 0; i < src_pages.size(); ++i)
        std::memcpy(&expected[static_cast<std::size_t>(dst_pages[i] * page_bytes)],
                    &initial[static_cast<std::size_t>(src_pages[i] * page_bytes)], static_cast<std::size_t>(page_bytes));
    const Bytes after_a = download(a.bytes()), after_b = download(b.bytes()), after_c = download(c.bytes());
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
                    for (index_t e = 0; e < 4; ++e) kh(l, t, h, e) = get<u16>(initial, at.k(l, t, h * 4 + e));
                    for (index_t e = 0; e < 2; ++e) vh(l, t, h, e) = get<u16>(initial, at.v(l, t, h * 2 + e));
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
                for (index_t e = 0; e < 4; ++e) bad += dk(l, t, h, e) != k(t / ps, t % ps, h, e);
                for (index_t e = 0; e < 2; ++e) bad += dv(l, t, h, e) != v(t / ps, t % ps, h, e);
            }
    }
    CHECK(bad == 0);
}

TEST_CASE("kv layout: a per-layer MHA pool as the allocator's KV mover follows compaction",
          "[kv-layout]") {
    const MHAGeometry g{2, 1, 4, 4, KVDtype::fp16};  // 32 bytes per token
    const index_t ps = 4;
    Pool upool(PoolLayout(g.entry_bytes() * ps * 16, {sub_pool_spec("full", g, ps, GrowDirection::up)}));
    Allocator alloc(upool, "full", options(CompactionMode::eager));
    MHAKVPool<Mem, u16> kv(g, alloc.geometry().num_physical_pages * ps);
    set_kv_mover(alloc, kv);

    // Three requests of two pages each; every token's K/V (all layers) tagged by its virtual id.
    std::vector<std::vector<index_t>> requests;
    for (int r = 0; r < 3; ++r) requests.push_back(to_host(*alloc.alloc(Space(), 2 * ps)));
    const auto store = [&](const std::vector<index_t>& virtual_tokens) {
        const auto physical = alloc.translate(Space(), to_device(virtual_tokens));
        const auto n = static_cast<index_t>(virtual_tokens.size());
        for (index_t l = 0; l < g.layers; ++l)
            kv.set_kv_buffer(Space(), l, physical,
                             make_source<u16>(n, 1, 4, [&](index_t i, index_t, index_t e) {
                                 return pattern<u16>(0, l, virtual_tokens[i], e);
                             }),
                             make_source<u16>(n, 1, 4, [&](index_t i, index_t, index_t e) {
                                 return pattern<u16>(1, l, virtual_tokens[i], e);
                             }));
    };
    for (const auto& r : requests) store(r);
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
    expect_error(ErrorCode::invalid_argument, "the pool holds 4 token slots", [&] { set_kv_mover(alloc, small); });
}

TEST_CASE("kv layout: bad input names the value", "[kv-layout]") {
    expect_error(ErrorCode::invalid_argument, "heads must be > 0, got 0",
                 [] { MHAKVPool<Mem, u16>(MHAGeometry{2, 0, 8, 0, KVDtype::bf16}, 8); });
    expect_error(ErrorCode::invalid_argument, "dtype bf16 is 2 bytes, but the storage element is 4 bytes",
                 [] { MHAKVPool<Mem, u32>(MHAGeometry{2, 1, 8, 0, KVDtype::bf16}, 8); });
    expect_error(ErrorCode::invalid_argument, "temporal state dtype fp32 is 4 bytes",
                 [] { MambaStatePool<Mem, u16, u16>(mamba_geometry, 8); });
    expect_error(ErrorCode::invalid_argument, "num_slots must be > 0, got 0",
                 [] { MLAKVPool<Mem, u16>(MLAGeometry{1, 8, 0, KVDtype::fp16}, 0); });

    // A side whose entry_bytes do not match the model geometry.
    const MHAGeometry g{2, 2, 8, 0, KVDtype::bf16};  // 128 bytes per token
    SubPoolSpec wrong = sub_pool_spec("full", g, 4, GrowDirection::up);
    wrong.entry_bytes = 120;
    Pool wrong_pool(PoolLayout(120 * 4 * 8, {wrong}));
    expect_error(ErrorCode::invalid_argument, "side 'full' has entry_bytes 120, but the geometry needs 128",
                 [&] { PageMajorMHAPool<Mem, u16>(wrong_pool, "full", g); });
    Pool state_pool(PoolLayout(mamba_geometry.entry_bytes() * 4 * 8,
                               {sub_pool_spec("mamba", mamba_geometry, 4, GrowDirection::down)}));
    expect_error(ErrorCode::invalid_argument, "has page_size 4; state slots need page size 1",
                 [&] { PageMajorMambaPool<Mem, u16, u32>(state_pool, "mamba", mamba_geometry); });

    MHAKVPool<Mem, u16> pool(g, 16);
    const auto k = make_source<u16>(2, 2, 8, [](index_t, index_t, index_t) { return u16(1); });
    const auto loc = to_device({3, 4});
    expect_error(ErrorCode::out_of_range, "layer 2 is outside [0, 2)",
                 [&] { pool.set_kv_buffer(Space(), 2, loc, k, k); });
    expect_error(ErrorCode::invalid_argument, "k has 2 entries but loc has 3",
                 [&] { pool.set_kv_buffer(Space(), 0, to_device({1, 2, 3}), k, k); });
    const auto k_wide = make_source<u16>(2, 2, 16, [](index_t, index_t, index_t) { return u16(1); });
    expect_error(ErrorCode::invalid_argument, "k extent 2 (head_dim) is 16, expected 8",
                 [&] { pool.set_kv_buffer(Space(), 0, loc, k_wide, k); });
    expect_error(ErrorCode::invalid_argument, "dst has 1 entries but src has 2",
                 [&] { pool.move_kv_cache(Space(), to_device({1}), to_device({2, 3})); });

    // Out-of-range locations: the explicit check on every backend, every call on host backends.
    const auto outside = to_device({3, 16});
    expect_error(ErrorCode::out_of_range, "location 16 (entry 1) is outside the pool's 16 slots",
                 [&] { pool.check_locations(Space(), outside); });
    expect_error(ErrorCode::out_of_range, "location -1 (entry 0)",
                 [&] { pool.check_move(Space(), to_device({-1}), to_device({2})); });
    if (kk::host_execution<Space>) {
        expect_error(ErrorCode::out_of_range, "set_kv_buffer: location 16",
                     [&] { pool.set_kv_buffer(Space(), 0, outside, k, k); });
        expect_error(ErrorCode::out_of_range, "move_kv_cache: location 16",
                     [&] { pool.move_kv_cache(Space(), outside, to_device({1, 2})); });
        MambaStatePool<Mem, u16, u32> state(mamba_geometry, 8);
        expect_error(ErrorCode::out_of_range, "clear_slots: location 8",
                     [&] { state.clear_slots(Space(), to_device({8})); });
        expect_error(ErrorCode::out_of_range, "move_page_rows: page 4 (entry 0) is outside the pool's 4 pages of 4 tokens",
                     [&] { pool.move_page_rows(Space(), to_device({4}), to_device({1}), 4); });
    }
}
