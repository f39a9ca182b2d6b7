#include "report_phases.hpp"

#include "report_cells.hpp"
#include "text_table.hpp"

#include <fmt/format.h>

namespace kvpool::sim {

namespace {

bool has_phases(const ReportContext& context) {
    return context.workload.phases.size() > 1;
}

std::string phase_label(const ReportContext& context, std::size_t phase) {
    return fmt::format("{} {}", phase + 1, context.workload.phases[phase].name);
}

std::string completed_cell(const PhaseResult& r) {
    return r.aborted == 0 ? fmt::format("{}", r.completed)
                          : fmt::format("{} ({} aborted)", r.completed, r.aborted);
}

} // namespace

std::string phase_table(const ReportContext& context, const ExperimentResult& result) {
    if (!has_phases(context))
        return {};
    using A = TextTable::Align;
    const bool prefix = context.workload.block_tokens > 0;
    TextTable table({A::left, A::left, A::left, A::right, A::right, A::right, A::right, A::right,
                     A::right, A::right, A::right});
    table.add_row({"", "", "", "time", "running", "", "completed", "", "vs", "retrac-",
                   prefix ? "prefix" : ""});
    table.add_row({"phase", "policy", "split", "s", "avg", "peak", "requests", "per s", "default",
                   "tions", prefix ? "hits" : ""});
    const auto compared = result.compared();
    for (std::size_t p = 0; p < context.workload.phases.size(); ++p) {
        std::vector<std::pair<std::string, const PolicyRun*>> rows;
        for (std::size_t i = 0; i < compared.size(); ++i)
            rows.emplace_back(compared_label(i, result), compared[i]);
        rows.emplace_back("fixed split, best for this phase",
                          &result.sweep[result.phase_oracles[p]]);
        const double default_rate = compared[2]->result.phases[p].completed_per_second();
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const PhaseResult& r = rows[i].second->result.phases[p];
            const std::string label =
                i == 0   ? phase_label(context, p)
                : i == 1 ? fmt::format("  {} requests", context.workload.phases[p].requests)
                         : std::string();
            table.add_row(
                {label, rows[i].first, split_cell(context.model, rows[i].second->policy),
                 fmt::format("{:.1f}", r.sim_seconds), fmt::format("{:.1f}", r.mean_running()),
                 fmt::format("{}", r.peak_running), completed_cell(r),
                 fmt::format("{:.2f}", r.completed_per_second()),
                 relative(r.completed_per_second(), default_rate), fmt::format("{}", r.retractions),
                 prefix ? percent(r.prefix_hit_rate()) : std::string()});
        }
    }
    TextTable latency({A::left, A::left, A::right, A::right, A::right, A::right, A::right, A::right,
                       A::right, A::right, A::right});
    for (int h = 0; h < 2; ++h) {
        std::vector<std::string> row{h == 0 ? "" : "phase", h == 0 ? "" : "policy"};
        for (const std::string& cell : latency_header(h))
            row.push_back(cell);
        latency.add_row(row);
    }
    for (std::size_t p = 0; p < context.workload.phases.size(); ++p)
        for (std::size_t i = 0; i <= compared.size(); ++i) {
            const bool best = i == compared.size();
            const PolicyRun& run = best ? result.sweep[result.phase_oracles[p]] : *compared[i];
            std::vector<std::string> row{i == 0 ? phase_label(context, p) : std::string(),
                                         best ? std::string("fixed split, best for this phase")
                                              : compared_label(i, result)};
            for (const std::string& cell : latency_cells(run.result.phases[p].latency))
                row.push_back(cell);
            latency.add_row(row);
        }
    return "\nper phase: the phase's own requests. Phases overlap in time, so each step's time "
           "goes to "
           "the phases by what\ntheir requests cost in it (tokens, and the step overhead by head "
           "count); running requests are averaged\nover the phase's share of the time.\n\n" +
           table.render() + "\nper phase, latency of the phase's own requests:\n\n" +
           latency.render();
}

std::string phase_notes(const ReportContext& context, const ExperimentResult& result) {
    if (!has_phases(context))
        return {};
    const ModelConfig& model = context.model;
    const auto ratio_of = [&](const PolicyRun& run) { return ratios_cell(model, run.policy); };
    const RunResult& lazy = result.unified_lazy.result;
    std::string best;
    std::string gain;
    for (std::size_t p = 0; p < result.phase_oracles.size(); ++p) {
        const PolicyRun& oracle = result.sweep[result.phase_oracles[p]];
        const char* comma = p ? ", " : "";
        best += fmt::format("{}{} {}", comma, phase_label(context, p), ratio_of(oracle));
        gain += fmt::format("{}{} {}", comma, phase_label(context, p),
                            relative(lazy.phases[p].completed_per_second(),
                                     oracle.result.phases[p].completed_per_second()));
    }
    return fmt::format(
        "best fixed split per phase ({}): {}; for the whole run: {}.\n"
        "unified (lazy) vs the best fixed split for each phase alone, completed requests per "
        "second: {}.\n",
        ratio_flags(model), best, ratio_of(result.sweep[result.oracle]), gain);
}

} // namespace kvpool::sim
