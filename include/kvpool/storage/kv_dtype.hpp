// The element types of KV and state storage. Elements are stored as bit
// patterns; only their size matters to kvpool. No Kokkos here.
#pragma once

#include <kvpool/types.hpp>

#include <cstdint>

namespace kvpool {

enum class KVDtype { fp8, fp16, bf16, fp32 };

constexpr index_t dtype_size(KVDtype d) {
    return d == KVDtype::fp8 ? 1 : d == KVDtype::fp32 ? 4 : 2;
}

constexpr const char* to_string(KVDtype d) {
    switch (d) {
    case KVDtype::fp8:
        return "fp8";
    case KVDtype::fp16:
        return "fp16";
    case KVDtype::bf16:
        return "bf16";
    case KVDtype::fp32:
        return "fp32";
    }
    return "?";
}

// The unsigned integer that holds one element of a dtype.
template <index_t Bytes> struct storage_word;
template <> struct storage_word<1> {
    using type = std::uint8_t;
};
template <> struct storage_word<2> {
    using type = std::uint16_t;
};
template <> struct storage_word<4> {
    using type = std::uint32_t;
};

template <KVDtype D> using storage_t = typename storage_word<dtype_size(D)>::type;

} // namespace kvpool
