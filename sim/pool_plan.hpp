// The unified buffer each policy runs on: the same model bytes and memory,
// with the sides of the model's kind (the SWA pair, the Mamba pair, or the
// tri-pool of state slots, sliding-window KV and full KV), each capped at its
// share in a fixed split.
#pragma once

#include "engine_split.hpp"
#include "model_config.hpp"
#include "sim_pool.hpp"
#include "workload.hpp"

#include <kvpool/storage/pool_layout.hpp>

#include <optional>
#include <string>
#include <vector>

namespace kvpool::sim {

struct PoolGeometry {
    index_t memory_bytes = 0; // the model's real KV bytes
    index_t page_size = 16;   // tokens per page of the full side
    // Allocate the real bytes instead of the exactly equivalent scaled buffer.
    bool full_size_buffer = false;
    // Tokens per page of the sliding-window side, a divisor of page_size; 0: page_size.
    index_t swa_page_size = 0;

    index_t window_page_size() const { return swa_page_size > 0 ? swa_page_size : page_size; }
};

// Throws InputError when the sliding-window page size does not divide the page
// size, or differs from it on a model without a sliding window.
void check_window_page_size(const ModelConfig& model, const PoolGeometry& geometry);

// Every entry size and the memory are divided by the greatest common divisor
// of the entry sizes: the same number of pages of each side fit, so every
// allocator decision is the same, in a buffer small enough for any host.
index_t byte_scale(const ModelConfig& model, const PoolGeometry& geometry);

struct PoolPlan {
    HybridKind kind;
    // In scaled bytes; the sides listed as the kind's allocator wants them
    // (the tri-pool's from the low end up: state slots, sliding window, full).
    PoolLayout layout;
    CompactionMode mode;
    RealPageBytes real; // page sizes of the sides in real bytes
};

// Fixed splits run in lazy mode: frees leave holes that allocation reuses, as
// an engine's free list does, and each side is capped at its share.
PoolPlan plan_pool(const ModelConfig& model, const PoolGeometry& geometry, const Policy& policy);

// Throws InputError when the memory cannot hold a page of each side, or the
// longest request alone in the unified pool.
void check_memory_holds(const ModelConfig& model, const PoolGeometry& geometry,
                        const std::vector<RequestSpec>& requests);

// What keeps a fixed split from running the longest of the requests alone: the
// first side too small for it, its capacity and the request's need; nothing
// when every side holds every request. A request needs its prompt and output
// on the full side, its prompt on the sliding-window side (prefill puts it
// there whole) and one state slot.
std::optional<std::string> split_floor_problem(const ModelConfig& model,
                                               const PoolGeometry& geometry, const Policy& policy,
                                               const std::vector<RequestSpec>& requests);

} // namespace kvpool::sim
