#include "model_config.hpp"

#include "byte_size.hpp"
#include "input_error.hpp"
#include "model_presets.hpp"
#include "text_lines.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace kvpool::sim {

namespace {

// Which layers a count key describes: every model's, the sliding-window
// layers' or the Mamba layers' (the tri-pool's model has both).
enum class Scope { any, sliding_window, mamba };

struct CountKey {
    const char* key;
    index_t ModelConfig::*field;
    Scope scope;
    const char* help;
};

const CountKey count_keys[] = {
    {"kv_dtype_bytes", &ModelConfig::kv_dtype_bytes, Scope::any,
     "bytes of one KV element (2: bf16, 1: fp8)"},
    {"kv_heads", &ModelConfig::kv_heads, Scope::any,
     "KV heads per attention layer (num_key_value_heads)"},
    {"head_dim", &ModelConfig::head_dim, Scope::any, "dimension of one head"},
    {"full_attention_layers", &ModelConfig::full_attention_layers, Scope::any,
     "layers that attend to every token"},
    {"sliding_window_layers", &ModelConfig::sliding_window_layers, Scope::sliding_window,
     "layers that attend to the last `sliding_window` tokens"},
    {"sliding_window", &ModelConfig::sliding_window, Scope::sliding_window,
     "window length in tokens"},
    {"mamba_layers", &ModelConfig::mamba_layers, Scope::mamba, "layers with recurrent state"},
    {"conv_state_elements", &ModelConfig::conv_state_elements, Scope::mamba,
     "convolution state elements per layer and request"},
    {"conv_state_dtype_bytes", &ModelConfig::conv_state_dtype_bytes, Scope::mamba,
     "bytes of one convolution state element"},
    {"temporal_state_elements", &ModelConfig::temporal_state_elements, Scope::mamba,
     "temporal (SSM) state elements per layer and request"},
    {"temporal_state_dtype_bytes", &ModelConfig::temporal_state_dtype_bytes, Scope::mamba,
     "bytes of one temporal state element"},
};

const char* const text_keys[] = {"name", "description", "kind", "kv_memory"};

// The step-time model's three numbers: all given or none.
struct StepTimeKey {
    const char* key;
    double StepTimeModel::*field;
    double unit_seconds;
    const char* help;
};

const StepTimeKey step_time_keys[] = {
    {"step_overhead_ms", &StepTimeModel::overhead_s, 1e-3, "simulated time every step costs"},
    {"prefill_us_per_token", &StepTimeModel::per_prefill_token_s, 1e-6,
     "simulated time per prefilled token"},
    {"decode_us_per_token", &StepTimeModel::per_decode_token_s, 1e-6,
     "simulated time per decoded token"},
};

// Counts above this are typos, and keep every product of them far from overflow.
constexpr index_t max_count = index_t(1) << 32;
constexpr double max_entry_bytes = 1e15;

struct Entry {
    std::string value;
    std::size_t line;
};

bool in_scope(Scope scope, const ModelConfig& model) {
    return scope == Scope::any ||
           (scope == Scope::sliding_window ? model.has_sliding_window() : model.has_state_slots());
}

// The kinds whose models have a scoped key's layers, for messages.
const char* kinds_of(Scope s) {
    return s == Scope::sliding_window ? "sliding_window and mamba_sliding_window"
                                      : "mamba and mamba_sliding_window";
}

std::optional<HybridKind> kind_from_name(const std::string& name) {
    for (const auto kind :
         {HybridKind::sliding_window, HybridKind::mamba, HybridKind::mamba_sliding_window})
        if (name == to_string(kind))
            return kind;
    return std::nullopt;
}

bool is_known_key(const std::string& key) {
    for (const auto& k : count_keys)
        if (key == k.key)
            return true;
    for (const char* k : text_keys)
        if (key == k)
            return true;
    for (const auto& k : step_time_keys)
        if (key == k.key)
            return true;
    return false;
}

std::vector<std::string> known_keys() {
    std::vector<std::string> keys(std::begin(text_keys), std::end(text_keys));
    for (const auto& k : count_keys)
        keys.emplace_back(k.key);
    for (const auto& k : step_time_keys)
        keys.emplace_back(k.key);
    return keys;
}

std::map<std::string, Entry> read_entries(const std::string& text, const std::string& source) {
    std::map<std::string, Entry> entries;
    std::size_t number = 0;
    for (const std::string& raw : split_lines(text)) {
        ++number;
        const std::string line = trim(strip_comment(raw));
        if (line.empty())
            continue;
        const auto equals = line.find('=');
        if (equals == std::string::npos)
            throw InputError(
                fmt::format("{}:{}: expected 'key = value', got '{}'", source, number, line));
        const std::string key = trim(line.substr(0, equals));
        const std::string value = trim(line.substr(equals + 1));
        if (!is_known_key(key))
            throw InputError(fmt::format("{}:{}: unknown key '{}' (known keys: {})", source, number,
                                         key, fmt::join(known_keys(), ", ")));
        if (value.empty())
            throw InputError(fmt::format("{}:{}: '{}' has no value", source, number, key));
        if (const auto it = entries.find(key); it != entries.end())
            throw InputError(fmt::format("{}:{}: '{}' given twice (first on line {})", source,
                                         number, key, it->second.line));
        entries.emplace(key, Entry{value, number});
    }
    return entries;
}

index_t parse_count(const Entry& e, const char* key, const std::string& source) {
    index_t value = 0;
    bool ok = !e.value.empty() && e.value.size() <= 12;
    for (char c : e.value) {
        ok = ok && c >= '0' && c <= '9';
        if (ok)
            value = value * 10 + (c - '0');
    }
    if (!ok || value <= 0 || value > max_count)
        throw InputError(fmt::format("{}:{}: {} must be a whole number from 1 to {}, got '{}'",
                                     source, e.line, key, max_count, e.value));
    return value;
}

std::optional<StepTimeModel> parse_step_time(const std::map<std::string, Entry>& entries,
                                             const std::string& source) {
    std::size_t given = 0;
    for (const auto& k : step_time_keys)
        given += entries.count(k.key);
    if (given == 0)
        return std::nullopt;
    StepTimeModel model;
    for (const auto& k : step_time_keys) {
        const auto it = entries.find(k.key);
        if (it == entries.end())
            throw InputError(
                fmt::format("{}: missing '{}': step_overhead_ms, prefill_us_per_token and "
                            "decode_us_per_token go together",
                            source, k.key));
        char* end = nullptr;
        const double v = std::strtod(it->second.value.c_str(), &end);
        if (end != it->second.value.c_str() + it->second.value.size() || !(v >= 0.0 && v <= 1e6))
            throw InputError(fmt::format("{}:{}: {} must be a number from 0 to 1e6, got '{}'",
                                         source, it->second.line, k.key, it->second.value));
        model.*k.field = v * k.unit_seconds;
    }
    return model;
}

} // namespace

