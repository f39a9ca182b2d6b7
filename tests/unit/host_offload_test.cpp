// Host offload: selected tokens' KV (every layer) and Mamba state slots copied
// to host memory in chunks and back. The host copy holds exactly the packed
// rows; after poisoning the device pool, loading restores every byte of the
// selected rows and no other byte.
#include "kv_pool_test_support.hpp"

#include <kvpool/device_faults.hpp>
#include <kvpool/storage/host_offload.hpp>
#include <kvpool/storage/page_major_pools.hpp>
#include <kvpool/storage/per_layer_pools.hpp>

#include <cstring>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using Offload = HostOffload<Space>;

std::uint8_t noise(std::uint64_t seed, std::uint64_t i) {
    std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    x *= 0x94d049bb133111ebull;
    return static_cast<std::uint8_t>(x >> 32);
}

// A byte View's contents on the host, and back.
template <class View> Bytes read_bytes(const View& v) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    const auto* p = reinterpret_cast<const std::uint8_t*>(h.data());
    return Bytes(p, p + h.span() * sizeof(typename View::value_type));
}
template <class View> void write_bytes(const View& v, const Bytes& image) {
    auto h = Kokkos::create_mirror_view(v);
    std::memcpy(h.data(), image.data(), image.size());
    Kokkos::deep_copy(v, h);
}
template <class View> Bytes random_fill(const View& v, std::uint64_t seed) {
    Bytes image(v.span() * sizeof(typename View::value_type));
    for (std::size_t i = 0; i < image.size(); ++i)
        image[i] = noise(seed, i);
    write_bytes(v, image);
    return image;
}

// One row in the device buffers' images: which image, where, how long.
struct Row {
    std::size_t image;
    index_t offset;
    index_t bytes;
};

// Round trip through the host for a pool whose rows the test locates itself:
// rows(t) lists token t's rows in packed order (layer by layer, first kind
// then second) as byte ranges of the buffer images that images() returns.
template <class Pool, class Images, class Rows, class Poison>
void round_trip(const Pool& pool, index_t chunk, const std::vector<index_t>& tokens,
                const Images& images, const Rows& rows, const Poison& poison_device) {
    Offload offload(chunk, pool.token_bytes());
    const auto ids = to_device(tokens);
    const std::vector<Bytes> before = images();

    auto host = offload.copy_to_host(Space(), pool, ids);
    Space().fence();
    REQUIRE(static_cast<index_t>(host.extent(0)) ==
            static_cast<index_t>(tokens.size()) * pool.token_bytes());

    // The host copy is the packed rows, token after token.
    Bytes packed;
    for (index_t t : tokens)
        for (const Row& r : rows(t)) {
            const auto first = before[r.image].begin() + r.offset;
            packed.insert(packed.end(), first, first + r.bytes);
        }
    REQUIRE(static_cast<index_t>(packed.size()) ==
            pool.token_bytes() * static_cast<index_t>(tokens.size()));
    Bytes host_bytes(host.data(), host.data() + host.extent(0));
    CHECK(byte_mismatches(host_bytes, packed) == 0);

    // Poison the device, load back: the rows come back, every other byte keeps the poison.
    poison_device();
    const std::vector<Bytes> poisoned = images();
    offload.load_from_host(Space(), pool, host, ids);
    Space().fence();
    const std::vector<Bytes> after = images();
    std::vector<Bytes> expected = poisoned;
    for (index_t t : tokens)
        for (const Row& r : rows(t))
            std::memcpy(expected[r.image].data() + r.offset, before[r.image].data() + r.offset,
                        static_cast<std::size_t>(r.bytes));
    for (std::size_t i = 0; i < after.size(); ++i)
        CHECK(byte_mismatches(after[i], expected[i]) == 0);
}

const std::vector<index_t> selected = {7, 3, 12, 0, 25, 9, 30}; // 7 tokens, chunks of 3

} // namespace

TEST_CASE("offload: MHA per-layer pool round trip in chunks", "[offload]") {
    const MHAGeometry g{3, 2, 8, 4, KVDtype::bf16};
    const index_t slots = 32;
    MHAKVPool<Mem, std::uint16_t> pool(g, slots);
    random_fill(pool.k_buffers(), 1);
    random_fill(pool.v_buffers(), 2);
    const index_t k_row = 2 * 8 * 2, v_row = 2 * 4 * 2;
    round_trip(
        pool, 3, selected,
        [&] {
            return std::vector<Bytes>{read_bytes(pool.k_buffers()), read_bytes(pool.v_buffers())};
        },
        [&](index_t t) {
            std::vector<Row> r;
            for (index_t l = 0; l < g.layers; ++l) {
                r.push_back({0, (l * slots + t) * k_row, k_row});
                r.push_back({1, (l * slots + t) * v_row, v_row});
            }
            return r;
        },
        [&] {
            Kokkos::deep_copy(pool.k_buffers(), std::uint16_t(0xA5A5));
            Kokkos::deep_copy(pool.v_buffers(), std::uint16_t(0xA5A5));
        });
}

