#include "report_cells.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace kvpool::sim {

std::string relative(double value, double base) {
    if (base <= 0.0)
        return "n/a";
    const double percent = (value / base - 1.0) * 100.0;
    // "+0%", not "-0%", for a difference that rounds away.
    return std::abs(percent) < 0.5 ? "+0%" : fmt::format("{:+.0f}%", percent);
}

std::string percent(double fraction) {
    return fmt::format("{:.1f}%", fraction * 100.0);
}

std::string split_cell(const ModelConfig& model, const Policy& policy) {
    if (policy.kind != PolicyKind::fixed_split)
        return "adaptive";
    const std::string state = model.kind == HybridKind::mamba_sliding_window
                                  ? fmt::format("{:.0f}% state, ", policy.state_fraction * 100.0)
                                  : std::string();
    return fmt::format("{} ({}{:.0f}% full)", ratios_cell(model, policy), state,
                       policy.full_fraction * 100.0);
}

std::string ratios_cell(const ModelConfig& model, const Policy& policy) {
    return fmt::format("{:.2f}", fmt::join(engine_ratios_of(model, policy), " / "));
}

std::string ratio_flags(const ModelConfig& model) {
    std::vector<std::string> flags;
    for (const EngineRatio& r : engine_ratios(model))
        flags.emplace_back(r.flag);
    return fmt::format("{}", fmt::join(flags, " / "));
}

std::vector<std::string> latency_cells(const SpanLatency& latency) {
    const auto seconds = [](const LatencyStats& s) {
        return std::vector<std::string>{fmt::format("{:.2f}", s.p50), fmt::format("{:.2f}", s.p90),
                                        fmt::format("{:.2f}", s.p99)};
    };
    std::vector<std::string> cells = seconds(latency.ttft);
    for (double v : {latency.itl.p50, latency.itl.p90, latency.itl.p99})
        cells.push_back(fmt::format("{:.1f}", v * 1e3));
    for (const std::string& cell : seconds(latency.queueing))
        cells.push_back(cell);
    return cells;
}

std::vector<std::string> latency_header(int row) {
    if (row == 0)
        return {"", "TTFT s", "", "", "ITL ms", "", "", "queued s", ""};
    return {"p50", "p90", "p99", "p50", "p90", "p99", "p50", "p90", "p99"};
}

std::string compared_label(std::size_t row, const ExperimentResult& result) {
    switch (row) {
    case 2:
        return result.configured_split ? "fixed split, as configured"
                                       : "fixed split, engine default";
    case 3:
        return fmt::format("fixed split, oracle (best of {})", result.sweep.size());
    default:
        return result.compared()[row]->name;
    }
}

} // namespace kvpool::sim
