// Device memory for staged ids, and the host-to-device copy into it, both
// ordered on an execution-space instance. On the GPU backends through the
// vendor's stream-ordered allocation and copy (stream_ordered_array.hpp), so
// that neither blocks the host; elsewhere through Kokkos.
#pragma once

#include <kvpool/kernels/native_backend.hpp>
#include <kvpool/kernels/stream_ordered_array.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstddef>

namespace kvpool::kernels {

template <class ExecutionSpace>
using DeviceIdsView = Kokkos::View<index_t*, typename ExecutionSpace::memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class ExecutionSpace, bool Native = NativeBackend<ExecutionSpace>::available>
class DeviceIds {
public:
    using view_type = DeviceIdsView<ExecutionSpace>;
    void reserve(const ExecutionSpace&, std::size_t n) {
        if (n > owned_.extent(0))
            owned_ =
                kk::uninitialized<Kokkos::View<index_t*, typename ExecutionSpace::memory_space>>(
                    "kvpool::staging_device", n);
    }
    view_type view() const { return view_type(owned_.data(), owned_.extent(0)); }

private:
    Kokkos::View<index_t*, typename ExecutionSpace::memory_space> owned_;
};

template <class ExecutionSpace> class DeviceIds<ExecutionSpace, true> {
    using backend = NativeBackend<ExecutionSpace>;

public:
    using view_type = DeviceIdsView<ExecutionSpace>;
    void reserve(const ExecutionSpace& space, std::size_t n) {
        ids_.reserve(backend::stream(space), n);
    }
    view_type view() const { return view_type(ids_.data(), ids_.size()); }

private:
    StreamOrderedArray<typename backend::runtime, index_t> ids_;
};

// host_src must be page-locked for the copy to be asynchronous on a GPU.
template <class ExecutionSpace>
void async_upload(const ExecutionSpace& space, index_t* device_dst, const index_t* host_src,
                  std::size_t n) {
    using backend = NativeBackend<ExecutionSpace>;
    if constexpr (backend::available) {
        upload_async<typename backend::runtime>(backend::stream(space), device_dst, host_src, n);
    } else {
        using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
        Kokkos::View<index_t*, typename ExecutionSpace::memory_space, Unmanaged> dst(device_dst, n);
        Kokkos::View<const index_t*, Kokkos::HostSpace, Unmanaged> src(host_src, n);
        kvpool::detail::device_fault_point(DeviceOp::upload, "kvpool: staged ids upload");
        Kokkos::deep_copy(space, dst, src);
    }
}

} // namespace kvpool::kernels
