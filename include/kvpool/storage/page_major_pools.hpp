// KV storage over one side of a UnifiedKVPool, page-major: a page holds all
// layers of its tokens, so a compaction moves it as one contiguous copy. MHA,
// MLA and Mamba state; the same operations as the per-layer pools
// (per_layer_pools.hpp).
//
// A side of a UnifiedKVPool, physical page p at bytes [p * page_bytes,
// (p + 1) * page_bytes), holding all layers of its page_size tokens: for layer
// l, its block of page_size rows of each kind in turn. Token t is slot
// t % page_size of page t / page_size. The pools keep the buffer alive; whole
// pages move with MultiEndedAllocator's page move (one contiguous copy).
#pragma once

#include <kvpool/detail/mamba_store.hpp>
#include <kvpool/detail/mha_store.hpp>
#include <kvpool/detail/mla_store.hpp>
#include <kvpool/detail/shape_checks.hpp>
#include <kvpool/error.hpp>
#include <kvpool/kernels/row_map.hpp>
#include <kvpool/kokkos_compat.hpp>
#include <kvpool/storage/model_geometry.hpp>
#include <kvpool/storage/pool_layout.hpp>
#include <kvpool/storage/unified_kv_pool.hpp>

#include <string>

namespace kvpool {

// MHA: per layer, K [page_size][heads][head_dim] then V [page_size][heads][v_head_dim].
template <class MemorySpace, class T>
class PageMajorMHAPool : public kv_detail::MHAStore<MemorySpace, T> {
public:
    using layer_view =
        kk::UnmanagedStridedView<T****, MemorySpace>; // [pages][page_size][heads][dim]

    PageMajorMHAPool(const UnifiedKVPool<MemorySpace>& pool, const std::string& side_name,
                     const MHAGeometry& geometry)
        : kv_detail::MHAStore<MemorySpace, T>(geometry, "PageMajorMHAPool"), bytes_(pool.bytes()),
          side_(pool.layout().sub_pool(side_name)) {
        const MHAGeometry& g = this->geometry_;
        const index_t size = static_cast<index_t>(sizeof(T)), ps = side_.page_size();
        kernels::RowMap k;
        kv_detail::require_entry_bytes(side_, "PageMajorMHAPool", g.entry_bytes());
        k.base = bytes_.data();
        k.layers = g.layers;
        k.row_bytes = g.k_row_elements() * size;
        k.layer_stride = ps * (g.k_row_elements() + g.v_row_elements()) * size;
        k.page_size = ps;
        k.page_stride = side_.page_bytes;
        k.slot_stride = k.row_bytes;
        kernels::RowMap v = k;
        v.base = k.base + ps * k.row_bytes;
        v.row_bytes = g.v_row_elements() * size;
        v.slot_stride = v.row_bytes;
        this->init(k, v, side_.num_physical_pages * ps);
    }

    const SubPoolGeometry& side() const { return side_; }
    index_t num_pages() const { return side_.num_physical_pages; }
    index_t page_size() const { return side_.page_size(); }

    layer_view k_buffer(index_t layer) const {
        kv_detail::require_layer("k_buffer", layer, this->geometry_.layers);
        return view_of(this->a_, layer, this->geometry_.head_dim);
    }
    layer_view v_buffer(index_t layer) const {
        kv_detail::require_layer("v_buffer", layer, this->geometry_.layers);
        return view_of(this->b_, layer, this->geometry_.value_head_dim());
    }

private:
    layer_view view_of(const kernels::RowMap& rows, index_t layer, index_t dim) const {
        const auto size = sizeof(T);
        const auto heads = static_cast<std::size_t>(this->geometry_.heads);
        const auto d = static_cast<std::size_t>(dim);
        return layer_view(reinterpret_cast<T*>(rows.row(layer, 0)),
                          Kokkos::LayoutStride(static_cast<std::size_t>(num_pages()),
                                               static_cast<std::size_t>(rows.page_stride) / size,
                                               static_cast<std::size_t>(page_size()),
                                               static_cast<std::size_t>(rows.slot_stride) / size,
                                               heads, d, d, 1));
    }

    typename UnifiedKVPool<MemorySpace>::bytes_view bytes_;
    SubPoolGeometry side_;
};

// MLA: per layer, [page_size][1][kv_lora_rank + qk_rope_head_dim].
template <class MemorySpace, class T>
class PageMajorMLAPool : public kv_detail::MLAStore<MemorySpace, T> {
public:
    using layer_view = kk::UnmanagedStridedView<T****, MemorySpace>; // [pages][page_size][1][row]

