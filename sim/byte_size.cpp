#include "byte_size.hpp"

#include "input_error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

namespace kvpool::sim {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

double unit_factor(const std::string& unit) {
    static const std::pair<const char*, double> units[] = {
        {"", 1.0},
        {"b", 1.0},
        {"kb", 1e3},
        {"mb", 1e6},
        {"gb", 1e9},
        {"tb", 1e12},
        {"kib", 1024.0},
        {"mib", 1024.0 * 1024},
        {"gib", 1024.0 * 1024 * 1024},
        {"tib", 1024.0 * 1024 * 1024 * 1024},
    };
    for (const auto& [name, factor] : units)
        if (unit == name)
            return factor;
    return 0.0;
}

} // namespace

index_t parse_byte_size(const std::string& text, const std::string& what) {
    const auto fail = [&] {
        return InputError(fmt::format(
            "{}: '{}' is not a byte size (examples: 64GiB, 512MiB, 80GB, 1073741824)", what, text));
    };
    std::size_t digits_end = 0;
    while (digits_end < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[digits_end])) || text[digits_end] == '.'))
        ++digits_end;
    if (digits_end == 0)
        throw fail();
    char* end = nullptr;
    const std::string number = text.substr(0, digits_end);
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size())
        throw fail();
    std::size_t unit_begin = digits_end;
    while (unit_begin < text.size() && text[unit_begin] == ' ')
        ++unit_begin;
    const double factor = unit_factor(lower(text.substr(unit_begin)));
    if (factor == 0.0)
        throw fail();
    const double bytes = std::floor(value * factor);
    if (!(bytes <= static_cast<double>(std::numeric_limits<index_t>::max() / 2)))
        throw InputError(fmt::format("{}: '{}' is too large", what, text));
    return static_cast<index_t>(bytes);
}

std::string format_bytes(double bytes) {
    static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int unit = 0;
    while (std::abs(bytes) >= 1024.0 && unit < 4) {
        bytes /= 1024.0;
        ++unit;
    }
    return unit == 0 ? fmt::format("{:.0f} B", bytes)
                     : fmt::format("{:.1f} {}", bytes, units[unit]);
}

} // namespace kvpool::sim
