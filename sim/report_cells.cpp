#include "report_cells.hpp"

#include <fmt/format.h>

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
    return fmt::format("{:.2f} ({:.0f}% full)",
                       engine_ratio_from_full_fraction(model, policy.full_fraction),
                       policy.full_fraction * 100.0);
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
