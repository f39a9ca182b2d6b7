// The reports of one comparison: the summary table, JSON, CSV, and the plot
// of running requests over time.
#pragma once

#include "experiment.hpp"

#include <string>

namespace kvpool::sim {

// What the reports say about the set-up, besides the results.
struct ReportContext {
    const ModelConfig& model;
    const PoolGeometry& geometry;
    const Workload& workload;
    const SchedulerConfig& scheduler;
    std::string backend;
    double wall_seconds = 0.0;
};

std::string summary_table(const ReportContext& context, const ExperimentResult& result);
std::string json_report(const ReportContext& context, const ExperimentResult& result);
std::string csv_report(const ReportContext& context, const ExperimentResult& result);

// The role of each compared row: "unified_eager", "unified_lazy", "fixed_default", "fixed_oracle".
const char* compared_role(std::size_t row);

} // namespace kvpool::sim
