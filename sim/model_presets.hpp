// The model presets: sim/models/*.conf, compiled into the program.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kvpool::sim {

std::vector<std::string> model_preset_names();
// The file text of a preset, or nothing when no preset has that name.
std::optional<std::string> model_preset_text(const std::string& name);

} // namespace kvpool::sim
