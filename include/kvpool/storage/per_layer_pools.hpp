// KV storage that owns its memory, one block per layer (per-layer NHD): MHA,
// MLA and Mamba state. Elements are dtype bit patterns in an unsigned type of
// the dtype's size (storage_t<KVDtype::bf16> is std::uint16_t). Locations are
// physical token (slot) ids; on host backends every call checks them, on
// device backends check_locations / check_move do (a copy and a fence).
#pragma once

#include <kvpool/detail/mamba_store.hpp>
#include <kvpool/detail/mha_store.hpp>
#include <kvpool/detail/mla_store.hpp>
#include <kvpool/detail/shape_checks.hpp>
#include <kvpool/kernels/row_map.hpp>
#include <kvpool/kokkos_compat.hpp>
#include <kvpool/storage/model_geometry.hpp>

#include <cstdint>

namespace kvpool {

// MHA K and V per layer, [slots][heads][head_dim] and [slots][heads][v_head_dim]
// (token-major, LayoutRight), zero-initialised. Slot 0 is the padding sink by
// the engine's convention.
template <class MemorySpace, class T> class MHAKVPool : public kv_detail::MHAStore<MemorySpace, T> {
public:
    using buffers_type = kk::RightView<T****, MemorySpace>; // [layers][slots][heads][dim]

    MHAKVPool(const MHAGeometry& geometry, index_t num_slots)
        : kv_detail::MHAStore<MemorySpace, T>(geometry, "MHAKVPool") {
        kv_detail::require_slots("MHAKVPool", num_slots);
        const MHAGeometry& g = this->geometry_;
        k_ = buffers_type("kvpool::mha_k", g.layers, num_slots, g.heads, g.head_dim);
        v_ = buffers_type("kvpool::mha_v", g.layers, num_slots, g.heads, g.value_head_dim());
        const index_t size = static_cast<index_t>(sizeof(T));
        this->init(
            kernels::per_layer_rows(bytes_of(k_), g.layers, num_slots, g.k_row_elements() * size),
            kernels::per_layer_rows(bytes_of(v_), g.layers, num_slots, g.v_row_elements() * size),
            num_slots);
    }

    auto k_buffer(index_t layer) const {
        kv_detail::require_layer("k_buffer", layer, this->geometry_.layers);
        return Kokkos::subview(k_, layer, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    }
    auto v_buffer(index_t layer) const {
        kv_detail::require_layer("v_buffer", layer, this->geometry_.layers);
        return Kokkos::subview(v_, layer, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    }
    const buffers_type& k_buffers() const { return k_; }
    const buffers_type& v_buffers() const { return v_; }

private:
    static std::uint8_t* bytes_of(const buffers_type& v) {
        return reinterpret_cast<std::uint8_t*>(v.data());
    }

    buffers_type k_;
    buffers_type v_;
};

// MLA, one row per token per layer: [slots][1][kv_lora_rank + qk_rope_head_dim].
template <class MemorySpace, class T> class MLAKVPool : public kv_detail::MLAStore<MemorySpace, T> {
public:
    using buffers_type = kk::RightView<T****, MemorySpace>; // [layers][slots][1][row]

    MLAKVPool(const MLAGeometry& geometry, index_t num_slots)
        : kv_detail::MLAStore<MemorySpace, T>(geometry, "MLAKVPool") {
        kv_detail::require_slots("MLAKVPool", num_slots);
        const MLAGeometry& g = this->geometry_;
        kv_ = buffers_type("kvpool::mla_kv", g.layers, num_slots, 1, g.row_elements());
        this->init(kernels::per_layer_rows(reinterpret_cast<std::uint8_t*>(kv_.data()), g.layers,
                                           num_slots,
                                           g.row_elements() * static_cast<index_t>(sizeof(T))),
                   kernels::RowMap(), num_slots);
    }

    auto kv_buffer(index_t layer) const {
        kv_detail::require_layer("kv_buffer", layer, this->geometry_.layers);
        return Kokkos::subview(kv_, layer, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    }
    const buffers_type& kv_buffers() const { return kv_; }

private:
    buffers_type kv_;
};

// Mamba state per layer: conv [slots][conv_dim][conv_width] and temporal
// [slots][heads][head_dim][state_dim], each in its own dtype.
template <class MemorySpace, class TConv, class TTemporal>
class MambaStatePool : public kv_detail::MambaStore<MemorySpace, TConv, TTemporal> {
public:
    using conv_buffers_type = kk::RightView<TConv****, MemorySpace>; // [layers][slots][...]
    using temporal_buffers_type =
        kk::RightView<TTemporal*****, MemorySpace>; // [layers][slots][...]

    MambaStatePool(const MambaStateGeometry& geometry, index_t num_slots)
        : kv_detail::MambaStore<MemorySpace, TConv, TTemporal>(geometry, "MambaStatePool") {
        kv_detail::require_slots("MambaStatePool", num_slots);
        const MambaStateGeometry& g = this->geometry_;
        conv_ =
            conv_buffers_type("kvpool::mamba_conv", g.layers, num_slots, g.conv_dim, g.conv_width);
        temporal_ = temporal_buffers_type("kvpool::mamba_temporal", g.layers, num_slots, g.heads,
                                          g.head_dim, g.state_dim);
        this->init(kernels::per_layer_rows(reinterpret_cast<std::uint8_t*>(conv_.data()), g.layers,
                                           num_slots, g.conv_row_bytes()),
                   kernels::per_layer_rows(reinterpret_cast<std::uint8_t*>(temporal_.data()),
                                           g.layers, num_slots, g.temporal_row_bytes()),
                   num_slots);
    }

    auto conv_state(index_t layer) const {
        kv_detail::require_layer("conv_state", layer, this->geometry_.layers);
        return Kokkos::subview(conv_, layer, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    }
    auto temporal_state(index_t layer) const {
        kv_detail::require_layer("temporal_state", layer, this->geometry_.layers);
        return Kokkos::subview(temporal_, layer, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL,
                               Kokkos::ALL);
    }
    const conv_buffers_type& conv_buffers() const { return conv_; }
    const temporal_buffers_type& temporal_buffers() const { return temporal_; }

private:
    conv_buffers_type conv_;
    temporal_buffers_type temporal_;
};

} // namespace kvpool
