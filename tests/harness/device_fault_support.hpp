// The loop of the device-fault tests: every device operation of a call, of
// each kind in turn, made to fail once.
#pragma once

#include <kvpool/device_faults.hpp>

#include <cstdint>

namespace kvpool::test {

constexpr DeviceOp device_ops[] = {DeviceOp::allocation, DeviceOp::upload, DeviceOp::copy,
                                   DeviceOp::launch};

// Faults are disarmed and counts zeroed however a check ends.
struct FaultScope {
    FaultScope() { device_faults::reset(); }
    ~FaultScope() { device_faults::reset(); }
};

// dry_run() sets up a fresh state, calls device_faults::reset() and makes the
// call once, so that the counts are the call's own; then check(op, n, ops)
// runs for every kind op and every position n of the ops of that kind: it sets
// up a fresh state, arms device_faults::fail_nth(op, n) (counted from there)
// and makes the call. Returns how many checks ran.
template <class DryRun, class Check>
std::uint64_t for_each_device_fault(const DryRun& dry_run, const Check& check) {
    std::uint64_t tried = 0;
    for (const DeviceOp op : device_ops) {
        std::uint64_t ops = 0;
        {
            FaultScope scope;
            dry_run();
            ops = device_faults::count(op);
        }
        for (std::uint64_t n = 1; n <= ops; ++n, ++tried) {
            FaultScope scope;
            check(op, n, ops);
        }
    }
    return tried;
}

} // namespace kvpool::test
