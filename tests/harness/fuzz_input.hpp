// A fuzzer's input as one differential run: the first byte picks the
// configuration, every further byte is one decision of the run, which ends
// where the input does. Shared by the fuzz targets (fuzz/) and the Catch2 test
// that replays their seed corpus and every crash found (fuzz_replay_test.cpp).
#pragma once

#include "test_random.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvpool::test {

// Operations one input can reach: with the small pools of a fuzzer's run
// (DifferentialRun::pool_pages) enough to fill a side, meet the peer and
// compact, and few enough that an input takes milliseconds at most.
constexpr int fuzz_max_ops = 64;

// The run the input decodes to, not yet run; nullptr for an input too short to hold one.
template <class Run, class Config>
std::unique_ptr<Run> run_from_input(const std::vector<Config>& configs, const std::uint8_t* data,
                                    std::size_t size) {
    if (size < 2)
        return nullptr;
    const Rng input(data + 1, size - 1);
    return std::make_unique<Run>(0, configs[data[0] % configs.size()], fuzz_max_ops, &input);
}

} // namespace kvpool::test
