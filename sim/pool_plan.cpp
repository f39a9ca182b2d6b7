#include "pool_plan.hpp"

#include "byte_size.hpp"
#include "input_error.hpp"

#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace kvpool::sim {

namespace {

std::vector<SubPoolSpec> side_specs(const ModelConfig& model, const PoolGeometry& geometry,
                                    index_t scale) {
    const index_t ps = geometry.page_size;
    const index_t full = model.full_token_bytes() / scale;
    switch (model.kind) {
    case HybridKind::sliding_window:
        return {{"full", full, ps, GrowDirection::up, 0},
                {"swa", model.window_token_bytes() / scale, geometry.window_page_size(),
                 GrowDirection::down, 0}};
    case HybridKind::mamba:
        return {{"full", full, ps, GrowDirection::up, 0},
                {"mamba", model.state_slot_bytes() / scale, 1, GrowDirection::down, 0}};
    case HybridKind::mamba_sliding_window:
        break;
    }
    // The sliding-window band floats from the layout's default start.
    return {{"mamba", model.state_slot_bytes() / scale, 1, GrowDirection::up, 0},
            {"swa", model.window_token_bytes() / scale, geometry.window_page_size(),
             GrowDirection::floating, 0},
            {"full", full, ps, GrowDirection::down, 0}};
}

// Real page bytes of the full side, then the pair's second side, or the
// tri-pool's sliding-window and state sides.
RealPageBytes real_page_bytes(const std::vector<SubPoolSpec>& specs, index_t scale) {
    const auto bytes = [&](const SubPoolSpec& s) {
        return static_cast<double>(s.entry_bytes * s.page_size * scale);
    };
    if (specs.size() == 2)
        return {bytes(specs[0]), bytes(specs[1]), 0.0};
    return {bytes(specs[2]), bytes(specs[1]), bytes(specs[0])};
}

// Caps every side of the tri-pool at its share of the bytes, as
// PoolLayout::fixed_split does for two, and starts the sliding-window band
// where the state share ends: each band starts in its own region.
PoolLayout three_way_split(index_t bytes, std::vector<SubPoolSpec> specs, const Policy& policy) {
    const auto share = [&](double fraction) {
        return static_cast<index_t>(static_cast<double>(bytes) * fraction);
    };
    const index_t state = share(policy.state_fraction);
    const index_t full = share(policy.full_fraction);
    const index_t shares[3] = {state, bytes - state - full, full};
    for (std::size_t i = 0; i < 3; ++i) {
        const index_t page_bytes = specs[i].entry_bytes * specs[i].page_size;
        // At least one page: max_tokens == 0 would mean "no cap".
        specs[i].max_tokens =
            std::max<index_t>(shares[i] / page_bytes * specs[i].page_size, specs[i].page_size);
    }
    specs[1].float_at = policy.state_fraction;
    return PoolLayout(bytes, std::move(specs));
}

index_t ceil_div(index_t a, index_t b) {
    return (a + b - 1) / b;
}

std::string side_entry_sizes(const ModelConfig& model, const PoolGeometry& geometry) {
    const auto bytes = [](index_t b) { return format_bytes(static_cast<double>(b)); };
    std::string out = fmt::format("{} per full page, {} per {} entry",
                                  bytes(model.full_token_bytes() * geometry.page_size),
                                  bytes(model.second_entry_bytes()), model.second_side_label());
    if (model.kind == HybridKind::mamba_sliding_window)
        out += fmt::format(", {} per Mamba state entry", bytes(model.state_slot_bytes()));
    return out;
}

} // namespace

index_t byte_scale(const ModelConfig& model, const PoolGeometry& geometry) {
    if (geometry.full_size_buffer)
        return 1;
    const index_t scale = std::gcd(model.full_token_bytes(), model.second_entry_bytes());
    return model.kind == HybridKind::mamba_sliding_window
               ? std::gcd(scale, model.state_slot_bytes())
               : scale;
}

PoolPlan plan_pool(const ModelConfig& model, const PoolGeometry& geometry, const Policy& policy) {
    const index_t scale = byte_scale(model, geometry);
    auto specs = side_specs(model, geometry, scale);
    const index_t bytes = geometry.memory_bytes / scale;
    const RealPageBytes real = real_page_bytes(specs, scale);
    switch (policy.kind) {
    case PolicyKind::unified_eager:
        return {model.kind, PoolLayout(bytes, std::move(specs)), CompactionMode::eager, real};
    case PolicyKind::unified_lazy:
        return {model.kind, PoolLayout(bytes, std::move(specs)), CompactionMode::lazy, real};
    case PolicyKind::fixed_split:
        break;
    }
    if (model.kind == HybridKind::mamba_sliding_window)
        return {model.kind, three_way_split(bytes, std::move(specs), policy), CompactionMode::lazy,
                real};
    return {model.kind, PoolLayout::fixed_split(bytes, std::move(specs), policy.full_fraction),
            CompactionMode::lazy, real};
}

