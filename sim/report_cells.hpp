// Cells shared by the summary table and its per-phase part.
#pragma once

#include "experiment.hpp"
#include "latency.hpp"

#include <string>
#include <vector>

namespace kvpool::sim {

// A fraction as a percentage with one decimal: "64.9%".
std::string percent(double fraction);

// value against base as a signed percentage ("+6%"), "n/a" without a base.
std::string relative(double value, double base);

// "adaptive" for the unified pool; otherwise the engine ratios and the shares
// of the bytes: "0.80 (19% full)", on the tri-pool "0.90 / 0.80 (47% state, 11% full)".
std::string split_cell(const ModelConfig& model, const Policy& policy);

// A fixed split's engine ratios, "0.80" or "0.90 / 0.80", and their flags,
// "--swa-full-tokens-ratio" or "--mamba-full-memory-ratio / --swa-full-tokens-ratio".
std::string ratios_cell(const ModelConfig& model, const Policy& policy);
std::string ratio_flags(const ModelConfig& model);

// The latency cells of a run or phase: TTFT p50/p90/p99 (s), inter-token
// p50/p90/p99 (ms), queueing p50/p90/p99 (s); and the two header rows.
std::vector<std::string> latency_cells(const SpanLatency& latency);
std::vector<std::string> latency_header(int row);

// The label of row `row` of ExperimentResult::compared().
std::string compared_label(std::size_t row, const ExperimentResult& result);

} // namespace kvpool::sim
