// The whole Kokkos surface kvpool uses, in one place, so that Kokkos 3.4 and 4.x
// both build it: Views, range launches on an execution-space instance, and
// asynchronous deep copies. Anything newer than 3.4 stays out of the code base.
#pragma once

#include <Kokkos_Core.hpp>

#include <kvpool/device_faults.hpp>
#include <kvpool/error.hpp>
#include <kvpool/types.hpp>

#include <new>

#include <string>
#include <type_traits>

namespace kvpool::kk {

template <class T, class MemorySpace> using View = Kokkos::View<T, MemorySpace>;

template <class T> using HostView = Kokkos::View<T, Kokkos::HostSpace>;

template <class T>
using UnmanagedHostView =
    Kokkos::View<T, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class ExecutionSpace>
using Range = Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<index_t>>;

template <class ExecutionSpace>
Range<ExecutionSpace> range(const ExecutionSpace& space, index_t n) {
    return Range<ExecutionSpace>(space, 0, n);
}

// A View allocation through the device-fault seam (device_faults.hpp): an
// injected fault, or memory the runtime refuses (Kokkos throws a bad_alloc
// carrying the runtime's message), is Error(ErrorCode::device).
// The message is built only when the allocation fails (a hot call allocates its output View).
template <class Make> auto checked_allocation(const std::string& label, const Make& make) {
    if (kvpool::detail::device_fault_due(DeviceOp::allocation))
        kvpool::detail::throw_injected_fault(DeviceOp::allocation, ("allocating " + label).c_str());
    try {
        return make();
    } catch (const std::bad_alloc& e) {
        throw Error(ErrorCode::device, "kvpool: allocating " + label + " failed: " + e.what());
    }
}

// An initialised View, through the seam.
template <class ViewType, class... Extents>
ViewType allocated(const std::string& label, Extents... extents) {
    return checked_allocation(label, [&] { return ViewType(label, extents...); });
}

// A View allocation that skips the initialising kernel, through the seam.
template <class ViewType> ViewType uninitialized(const std::string& label, std::size_t n) {
    return checked_allocation(
        label, [&] { return ViewType(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n); });
}

#if defined(KOKKOS_ENABLE_HIP)
// HIP left Kokkos::Experimental in Kokkos 4.0.
#if KOKKOS_VERSION >= 40000
using HIP = Kokkos::HIP;
using HIPHostPinnedSpace = Kokkos::HIPHostPinnedSpace;
#else
using HIP = Kokkos::Experimental::HIP;
using HIPHostPinnedSpace = Kokkos::Experimental::HIPHostPinnedSpace;
#endif
#endif

// Host memory a kernel of ExecutionSpace can read directly: page-locked host
// memory for the GPU backends, ordinary memory for the host ones.
template <class ExecutionSpace> struct pinned_host_space {
    using type = Kokkos::HostSpace;
};
#if defined(KOKKOS_ENABLE_CUDA)
template <> struct pinned_host_space<Kokkos::Cuda> {
    using type = Kokkos::CudaHostPinnedSpace;
};
#endif
#if defined(KOKKOS_ENABLE_HIP)
template <> struct pinned_host_space<HIP> {
    using type = HIPHostPinnedSpace;
};
#endif

template <class MemorySpace>
constexpr bool host_accessible =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;

// Explicit LayoutRight: a View's default layout is LayoutLeft on CUDA, and the
// per-layer KV pools promise token-major rows on every backend.
template <class T, class MemorySpace>
using RightView = Kokkos::View<T, Kokkos::LayoutRight, MemorySpace>;

// Strided windows onto bytes another View owns (the page-major per-layer views).
template <class T, class MemorySpace>
using UnmanagedStridedView =
    Kokkos::View<T, Kokkos::LayoutStride, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Execution spaces that run on the host: their launches have finished when the
// call returns, so the host may read the memory they use without a fence.
template <class ExecutionSpace>
constexpr bool host_execution =
    Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;

} // namespace kvpool::kk
