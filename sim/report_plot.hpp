// The plot of running requests over simulated time, one line per compared
// policy, drawn by gnuplot (not a build dependency: found on PATH at run time).
#pragma once

#include "report.hpp"

#include <string>

namespace kvpool::sim {

// Throws InputError saying how to install gnuplot when it is not on PATH.
void require_gnuplot();

// Writes the PNG to png_path (a staged temporary file).
void render_plot(const ReportContext& context, const ExperimentResult& result,
                 const std::string& png_path);

} // namespace kvpool::sim
