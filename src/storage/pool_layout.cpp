#include <kvpool/error.hpp>
#include <kvpool/storage/pool_layout.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvpool {

namespace {

index_t ceil_div(index_t a, index_t b) {
    return (a + b - 1) / b;
}

void validate(const SubPoolSpec& s) {
    if (s.name.empty())
        throw Error(ErrorCode::invalid_argument, "sub-pool spec without a name");
    if (s.entry_bytes <= 0)
        throw Error(
            ErrorCode::invalid_argument,
            fmt::format("sub-pool '{}': entry_bytes must be > 0, got {}", s.name, s.entry_bytes));
    if (s.page_size <= 0)
        throw Error(
            ErrorCode::invalid_argument,
            fmt::format("sub-pool '{}': page_size must be > 0, got {}", s.name, s.page_size));
    if (s.max_tokens < 0)
        throw Error(
            ErrorCode::invalid_argument,
            fmt::format("sub-pool '{}': max_tokens must be >= 0, got {}", s.name, s.max_tokens));
}

} // namespace

namespace {

// Two sub-pools grow toward each other, in either order; more run from the low
// end up: up, floating..., down. A single one is anchored at an end.
void validate_order(const std::vector<SubPoolSpec>& specs) {
    for (std::size_t i = 0; i < specs.size(); ++i)
        for (std::size_t j = i + 1; j < specs.size(); ++j)
            if (specs[i].name == specs[j].name)
                throw Error(ErrorCode::invalid_argument,
                            fmt::format("two sub-pools named '{}'", specs[i].name));
    if (specs.size() == 1) {
        if (specs[0].grow == GrowDirection::floating)
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("sub-pool '{}' floats, but has no neighbours: a floating "
                                    "sub-pool lies between one growing up and one growing down",
                                    specs[0].name));
        return;
    }
    if (specs.size() == 2) {
        if (specs[0].grow == specs[1].grow || specs[0].grow == GrowDirection::floating ||
            specs[1].grow == GrowDirection::floating)
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("sub-pools '{}' ({}) and '{}' ({}): two sub-pools must grow "
                                    "toward each other, one up and one down",
                                    specs[0].name, to_string(specs[0].grow), specs[1].name,
                                    to_string(specs[1].grow)));
        return;
    }
    for (std::size_t i = 0; i < specs.size(); ++i) {
        const GrowDirection want = i == 0                  ? GrowDirection::up
                                   : i + 1 == specs.size() ? GrowDirection::down
                                                           : GrowDirection::floating;
        if (specs[i].grow != want)
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("sub-pool '{}' (position {} of {}) grows {}: {} sub-pools are "
                                    "listed from the low end up, the first growing up, the last "
                                    "down and the others floating",
                                    specs[i].name, i, specs.size(), to_string(specs[i].grow),
                                    specs.size()));
        if (want != GrowDirection::floating)
            continue;
        const double at = specs[i].float_at;
        const double before = i > 1 ? specs[i - 1].float_at : 0.0;
        if (!(at > before && at < 1.0))
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("floating sub-pool '{}': float_at {} must lie in ({}, 1), "
                                    "above the floating sub-pools listed before it",
                                    specs[i].name, at, before));
    }
}

} // namespace

PoolLayout::PoolLayout(index_t total_bytes, std::vector<SubPoolSpec> specs)
    : total_bytes_(total_bytes), sink_bytes_(0) {
    if (specs.empty())
        throw Error(ErrorCode::invalid_argument, "a unified buffer needs at least one sub-pool");
    for (const auto& s : specs)
        validate(s);
    validate_order(specs);
    // The sink covers page 0 of every side, not only slot 0: a paged side's
    // slot 0 has rows all over its page (page-major: each layer's rows of the
    // page are together), and a tombstoned write through any layer's view lands
    // in that page.
    for (const auto& s : specs)
        sink_bytes_ = std::max(sink_bytes_, s.entry_bytes * s.page_size);
    for (std::size_t i = 0; i < specs.size(); ++i) {
        SubPoolSpec& s = specs[i];
        SubPoolGeometry g;
        g.page_bytes = s.entry_bytes * s.page_size;
        g.num_physical_pages = total_bytes / g.page_bytes;
        g.min_page_index = ceil_div(ceil_div(sink_bytes_, s.entry_bytes), s.page_size);
        g.sink_bytes = sink_bytes_;
        if (g.num_physical_pages <= g.min_page_index)
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("sub-pool '{}': a buffer of {} bytes holds no page of {} "
                                    "bytes beyond the {}-byte padding sink",
                                    s.name, total_bytes, g.page_bytes, sink_bytes_));
        g.num_virtual_pages = g.num_physical_pages;
        if (s.max_tokens > 0)
            g.num_virtual_pages = std::min(g.num_physical_pages,
                                           g.min_page_index + ceil_div(s.max_tokens, s.page_size));
        g.position = specs.size() == 2 ? (s.grow == GrowDirection::up ? 0 : 1) : i;
        if (s.grow == GrowDirection::up)
            g.start_page = g.min_page_index;
        else if (s.grow == GrowDirection::down)
            g.start_page = g.num_physical_pages;
        else
            g.start_page = std::clamp(
                static_cast<index_t>(s.float_at * static_cast<double>(g.num_physical_pages)),
                g.min_page_index, g.num_physical_pages);
        g.spec = std::move(s);
        sub_pools_.push_back(std::move(g));
    }
    order_floating_starts();
}

