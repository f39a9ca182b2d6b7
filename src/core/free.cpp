// The allocator core's frees: the ids checked, free groups, the checks a
// composite runs on every side before freeing any, and the free itself,
// handed to compaction.
#include "core_util.hpp"

#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <functional>

namespace kvpool::detail {

namespace {

// Each value once, at its first position.
std::vector<index_t> first_occurrences(std::vector<index_t> values) {
    // A request's pages in ascending order hold no repeats: nothing to drop.
    if (std::adjacent_find(values.begin(), values.end(), std::greater_equal<index_t>()) ==
        values.end())
        return values;
    std::vector<std::size_t> order(values.size());
    for (std::size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
    std::vector<char> repeat(values.size(), 0);
    for (std::size_t k = 1; k < order.size(); ++k)
        repeat[order[k]] = values[order[k]] == values[order[k - 1]];
    std::size_t kept = 0;
    for (std::size_t i = 0; i < values.size(); ++i)
        if (!repeat[i])
            values[kept++] = values[i];
    values.resize(kept);
    return values;
}

} // namespace

std::vector<index_t> AllocatorCore::validated_pages(const index_t* virtual_tokens, index_t count,
                                                    bool skip_unbound) const {
    if (count < 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: negative id count {}", geometry_.spec.name, count));
    std::vector<index_t> pages;
    const index_t token_limit = tables_.virtual_table_pages * page_size();
    const index_t ps = page_size();
    const int shift = power_of_two_shift(ps);
    // A run of consecutive tokens (a request's, at page size 1 a fresh
    // band's) covers a run of pages: one vectorised pass over their v2p rows
    // finds them all bound, and the pages are that run, ascending, in every
    // mode's order. Anything else (an id outside, unbound, or tokens out of
    // order) takes the token-by-token walk below, which words the errors.
    if (count > 0 && consecutive(virtual_tokens, static_cast<std::size_t>(count))) {
        const index_t t0 = virtual_tokens[0];
        const index_t first = shift >= 0 ? t0 >> shift : t0 / ps;
        const index_t last = shift >= 0 ? (t0 + count - 1) >> shift : (t0 + count - 1) / ps;
        if (t0 >= 0 && t0 + count <= token_limit && first >= tables_.min_virtual_page &&
            tables_.rows_bound(first, last - first + 1)) {
            append_run(pages, first, last - first + 1);
            return pages;
        }
    }
    pages.reserve(static_cast<std::size_t>(count));
    std::vector<index_t> outside, unallocated;
    for (index_t i = 0; i < count; ++i) {
        const index_t t = virtual_tokens[i];
        const index_t page = shift >= 0 ? t >> shift : t / ps;
        if (t < 0 || t >= token_limit || page < tables_.min_virtual_page) {
            outside.push_back(t);
            continue;
        }
        if (tables_.v2p[page] == unbound) {
            if (!skip_unbound)
                unallocated.push_back(t);
            continue;
        }
        pages.push_back(page);
    }
    if (!outside.empty())
        throw Error(ErrorCode::out_of_range,
                    fmt::format("{}: free of ids {} outside this side's allocatable ids [{}, "
                                "{}). State: {}",
                                geometry_.spec.name, first_ids(outside),
                                tables_.min_virtual_page * page_size(), token_limit,
                                state_string()));
    if (!unallocated.empty())
        throw Error(ErrorCode::not_allocated,
                    fmt::format("{}: free of ids {} that are not allocated (double free or "
                                "never allocated). State: {}",
                                geometry_.spec.name, first_ids(unallocated), state_string()));
    // The reference frees a lazy side's page-size-1 ids in the caller's order
    // (its hole list, and every later reuse, follow it) and every other free
    // in ascending page order.
    if (is_lazy() && page_size() == 1)
        return first_occurrences(std::move(pages));
    // A request's pages usually arrive in ascending order already.
    if (!std::is_sorted(pages.begin(), pages.end()))
        std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    return pages;
}

void AllocatorCore::free_tokens(const index_t* virtual_tokens, index_t count, bool skip_unbound) {
    if (in_free_group_) {
        validated_pages(virtual_tokens, count, skip_unbound);
        free_group_tokens_.insert_back(virtual_tokens, virtual_tokens + count);
        return;
    }
    free_pages(validated_pages(virtual_tokens, count, skip_unbound));
}

void AllocatorCore::free_group_begin() {
    in_free_group_ = true;
    free_group_tokens_.clear();
}

void AllocatorCore::free_group_end() {
    if (!in_free_group_)
        return;
    // Tokens of one page may have been queued by several frees of the group.
    const std::vector<index_t> tokens(free_group_tokens_.begin(), free_group_tokens_.end());
    const std::vector<index_t> pages =
        validated_pages(tokens.data(), static_cast<index_t>(tokens.size()), true);
    if (!pages.empty()) {
        check_free_allowed();
        if (!is_lazy())
            gate_.eager_free_waits(view(), pages);
    }
    in_free_group_ = false;
    free_group_tokens_.clear();
    free_pages(pages);
}

void AllocatorCore::check_free_tokens(const index_t* virtual_tokens, index_t count,
                                      bool skip_unbound) const {
    const std::vector<index_t> pages = validated_pages(virtual_tokens, count, skip_unbound);
    if (!in_free_group_ && !pages.empty())
        check_free_allowed();
}

void AllocatorCore::check_free_group_end() const {
    if (!in_free_group_)
        return;
    const std::vector<index_t> tokens(free_group_tokens_.begin(), free_group_tokens_.end());
    if (!validated_pages(tokens.data(), static_cast<index_t>(tokens.size()), true).empty())
        check_free_allowed();
}

void AllocatorCore::check_free_allowed() const {
    if (backup_.is_open())
        throw Error(ErrorCode::invalid_state,
                    fmt::format("{}: free inside a backup window (speculative decoding must "
                                "restore or commit first). State: {}",
                                geometry_.spec.name, state_string()));
}

void AllocatorCore::free_pages(const std::vector<index_t>& virtual_pages) {
    if (virtual_pages.empty())
        return;
    check_free_allowed();
    // Inside a transaction the first free goes unjournaled: the transaction
    // log takes it back from its record.
    const bool unjournaled = transaction_.takes_free();
    const Unjournaled quiet(transaction_scope(), unjournaled);
    if (unjournaled)
        transaction_.begin_free(tables_, virtual_pages);
    if (is_lazy())
        compaction_.free_lazy(band(), virtual_pages);
    else
        compaction_.free_eager(band(), gate_, virtual_pages, transaction_.free_record());
    if (options_.is_id_owner)
        tables_.free_virtual_pages.insert_back(virtual_pages.data(),
                                               virtual_pages.data() + virtual_pages.size());
    ++counters_.frees;
    counters_.pages_freed += static_cast<index_t>(virtual_pages.size());
    if (unjournaled)
        transaction_.end_free();
}

void AllocatorCore::check_free_gates(const index_t* virtual_tokens, index_t count) const {
    if (is_lazy() || gate_.empty())
        return;
    std::vector<index_t> tokens(virtual_tokens, virtual_tokens + std::max<index_t>(0, count));
    if (in_free_group_)
        tokens.insert(tokens.end(), free_group_tokens_.begin(), free_group_tokens_.end());
    std::vector<index_t> pages;
    for (index_t t : tokens)
        if (is_slot_allocated(t))
            pages.push_back(t / page_size());
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    gate_.eager_free_waits(view(), pages);
}

} // namespace kvpool::detail
