// A plain-text table: columns sized to their widest cell, text left-aligned
// and numbers right-aligned.
#pragma once

#include <string>
#include <vector>

namespace kvpool::sim {

class TextTable {
public:
    enum class Align { left, right };

    // One alignment per column.
    explicit TextTable(std::vector<Align> columns) : align_(std::move(columns)) {}
    void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
    // The rows, one line each, columns two spaces apart.
    std::string render() const;

private:
    std::vector<Align> align_;
    std::vector<std::vector<std::string>> rows_;
};

} // namespace kvpool::sim