    PageMajorMLAPool(const UnifiedKVPool<MemorySpace>& pool, const std::string& side_name,
                     const MLAGeometry& geometry)
        : kv_detail::MLAStore<MemorySpace, T>(geometry, "PageMajorMLAPool"), bytes_(pool.bytes()),
          side_(pool.layout().sub_pool(side_name)) {
        const MLAGeometry& g = this->geometry_;
        const index_t ps = side_.page_size();
        kernels::RowMap rows;
        kv_detail::require_entry_bytes(side_, "PageMajorMLAPool", g.entry_bytes());
        rows.base = bytes_.data();
        rows.layers = g.layers;
        rows.row_bytes = g.row_elements() * static_cast<index_t>(sizeof(T));
        rows.layer_stride = ps * rows.row_bytes;
        rows.page_size = ps;
        rows.page_stride = side_.page_bytes;
        rows.slot_stride = rows.row_bytes;
        this->init(rows, kernels::RowMap(), side_.num_physical_pages * ps);
    }

    const SubPoolGeometry& side() const { return side_; }
    index_t num_pages() const { return side_.num_physical_pages; }
    index_t page_size() const { return side_.page_size(); }

    layer_view kv_buffer(index_t layer) const {
        kv_detail::require_layer("kv_buffer", layer, this->geometry_.layers);
        const auto size = sizeof(T);
        const auto row = static_cast<std::size_t>(this->geometry_.row_elements());
        return layer_view(
            reinterpret_cast<T*>(this->a_.row(layer, 0)),
            Kokkos::LayoutStride(static_cast<std::size_t>(num_pages()),
                                 static_cast<std::size_t>(this->a_.page_stride) / size,
                                 static_cast<std::size_t>(page_size()), row, 1, row, row, 1));
    }

private:
    typename UnifiedKVPool<MemorySpace>::bytes_view bytes_;
    SubPoolGeometry side_;
};

// Mamba state (page size 1: a page is a slot): per layer, the conv block then
// the temporal block, each padded to the larger element size.
template <class MemorySpace, class TConv, class TTemporal>
class PageMajorMambaPool : public kv_detail::MambaStore<MemorySpace, TConv, TTemporal> {
public:
    using conv_view =
        kk::UnmanagedStridedView<TConv***, MemorySpace>; // [slots][conv_dim][conv_width]
    using temporal_view =
        kk::UnmanagedStridedView<TTemporal****, MemorySpace>; // [slots][heads][head_dim][state_dim]

    PageMajorMambaPool(const UnifiedKVPool<MemorySpace>& pool, const std::string& side_name,
                       const MambaStateGeometry& geometry)
        : kv_detail::MambaStore<MemorySpace, TConv, TTemporal>(geometry, "PageMajorMambaPool"),
          bytes_(pool.bytes()), side_(pool.layout().sub_pool(side_name)) {
        if (side_.page_size() != 1)
            throw Error(ErrorCode::invalid_argument,
                        "PageMajorMambaPool: side '" + side_name + "' has page_size " +
                            std::to_string(side_.page_size()) + "; state slots need page size 1");
        const MambaStateGeometry& g = this->geometry_;
        kernels::RowMap conv;
        kv_detail::require_entry_bytes(side_, "PageMajorMambaPool", g.entry_bytes());
        conv.base = bytes_.data();
        conv.layers = g.layers;
        conv.row_bytes = g.conv_row_bytes();
        conv.layer_stride = g.layer_bytes();
        conv.page_stride = side_.page_bytes;
        kernels::RowMap temporal = conv;
        temporal.base = conv.base + g.conv_block_bytes();
        temporal.row_bytes = g.temporal_row_bytes();
        this->init(conv, temporal, side_.num_physical_pages);
    }

    const SubPoolGeometry& side() const { return side_; }

    conv_view conv_state(index_t layer) const {
        kv_detail::require_layer("conv_state", layer, this->geometry_.layers);
        const MambaStateGeometry& g = this->geometry_;
        const auto w = static_cast<std::size_t>(g.conv_width);
        return conv_view(
            reinterpret_cast<TConv*>(this->a_.row(layer, 0)),
            Kokkos::LayoutStride(static_cast<std::size_t>(this->num_slots()),
                                 static_cast<std::size_t>(this->a_.page_stride) / sizeof(TConv),
                                 static_cast<std::size_t>(g.conv_dim), w, w, 1));
    }
    temporal_view temporal_state(index_t layer) const {
        kv_detail::require_layer("temporal_state", layer, this->geometry_.layers);
        const MambaStateGeometry& g = this->geometry_;
        const auto hd = static_cast<std::size_t>(g.head_dim),
                   s = static_cast<std::size_t>(g.state_dim);
        return temporal_view(
            reinterpret_cast<TTemporal*>(this->b_.row(layer, 0)),
            Kokkos::LayoutStride(static_cast<std::size_t>(this->num_slots()),
                                 static_cast<std::size_t>(this->b_.page_stride) / sizeof(TTemporal),
                                 static_cast<std::size_t>(g.heads), hd * s, hd, s, s, 1));
    }

private:
    typename UnifiedKVPool<MemorySpace>::bytes_view bytes_;
    SubPoolGeometry side_;
};

} // namespace kvpool
