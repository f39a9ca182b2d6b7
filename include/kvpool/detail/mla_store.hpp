// The operations of a multi-head latent attention KV pool, per-layer or page-major.
#pragma once

#include <kvpool/detail/row_storage.hpp>
#include <kvpool/detail/shape_checks.hpp>
#include <kvpool/kernels/portable/row_store.hpp>
#include <kvpool/storage/model_geometry.hpp>

#include <string>

namespace kvpool::kv_detail {

// MLA operations over one row kind: latent (kv_lora_rank) then rope.
template <class MemorySpace, class T> class MLAStore : public RowStorage<MemorySpace> {
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
        require_extent(what, "kv", kv, 2, "kv_lora_rank + qk_rope_head_dim",
                       geometry_.row_elements());
        this->precheck_locations(space, loc, what);
        kernels::portable::store_rows<T>(space, layer, loc, this->a_, 0, kv);
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
        kernels::portable::store_rows<T>(space, layer, loc, this->a_, 0, k_nope, this->a_,
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

} // namespace kvpool::kv_detail
