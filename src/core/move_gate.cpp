#include "band_direction.hpp"
#include "core_util.hpp"

#include <kvpool/detail/core/move_gate.hpp>
#include <kvpool/detail/state_digest.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace kvpool::detail {

std::vector<index_t> MoveGate::pages_of(const BandView& band, const CompletionTokenPtr& token,
                                        const index_t* virtual_tokens, index_t count,
                                        bool skip_unbound, bool window_open) const {
    const std::string& name = band.geometry.spec.name;
    if (!token)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: gate_transfer without a completion token", name));
    if (window_open)
        throw Error(ErrorCode::invalid_state,
                    fmt::format("{}: gate_transfer inside a backup window. State: {}", name,
                                band.report.state_string()));
    if (count < 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: negative id count {}", name, count));
    const BandTables& t = band.tables;
    const index_t ps = band.page_size();
    std::vector<index_t> pages, unallocated;
    for (index_t i = 0; i < count; ++i) {
        const index_t v = virtual_tokens[i];
        if (t.is_bound(v, ps))
            pages.push_back(t.v2p[v / ps]);
        else if (!skip_unbound)
            unallocated.push_back(v);
    }
    if (!unallocated.empty())
        throw Error(ErrorCode::not_allocated,
                    fmt::format("{}: gate_transfer of ids {} that are not allocated. State: {}",
                                name, first_ids(unallocated), band.report.state_string()));
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    return pages;
}

void MoveGate::add(CompletionTokenPtr token, std::vector<index_t> pages) {
    if (pages.empty() || token->is_complete())
        return;
    std::vector<Gate>& gates = gates_.edit();
    gates.erase(std::remove_if(gates.begin(), gates.end(),
                               [](const Gate& g) { return g.done->is_complete(); }),
                gates.end());
    gates.push_back({std::move(token), std::move(pages)});
}

std::vector<index_t> MoveGate::gated_pages() const {
    std::vector<index_t> pages;
    for (const Gate& g : gates_.get())
        if (!g.done->is_complete())
            pages.insert(pages.end(), g.pages.begin(), g.pages.end());
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    return pages;
}

index_t MoveGate::usable_holes(const BandTables& tables) const {
    if (gates_.get().empty())
        return static_cast<index_t>(tables.holes.size());
    const std::vector<index_t> gated = gated_pages();
    index_t usable = 0;
    for (index_t p : tables.holes)
        usable += std::binary_search(gated.begin(), gated.end(), p) ? 0 : 1;
    return usable;
}

std::vector<CompletionTokenPtr>
MoveGate::eager_free_waits(const BandView& band, const std::vector<index_t>& virtual_pages) const {
    std::vector<CompletionTokenPtr> waits;
    if (gates_.get().empty() || virtual_pages.empty())
        return waits;
    // The compaction overwrites every freed page (a move's destination, or the
    // gap the peer takes over) and reads every page at the frontier it vacates.
    const BandTables& t = band.tables;
    const SubPoolGeometry& geometry = band.geometry;
    std::vector<index_t> touched;
    for (index_t v : virtual_pages)
        touched.push_back(t.v2p[v]);
    const auto [first, last] =
        BandDirection(geometry, t.anchor)
            .frontier_pages(t.watermark, static_cast<index_t>(virtual_pages.size()));
    for (index_t p = std::max(first, geometry.min_page_index);
         p < std::min(last, geometry.num_physical_pages); ++p)
        touched.push_back(p);
    std::sort(touched.begin(), touched.end());
    for (const Gate& g : gates_.get()) {
        const bool hit = std::any_of(g.pages.begin(), g.pages.end(), [&](index_t p) {
            return std::binary_search(touched.begin(), touched.end(), p);
        });
        if (!hit || g.done->is_complete())
            continue;
        if (!stream_wait_check_ || !stream_wait_check_(*g.done))
            throw Error(ErrorCode::invalid_state,
                        fmt::format("{}: free would move or overwrite pages {} under a transfer "
                                    "not complete (gate_transfer), and no stream wait can order "
                                    "this eager compaction after it (a host backend, or a token "
                                    "that is not an event of the instance's GPU runtime): "
                                    "complete the transfer first. State: {}",
                                    geometry.spec.name, first_ids(g.pages),
                                    band.report.state_string()));
        if (std::find(waits.begin(), waits.end(), g.done) == waits.end())
            waits.push_back(g.done);
    }
    return waits;
}

std::optional<std::vector<MoveGate::Gate>>
MoveGate::settle(const std::vector<CompletionTokenPtr>& waits, bool keep_before) {
    const auto settled = [&](const Gate& g) {
        return g.done->is_complete() ||
               std::find(waits.begin(), waits.end(), g.done) != waits.end();
    };
    std::optional<std::vector<Gate>> before;
    if (std::any_of(gates_.get().begin(), gates_.get().end(), settled)) {
        if (keep_before)
            before = gates_.get();
        std::vector<Gate>& gates = gates_.edit();
        gates.erase(std::remove_if(gates.begin(), gates.end(), settled), gates.end());
    }
    return before;
}

void MoveGate::drop_complete() {
    const auto complete = [](const Gate& g) { return g.done->is_complete(); };
    if (std::any_of(gates_.get().begin(), gates_.get().end(), complete)) {
        std::vector<Gate>& gates = gates_.edit();
        gates.erase(std::remove_if(gates.begin(), gates.end(), complete), gates.end());
    }
}

void MoveGate::add_to(StateDigest& digest) const {
    const std::vector<Gate>& gates = gates_.get();
    digest.add(gates.size());
    for (const Gate& g : gates) {
        digest.add_bool(g.done != nullptr);
        digest.add_range(g.pages);
    }
}

} // namespace kvpool::detail
