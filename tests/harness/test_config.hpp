#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvpool::test {

struct RandomisedTestConfig {
    std::uint64_t seed = 0; // 0: the default seed list
    int seeds = 10;
    int ops = 5000;
    // Where the fuzz corpus and regressions are: --kvpool-fuzz-dir, else the environment's
    // KVPOOL_FUZZ_DIR, else the source tree's fuzz/ (binaries run away from the tree need one).
    std::string fuzz_dir;

    std::vector<std::uint64_t> seed_list() const {
        if (seed != 0)
            return {seed};
        std::vector<std::uint64_t> list;
        for (int i = 0; i < seeds; ++i)
            list.push_back(0x9e3779b97f4a7c15ull * (i + 1) + 12345);
        return list;
    }
};

RandomisedTestConfig& randomised_config();

} // namespace kvpool::test
