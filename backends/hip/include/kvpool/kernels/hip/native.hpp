// Kokkos' HIP space launches the native HIP kernels on the instance's stream.
// HipEventToken comes with it, for whoever makes tokens from engine events.
#pragma once

#include <kvpool/kernels/hip/event_token.hpp>
#include <kvpool/kernels/hip/runtime.hpp>
#include <kvpool/kernels/native_backend.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

template <> struct NativeBackend<kk::HIP> {
    static constexpr bool available = true;
    using runtime = hip::Runtime;
    using tuning = Tuning<runtime>;
    static hipStream_t stream(const kk::HIP& space) { return space.hip_stream(); }
};

} // namespace kvpool::kernels