index_t ModelConfig::full_token_bytes() const {
    return full_attention_layers * 2 * kv_heads * head_dim * kv_dtype_bytes;
}

index_t ModelConfig::window_token_bytes() const {
    return sliding_window_layers * 2 * kv_heads * head_dim * kv_dtype_bytes;
}

index_t ModelConfig::state_slot_bytes() const {
    return mamba_layers * (conv_state_elements * conv_state_dtype_bytes +
                           temporal_state_elements * temporal_state_dtype_bytes);
}

index_t ModelConfig::second_entry_bytes() const {
    return has_sliding_window() ? window_token_bytes() : state_slot_bytes();
}

const char* ModelConfig::second_side_label() const {
    return has_sliding_window() ? "sliding-window KV" : "Mamba state";
}

const char* to_string(HybridKind kind) {
    switch (kind) {
    case HybridKind::sliding_window:
        return "sliding_window";
    case HybridKind::mamba:
        return "mamba";
    case HybridKind::mamba_sliding_window:
        break;
    }
    return "mamba_sliding_window";
}

ModelConfig parse_model_config(const std::string& text, const std::string& source) {
    const auto entries = read_entries(text, source);
    const auto require = [&](const char* key, const char* why) -> const Entry& {
        const auto it = entries.find(key);
        if (it == entries.end())
            throw InputError(fmt::format("{}: missing '{}' ({})", source, key, why));
        return it->second;
    };

    ModelConfig model;
    model.name = require("name", "the model's short name").value;
    const auto description = entries.find("description");
    model.description = description != entries.end() ? description->second.value : model.name;

    const Entry& kind = require("kind", "sliding_window, mamba or mamba_sliding_window");
    const auto known_kind = kind_from_name(kind.value);
    if (!known_kind)
        throw InputError(fmt::format(
            "{}:{}: kind must be sliding_window, mamba or mamba_sliding_window, got '{}'", source,
            kind.line, kind.value));
    model.kind = *known_kind;

    for (const auto& k : count_keys) {
        const auto it = entries.find(k.key);
        if (!in_scope(k.scope, model)) {
            if (it != entries.end())
                throw InputError(
                    fmt::format("{}:{}: '{}' belongs to kind = {} models, not kind = {}", source,
                                it->second.line, k.key, kinds_of(k.scope), kind.value));
            continue;
        }
        if (it == entries.end())
            throw InputError(fmt::format("{}: missing '{}' ({}; required for kind = {})", source,
                                         k.key, k.help, kind.value));
        model.*k.field = parse_count(it->second, k.key, source);
    }

    const Entry& memory = require("kv_memory", "KV memory of the runs, e.g. 64GiB");
    model.kv_memory_bytes =
        parse_byte_size(memory.value, fmt::format("{}:{}: kv_memory", source, memory.line));
    model.step_time = parse_step_time(entries, source);

    // Products of counts: compare in floating point before trusting the integers
    // (the counts a kind has no layers for are 0).
    const double per_layer = 2.0 * static_cast<double>(model.kv_heads) *
                             static_cast<double>(model.head_dim) *
                             static_cast<double>(model.kv_dtype_bytes);
    const double window = per_layer * static_cast<double>(model.sliding_window_layers);
    const double state = static_cast<double>(model.mamba_layers) *
                         (static_cast<double>(model.conv_state_elements) *
                              static_cast<double>(model.conv_state_dtype_bytes) +
                          static_cast<double>(model.temporal_state_elements) *
                              static_cast<double>(model.temporal_state_dtype_bytes));
    if (per_layer * static_cast<double>(model.full_attention_layers) > max_entry_bytes ||
        window > max_entry_bytes || state > max_entry_bytes)
        throw InputError(fmt::format(
            "{}: the model's bytes per token or per state slot exceed {:.0e}: check the "
            "layer, head and element counts",
            source, max_entry_bytes));
    return model;
}

