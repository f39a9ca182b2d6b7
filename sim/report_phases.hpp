// The per-phase part of the summary table, for a workload with phases (a
// workload shift): each compared policy and the best fixed split for the
// phase alone, over each phase's span. Empty for a workload of one phase.
#pragma once

#include "report.hpp"

#include <string>

namespace kvpool::sim {

std::string phase_table(const ReportContext& context, const ExperimentResult& result);
// The best fixed split of each phase against the whole run's, and what the
// unified pool gains on each.
std::string phase_notes(const ReportContext& context, const ExperimentResult& result);

} // namespace kvpool::sim
