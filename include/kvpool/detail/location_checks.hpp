// Checks of the token locations (physical slot ids) the KV pools are given:
// range, the move contract, and the Views that carry them. Reading the ids
// costs nothing on host backends; on device backends it is a device-to-host
// copy and a fence, so pools call it only where it is free, and explicitly
// (check_locations / check_move) elsewhere.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

namespace kvpool::kv_detail {

// Location checks cost nothing where the host can read the ids directly.
template <class ExecutionSpace, class IdView> constexpr bool free_to_read() {
    return kk::host_execution<ExecutionSpace> && kk::host_accessible<typename IdView::memory_space>;
}

// The ids on the host: a copy on the instance and a fence unless free_to_read.
template <class ExecutionSpace, class IdView>
std::vector<index_t> read_ids(const ExecutionSpace& space, const IdView& ids) {
    static_assert(IdView::rank == 1, "location Views are rank 1");
    const std::size_t n = ids.extent(0);
    std::vector<index_t> out(n);
    if constexpr (kk::host_accessible<typename IdView::memory_space>) {
        if (!kk::host_execution<ExecutionSpace>)
            space.fence();
        for (std::size_t i = 0; i < n; ++i)
            out[i] = static_cast<index_t>(ids(i));
    } else {
        using value_type = std::remove_const_t<typename IdView::value_type>;
        Kokkos::View<value_type*, Kokkos::HostSpace> host(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "kvpool::checked_ids"), n);
        kvpool::detail::device_fault_point(DeviceOp::copy,
                                           "kvpool: copying ids to the host for their check");
        Kokkos::deep_copy(space, host, ids);
        space.fence();
        for (std::size_t i = 0; i < n; ++i)
            out[i] = static_cast<index_t>(host(i));
    }
    return out;
}

// ids of units of `unit` tokens must lie in [0, slots / unit).
inline void require_in_range(const std::vector<index_t>& ids, index_t slots, index_t unit,
                             const std::string& what) {
    const index_t limit = slots / unit;
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= limit)
            throw Error(
                ErrorCode::out_of_range,
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
        throw Error(ErrorCode::invalid_argument, what + ": destination " +
                                                     std::to_string(*repeated) +
                                                     " appears more than once");
    for (std::size_t i = 0; i < src.size(); ++i)
        if (std::binary_search(sorted.begin(), sorted.end(), src[i]))
            throw Error(ErrorCode::invalid_argument,
                        what + ": " + std::to_string(src[i]) + " (source entry " +
                            std::to_string(i) +
                            ") is also a destination; sources and destinations must be disjoint "
                            "(run a chain a->b, b->c as two calls: b->c, then a->b)");
}

// Location (id) Views are rank 1 and readable by the instance that uses them.
template <class ExecutionSpace, class IdView> constexpr void check_id_view() {
    static_assert(IdView::rank == 1, "location Views are rank 1");
    static_assert(
        Kokkos::SpaceAccessibility<ExecutionSpace, typename IdView::memory_space>::accessible,
        "location Views must be readable by the execution space");
}

} // namespace kvpool::kv_detail
