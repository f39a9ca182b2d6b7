// The allocator core's frees: the ids checked, free groups, the checks a
// composite runs on every side before freeing any, and the free itself,
// handed to compaction.
#include "core_util.hpp"

#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>

namespace kvpool::detail {

namespace {

// Drops each value's repeats, keeping its first position.
void keep_first_occurrences(std::vector<index_t>& values) {
    // A request's pages in ascending order hold no repeats: nothing to drop.
    if (std::adjacent_find(values.begin(), values.end(), std::greater_equal<index_t>()) ==
        values.end())
        return;
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
}

} // namespace

bool AllocatorCore::pages_of_runs(const index_t* virtual_tokens, index_t count,
                                  std::vector<index_t>* pages) const {
    const index_t token_limit = tables_.virtual_table_pages * page_size();
    const index_t ps = page_size();
    const int shift = power_of_two_shift(ps);
    const auto page_of = [&](index_t t) { return shift >= 0 ? t >> shift : t / ps; };
    // The runs of consecutive tokens (a request's, in a few pieces once its
    // ids came from several freed requests), each a run of pages that one
    // vectorised pass over their v2p rows finds bound.
    std::array<IdRun<index_t>, max_free_runs> runs;
    std::size_t r = 0;
    const auto add_run = [&](std::size_t i, std::size_t n) {
        const index_t t0 = virtual_tokens[i];
        if (r == max_free_runs || t0 < 0 || t0 >= token_limit ||
            static_cast<index_t>(n) > token_limit - t0)
            return false;
        const index_t t1 = t0 + static_cast<index_t>(n) - 1;
        const index_t first = page_of(t0);
        const index_t pages_in_run = page_of(t1) - first + 1;
        if (first < tables_.min_virtual_page || !tables_.rows_bound(first, pages_in_run))
            return false;
        runs[r++] = {first, pages_in_run};
        return true;
    };
    // for_each_run compares ids as unsigned, where the caller's wildest ids
    // cannot overflow; a run that wraps around fails add_run's range check.
    if (!for_each_run(virtual_tokens, static_cast<std::size_t>(count), add_run))
        return false;
    std::array<IdRun<index_t>, max_free_runs> sorted;
    std::copy(runs.begin(), runs.begin() + r, sorted.begin());
    const auto by_first = [](const IdRun<index_t>& a, const IdRun<index_t>& b) {
        return a.first < b.first;
    };
    if (!std::is_sorted(sorted.begin(), sorted.begin() + r, by_first))
        std::sort(sorted.begin(), sorted.begin() + r, by_first);
    // A lazy side's page-size-1 free keeps the caller's order (see
    // validated_pages): runs that share no page are that order with no
    // repeat to drop; others take the walk, which drops them.
    if (is_lazy() && ps == 1) {
        for (std::size_t k = 1; k < r; ++k)
            if (sorted[k].first < sorted[k - 1].first + sorted[k - 1].count)
                return false;
        if (pages) {
            pages->clear();
            for (std::size_t k = 0; k < r; ++k)
                append_run(*pages, runs[k].first, runs[k].count);
        }
        return true;
    }
    // Every other free: the pages ascending, each once (runs may overlap,
    // or share a page at their ends where a page holds several tokens).
    if (pages) {
        pages->clear();
        index_t next = sorted[0].first;
        for (std::size_t k = 0; k < r; ++k) {
            const index_t from = std::max(next, sorted[k].first);
            const index_t end = sorted[k].first + sorted[k].count;
            if (from < end)
                append_run(*pages, from, end - from);
            next = std::max(next, end);
        }
    }
    return true;
}

bool AllocatorCore::validated_pages(const index_t* virtual_tokens, index_t count, bool skip_unbound,
                                    std::vector<index_t>* pages) const {
    if (count < 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: negative id count {}", geometry_.spec.name, count));
    if (count == 0) {
        if (pages)
            pages->clear();
        return false;
    }
    // Tokens in a few runs, all inside and bound: a pass per run. Anything
    // else (an id outside, unbound, scattered tokens or repeats a lazy
    // page-size-1 free must drop) takes the token-by-token walk below, which
    // words the errors.
    if (pages_of_runs(virtual_tokens, count, pages))
        return true;
    std::vector<index_t> own;
    std::vector<index_t>& out = pages ? *pages : own;
    out.clear();
    out.reserve(static_cast<std::size_t>(count));
    const index_t token_limit = tables_.virtual_table_pages * page_size();
    const index_t ps = page_size();
    const int shift = power_of_two_shift(ps);
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
        out.push_back(page);
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
    if (is_lazy() && page_size() == 1) {
        keep_first_occurrences(out);
    } else {
        // A request's pages usually arrive in ascending order already.
        if (!std::is_sorted(out.begin(), out.end()))
            std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
    }
    return !out.empty();
}

void AllocatorCore::free_tokens(const index_t* virtual_tokens, index_t count, bool skip_unbound) {
    if (in_free_group_) {
        validated_pages(virtual_tokens, count, skip_unbound, nullptr);
        free_group_tokens_.insert_back(virtual_tokens, virtual_tokens + count);
        return;
    }
    validated_pages(virtual_tokens, count, skip_unbound, &freed_pages_);
    free_pages(freed_pages_);
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
    const std::vector<index_t>& pages = freed_pages_;
    if (validated_pages(tokens.data(), static_cast<index_t>(tokens.size()), true, &freed_pages_)) {
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
    if (validated_pages(virtual_tokens, count, skip_unbound, nullptr) && !in_free_group_)
        check_free_allowed();
}

void AllocatorCore::check_free_group_end() const {
    if (!in_free_group_)
        return;
    const std::vector<index_t> tokens(free_group_tokens_.begin(), free_group_tokens_.end());
    if (validated_pages(tokens.data(), static_cast<index_t>(tokens.size()), true, nullptr))
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
    // The record's physical pages serve the free too: one read of v2p.
    const index_t* const physical =
        unjournaled ? transaction_.begin_free(tables_, virtual_pages).data() : nullptr;
    if (is_lazy())
        compaction_.free_lazy(band(), virtual_pages, physical);
    else
        compaction_.free_eager(band(), gate_, virtual_pages, transaction_.free_record(), physical);
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
