// Cells shared by the summary table and its per-phase part.
#pragma once

#include "experiment.hpp"

#include <string>

namespace kvpool::sim {

// value against base as a signed percentage ("+6%"), "n/a" without a base.
std::string relative(double value, double base);

// "adaptive" for the unified pool, the engine ratio and the full side's share otherwise.
std::string split_cell(const ModelConfig& model, const Policy& policy);

// The label of row `row` of ExperimentResult::compared().
std::string compared_label(std::size_t row, const ExperimentResult& result);

} // namespace kvpool::sim
