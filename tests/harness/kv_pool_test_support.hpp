// Shared by the KV pool tests: pattern data, host images of device bytes,
// the documented page-major MHA offsets, and the error check every bad-input
// case uses.
#pragma once

#include "test_support.hpp"

#include <kvpool/storage/model_geometry.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace kvpool::test {

using Mem = Space::memory_space;
using Bytes = std::vector<std::uint8_t>;
using u16 = std::uint16_t;
using u32 = std::uint32_t;

inline constexpr std::uint8_t poison_byte = 0xA5;

inline std::uint64_t mix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The element a test writes for (kind, layer, token, element index).
template <class T> T pattern(index_t kind, index_t layer, index_t token, index_t e) {
    return static_cast<T>(
        mix(static_cast<std::uint64_t>(((kind * 131 + layer) * 8191 + token) * 65537 + e)));
}

template <class T> T poison() {
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
            for (index_t y = 0; y < d2; ++y)
                h(i, x, y) = f(i, x, y);
    Kokkos::deep_copy(v, h);
    return v;
}

template <class View> auto on_host(const View& v) {
    return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
}

// Any-layout View (e.g. a strided page-major layer view) copied into a host LayoutRight one.
template <class View> auto strided_on_host(const View& v) {
    using T = typename View::non_const_value_type;
    if constexpr (View::rank == 3) {
        kk::RightView<T***, Mem> flat("test::flat", v.extent(0), v.extent(1), v.extent(2));
        Kokkos::deep_copy(flat, v);
        return on_host(flat);
    } else {
        kk::RightView<T****, Mem> flat("test::flat", v.extent(0), v.extent(1), v.extent(2),
                                       v.extent(3));
        Kokkos::deep_copy(flat, v);
        return on_host(flat);
    }
}

inline Bytes download(const Pool::bytes_view& bytes) {
    auto h = on_host(bytes);
    return Bytes(h.data(), h.data() + h.extent(0));
}

inline void upload(const Pool::bytes_view& bytes, const Bytes& image) {
    auto h = Kokkos::create_mirror_view(bytes);
    std::memcpy(h.data(), image.data(), image.size());
    Kokkos::deep_copy(bytes, h);
}

template <class T> void put(Bytes& image, index_t offset, T value) {
    std::memcpy(&image[static_cast<std::size_t>(offset)], &value, sizeof(T));
}
template <class T> T get(const Bytes& image, index_t offset) {
    T value;
    std::memcpy(&value, &image[static_cast<std::size_t>(offset)], sizeof(T));
    return value;
}

// Number of differing bytes; the first one is reported.
inline std::size_t byte_mismatches(const Bytes& actual, const Bytes& expected) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
        if (actual[i] != expected[i] && bad++ == 0)
            UNSCOPED_INFO("byte " << i << ": got " << int(actual[i]) << ", expected "
                                  << int(expected[i]));
    return bad;
}

inline Bytes random_image(std::size_t n, std::uint64_t seed) {
    Bytes image(n);
    for (std::size_t i = 0; i < n; ++i)
        image[i] = static_cast<std::uint8_t>(mix(seed * 1000003 + i));
    return image;
}

template <class F> void expect_error(ErrorCode code, const std::string& named, F&& call) {
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
    index_t layer_block() const {
        return page_size * (g.k_row_elements() + g.v_row_elements()) * size();
    }
    index_t page_start(index_t t) const { return t / page_size * page_size * g.entry_bytes(); }
    index_t k(index_t layer, index_t t, index_t e) const {
        return page_start(t) + layer * layer_block() +
               (t % page_size) * g.k_row_elements() * size() + e * size();
    }
    index_t v(index_t layer, index_t t, index_t e) const {
        return page_start(t) + layer * layer_block() + page_size * g.k_row_elements() * size() +
               (t % page_size) * g.v_row_elements() * size() + e * size();
    }
};

// The Mamba state geometry of the state pool tests: 2 layers, conv 3 x 3
// (bf16), temporal 2 x 2 x 3 (fp32).
inline const MambaStateGeometry mamba_geometry{2, 3, 3, KVDtype::bf16, 2, 2, 3, KVDtype::fp32};

} // namespace kvpool::test
