// The soak's id buffers on the device and its copies of ids to and from them.
// Made once, at a capacity no call exceeds, so that the soak's own
// allocations stay out of the memory it watches.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <string>
#include <utility>
#include <vector>

namespace kvpool::soak {

template <class View> View slice(const View& view, index_t n) {
    if (static_cast<std::size_t>(n) > view.extent(0))
        throw Error(ErrorCode::invalid_argument, "kvpool-soak: " + std::to_string(n) +
                                                     " ids exceed the buffer " + view.label() +
                                                     " of " + std::to_string(view.extent(0)));
    return Kokkos::subview(view, std::make_pair(std::size_t(0), static_cast<std::size_t>(n)));
}

template <class ExecutionSpace> class DeviceIds {
public:
    using index_view = kk::View<index_t*, typename ExecutionSpace::memory_space>;

    explicit DeviceIds(index_t capacity)
        : in_(make("kvpool_soak::ids_in", capacity)), out_(make("kvpool_soak::ids_out", capacity)),
          physical_(make("kvpool_soak::physical", capacity)) {}

    // The ids as a device view of their length (valid until the next upload).
    index_view upload(const ExecutionSpace& space, const std::vector<index_t>& host) {
        const index_view ids = slice(in_, static_cast<index_t>(host.size()));
        Kokkos::deep_copy(space, ids,
                          kk::UnmanagedHostView<const index_t*>(host.data(), host.size()));
        return ids;
    }
    // A view of n ids for an allocation to write.
    index_view output(index_t n) const { return slice(out_, n); }
    // A view of n ids for a translate to write.
    index_view physical(index_t n) const { return slice(physical_, n); }
    // The host copy of ids a call wrote; waits for the instance's work.
    const std::vector<index_t>& download(const ExecutionSpace& space, const index_view& ids) {
        host_.resize(ids.extent(0));
        Kokkos::deep_copy(space, kk::UnmanagedHostView<index_t*>(host_.data(), host_.size()), ids);
        space.fence();
        return host_;
    }

private:
    static index_view make(const char* label, index_t n) {
        return kk::uninitialized<index_view>(label, static_cast<std::size_t>(n));
    }

    index_view in_, out_, physical_;
    std::vector<index_t> host_;
};

} // namespace kvpool::soak
