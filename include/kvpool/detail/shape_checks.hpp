// Checks of the shapes the KV pools are given: layers, extents, element
// types, the side's entry size and the slot count. Host only; each names the
// offending value in its kvpool::Error.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/kokkos_compat.hpp>
#include <kvpool/storage/kv_dtype.hpp>
#include <kvpool/storage/pool_layout.hpp>

#include <string>
#include <type_traits>

namespace kvpool::kv_detail {

// A pool storing elements of type T must have been given a dtype of that size.
template <class T> void require_storage(const char* layout, const char* field, KVDtype dtype) {
    if (dtype_size(dtype) != static_cast<index_t>(sizeof(T)))
        throw Error(ErrorCode::invalid_argument,
                    std::string(layout) + ": " + field + " dtype " + to_string(dtype) + " is " +
                        std::to_string(dtype_size(dtype)) + " bytes, but the storage element is " +
                        std::to_string(sizeof(T)) + " bytes");
}

template <class A, class B>
void require_same_length(const std::string& what, const char* a_name, const A& a,
                         const char* b_name, const B& b) {
    if (a.extent(0) != b.extent(0))
        throw Error(ErrorCode::invalid_argument,
                    what + ": " + a_name + " has " + std::to_string(a.extent(0)) + " entries but " +
                        b_name + " has " + std::to_string(b.extent(0)));
}

template <class View>
void require_extent(const std::string& what, const char* name, const View& view, unsigned dim,
                    const char* dim_name, index_t expected) {
    if (static_cast<index_t>(view.extent(dim)) != expected)
        throw Error(ErrorCode::invalid_argument, what + ": " + name + " extent " +
                                                     std::to_string(dim) + " (" + dim_name +
                                                     ") is " + std::to_string(view.extent(dim)) +
                                                     ", expected " + std::to_string(expected));
}

inline void require_layer(const std::string& what, index_t layer, index_t layers) {
    if (layer < 0 || layer >= layers)
        throw Error(ErrorCode::out_of_range, what + ": layer " + std::to_string(layer) +
                                                 " is outside [0, " + std::to_string(layers) + ")");
}

// Sources of a store are rank-3 Views of the storage type, readable by the
// instance that runs the store.
template <class T, class ExecutionSpace, class Src> constexpr void check_source_type() {
    static_assert(Src::rank == 3, "store sources are rank-3 Views [tokens][heads][dim]");
    static_assert(std::is_same<std::remove_const_t<typename Src::value_type>, T>::value,
                  "store sources hold the pool's storage type (bit patterns): view fp16/bf16 "
                  "data as std::uint16_t, fp8 as std::uint8_t, fp32 as std::uint32_t");
    static_assert(
        Kokkos::SpaceAccessibility<ExecutionSpace, typename Src::memory_space>::accessible,
        "store sources must be readable by the execution space");
}

inline void require_entry_bytes(const SubPoolGeometry& side, const std::string& layout,
                                index_t needed_entry_bytes) {
    if (side.spec.entry_bytes != needed_entry_bytes)
        throw Error(ErrorCode::invalid_argument,
                    layout + ": side '" + side.spec.name + "' has entry_bytes " +
                        std::to_string(side.spec.entry_bytes) + ", but the geometry needs " +
                        std::to_string(needed_entry_bytes) +
                        " (build the side's SubPoolSpec with sub_pool_spec())");
}

inline void require_slots(const char* layout, index_t slots) {
    if (slots <= 0)
        throw Error(ErrorCode::invalid_argument,
                    std::string(layout) + ": num_slots must be > 0, got " + std::to_string(slots));
}

} // namespace kvpool::kv_detail
