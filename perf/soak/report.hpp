// kvpool-soak's output: a human summary, and one JSON line ("kvpool_soak":
// ops, seconds, ops/s, memory after warm-up and at the end, seed, mode, page
// size, failures) that scripts/run-gpu-tests reads.
#pragma once

#include "soak_result.hpp"

#include <string>

namespace kvpool::soak {

std::string summary(const SoakResult& r);
std::string json_line(const SoakResult& r);

} // namespace kvpool::soak
