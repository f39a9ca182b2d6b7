#include "text_table.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvpool::sim {

namespace {

// Display width: UTF-8 continuation bytes take no column.
std::size_t width(const std::string& s) {
    return static_cast<std::size_t>(std::count_if(
        s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

} // namespace

std::string TextTable::render() const {
    std::vector<std::size_t> widths(align_.size(), 0);
    for (const auto& row : rows_)
        for (std::size_t c = 0; c < row.size() && c < widths.size(); ++c)
            widths[c] = std::max(widths[c], width(row[c]));
    std::string out;
    for (const auto& row : rows_) {
        std::string line;
        for (std::size_t c = 0; c < widths.size(); ++c) {
            const std::string cell = c < row.size() ? row[c] : std::string();
            const std::string pad(widths[c] - width(cell), ' ');
            if (c > 0)
                line += "  ";
            line += align_[c] == Align::left ? cell + pad : pad + cell;
        }
        line.erase(line.find_last_not_of(' ') + 1);
        out += line + "\n";
    }
    return out;
}

} // namespace kvpool::sim
