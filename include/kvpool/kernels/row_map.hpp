// Where the bytes of one token in one layer live, for every KV layout. Every
// layout (per-layer NHD, page-major over the unified buffer, Mamba state) is a
// set of rows: for token t and layer l one contiguous run of row_bytes bytes.
// The data-plane kernels are written once against this description, so store,
// move, clear and offload are the same code for every layout.
#pragma once

#include <kvpool/kokkos_compat.hpp>

#include <cstdint>

namespace kvpool::kernels {

// Byte addressing of one kind of row (K, V, MLA latent+rope, conv or temporal
// state) of a pool. Token t sits in page t / page_size at slot t % page_size;
// per-layer pools are the case page_size == 1.
struct RowMap {
    std::uint8_t* base = nullptr;
    index_t layers = 0;
    index_t row_bytes = 0;    // contiguous bytes of one token in one layer; 0: no such rows
    index_t layer_stride = 0; // bytes from layer l to layer l + 1
    index_t page_size = 1;
    index_t page_stride = 0; // bytes from page p to page p + 1
    index_t slot_stride = 0; // bytes from slot s to slot s + 1 inside a page

    KOKKOS_INLINE_FUNCTION std::uint8_t* row(index_t layer, index_t token) const {
        return base + layer * layer_stride + (token / page_size) * page_stride +
               (token % page_size) * slot_stride;
    }

    // The largest power of two, at most max, dividing every row's address and
    // length: the widest word the kernels may copy these rows in.
    index_t word_bytes(index_t max = 8) const {
        index_t w = max;
        const auto fits = [&w](index_t x) {
            while (w > 1 && x % w != 0)
                w /= 2;
        };
        fits(static_cast<index_t>(reinterpret_cast<std::uintptr_t>(base) % 8));
        fits(row_bytes);
        fits(layer_stride);
        fits(page_stride);
        fits(slot_stride);
        return w;
    }
};

// Rows of the token-major layout [layers][slots][row]: one block per layer.
inline RowMap per_layer_rows(std::uint8_t* base, index_t layers, index_t slots, index_t row_bytes) {
    RowMap m;
    m.base = base;
    m.layers = layers;
    m.row_bytes = row_bytes;
    m.layer_stride = slots * row_bytes;
    m.page_stride = row_bytes;
    return m;
}

} // namespace kvpool::kernels
