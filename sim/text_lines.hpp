// Small text helpers shared by the model-file and trace readers.
#pragma once

#include <string>
#include <vector>

namespace kvpool::sim {

// Lines without their terminators ("\n" or "\r\n"); a final line without a
// newline counts, an empty text has no lines.
std::vector<std::string> split_lines(const std::string& text);
std::string trim(const std::string& s);
// The text before the first '#'.
std::string strip_comment(const std::string& s);
// Fields between commas, each trimmed.
std::vector<std::string> split_commas(const std::string& s);

} // namespace kvpool::sim
