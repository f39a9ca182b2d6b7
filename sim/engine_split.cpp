#include "engine_split.hpp"

#include <fmt/format.h>

namespace kvpool::sim {

namespace {

constexpr EngineRatio window_ratio{"--swa-full-tokens-ratio", "swa_full_tokens_ratio", 0.8,
                                   "sliding-window tokens per full token"};
constexpr EngineRatio mamba_ratio{"--mamba-full-memory-ratio", "mamba_full_memory_ratio", 0.9,
                                  "state bytes per full KV byte"};
// The tri-pool's KV memory is what the state leaves: both KV sides.
constexpr EngineRatio tri_mamba_ratio{"--mamba-full-memory-ratio", "mamba_full_memory_ratio", 0.9,
                                      "state bytes per KV byte, full and sliding-window"};

// The full side's share of the KV bytes when the sliding-window side holds
// `ratio` tokens per full token.
double full_kv_share(const ModelConfig& model, double ratio) {
    const auto full = static_cast<double>(model.full_token_bytes());
    return full / (full + ratio * static_cast<double>(model.window_token_bytes()));
}

// And back: sliding-window tokens per full token at that share.
double window_ratio_of(const ModelConfig& model, double full_kv_share) {
    return (1.0 - full_kv_share) / full_kv_share * static_cast<double>(model.full_token_bytes()) /
           static_cast<double>(model.window_token_bytes());
}

} // namespace

std::vector<EngineRatio> engine_ratios(const ModelConfig& model) {
    switch (model.kind) {
    case HybridKind::sliding_window:
        return {window_ratio};
    case HybridKind::mamba:
        return {mamba_ratio};
    case HybridKind::mamba_sliding_window:
        break;
    }
    return {tri_mamba_ratio, window_ratio};
}

Policy fixed_split_at(const ModelConfig& model, const std::vector<double>& ratios) {
    Policy p{PolicyKind::fixed_split, 0.0, 0.0};
    switch (model.kind) {
    case HybridKind::sliding_window:
        p.full_fraction = full_kv_share(model, ratios.at(0));
        break;
    case HybridKind::mamba:
        p.full_fraction = 1.0 / (1.0 + ratios.at(0));
        break;
    case HybridKind::mamba_sliding_window:
        // SGLang sizes the state pool first (state : KV = ratio), then splits
        // the KV memory between the full and sliding-window layers.
        p.state_fraction = ratios.at(0) / (1.0 + ratios.at(0));
        p.full_fraction = (1.0 - p.state_fraction) * full_kv_share(model, ratios.at(1));
        break;
    }
    return p;
}

std::vector<double> engine_ratios_of(const ModelConfig& model, const Policy& policy) {
    const double f = policy.full_fraction;
    switch (model.kind) {
    case HybridKind::sliding_window:
        return {window_ratio_of(model, f)};
    case HybridKind::mamba:
        return {(1.0 - f) / f};
    case HybridKind::mamba_sliding_window:
        break;
    }
    const double kv = 1.0 - policy.state_fraction;
    return {policy.state_fraction / kv, window_ratio_of(model, f / kv)};
}

Policy engine_default_split(const ModelConfig& model) {
    std::vector<double> defaults;
    for (const EngineRatio& r : engine_ratios(model))
        defaults.push_back(r.default_value);
    return fixed_split_at(model, defaults);
}

std::string engine_arguments(const ModelConfig& model, const Policy& policy) {
    const auto knobs = engine_ratios(model);
    const auto values = engine_ratios_of(model, policy);
    std::string out;
    for (std::size_t i = 0; i < knobs.size(); ++i)
        out += fmt::format("{}{} {:.2f}", i ? " " : "", knobs[i].flag, values[i]);
    return out;
}

} // namespace kvpool::sim
