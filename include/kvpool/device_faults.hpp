// The device-fault seam: a test makes the nth device allocation, upload, copy
// or kernel launch that kvpool issues on this thread fail, as the GPU runtime
// would (on CUDA and HIP with the runtime's own error code and message). Every
// public call then reports kvpool::Error(ErrorCode::device) and leaves its
// objects as they were (see MultiEndedAllocator::transaction). Counting is a
// thread-local increment per device operation; nothing fails unless armed.
#pragma once

#include <cstdint>

namespace kvpool {

enum class DeviceOp : int {
    allocation, // device or page-locked memory: Views, staging, stream-ordered arrays
    upload,     // host to device: staged id arrays, ids copied for a kernel
    copy,       // device to host or between memory spaces (host offload, id checks)
    launch,     // a kernel or a device fill
};
inline constexpr int device_op_kinds = 4;

const char* to_string(DeviceOp op);

namespace device_faults {

// The nth operation of this kind from now on (1: the next one) fails, once.
void fail_nth(DeviceOp op, std::uint64_t nth);
// Disarms every fault and sets the counts to zero.
void reset();
// Operations of this kind issued on this thread since the last reset().
std::uint64_t count(DeviceOp op);

} // namespace device_faults

namespace detail {
// Counts one operation; true when an armed fault is due (the caller fails it).
bool device_fault_due(DeviceOp op);
// Counts one operation and throws Error(ErrorCode::device) naming what failed
// when an armed fault is due: for operations without a runtime error code of
// their own (Kokkos launches and copies).
void device_fault_point(DeviceOp op, const char* what);
// The error an injected fault of op in what raises.
[[noreturn]] void throw_injected_fault(DeviceOp op, const char* what);
} // namespace detail

} // namespace kvpool
