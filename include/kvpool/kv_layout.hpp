// KV storage: per-layer NHD pools that own their memory (MHA, MLA, Mamba
// state) and page-major pools that view one side of a UnifiedKVPool, where a
// page holds all layers of its tokens. Elements are dtype bit patterns in an
// unsigned type of the dtype's size (storage_t<KVDtype::bf16> is std::uint16_t).
//
// Every pool is a set of rows (layout_rows.hpp), so store, all-layer move,
// state clear/copy and host offload are the same kernels for every layout.
// Locations are physical token (slot) ids. On host backends every call checks
// them, since reading them there is free; on device backends a check costs a
// device->host copy and a fence, so there it is the explicit check_locations /
// check_move call.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/kokkos_compat.hpp>
#include <kvpool/layout_geometry.hpp>
#include <kvpool/layout_rows.hpp>
#include <kvpool/unified_kv_pool.hpp>

#include <kokkos/kv_row_move.hpp>
#include <kokkos/kv_store.hpp>
#include <kokkos/state_ops.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace kvpool {

namespace kv_detail {

// Location checks cost nothing where the host can read the ids directly.
template <class ExecutionSpace, class IdView>
constexpr bool free_to_read() {
    return kk::host_execution<ExecutionSpace> && kk::host_accessible<typename IdView::memory_space>;
}

// The ids on the host: a copy on the instance and a fence unless free_to_read.
template <class ExecutionSpace, class IdView>
std::vector<index_t> read_ids(const ExecutionSpace& space, const IdView& ids) {
    static_assert(IdView::rank == 1, "location Views are rank 1");
    const std::size_t n = ids.extent(0);
    std::vector<index_t> out(n);
    if constexpr (kk::host_accessible<typename IdView::memory_space>) {
        if (!kk::host_execution<ExecutionSpace>) space.fence();
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<index_t>(ids(i));
    } else {
        using value_type = std::remove_const_t<typename IdView::value_type>;
        Kokkos::View<value_type*, Kokkos::HostSpace> host(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "kvpool::checked_ids"), n);
        Kokkos::deep_copy(space, host, ids);
        space.fence();
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<index_t>(host(i));
    }
    return out;
}

// ids of units of `unit` tokens must lie in [0, slots / unit).
inline void require_in_range(const std::vector<index_t>& ids, index_t slots, index_t unit,
                             const std::string& what) {
    const index_t limit = slots / unit;
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= limit)
            throw Error(ErrorCode::out_of_range,
                        what + ": " + (unit == 1 ? "location " : "page ") + std::to_string(ids[i]) +
                            " (entry " + std::to_string(i) + ") is outside the pool's " +
                            std::to_string(limit) +
                            (unit == 1 ? " slots" : " pages of " + std::to_string(unit) + " tokens"));
}

// The move contract: destinations distinct, no id both a source and a destination.
inline void require_disjoint(const std::vector<index_t>& dst, const std::vector<index_t>& src,
                             const std::string& what) {
    std::vector<index_t> sorted(dst);
    std::sort(sorted.begin(), sorted.end());
    const auto repeated = std::adjacent_find(sorted.begin(), sorted.end());
    if (repeated != sorted.end())
        throw Error(ErrorCode::invalid_argument,
                    what + ": destination " + std::to_string(*repeated) + " appears more than once");
    for (std::size_t i = 0; i < src.size(); ++i)
        if (std::binary_search(sorted.begin(), sorted.end(), src[i]))
            throw Error(ErrorCode::invalid_argument,
                        what + ": " + std::to_string(src[i]) + " (source entry " + std::to_string(i) +
                            ") is also a destination; sources and destinations must be disjoint "
                            "(run a chain a->b, b->c as two calls: b->c, then a->b)");
}

template <class A, class B>
void require_same_length(const std::string& what, const char* a_name, const A& a, const char* b_name,
                         const B& b) {
    if (a.extent(0) != b.extent(0))
        throw Error(ErrorCode::invalid_argument, what + ": " + a_name + " has " +
                                                     std::to_string(a.extent(0)) + " entries but " +
                                                     b_name + " has " + std::to_string(b.extent(0)));
}

