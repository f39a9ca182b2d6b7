// The policies compared, and the unified buffer each one runs on: the same
// model bytes and memory, split between the two sides adaptively (unified,
// eager or lazy compaction) or at a fixed share of the bytes.
#pragma once

#include "model_config.hpp"
#include "sim_pool.hpp"
#include "workload.hpp"

#include <kvpool/pool_layout.hpp>

#include <string>
#include <vector>

namespace kvpool::sim {

enum class PolicyKind { unified_eager, unified_lazy, fixed_split };

struct Policy {
    PolicyKind kind = PolicyKind::unified_eager;
    double full_fraction = 0.0; // fixed split: the full side's share of the bytes
};

// The engines' knob for a fixed split (SGLang): --swa-full-tokens-ratio,
// sliding-window tokens per full token (default 0.8), or
// --mamba-full-memory-ratio, state bytes per full KV byte (default 0.9).
struct EngineRatio {
    const char* flag;
    double default_value;
};
EngineRatio engine_ratio(const ModelConfig& model);
double full_fraction_from_engine_ratio(const ModelConfig& model, double ratio);
double engine_ratio_from_full_fraction(const ModelConfig& model, double full_fraction);

struct PoolGeometry {
    index_t memory_bytes = 0; // the model's real KV bytes
    index_t page_size = 16;   // tokens per page of the full (and sliding-window) side
    // Allocate the real bytes instead of the exactly equivalent scaled buffer.
    bool full_size_buffer = false;
};

// Every entry size and the memory are divided by the greatest common divisor
// of the two entry sizes: the same number of pages of each side fit, so every
// allocator decision is the same, in a buffer small enough for any host.
index_t byte_scale(const ModelConfig& model, const PoolGeometry& geometry);

struct PoolPlan {
    HybridKind kind;
    PoolLayout layout; // in scaled bytes
    CompactionMode mode;
    RealPageBytes real; // page sizes of the two sides in real bytes
};

// Fixed splits run in lazy mode: frees leave holes that allocation reuses, as
// an engine's free list does, and each side is capped at its share.
PoolPlan plan_pool(const ModelConfig& model, const PoolGeometry& geometry, const Policy& policy);

// Throws InputError when the memory cannot hold a page of each side, or the
// longest request alone in the unified pool.
void check_memory_holds(const ModelConfig& model, const PoolGeometry& geometry,
                        const std::vector<RequestSpec>& requests);

} // namespace kvpool::sim