TEST_CASE("offload: page-major MHA round trip through the unified buffer", "[offload]") {
    const MHAGeometry g{2, 2, 4, 6, KVDtype::fp16}; // 80 bytes per token
    const index_t ps = 4;
    Pool upool(PoolLayout(80 * ps * 8 + 40, {sub_pool_spec("full", g, ps, GrowDirection::up)}));
    PageMajorMHAPool<Mem, std::uint16_t> pool(upool, "full", g);
    random_fill(upool.bytes(), 3);
    const index_t k_row = 16, v_row = 24, layer_block = ps * (k_row + v_row), page_bytes = ps * 80;
    round_trip(
        pool, 4, selected, [&] { return std::vector<Bytes>{read_bytes(upool.bytes())}; },
        [&](index_t t) {
            std::vector<Row> r;
            const index_t page = t / ps * page_bytes, slot = t % ps;
            for (index_t l = 0; l < g.layers; ++l) {
                r.push_back({0, page + l * layer_block + slot * k_row, k_row});
                r.push_back({0, page + l * layer_block + ps * k_row + slot * v_row, v_row});
            }
            return r;
        },
        [&] { Kokkos::deep_copy(upool.bytes(), poison_byte); });
}

TEST_CASE("offload: MLA per-layer pool round trip, one token per chunk", "[offload]") {
    const MLAGeometry g{2, 12, 3, KVDtype::fp8}; // 15-byte rows: copied byte by byte
    const index_t slots = 40, row = 15;
    MLAKVPool<Mem, std::uint8_t> pool(g, slots);
    random_fill(pool.kv_buffers(), 4);
    round_trip(
        pool, 1, selected, [&] { return std::vector<Bytes>{read_bytes(pool.kv_buffers())}; },
        [&](index_t t) {
            std::vector<Row> r;
            for (index_t l = 0; l < g.layers; ++l)
                r.push_back({0, (l * slots + t) * row, row});
            return r;
        },
        [&] { Kokkos::deep_copy(pool.kv_buffers(), poison_byte); });
}

TEST_CASE("offload: Mamba state slots round trip, per-layer and page-major", "[offload]") {
    const MambaStateGeometry g{2, 3, 3, KVDtype::bf16, 2, 2, 3, KVDtype::fp32};
    const index_t slots = 32;
    const std::vector<index_t> state_slots = {5, 1, 31, 17, 2};
    {
        MambaStatePool<Mem, std::uint16_t, std::uint32_t> pool(g, slots);
        random_fill(pool.conv_buffers(), 5);
        random_fill(pool.temporal_buffers(), 6);
        const index_t conv = g.conv_row_bytes(), temporal = g.temporal_row_bytes();
        round_trip(
            pool, 2, state_slots,
            [&] {
                return std::vector<Bytes>{read_bytes(pool.conv_buffers()),
                                          read_bytes(pool.temporal_buffers())};
            },
            [&](index_t s) {
                std::vector<Row> r;
                for (index_t l = 0; l < g.layers; ++l) {
                    r.push_back({0, (l * slots + s) * conv, conv});
                    r.push_back({1, (l * slots + s) * temporal, temporal});
                }
                return r;
            },
            [&] {
                Kokkos::deep_copy(pool.conv_buffers(), std::uint16_t(0xA5A5));
                Kokkos::deep_copy(pool.temporal_buffers(), std::uint32_t(0xA5A5A5A5));
            });
    }
    {
        Pool upool(PoolLayout(g.entry_bytes() * slots,
                              {sub_pool_spec("mamba", g, 1, GrowDirection::down)}));
        PageMajorMambaPool<Mem, std::uint16_t, std::uint32_t> pool(upool, "mamba", g);
        random_fill(upool.bytes(), 7);
        round_trip(
            pool, 4, state_slots, [&] { return std::vector<Bytes>{read_bytes(upool.bytes())}; },
            [&](index_t s) {
                std::vector<Row> r;
                for (index_t l = 0; l < g.layers; ++l) {
                    const index_t base = s * g.entry_bytes() + l * g.layer_bytes();
                    r.push_back({0, base, g.conv_row_bytes()});
                    r.push_back({0, base + g.conv_block_bytes(), g.temporal_row_bytes()});
                }
                return r;
            },
            [&] { Kokkos::deep_copy(upool.bytes(), poison_byte); });
    }
}