template <class View>
void require_extent(const std::string& what, const char* name, const View& view, unsigned dim,
                    const char* dim_name, index_t expected) {
    if (static_cast<index_t>(view.extent(dim)) != expected)
        throw Error(ErrorCode::invalid_argument,
                    what + ": " + name + " extent " + std::to_string(dim) + " (" + dim_name + ") is " +
                        std::to_string(view.extent(dim)) + ", expected " + std::to_string(expected));
}

inline void require_layer(const std::string& what, index_t layer, index_t layers) {
    if (layer < 0 || layer >= layers)
        throw Error(ErrorCode::out_of_range, what + ": layer " + std::to_string(layer) +
                                                 " is outside [0, " + std::to_string(layers) + ")");
}

// Location (id) Views are rank 1 and readable by the instance that uses them.
template <class ExecutionSpace, class IdView>
constexpr void check_id_view() {
    static_assert(IdView::rank == 1, "location Views are rank 1");
    static_assert(Kokkos::SpaceAccessibility<ExecutionSpace, typename IdView::memory_space>::accessible,
                  "location Views must be readable by the execution space");
}

// Sources of a store are rank-3 Views of the storage type, readable by the
// instance that runs the store.
template <class T, class ExecutionSpace, class Src>
constexpr void check_source_type() {
    static_assert(Src::rank == 3, "store sources are rank-3 Views [tokens][heads][dim]");
    static_assert(std::is_same<std::remove_const_t<typename Src::value_type>, T>::value,
                  "store sources hold the pool's storage type (bit patterns): view fp16/bf16 "
                  "data as std::uint16_t, fp8 as std::uint8_t, fp32 as std::uint32_t");
    static_assert(Kokkos::SpaceAccessibility<ExecutionSpace, typename Src::memory_space>::accessible,
                  "store sources must be readable by the execution space");
}

inline void require_entry_bytes(const SideGeometry& side, const std::string& layout,
                                index_t needed_entry_bytes) {
    if (side.spec.entry_bytes != needed_entry_bytes)
        throw Error(ErrorCode::invalid_argument,
                    layout + ": side '" + side.spec.name + "' has entry_bytes " +
                        std::to_string(side.spec.entry_bytes) + ", but the geometry needs " +
                        std::to_string(needed_entry_bytes) +
                        " (build the side's SubPoolSpec with sub_pool_spec())");
}

// What every layout shares: one or two kinds of rows over num_slots() token
// slots, location checks and whole-row moves.
template <class MemorySpace>
class RowStorage {
public:
    using memory_space = MemorySpace;
    using execution_space = typename MemorySpace::execution_space;

    index_t num_slots() const { return slots_; }
    // Bytes of one token (slot) across all layers, as packed in a host copy.
    index_t token_bytes() const { return a_.layers * a_.row_bytes + b_.layers * b_.row_bytes; }
    const RowMap& first_rows() const { return a_; }
    const RowMap& second_rows() const { return b_; }

    // Throws out_of_range naming the first location outside [0, num_slots()).
    // Reads the locations on the host: on device backends a copy and a fence.
    template <class ExecutionSpace, class IdView>
    void check_locations(const ExecutionSpace& space, const IdView& locations) const {
        require_in_range(read_ids(space, locations), slots_, 1, "check_locations");
    }
    template <class IdView>
    void check_locations(const IdView& locations) const {
        check_locations(execution_space(), locations);
    }

    // The checks of move_kv_cache / copy_from, explicitly (a copy and a fence
    // on device backends): equal lengths, in range, the move contract.
    template <class ExecutionSpace, class DstView, class SrcView>
    void check_move(const ExecutionSpace& space, const DstView& dst, const SrcView& src) const {
        validate_move(space, dst, src, 1, "check_move");
    }
    template <class DstView, class SrcView>
    void check_move(const DstView& dst, const SrcView& src) const {
        check_move(execution_space(), dst, src);
    }

