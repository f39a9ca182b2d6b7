#include <kvpool/device_faults.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <array>

namespace kvpool {

namespace {

struct FaultState {
    std::array<std::uint64_t, device_op_kinds> count{};
    std::array<std::uint64_t, device_op_kinds> fail_at{}; // 0: not armed
};

FaultState& state() {
    thread_local FaultState s;
    return s;
}

std::size_t slot(DeviceOp op) {
    return static_cast<std::size_t>(op);
}

} // namespace

const char* to_string(DeviceOp op) {
    switch (op) {
    case DeviceOp::allocation:
        return "allocation";
    case DeviceOp::upload:
        return "upload";
    case DeviceOp::copy:
        return "copy";
    case DeviceOp::launch:
        return "launch";
    }
    return "unknown";
}

namespace device_faults {

void fail_nth(DeviceOp op, std::uint64_t nth) {
    if (nth == 0)
        throw Error(ErrorCode::invalid_argument,
                    "device_faults::fail_nth: nth counts from 1 (the next operation)");
    FaultState& s = state();
    s.fail_at[slot(op)] = s.count[slot(op)] + nth;
}

void reset() {
    state() = FaultState{};
}

std::uint64_t count(DeviceOp op) {
    return state().count[slot(op)];
}

} // namespace device_faults

namespace detail {

bool device_fault_due(DeviceOp op) {
    FaultState& s = state();
    const std::uint64_t n = ++s.count[slot(op)];
    if (s.fail_at[slot(op)] != n)
        return false;
    s.fail_at[slot(op)] = 0;
    return true;
}

void device_fault_point(DeviceOp op, const char* what) {
    if (device_fault_due(op))
        throw_injected_fault(op, what);
}

void throw_injected_fault(DeviceOp op, const char* what) {
    throw Error(ErrorCode::device, fmt::format("kvpool: {} failed: injected device fault ({} #{})",
                                               what, to_string(op), device_faults::count(op)));
}

} // namespace detail

} // namespace kvpool
