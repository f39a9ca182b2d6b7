#include "text_lines.hpp"

namespace kvpool::sim {

std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::size_t begin = 0;
    while (begin < text.size()) {
        std::size_t end = text.find('\n', begin);
        if (end == std::string::npos)
            end = text.size();
        std::size_t stop = end;
        if (stop > begin && text[stop - 1] == '\r')
            --stop;
        lines.push_back(text.substr(begin, stop - begin));
        begin = end + 1;
    }
    return lines;
}

std::string trim(const std::string& s) {
    const char* space = " \t\r\n";
    const auto first = s.find_first_not_of(space);
    if (first == std::string::npos)
        return {};
    return s.substr(first, s.find_last_not_of(space) - first + 1);
}

std::string strip_comment(const std::string& s) {
    return s.substr(0, s.find('#'));
}

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> fields;
    std::size_t begin = 0;
    while (true) {
        const std::size_t comma = s.find(',', begin);
        fields.push_back(
            trim(s.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin)));
        if (comma == std::string::npos)
            return fields;
        begin = comma + 1;
    }
}

} // namespace kvpool::sim