    // Every layer's rows of whole pages: token dst(i) * page_size + j receives
    // token src(i) * page_size + j. The KV move of MultiEndedAllocator
    // compaction (see make_page_mover); the same contract as move_kv_cache.
    template <class ExecutionSpace, class DstView, class SrcView>
    void move_page_rows(const ExecutionSpace& space, const DstView& dst_pages, const SrcView& src_pages,
                        index_t page_size) const {
        if (page_size <= 0)
            throw Error(ErrorCode::invalid_argument,
                        "move_page_rows: page_size must be > 0, got " + std::to_string(page_size));
        move_units(space, dst_pages, src_pages, page_size, "move_page_rows");
    }
    template <class DstView, class SrcView>
    void move_page_rows(const DstView& dst_pages, const SrcView& src_pages, index_t page_size) const {
        move_page_rows(execution_space(), dst_pages, src_pages, page_size);
    }

protected:
    RowStorage() = default;

    void init(const RowMap& a, const RowMap& b, index_t slots) {
        a_ = a;
        b_ = b;
        slots_ = slots;
    }

    template <class ExecutionSpace, class IdView>
    void precheck_locations(const ExecutionSpace& space, const IdView& locations,
                            const std::string& what) const {
        check_id_view<ExecutionSpace, IdView>();
        if constexpr (free_to_read<ExecutionSpace, IdView>())
            require_in_range(read_ids(space, locations), slots_, 1, what);
    }

    template <class ExecutionSpace, class DstView, class SrcView>
    void validate_move(const ExecutionSpace& space, const DstView& dst, const SrcView& src, index_t unit,
                       const std::string& what) const {
        require_same_length(what, "dst", dst, "src", src);
        const std::vector<index_t> d = read_ids(space, dst), s = read_ids(space, src);
        require_in_range(d, slots_, unit, what);
        require_in_range(s, slots_, unit, what);
        require_disjoint(d, s, what);
    }

    template <class ExecutionSpace, class DstView, class SrcView>
    void move_units(const ExecutionSpace& space, const DstView& dst, const SrcView& src, index_t unit,
                    const std::string& what) const {
        check_id_view<ExecutionSpace, DstView>();
        check_id_view<ExecutionSpace, SrcView>();
        require_same_length(what, "dst", dst, "src", src);
        if constexpr (free_to_read<ExecutionSpace, DstView>() && free_to_read<ExecutionSpace, SrcView>())
            validate_move(space, dst, src, unit, what);
        kernels::move_rows_portable(space, a_, b_, dst, src, unit);
    }

    RowMap a_;
    RowMap b_;
    index_t slots_ = 0;
};

// MHA operations over K rows (first) and V rows (second).
template <class MemorySpace, class T>
class MHAStore : public RowStorage<MemorySpace> {
public:
    using value_type = T;
    using execution_space = typename RowStorage<MemorySpace>::execution_space;

    const MHAGeometry& geometry() const { return geometry_; }

    // Layer `layer` of the tokens at loc: K row loc(i) = k(i, :, :), V row
    // loc(i) = v(i, :, :). k is [n][heads][head_dim], v [n][heads][v_head_dim],
    // any layout. A location given twice (padding tokens sent to the sink slot)
    // receives one of its rows, unspecified which.
    template <class ExecutionSpace, class LocView, class KView, class VView>
    void set_kv_buffer(const ExecutionSpace& space, index_t layer, const LocView& loc, const KView& k,
                       const VView& v) const {
        check_source_type<T, ExecutionSpace, KView>();
        check_source_type<T, ExecutionSpace, VView>();
        const std::string what = "set_kv_buffer";
        require_layer(what, layer, geometry_.layers);
        require_same_length(what, "k", k, "loc", loc);
        require_same_length(what, "v", v, "loc", loc);
        require_extent(what, "k", k, 1, "heads", geometry_.heads);
        require_extent(what, "k", k, 2, "head_dim", geometry_.head_dim);
        require_extent(what, "v", v, 1, "heads", geometry_.heads);
        require_extent(what, "v", v, 2, "v_head_dim", geometry_.value_head_dim());
        this->precheck_locations(space, loc, what);
        kernels::store_rows_portable<T>(space, layer, loc, this->a_, 0, k, this->b_, 0, v);
    }
    template <class LocView, class KView, class VView>
    void set_kv_buffer(index_t layer, const LocView& loc, const KView& k, const VView& v) const {
        set_kv_buffer(execution_space(), layer, loc, k, v);
    }

