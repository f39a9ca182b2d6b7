// The whole Kokkos surface kvpool uses, in one place, so that Kokkos 3.4 and 4.x
// both build it: Views, range launches on an execution-space instance, and
// asynchronous deep copies. Anything newer than 3.4 stays out of the code base.
#pragma once

#include <Kokkos_Core.hpp>

#include <kvpool/types.hpp>

#include <string>
#include <type_traits>

namespace kvpool::kk {

template <class T, class MemorySpace>
using View = Kokkos::View<T, MemorySpace>;

template <class T>
using HostView = Kokkos::View<T, Kokkos::HostSpace>;

template <class T>
using UnmanagedHostView = Kokkos::View<T, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class ExecutionSpace>
using Range = Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<index_t>>;

template <class ExecutionSpace>
Range<ExecutionSpace> range(const ExecutionSpace& space, index_t n) {
    return Range<ExecutionSpace>(space, 0, n);
}

// A View allocation that skips the initialising kernel.
template <class ViewType>
ViewType uninitialized(const std::string& label, std::size_t n) {
    return ViewType(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n);
}

template <class MemorySpace>
constexpr bool host_accessible = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;

}  // namespace kvpool::kk