void check_memory_holds(const ModelConfig& model, const PoolGeometry& geometry,
                        const std::vector<RequestSpec>& requests) {
    const index_t scale = byte_scale(model, geometry);
    // The padding sink at the buffer's low end, as the library lays it out (page 0 of every
    // side: the largest page).
    index_t sink = 0;
    try {
        sink = PoolLayout(geometry.memory_bytes / scale, side_specs(model, geometry, scale))
                   .sink_bytes() *
               scale;
    } catch (const Error&) {
        throw InputError(
            fmt::format("--memory {} is too small: it does not hold one page of each side ({})",
                        format_bytes(static_cast<double>(geometry.memory_bytes)),
                        side_entry_sizes(model, geometry)));
    }
    const index_t ps = geometry.page_size;
    const auto needs = [&](const RequestSpec& r) {
        const index_t full =
            ceil_div(r.prompt_tokens + r.output_tokens, ps) * ps * model.full_token_bytes();
        // The sliding-window side holds the whole prompt while it is prefilled.
        const index_t window = model.has_sliding_window()
                                   ? ceil_div(r.prompt_tokens, ps) * ps * model.window_token_bytes()
                                   : 0;
        const index_t state = model.has_state_slots() ? model.state_slot_bytes() : 0;
        return full + window + state + sink;
    };
    const auto largest =
        std::max_element(requests.begin(), requests.end(),
                         [&](const auto& a, const auto& b) { return needs(a) < needs(b); });
    if (largest != requests.end() && needs(*largest) > geometry.memory_bytes)
        throw InputError(
            fmt::format("--memory {} is too small: request {} (arrival {:.3f} s, {} prompt + {} "
                        "output tokens) alone needs {} with {}",
                        format_bytes(static_cast<double>(geometry.memory_bytes)),
                        largest - requests.begin() + 1, largest->arrival_s, largest->prompt_tokens,
                        largest->output_tokens, format_bytes(static_cast<double>(needs(*largest))),
                        model.name));
}

void check_window_page_size(const ModelConfig& model, const PoolGeometry& geometry) {
    const index_t window_page = geometry.window_page_size();
    if (window_page == geometry.page_size)
        return;
    if (!model.has_sliding_window())
        throw InputError(fmt::format("--swa-page-size {}: {} has no sliding-window layers",
                                     window_page, model.name));
    if (geometry.page_size % window_page != 0)
        throw InputError(fmt::format(
            "--swa-page-size {} does not divide the page size {} (--page-size): each full page "
            "must hold a whole number of sliding-window pages",
            window_page, geometry.page_size));
}

std::optional<std::string> split_floor_problem(const ModelConfig& model,
                                               const PoolGeometry& geometry, const Policy& policy,
                                               const std::vector<RequestSpec>& requests) {
    if (requests.empty())
        return std::nullopt;
    const PoolPlan plan = plan_pool(model, geometry, policy);
    const index_t ps = geometry.page_size;
    struct Side {
        const char* name;
        const char* label;
        const char* unit;
        index_t (*need)(const RequestSpec&, index_t);
    };
    const Side sides[] = {
        {"full", "full-attention side", "tokens",
         [](const RequestSpec& r, index_t page) {
             return ceil_div(r.prompt_tokens + r.output_tokens, page) * page;
         }},
        {"swa", "sliding-window side", "tokens",
         [](const RequestSpec& r, index_t page) { return ceil_div(r.prompt_tokens, page) * page; }},
        {"mamba", "state side", "state slots",
         [](const RequestSpec&, index_t) { return index_t(1); }},
    };
    for (const Side& side : sides) {
        const auto& layout_sides = plan.layout.sub_pools();
        const auto found =
            std::find_if(layout_sides.begin(), layout_sides.end(),
                         [&](const SubPoolGeometry& g) { return g.spec.name == side.name; });
        if (found == layout_sides.end())
            continue;
        const index_t capacity = found->page_capacity() * found->page_size();
        const auto largest =
            std::max_element(requests.begin(), requests.end(), [&](const auto& a, const auto& b) {
                return side.need(a, ps) < side.need(b, ps);
            });
        if (side.need(*largest, ps) > capacity)
            return fmt::format("its {} holds {} {}, and the longest request ({} prompt + {} "
                               "output tokens) needs {} there",
                               side.label, capacity, side.unit, largest->prompt_tokens,
                               largest->output_tokens, side.need(*largest, ps));
    }
    return std::nullopt;
}

} // namespace kvpool::sim