    // Every layer's K and V row of src(i) is copied onto dst(i). Sources and
    // destinations must be disjoint and destinations distinct (the move is
    // then order-free: one parallel launch); overlapping sets are rejected,
    // so a chain a->b, b->c is two calls, b->c first.
    template <class ExecutionSpace, class DstView, class SrcView>
    void move_kv_cache(const ExecutionSpace& space, const DstView& dst, const SrcView& src) const {
        this->move_units(space, dst, src, 1, "move_kv_cache");
    }
    template <class DstView, class SrcView>
    void move_kv_cache(const DstView& dst, const SrcView& src) const {
        move_kv_cache(execution_space(), dst, src);
    }

protected:
    explicit MHAStore(const MHAGeometry& geometry, const char* layout) : geometry_(geometry) {
        geometry_.validate();
        require_storage<T>(layout, "KV", geometry_.dtype);
    }

    MHAGeometry geometry_;
};

// MLA operations over one row kind: latent (kv_lora_rank) then rope.
template <class MemorySpace, class T>
class MLAStore : public RowStorage<MemorySpace> {
public:
    using value_type = T;
    using execution_space = typename RowStorage<MemorySpace>::execution_space;

    const MLAGeometry& geometry() const { return geometry_; }

    // Row loc(i) of layer `layer` = kv(i, 0, :), kv being [n][1][kv_lora_rank + qk_rope_head_dim].
    template <class ExecutionSpace, class LocView, class KVView>
    void set_kv_buffer(const ExecutionSpace& space, index_t layer, const LocView& loc,
                       const KVView& kv) const {
        check_source_type<T, ExecutionSpace, KVView>();
        const std::string what = "set_kv_buffer";
        require_layer(what, layer, geometry_.layers);
        require_same_length(what, "kv", kv, "loc", loc);
        require_extent(what, "kv", kv, 1, "heads", 1);
        require_extent(what, "kv", kv, 2, "kv_lora_rank + qk_rope_head_dim", geometry_.row_elements());
        this->precheck_locations(space, loc, what);
        kernels::store_rows_portable<T>(space, layer, loc, this->a_, 0, kv);
    }
    template <class LocView, class KVView>
    void set_kv_buffer(index_t layer, const LocView& loc, const KVView& kv) const {
        set_kv_buffer(execution_space(), layer, loc, kv);
    }

    // The latent and rope parts from separate tensors: k_nope [n][1][kv_lora_rank],
    // k_rope [n][1][qk_rope_head_dim], one launch.
    template <class ExecutionSpace, class LocView, class NopeView, class RopeView>
    void set_mla_kv_buffer(const ExecutionSpace& space, index_t layer, const LocView& loc,
                           const NopeView& k_nope, const RopeView& k_rope) const {
        check_source_type<T, ExecutionSpace, NopeView>();
        check_source_type<T, ExecutionSpace, RopeView>();
        const std::string what = "set_mla_kv_buffer";
        require_layer(what, layer, geometry_.layers);
        require_same_length(what, "k_nope", k_nope, "loc", loc);
        require_same_length(what, "k_rope", k_rope, "loc", loc);
        require_extent(what, "k_nope", k_nope, 1, "heads", 1);
        require_extent(what, "k_nope", k_nope, 2, "kv_lora_rank", geometry_.kv_lora_rank);
        require_extent(what, "k_rope", k_rope, 1, "heads", 1);
        require_extent(what, "k_rope", k_rope, 2, "qk_rope_head_dim", geometry_.qk_rope_head_dim);
        this->precheck_locations(space, loc, what);
        kernels::store_rows_portable<T>(space, layer, loc, this->a_, 0, k_nope, this->a_,
                                        geometry_.kv_lora_rank, k_rope);
    }
    template <class LocView, class NopeView, class RopeView>
    void set_mla_kv_buffer(index_t layer, const LocView& loc, const NopeView& k_nope,
                           const RopeView& k_rope) const {
        set_mla_kv_buffer(execution_space(), layer, loc, k_nope, k_rope);
    }

