#include "pool_plan.hpp"

#include "byte_size.hpp"
#include "input_error.hpp"

#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace kvpool::sim {

namespace {

std::vector<SubPoolSpec> side_specs(const ModelConfig& model, const PoolGeometry& geometry,
                                    index_t scale) {
    SubPoolSpec full{"full", model.full_token_bytes() / scale, geometry.page_size,
                     GrowDirection::up, 0};
    if (model.kind == HybridKind::sliding_window)
        return {full,
                {"swa", model.window_token_bytes() / scale, geometry.page_size, GrowDirection::down,
                 0}};
    return {full, {"mamba", model.state_slot_bytes() / scale, 1, GrowDirection::down, 0}};
}

index_t ceil_div(index_t a, index_t b) {
    return (a + b - 1) / b;
}

} // namespace

EngineRatio engine_ratio(const ModelConfig& model) {
    return model.kind == HybridKind::sliding_window ? EngineRatio{"--swa-full-tokens-ratio", 0.8}
                                                    : EngineRatio{"--mamba-full-memory-ratio", 0.9};
}

double full_fraction_from_engine_ratio(const ModelConfig& model, double ratio) {
    if (model.kind == HybridKind::mamba)
        return 1.0 / (1.0 + ratio);
    const auto full = static_cast<double>(model.full_token_bytes());
    return full / (full + ratio * static_cast<double>(model.window_token_bytes()));
}

double engine_ratio_from_full_fraction(const ModelConfig& model, double full_fraction) {
    const double rest = (1.0 - full_fraction) / full_fraction;
    if (model.kind == HybridKind::mamba)
        return rest;
    return rest * static_cast<double>(model.full_token_bytes()) /
           static_cast<double>(model.window_token_bytes());
}

index_t byte_scale(const ModelConfig& model, const PoolGeometry& geometry) {
    if (geometry.full_size_buffer)
        return 1;
    return std::gcd(model.full_token_bytes(), model.second_entry_bytes());
}

PoolPlan plan_pool(const ModelConfig& model, const PoolGeometry& geometry, const Policy& policy) {
    const index_t scale = byte_scale(model, geometry);
    auto specs = side_specs(model, geometry, scale);
    const index_t bytes = geometry.memory_bytes / scale;
    const RealPageBytes real{
        static_cast<double>(specs[0].entry_bytes * specs[0].page_size * scale),
        static_cast<double>(specs[1].entry_bytes * specs[1].page_size * scale)};
    switch (policy.kind) {
    case PolicyKind::unified_eager:
        return {model.kind, PoolLayout(bytes, std::move(specs)), CompactionMode::eager, real};
    case PolicyKind::unified_lazy:
        return {model.kind, PoolLayout(bytes, std::move(specs)), CompactionMode::lazy, real};
    case PolicyKind::fixed_split:
        break;
    }
    return {model.kind, PoolLayout::fixed_split(bytes, std::move(specs), policy.full_fraction),
            CompactionMode::lazy, real};
}

void check_memory_holds(const ModelConfig& model, const PoolGeometry& geometry,
                        const std::vector<RequestSpec>& requests) {
    const index_t scale = byte_scale(model, geometry);
    try {
        PoolLayout(geometry.memory_bytes / scale, side_specs(model, geometry, scale));
    } catch (const Error&) {
        throw InputError(fmt::format(
            "--memory {} is too small: it does not hold one page of each side ({} per "
            "full page, {} per {} entry)",
            format_bytes(static_cast<double>(geometry.memory_bytes)),
            format_bytes(static_cast<double>(model.full_token_bytes() * geometry.page_size)),
            format_bytes(static_cast<double>(model.second_entry_bytes())),
            model.second_side_label()));
    }
    const index_t ps = geometry.page_size;
    const auto needs = [&](const RequestSpec& r) {
        const index_t full =
            ceil_div(r.prompt_tokens + r.output_tokens, ps) * ps * model.full_token_bytes();
        // The sliding-window side holds the whole prompt while it is prefilled.
        const index_t second = model.kind == HybridKind::sliding_window
                                   ? ceil_div(r.prompt_tokens, ps) * ps * model.window_token_bytes()
                                   : model.state_slot_bytes();
        return full + second + std::max(model.full_token_bytes(), model.second_entry_bytes());
    };
    const auto largest =
        std::max_element(requests.begin(), requests.end(),
                         [&](const auto& a, const auto& b) { return needs(a) < needs(b); });
    if (largest != requests.end() && needs(*largest) > geometry.memory_bytes)
        throw InputError(
            fmt::format("--memory {} is too small: request {} (arrival {:.3f} s, {} prompt + {} "
                        "output tokens) alone needs {} with {}",
                        format_bytes(static_cast<double>(geometry.memory_bytes)),
                        largest - requests.begin() + 1, largest->arrival_s, largest->prompt_tokens,
                        largest->output_tokens, format_bytes(static_cast<double>(needs(*largest))),
                        model.name));
}

} // namespace kvpool::sim
