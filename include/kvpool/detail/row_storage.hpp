// What every KV pool shares: one or two kinds of rows (kernels/row_map.hpp)
// over its token slots, the location checks and whole-row moves.
#pragma once

#include <kvpool/detail/location_checks.hpp>
#include <kvpool/detail/shape_checks.hpp>
#include <kvpool/error.hpp>
#include <kvpool/kernels/portable/row_moves.hpp>
#include <kvpool/kernels/row_map.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <string>
#include <vector>

namespace kvpool::kv_detail {

// What every pool shares: one or two kinds of rows over num_slots() token
// slots, location checks and whole-row moves.
template <class MemorySpace> class RowStorage {
public:
    using memory_space = MemorySpace;
    using execution_space = typename MemorySpace::execution_space;

    index_t num_slots() const { return slots_; }
    // Bytes of one token (slot) across all layers, as packed in a host copy.
    index_t token_bytes() const { return a_.layers * a_.row_bytes + b_.layers * b_.row_bytes; }
    const kernels::RowMap& first_rows() const { return a_; }
    const kernels::RowMap& second_rows() const { return b_; }

    // Throws out_of_range naming the first location outside [0, num_slots()).
    // Reads the locations on the host: on device backends a copy and a fence.
    template <class ExecutionSpace, class IdView>
    void check_locations(const ExecutionSpace& space, const IdView& locations) const {
        require_in_range(read_ids(space, locations), slots_, 1, "check_locations");
    }
    template <class IdView> void check_locations(const IdView& locations) const {
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
    void move_page_rows(const ExecutionSpace& space, const DstView& dst_pages,
                        const SrcView& src_pages, index_t page_size) const {
        if (page_size <= 0)
            throw Error(ErrorCode::invalid_argument,
                        "move_page_rows: page_size must be > 0, got " + std::to_string(page_size));
        move_units(space, dst_pages, src_pages, page_size, "move_page_rows");
    }
    template <class DstView, class SrcView>
    void move_page_rows(const DstView& dst_pages, const SrcView& src_pages,
                        index_t page_size) const {
        move_page_rows(execution_space(), dst_pages, src_pages, page_size);
    }

protected:
    RowStorage() = default;

    void init(const kernels::RowMap& a, const kernels::RowMap& b, index_t slots) {
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
    void validate_move(const ExecutionSpace& space, const DstView& dst, const SrcView& src,
                       index_t unit, const std::string& what) const {
        require_same_length(what, "dst", dst, "src", src);
        const std::vector<index_t> d = read_ids(space, dst), s = read_ids(space, src);
        require_in_range(d, slots_, unit, what);
        require_in_range(s, slots_, unit, what);
        require_disjoint(d, s, what);
    }

    template <class ExecutionSpace, class DstView, class SrcView>
    void move_units(const ExecutionSpace& space, const DstView& dst, const SrcView& src,
                    index_t unit, const std::string& what) const {
        check_id_view<ExecutionSpace, DstView>();
        check_id_view<ExecutionSpace, SrcView>();
        require_same_length(what, "dst", dst, "src", src);
        if constexpr (free_to_read<ExecutionSpace, DstView>() &&
                      free_to_read<ExecutionSpace, SrcView>())
            validate_move(space, dst, src, unit, what);
        kernels::portable::move_rows(space, a_, b_, dst, src, unit);
    }

    kernels::RowMap a_;
    kernels::RowMap b_;
    index_t slots_ = 0;
};

} // namespace kvpool::kv_detail