    // As MHA move_kv_cache: disjoint sets, distinct destinations.
    template <class ExecutionSpace, class DstView, class SrcView>
    void move_kv_cache(const ExecutionSpace& space, const DstView& dst, const SrcView& src) const {
        this->move_units(space, dst, src, 1, "move_kv_cache");
    }
    template <class DstView, class SrcView>
    void move_kv_cache(const DstView& dst, const SrcView& src) const {
        move_kv_cache(execution_space(), dst, src);
    }

protected:
    explicit MLAStore(const MLAGeometry& geometry, const char* layout) : geometry_(geometry) {
        geometry_.validate();
        require_storage<T>(layout, "KV", geometry_.dtype);
    }

    MLAGeometry geometry_;
};

// Mamba state operations over conv rows (first) and temporal rows (second).
template <class MemorySpace, class TConv, class TTemporal>
class MambaStore : public RowStorage<MemorySpace> {
public:
    using conv_type = TConv;
    using temporal_type = TTemporal;
    using execution_space = typename RowStorage<MemorySpace>::execution_space;

    const MambaStateGeometry& geometry() const { return geometry_; }

    // Zeroes the conv and temporal state of these slots in every layer.
    template <class ExecutionSpace, class SlotView>
    void clear_slots(const ExecutionSpace& space, const SlotView& slots) const {
        this->precheck_locations(space, slots, "clear_slots");
        kernels::clear_rows_portable(space, this->a_, this->b_, slots);
    }
    template <class SlotView>
    void clear_slots(const SlotView& slots) const {
        clear_slots(execution_space(), slots);
    }

    // Slot src(i)'s state, every layer, is copied onto slot dst(i). The move
    // contract of move_kv_cache: disjoint sets, distinct destinations.
    template <class ExecutionSpace, class SrcView, class DstView>
    void copy_from(const ExecutionSpace& space, const SrcView& src, const DstView& dst) const {
        this->move_units(space, dst, src, 1, "copy_from");
    }
    template <class SrcView, class DstView>
    void copy_from(const SrcView& src, const DstView& dst) const {
        copy_from(execution_space(), src, dst);
    }

protected:
    explicit MambaStore(const MambaStateGeometry& geometry, const char* layout) : geometry_(geometry) {
        geometry_.validate();
        require_storage<TConv>(layout, "conv state", geometry_.conv_dtype);
        require_storage<TTemporal>(layout, "temporal state", geometry_.temporal_dtype);
    }

    MambaStateGeometry geometry_;
};

inline void require_slots(const char* layout, index_t slots) {
    if (slots <= 0)
        throw Error(ErrorCode::invalid_argument,
                    std::string(layout) + ": num_slots must be > 0, got " + std::to_string(slots));
}

}  // namespace kv_detail

// ------------------------------------------------------------------ per-layer NHD pools

// MHA K and V per layer, [slots][heads][head_dim] and [slots][heads][v_head_dim]
// (token-major, LayoutRight), zero-initialised. Slot 0 is the padding sink by
// the engine's convention.
template <class MemorySpace, class T>
class MHAKVPool : public kv_detail::MHAStore<MemorySpace, T> {
public:
    using buffers_type = kk::RightView<T****, MemorySpace>;  // [layers][slots][heads][dim]

