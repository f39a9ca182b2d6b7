// The operations of a multi-head attention KV pool, per-layer or page-major.
#pragma once

#include <kvpool/detail/row_storage.hpp>
#include <kvpool/detail/shape_checks.hpp>
#include <kvpool/kernels/portable/row_store.hpp>
#include <kvpool/storage/model_geometry.hpp>

#include <string>

namespace kvpool::kv_detail {

// MHA operations over K rows (first) and V rows (second).
template <class MemorySpace, class T> class MHAStore : public RowStorage<MemorySpace> {
public:
    using value_type = T;
    using execution_space = typename RowStorage<MemorySpace>::execution_space;

    const MHAGeometry& geometry() const { return geometry_; }

    // Layer `layer` of the tokens at loc: K row loc(i) = k(i, :, :), V row
    // loc(i) = v(i, :, :). k is [n][heads][head_dim], v [n][heads][v_head_dim],
    // any layout. A location given twice (padding tokens sent to the sink slot)
    // receives one of its rows, unspecified which.
    template <class ExecutionSpace, class LocView, class KView, class VView>
    void set_kv_buffer(const ExecutionSpace& space, index_t layer, const LocView& loc,
                       const KView& k, const VView& v) const {
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
        kernels::portable::store_rows<T>(space, layer, loc, this->a_, 0, k, this->b_, 0, v);
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

} // namespace kvpool::kv_detail