void PoolLayout::order_floating_starts() {
    if (sub_pools_.size() < 3)
        return;
    // Each floating band's start page is its float_at rounded down in its own
    // page size; bands of different page sizes could then start out of order,
    // one empty band inside the next. Each starts at or above the band below
    // it, and at or below the band above it.
    const auto start_byte = [](const SubPoolGeometry& g) { return g.start_page * g.page_bytes; };
    for (std::size_t i = 1; i + 1 < sub_pools_.size(); ++i) {
        SubPoolGeometry& g = sub_pools_[i];
        g.start_page =
            std::max(g.start_page, ceil_div(start_byte(sub_pools_[i - 1]), g.page_bytes));
    }
    for (std::size_t i = sub_pools_.size() - 2; i >= 1; --i) {
        SubPoolGeometry& g = sub_pools_[i];
        g.start_page = std::min(g.start_page, start_byte(sub_pools_[i + 1]) / g.page_bytes);
        if (g.start_page < g.min_page_index || start_byte(g) < start_byte(sub_pools_[i - 1]))
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("floating sub-pool '{}': a buffer of {} bytes has no page "
                                    "of {} bytes to start its band between '{}' and '{}'",
                                    g.spec.name, total_bytes_, g.page_bytes,
                                    sub_pools_[i - 1].spec.name, sub_pools_[i + 1].spec.name));
    }
}

PoolLayout PoolLayout::fixed_split(index_t total_bytes, std::vector<SubPoolSpec> specs,
                                   double first_side_fraction) {
    if (specs.size() != 2)
        throw Error(ErrorCode::invalid_argument, "a fixed split needs exactly two sub-pools");
    if (!(first_side_fraction > 0.0 && first_side_fraction < 1.0))
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("split fraction must lie in (0, 1), got {}", first_side_fraction));
    return fixed_split(total_bytes, std::move(specs),
                       std::vector<double>{first_side_fraction, 1.0 - first_side_fraction});
}

PoolLayout PoolLayout::fixed_split(index_t total_bytes, std::vector<SubPoolSpec> specs,
                                   const std::vector<double>& fractions) {
    if (fractions.size() != specs.size())
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("a fixed split of {} sub-pools needs as many fractions, got {}",
                                specs.size(), fractions.size()));
    double sum = 0.0;
    for (std::size_t i = 0; i < fractions.size(); ++i) {
        if (!(fractions[i] > 0.0 && fractions[i] < 1.0))
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("sub-pool '{}': split fraction must lie in (0, 1), got {}",
                                    specs[i].name, fractions[i]));
        sum += fractions[i];
    }
    if (std::abs(sum - 1.0) > 1e-9)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("split fractions must add up to 1, got {}", sum));
    index_t assigned = 0;
    double before = 0.0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
        // The last side takes what the others leave, so the shares tile the buffer.
        const index_t share =
            i + 1 == specs.size()
                ? total_bytes - assigned
                : static_cast<index_t>(static_cast<double>(total_bytes) * fractions[i]);
        assigned += share;
        const index_t page_bytes = specs[i].entry_bytes * specs[i].page_size;
        const index_t tokens = page_bytes > 0 ? share / page_bytes * specs[i].page_size : 0;
        // A side may not hold less than one page; max_tokens == 0 would mean "no cap".
        specs[i].max_tokens = std::max<index_t>(tokens, specs[i].page_size);
        // A floating band starts at the low end of its share.
        if (specs[i].grow == GrowDirection::floating)
            specs[i].float_at = before;
        before += fractions[i];
    }
    return PoolLayout(total_bytes, std::move(specs));
}

const SubPoolGeometry& PoolLayout::sub_pool(std::size_t i) const {
    if (i >= sub_pools_.size())
        throw Error(ErrorCode::out_of_range,
                    fmt::format("sub-pool index {} out of range (the buffer has {})", i,
                                sub_pools_.size()));
    return sub_pools_[i];
}

std::size_t PoolLayout::sub_pool_index(const std::string& name) const {
    for (std::size_t i = 0; i < sub_pools_.size(); ++i)
        if (sub_pools_[i].spec.name == name)
            return i;
    throw Error(ErrorCode::invalid_argument, fmt::format("no sub-pool named '{}'", name));
}

const SubPoolGeometry& PoolLayout::sub_pool(const std::string& name) const {
    return sub_pools_[sub_pool_index(name)];
}

} // namespace kvpool
