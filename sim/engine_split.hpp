// The policies compared, and the engines' knobs for a fixed split: how the
// same model bytes and memory are split between the pool's sides, adaptively
// (unified, eager or lazy compaction) or at fixed shares of the bytes.
#pragma once

#include "model_config.hpp"

#include <string>
#include <vector>

namespace kvpool::sim {

enum class PolicyKind { unified_eager, unified_lazy, fixed_split };

struct Policy {
    PolicyKind kind = PolicyKind::unified_eager;
    // A fixed split: the full side's share of the bytes, and the tri-pool's
    // state slots' share (0 on a pair); the sliding-window side of the
    // tri-pool has the rest.
    double full_fraction = 0.0;
    double state_fraction = 0.0;

    bool operator==(const Policy& o) const {
        return kind == o.kind && full_fraction == o.full_fraction &&
               state_fraction == o.state_fraction;
    }
};

// The engines' knobs for a fixed split (SGLang): --swa-full-tokens-ratio,
// sliding-window tokens per full token (default 0.8), and
// --mamba-full-memory-ratio, state bytes per KV byte (default 0.9). A pair has
// its one; the tri-pool both: the Mamba ratio sets the state's share of the
// memory, the window ratio splits the rest between the two KV sides.
struct EngineRatio {
    const char* flag;
    const char* key; // the flag as a name in --json and --csv
    double default_value;
    const char* meaning; // what the value counts, for the reports
};
// The model's knobs: the Mamba ratio first on the tri-pool.
std::vector<EngineRatio> engine_ratios(const ModelConfig& model);

// The fixed split the knobs set to `ratios` give (one value per knob, in
// engine_ratios' order), and the knobs' values of a fixed split.
Policy fixed_split_at(const ModelConfig& model, const std::vector<double>& ratios);
std::vector<double> engine_ratios_of(const ModelConfig& model, const Policy& policy);

// The fixed split at the engine's defaults.
Policy engine_default_split(const ModelConfig& model);

// The knobs as command-line arguments: "--swa-full-tokens-ratio 0.80".
std::string engine_arguments(const ModelConfig& model, const Policy& policy);

} // namespace kvpool::sim
