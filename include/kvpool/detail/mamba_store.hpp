// The operations of a Mamba state pool, per-layer or page-major.
#pragma once

#include <kvpool/detail/row_storage.hpp>
#include <kvpool/detail/shape_checks.hpp>
#include <kvpool/kernels/portable/row_clear.hpp>
#include <kvpool/storage/model_geometry.hpp>

namespace kvpool::kv_detail {

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
        kernels::portable::clear_rows(space, this->a_, this->b_, slots);
    }
    template <class SlotView> void clear_slots(const SlotView& slots) const {
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
    explicit MambaStore(const MambaStateGeometry& geometry, const char* layout)
        : geometry_(geometry) {
        geometry_.validate();
        require_storage<TConv>(layout, "conv state", geometry_.conv_dtype);
        require_storage<TTemporal>(layout, "temporal state", geometry_.temporal_dtype);
    }

    MambaStateGeometry geometry_;
};

} // namespace kvpool::kv_detail