ModelConfig load_model(const std::string& name_or_path) {
    if (const auto text = model_preset_text(name_or_path))
        return parse_model_config(*text, name_or_path);
    std::ifstream file(name_or_path);
    if (!file)
        throw InputError(
            fmt::format("unknown model '{}': not a preset ({}) and no readable file of that name",
                        name_or_path, fmt::join(model_preset_names(), ", ")));
    std::ostringstream text;
    text << file.rdbuf();
    return parse_model_config(text.str(), name_or_path);
}

std::string model_file_keys_help() {
    std::string help = "  name = NAME                     short name used in the reports\n"
                       "  description = TEXT              one line (optional)\n"
                       "  kind = sliding_window|mamba|mamba_sliding_window\n"
                       "                                  the model's layers besides full "
                       "attention (both: the tri-pool)\n"
                       "  kv_memory = SIZE                KV memory of the runs unless --memory is "
                       "given (e.g. 64GiB)\n";
    // Every model's keys, then each kind of layers' under a heading.
    for (const Scope scope : {Scope::any, Scope::sliding_window, Scope::mamba}) {
        if (scope != Scope::any)
            help += fmt::format("  {} models:\n", kinds_of(scope));
        for (const auto& k : count_keys)
            if (k.scope == scope)
                help += fmt::format("  {:<31} {}\n", fmt::format("{} = N", k.key), k.help);
    }
    for (const auto& k : step_time_keys)
        help += fmt::format("  {:<31} {} (optional; all three or none)\n",
                            fmt::format("{} = X", k.key), k.help);
    return help;
}

} // namespace kvpool::sim
