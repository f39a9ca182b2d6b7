// A hybrid model as the simulator sees it: how many KV bytes one token costs on
// the full-attention layers, and what its other kinds of state cost (KV bytes
// per token on the sliding-window layers, one request's recurrent state on the
// Mamba layers, or both). Read from a small `key = value` file; the presets in
// sim/models/ are such files.
#pragma once

#include "step_time_model.hpp"

#include <kvpool/types.hpp>

#include <optional>
#include <string>

namespace kvpool::sim {

// Which layers a model has besides full attention: sliding-window ones (the SWA
// pair), Mamba ones (the Mamba pair), or both (the tri-pool).
enum class HybridKind { sliding_window, mamba, mamba_sliding_window };

// "sliding_window", "mamba", "mamba_sliding_window": the model file's kind.
const char* to_string(HybridKind kind);

struct ModelConfig {
    std::string name;
    std::string description;
    HybridKind kind = HybridKind::sliding_window;
    index_t kv_dtype_bytes = 0;
    index_t kv_heads = 0; // per layer, the same on full and sliding-window layers
    index_t head_dim = 0;
    index_t full_attention_layers = 0;
    // kind = sliding_window or mamba_sliding_window
    index_t sliding_window_layers = 0;
    index_t sliding_window = 0; // tokens a sliding-window layer attends to
    // kind = mamba or mamba_sliding_window: per layer, elements and element
    // sizes of the two state parts
    index_t mamba_layers = 0;
    index_t conv_state_elements = 0;
    index_t conv_state_dtype_bytes = 0;
    index_t temporal_state_elements = 0;
    index_t temporal_state_dtype_bytes = 0;
    // KV memory the runs use unless --memory says otherwise
    index_t kv_memory_bytes = 0;
    // The model's step times on its reference GPU (estimates), when the file gives them
    std::optional<StepTimeModel> step_time;

    // KV bytes of one token across all full-attention layers (K and V).
    index_t full_token_bytes() const;
    // KV bytes of one token across all sliding-window layers.
    index_t window_token_bytes() const;
    // Recurrent state of one request across all Mamba layers.
    index_t state_slot_bytes() const;
    bool has_sliding_window() const { return kind != HybridKind::mamba; }
    bool has_state_slots() const { return kind != HybridKind::sliding_window; }
    // Bytes of one entry of the pool's second side: a window token (the SWA pair
    // and the tri-pool) or a state slot (the Mamba pair).
    index_t second_entry_bytes() const;
    // "sliding-window KV" or "Mamba state".
    const char* second_side_label() const;
};

// Parses the `key = value` text of a model file; `source` names it in errors
// ("models/x.conf:7: ..."). Throws InputError.
ModelConfig parse_model_config(const std::string& text, const std::string& source);

// A preset name (see model_preset_names()) or the path of a model file.
ModelConfig load_model(const std::string& name_or_path);

// The keys a model file may hold, with one line of help each (for --help).
std::string model_file_keys_help();

} // namespace kvpool::sim
