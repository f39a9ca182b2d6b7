// The command line of kvpool-soak.
#pragma once

#include <kvpool/allocator_options.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvpool::soak {

struct SoakOptions {
    std::string pair = "swa"; // or mamba
    index_t ops = 1'000'000;
    index_t tokens_per_side = 262'144; // the peer's geometry: a 64 GiB buffer
    index_t page_size = 16;
    CompactionMode mode = CompactionMode::lazy;
    std::uint64_t seed = 0; // drawn when not given
    index_t check_every = 10'000;
    index_t memory_tolerance_bytes = index_t(64) << 20;
    bool help = false;
};

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Throws UsageError naming the option and the value.
SoakOptions parse_options(const std::vector<std::string>& args);

std::string help_text();

const char* mode_name(CompactionMode mode);

} // namespace kvpool::soak