TEST_CASE("offload: bad input names the value", "[offload]") {
    const MHAGeometry g{2, 2, 8, 0, KVDtype::bf16}; // 128 bytes per token
    MHAKVPool<Mem, std::uint16_t> pool(g, 16);
    const auto ids = to_device({1, 2, 3});
    expect_error(ErrorCode::invalid_argument, "chunk_tokens and max_token_bytes must be > 0, got 0",
                 [] { Offload(0, 128); });
    Offload small(4, 64);
    expect_error(ErrorCode::invalid_argument,
                 "the pool's tokens take 128 bytes, the staging buffer holds at most 64",
                 [&] { small.copy_to_host(Space(), pool, ids); });
    Offload offload(4, 128);
    const auto host = Offload::allocate_host(pool, 2);
    expect_error(ErrorCode::invalid_argument,
                 "the host buffer has 256 bytes, 3 tokens of 128 bytes need 384",
                 [&] { offload.load_from_host(Space(), pool, host, ids); });
    if (kk::host_execution<Space>)
        expect_error(ErrorCode::out_of_range, "copy_to_host: location 16 (entry 1)", [&] {
            offload.copy_to_host(Space(), pool, to_device({4, 16}));
        });
}

TEST_CASE("offload: a device failure part-way through a chunked copy", "[offload][device-faults]") {
    const MHAGeometry g{3, 2, 8, 4, KVDtype::bf16};
    const index_t slots = 32, chunk = 3;
    MHAKVPool<Mem, std::uint16_t> pool(g, slots);
    random_fill(pool.k_buffers(), 1);
    random_fill(pool.v_buffers(), 2);
    const index_t k_row = 2 * 8 * 2, v_row = 2 * 4 * 2;
    const auto images = [&] {
        return std::vector<Bytes>{read_bytes(pool.k_buffers()), read_bytes(pool.v_buffers())};
    };
    const std::vector<Bytes> original = images();
    // Token t's rows of original copied into image.
    const auto with_rows = [&](std::vector<Bytes> image, const std::vector<index_t>& tokens) {
        for (index_t t : tokens)
            for (index_t l = 0; l < g.layers; ++l) {
                const index_t k = (l * slots + t) * k_row, v = (l * slots + t) * v_row;
                std::memcpy(image[0].data() + k, original[0].data() + k, k_row);
                std::memcpy(image[1].data() + v, original[1].data() + v, v_row);
            }
        return image;
    };
    Offload offload(chunk, pool.token_bytes());
    const auto ids = to_device(selected);
    const auto host = offload.copy_to_host(Space(), pool, ids);
    Space().fence();
    const Bytes host_copy(host.data(), host.data() + host.extent(0));

    device_faults::reset();
    offload.load_from_host(Space(), pool, host, ids);
    const std::uint64_t copies = device_faults::count(DeviceOp::copy);
    REQUIRE(copies == (selected.size() + chunk - 1) / chunk);
    for (std::uint64_t n = 1; n <= copies; ++n) {
        INFO("copy " << n << " of " << copies);
        // copy_to_host: the pool is read only; a repeat writes the whole host copy.
        Kokkos::deep_copy(host, std::uint8_t(0));
        const std::vector<Bytes> before = images();
        device_faults::fail_nth(DeviceOp::copy, n);
        expect_error(ErrorCode::device, "copy_to_host",
                     [&] { offload.copy_to_host(Space(), pool, ids, host); });
        device_faults::reset();
        CHECK(images() == before);
        offload.copy_to_host(Space(), pool, ids, host);
        Space().fence();
        CHECK(byte_mismatches(Bytes(host.data(), host.data() + host.extent(0)), host_copy) == 0);

        // load_from_host: the chunks before the failed one have landed, no other byte of the
        // pool changed; the same call again loads every row.
        Kokkos::deep_copy(pool.k_buffers(), std::uint16_t(0xA5A5));
        Kokkos::deep_copy(pool.v_buffers(), std::uint16_t(0xA5A5));
        const std::vector<Bytes> poisoned = images();
        device_faults::fail_nth(DeviceOp::copy, n);
        expect_error(ErrorCode::device, "load_from_host",
                     [&] { offload.load_from_host(Space(), pool, host, ids); });
        device_faults::reset();
        Space().fence();
        const std::vector<index_t> landed(
            selected.begin(), selected.begin() + static_cast<std::ptrdiff_t>((n - 1) * chunk));
        CHECK(images() == with_rows(poisoned, landed));
        offload.load_from_host(Space(), pool, host, ids);
        Space().fence();
        CHECK(images() == with_rows(poisoned, selected));
    }
}
