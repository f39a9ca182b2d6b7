// The launch fault point (device_faults.hpp) of every kernel entry the public
// API calls: one per entry, before anything is enqueued, so that an injected
// fault leaves the device untouched. Native backends report it as their
// runtime reports a refused launch.
#pragma once

#include <kvpool/device_faults.hpp>
#include <kvpool/kernels/native_backend.hpp>

namespace kvpool::kernels {

template <class ExecutionSpace> void launch_fault_point(const char* kernel) {
    if (!kvpool::detail::device_fault_due(DeviceOp::launch))
        return;
    using backend = NativeBackend<ExecutionSpace>;
    if constexpr (backend::available)
        backend::runtime::fail_launch(kernel);
    kvpool::detail::throw_injected_fault(DeviceOp::launch, kernel);
}

} // namespace kvpool::kernels
