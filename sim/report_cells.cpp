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

std::string compared_label(std::size_t row, const ExperimentResult& result) {
    switch (row) {
    case 2:
        return "fixed split, engine default";
    case 3:
        return fmt::format("fixed split, oracle (best of {})", result.sweep.size());
    default:
        return result.compared()[row]->name;
    }
}

} // namespace kvpool::sim
