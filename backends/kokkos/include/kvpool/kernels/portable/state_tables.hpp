// Portable kernels over the device maps of a hybrid request table
// (HybridReqToTokenPool): request slot -> Mamba state slot and track slots.
#pragma once

#include <kvpool/kernels/launch_fault.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels::portable {

// For request i: mamba_map(reqs(i)) = mamba(i) and, when track_map has
// columns, track_map(reqs(i), j) = tracks(i * columns + j).
template <class ExecutionSpace, class MapView, class TrackMapView, class IndexView>
void set_state_mapping(const ExecutionSpace& space, const MapView& mamba_map,
                       const TrackMapView& track_map, const IndexView& reqs, const IndexView& mamba,
                       const IndexView& tracks) {
    launch_fault_point<ExecutionSpace>("kvpool::set_state_mapping");
    const index_t n = static_cast<index_t>(reqs.extent(0));
    const index_t columns = static_cast<index_t>(track_map.extent(1));
    if (n == 0)
        return;
    Kokkos::parallel_for(
        "kvpool::set_state_mapping", kk::range(space, n), KOKKOS_LAMBDA(const index_t i) {
            mamba_map(reqs(i)) = mamba(i);
            for (index_t j = 0; j < columns; ++j)
                track_map(reqs(i), j) = tracks(i * columns + j);
        });
}

// Every entry of both maps 0 (the padding state slot), in one launch: a clear
// that fails to launch has changed neither map.
template <class ExecutionSpace, class MapView, class TrackMapView>
void clear_state_maps(const ExecutionSpace& space, const MapView& mamba_map,
                      const TrackMapView& track_map) {
    launch_fault_point<ExecutionSpace>("kvpool::clear_state_maps");
    const index_t rows = static_cast<index_t>(mamba_map.extent(0));
    const index_t columns = static_cast<index_t>(track_map.extent(1));
    Kokkos::parallel_for(
        "kvpool::clear_state_maps", kk::range(space, rows), KOKKOS_LAMBDA(const index_t r) {
            mamba_map(r) = 0;
            for (index_t j = 0; j < columns; ++j)
                track_map(r, j) = 0;
        });
}

// out(i) = map(req_indices(i)); an index outside the table reads the padding row.
template <class ExecutionSpace, class MapView, class InView, class OutView>
void gather_state_slots(const ExecutionSpace& space, const MapView& map, const InView& req_indices,
                        const OutView& out) {
    launch_fault_point<ExecutionSpace>("kvpool::gather_state_slots");
    const index_t n = static_cast<index_t>(req_indices.extent(0));
    const index_t rows = static_cast<index_t>(map.extent(0));
    if (n == 0)
        return;
    Kokkos::parallel_for(
        "kvpool::gather_mamba_indices", kk::range(space, n), KOKKOS_LAMBDA(const index_t i) {
            const index_t r = req_indices(i);
            out(i) = map(r >= 0 && r < rows ? r : 0);
        });
}

} // namespace kvpool::kernels::portable