    MHAKVPool(const MHAGeometry& geometry, index_t num_slots)
        : kv_detail::MHAStore<MemorySpace, T>(geometry, "MHAKVPool") {
        kv_detail::require_slots("MHAKVPool", num_slots);
        const MHAGeometry& g = this->geometry_;
        k_ = buffers_type("kvpool::mha_k", g.layers, num_slots, g.heads, g.head_dim);
        v_ = buffers_type("kvpool::mha_v", g.layers, num_slots, g.heads, g.value_head_dim());
        const index_t size = static_cast<index_t>(sizeof(T));
        this->init(per_layer_rows(bytes_of(k_), g.layers, num_slots, g.k_row_elements() * size),
                   per_layer_rows(bytes_of(v_), g.layers, num_slots, g.v_row_elements() * size),
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
    static std::uint8_t* bytes_of(const buffers_type& v) { return reinterpret_cast<std::uint8_t*>(v.data()); }

    buffers_type k_;
    buffers_type v_;
};

// MLA, one row per token per layer: [slots][1][kv_lora_rank + qk_rope_head_dim].
template <class MemorySpace, class T>
class MLAKVPool : public kv_detail::MLAStore<MemorySpace, T> {
public:
    using buffers_type = kk::RightView<T****, MemorySpace>;  // [layers][slots][1][row]

    MLAKVPool(const MLAGeometry& geometry, index_t num_slots)
        : kv_detail::MLAStore<MemorySpace, T>(geometry, "MLAKVPool") {
        kv_detail::require_slots("MLAKVPool", num_slots);
        const MLAGeometry& g = this->geometry_;
        kv_ = buffers_type("kvpool::mla_kv", g.layers, num_slots, 1, g.row_elements());
        this->init(per_layer_rows(reinterpret_cast<std::uint8_t*>(kv_.data()), g.layers, num_slots,
                                  g.row_elements() * static_cast<index_t>(sizeof(T))),
                   RowMap(), num_slots);
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
    using conv_buffers_type = kk::RightView<TConv****, MemorySpace>;           // [layers][slots][...]
    using temporal_buffers_type = kk::RightView<TTemporal*****, MemorySpace>;  // [layers][slots][...]

    MambaStatePool(const MambaStateGeometry& geometry, index_t num_slots)
        : kv_detail::MambaStore<MemorySpace, TConv, TTemporal>(geometry, "MambaStatePool") {
        kv_detail::require_slots("MambaStatePool", num_slots);
        const MambaStateGeometry& g = this->geometry_;
        conv_ = conv_buffers_type("kvpool::mamba_conv", g.layers, num_slots, g.conv_dim, g.conv_width);
        temporal_ = temporal_buffers_type("kvpool::mamba_temporal", g.layers, num_slots, g.heads,
                                          g.head_dim, g.state_dim);
        this->init(per_layer_rows(reinterpret_cast<std::uint8_t*>(conv_.data()), g.layers, num_slots,
                                  g.conv_row_bytes()),
                   per_layer_rows(reinterpret_cast<std::uint8_t*>(temporal_.data()), g.layers,
                                  num_slots, g.temporal_row_bytes()),
                   num_slots);
    }

    auto conv_state(index_t layer) const {
        kv_detail::require_layer("conv_state", layer, this->geometry_.layers);
        return Kokkos::subview(conv_, layer, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    }
    auto temporal_state(index_t layer) const {
        kv_detail::require_layer("temporal_state", layer, this->geometry_.layers);
        return Kokkos::subview(temporal_, layer, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    }
    const conv_buffers_type& conv_buffers() const { return conv_; }
    const temporal_buffers_type& temporal_buffers() const { return temporal_; }

private:
    conv_buffers_type conv_;
    temporal_buffers_type temporal_;
};

// ------------------------------------------------------------------ page-major pools
//
// A side of a UnifiedKVPool, physical page p at bytes [p * page_bytes,
// (p + 1) * page_bytes), holding all layers of its page_size tokens: for layer
// l, its block of page_size rows of each kind in turn. Token t is slot
// t % page_size of page t / page_size. The pools keep the buffer alive; whole
// pages move with MultiEndedAllocator's page move (one contiguous copy).

// MHA: per layer, K [page_size][heads][head_dim] then V [page_size][heads][v_head_dim].
template <class MemorySpace, class T>
class PageMajorMHAPool : public kv_detail::MHAStore<MemorySpace, T> {
public:
    using layer_view = kk::UnmanagedStridedView<T****, MemorySpace>;  // [pages][page_size][heads][dim]

    PageMajorMHAPool(const UnifiedKVPool<MemorySpace>& pool, const std::string& side_name,
                     const MHAGeometry& geometry)
        : kv_detail::MHAStore<MemorySpace, T>(geometry, "PageMajorMHAPool"),
          bytes_(pool.bytes()),
          side_(pool.layout().side(side_name)) {
        const MHAGeometry& g = this->geometry_;
        const index_t size = static_cast<index_t>(sizeof(T)), ps = side_.page_size();
        RowMap k;
        kv_detail::require_entry_bytes(side_, "PageMajorMHAPool", g.entry_bytes());
        k.base = bytes_.data();
        k.layers = g.layers;
        k.row_bytes = g.k_row_elements() * size;
        k.layer_stride = ps * (g.k_row_elements() + g.v_row_elements()) * size;
        k.page_size = ps;
        k.page_stride = side_.page_bytes;
        k.slot_stride = k.row_bytes;
        RowMap v = k;
        v.base = k.base + ps * k.row_bytes;
        v.row_bytes = g.v_row_elements() * size;
        v.slot_stride = v.row_bytes;
        this->init(k, v, side_.num_physical_pages * ps);
    }

    const SideGeometry& side() const { return side_; }
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
    layer_view view_of(const RowMap& rows, index_t layer, index_t dim) const {
        const auto size = sizeof(T);
        const auto heads = static_cast<std::size_t>(this->geometry_.heads);
        const auto d = static_cast<std::size_t>(dim);
        return layer_view(reinterpret_cast<T*>(rows.row(layer, 0)),
                          Kokkos::LayoutStride(static_cast<std::size_t>(num_pages()),
                                               static_cast<std::size_t>(rows.page_stride) / size,
                                               static_cast<std::size_t>(page_size()),
                                               static_cast<std::size_t>(rows.slot_stride) / size, heads,
                                               d, d, 1));
    }

    typename UnifiedKVPool<MemorySpace>::bytes_view bytes_;
    SideGeometry side_;
};

// MLA: per layer, [page_size][1][kv_lora_rank + qk_rope_head_dim].
template <class MemorySpace, class T>
class PageMajorMLAPool : public kv_detail::MLAStore<MemorySpace, T> {
public:
    using layer_view = kk::UnmanagedStridedView<T****, MemorySpace>;  // [pages][page_size][1][row]

    PageMajorMLAPool(const UnifiedKVPool<MemorySpace>& pool, const std::string& side_name,
                     const MLAGeometry& geometry)
        : kv_detail::MLAStore<MemorySpace, T>(geometry, "PageMajorMLAPool"),
          bytes_(pool.bytes()),
          side_(pool.layout().side(side_name)) {
        const MLAGeometry& g = this->geometry_;
        const index_t ps = side_.page_size();
        RowMap rows;
        kv_detail::require_entry_bytes(side_, "PageMajorMLAPool", g.entry_bytes());
        rows.base = bytes_.data();
        rows.layers = g.layers;
        rows.row_bytes = g.row_elements() * static_cast<index_t>(sizeof(T));
        rows.layer_stride = ps * rows.row_bytes;
        rows.page_size = ps;
        rows.page_stride = side_.page_bytes;
        rows.slot_stride = rows.row_bytes;
        this->init(rows, RowMap(), side_.num_physical_pages * ps);
    }

    const SideGeometry& side() const { return side_; }
    index_t num_pages() const { return side_.num_physical_pages; }
    index_t page_size() const { return side_.page_size(); }

    layer_view kv_buffer(index_t layer) const {
        kv_detail::require_layer("kv_buffer", layer, this->geometry_.layers);
        const auto size = sizeof(T);
        const auto row = static_cast<std::size_t>(this->geometry_.row_elements());
        return layer_view(reinterpret_cast<T*>(this->a_.row(layer, 0)),
                          Kokkos::LayoutStride(static_cast<std::size_t>(num_pages()),
                                               static_cast<std::size_t>(this->a_.page_stride) / size,
                                               static_cast<std::size_t>(page_size()), row, 1, row, row, 1));
    }

private:
    typename UnifiedKVPool<MemorySpace>::bytes_view bytes_;
    SideGeometry side_;
};

// Mamba state (page size 1: a page is a slot): per layer, the conv block then
// the temporal block, each padded to the larger element size.
template <class MemorySpace, class TConv, class TTemporal>
class PageMajorMambaPool : public kv_detail::MambaStore<MemorySpace, TConv, TTemporal> {
public:
    using conv_view = kk::UnmanagedStridedView<TConv***, MemorySpace>;  // [slots][conv_dim][conv_width]
    using temporal_view =
        kk::UnmanagedStridedView<TTemporal****, MemorySpace>;  // [slots][heads][head_dim][state_dim]

    PageMajorMambaPool(const UnifiedKVPool<MemorySpace>& pool, const std::string& side_name,
                       const MambaStateGeometry& geometry)
        : kv_detail::MambaStore<MemorySpace, TConv, TTemporal>(geometry, "PageMajorMambaPool"),
          bytes_(pool.bytes()),
          side_(pool.layout().side(side_name)) {
        if (side_.page_size() != 1)
            throw Error(ErrorCode::invalid_argument,
                        "PageMajorMambaPool: side '" + side_name + "' has page_size " +
                            std::to_string(side_.page_size()) + "; state slots need page size 1");
        const MambaStateGeometry& g = this->geometry_;
        RowMap conv;
        kv_detail::require_entry_bytes(side_, "PageMajorMambaPool", g.entry_bytes());
        conv.base = bytes_.data();
        conv.layers = g.layers;
        conv.row_bytes = g.conv_row_bytes();
        conv.layer_stride = g.layer_bytes();
        conv.page_stride = side_.page_bytes;
        RowMap temporal = conv;
        temporal.base = conv.base + g.conv_block_bytes();
        temporal.row_bytes = g.temporal_row_bytes();
        this->init(conv, temporal, side_.num_physical_pages);
    }

    const SideGeometry& side() const { return side_; }

    conv_view conv_state(index_t layer) const {
        kv_detail::require_layer("conv_state", layer, this->geometry_.layers);
        const MambaStateGeometry& g = this->geometry_;
        const auto w = static_cast<std::size_t>(g.conv_width);
        return conv_view(reinterpret_cast<TConv*>(this->a_.row(layer, 0)),
                         Kokkos::LayoutStride(static_cast<std::size_t>(this->num_slots()),
                                              static_cast<std::size_t>(this->a_.page_stride) / sizeof(TConv),
                                              static_cast<std::size_t>(g.conv_dim), w, w, 1));
    }
    temporal_view temporal_state(index_t layer) const {
        kv_detail::require_layer("temporal_state", layer, this->geometry_.layers);
        const MambaStateGeometry& g = this->geometry_;
        const auto hd = static_cast<std::size_t>(g.head_dim), s = static_cast<std::size_t>(g.state_dim);
        return temporal_view(
            reinterpret_cast<TTemporal*>(this->b_.row(layer, 0)),
            Kokkos::LayoutStride(static_cast<std::size_t>(this->num_slots()),
                                 static_cast<std::size_t>(this->b_.page_stride) / sizeof(TTemporal),
                                 static_cast<std::size_t>(g.heads), hd * s, hd, s, s, 1));
    }

private:
    typename UnifiedKVPool<MemorySpace>::bytes_view bytes_;
    SideGeometry side_;
};

// ------------------------------------------------------------------ allocator wiring

// A MultiEndedAllocator move callback (space, src_pages, dst_pages) that moves
// every layer's rows of the relocated pages in pool, for engines that keep KV
// in a per-layer pool instead of the unified buffer's pages. The callback holds
// a shallow copy of the pool (its Views), so the memory outlives it.
template <class Pool>
auto make_page_mover(const Pool& pool, index_t page_size) {
    return [pool, page_size](const auto& space, const auto& src_pages, const auto& dst_pages) {
        pool.move_page_rows(space, dst_pages, src_pages, page_size);
    };
}

// Installs make_page_mover(pool, ...) on allocator, after checking that pool
// holds every physical page of the allocator's side.
template <class Allocator, class Pool>
void set_kv_mover(Allocator& allocator, const Pool& pool) {
    const index_t page_size = allocator.page_size();
    const SideGeometry& side = allocator.geometry();
    if (pool.num_slots() < side.num_physical_pages * page_size)
        throw Error(ErrorCode::invalid_argument,
                    "set_kv_mover: the pool holds " + std::to_string(pool.num_slots()) +
                        " token slots, but side '" + side.spec.name + "' has " +
                        std::to_string(side.num_physical_pages) + " pages of " +
                        std::to_string(page_size) + " tokens");
    allocator.set_move_callback(make_page_mover(pool, page_size));
}

}  // namespace kvpool
