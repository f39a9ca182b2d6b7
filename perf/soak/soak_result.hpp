// What one soak run measured and found.
#pragma once

#include "options.hpp"

#include <optional>
#include <string>
#include <vector>

namespace kvpool::soak {

struct MemorySample {
    index_t host_rss_bytes = 0;
    std::optional<index_t> device_bytes; // GPU backends only
};

struct SoakResult {
    SoakOptions options;
    std::string pair; // swa or mamba
    std::string backend;
    index_t buffer_bytes = 0;
    index_t ops = 0;
    double seconds = 0;
    index_t steps = 0;
    index_t checks = 0;
    index_t entries_checked = 0; // stamped tokens and state slots found through translate
    index_t requests_admitted = 0;
    index_t requests_finished = 0;
    index_t retractions = 0;
    index_t admission_waits = 0;
    index_t pages_moved = 0;
    index_t bytes_moved = 0;
    MemorySample warm; // after warm-up
    MemorySample end;  // before teardown
    std::vector<std::string> failures;

    bool passed() const { return failures.empty(); }
};

} // namespace kvpool::soak
