// Which native kernels an execution space launches, and on which stream: the
// one place that maps Kokkos' GPU execution spaces to a vendor's runtime
// (kernels/cuda/native.hpp, kernels/hip/native.hpp). Other spaces have none.
#pragma once

#include <kvpool/kernels/tuning.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

// A vendor's specialisation has available = true, runtime (its traits,
// e.g. cuda::Runtime), stream(space) and tuning (Tuning<runtime>).
template <class ExecutionSpace> struct NativeBackend {
    static constexpr bool available = false;
    using tuning = Tuning<void>;
};

} // namespace kvpool::kernels

#if defined(KOKKOS_ENABLE_CUDA)
#include <kvpool/kernels/cuda/native.hpp>
#endif
#if defined(KOKKOS_ENABLE_HIP)
#include <kvpool/kernels/hip/native.hpp>
#endif
