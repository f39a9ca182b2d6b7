// What the scheduler's pools share: the unified pool and the composite
// allocator they own (the SWA or the Mamba pair, or the tri-pool), and the
// calls that go to the full side, to every side alike, or to a side the
// composite may have (the sliding window, the state slots). Derived names its
// second side (second_side()).
#pragma once

#include "device_calls.hpp"
#include "sim_pool.hpp"

#include <kvpool/eviction.hpp>
#include <kvpool/multi_ended_allocator.hpp>

#include <algorithm>
#include <functional>

#include <utility>
#include <vector>

namespace kvpool::sim {

template <class ExecutionSpace, class Pair, class Derived> class PairSimPool : public SimPool {
public:
    PairSimPool(PoolLayout layout, CompactionMode mode, RealPageBytes real)
        : pool_(std::move(layout)), pair_(pool_, mode), mode_(mode), real_(real) {}

    index_t page_size() const override { return pair_.full().page_size(); }

    bool decode(const std::vector<RequestKv*>& batch) override {
        std::vector<index_t> seq_lens, last;
        for (const RequestKv* kv : batch) {
            seq_lens.push_back(kv->tokens + 1);
            last.push_back(last_token(*kv, page_size()));
        }
        const auto out = calls_.output(batch.size());
        const auto last_loc = calls_.upload(last);
        if (!calls_.timed(
                [&] { return pair_.alloc_decode(calls_.space(), seq_lens, last_loc, out); }))
            return false;
        take_decode_ids(batch, calls_.download(out), page_size());
        return true;
    }

    void begin_releases() override { pair_.free_group_begin(); }
    void end_releases() override {
        calls_.timed([&] {
            pair_.free_group_end(calls_.space());
            return 0;
        });
    }

    void idle_point() override {
        if (mode_ == CompactionMode::lazy)
            calls_.timed([&] { return pair_.flush_opportunistic(calls_.space()); });
    }

    PoolStats stats() const override {
        const auto& full = pair_.full().counters();
        const auto& second = static_cast<const Derived&>(*this).second_side().counters();
        PoolStats s;
        s.pages_moved = full.pages_moved + second.pages_moved;
        s.bytes_moved = static_cast<double>(full.pages_moved) * real_.first +
                        static_cast<double>(second.pages_moved) * real_.second;
        s.allocator_seconds = calls_.seconds();
        s.live_full_tokens = pair_.full().allocated_count();
        s.live_second_entries = static_cast<const Derived&>(*this).second_side().allocated_count();
        s.pages_allocated = full.pages_allocated + second.pages_allocated;
        s.pages_freed = full.pages_freed + second.pages_freed;
        return s;
    }

    void check_invariants() const override { pair_.check_invariants(calls_.space()); }

    void set_eviction(std::function<bool()> evict) override {
        if (!evict) {
            pair_.set_eviction_callback(nullptr);
            return;
        }
        pair_.set_eviction_callback(
            [evict = std::move(evict)](const EvictionShortfall& s) -> std::size_t {
                return evict() ? std::max<std::size_t>(s.bytes, 1) : 0;
            });
    }

protected:
    // The new tokens of a request after its shared prefix (page-aligned) on the
    // full side and its partner.
    bool extend(RequestKv& kv, const std::vector<index_t>& prefix_pages, index_t tokens) {
        const index_t prefix = static_cast<index_t>(prefix_pages.size()) * page_size();
        const auto out = calls_.output(static_cast<std::size_t>(tokens));
        // A page-aligned prefix's last-token location is never read (the new tokens start a
        // page), but it is the prefix's when there is one.
        const auto last_loc = calls_.upload(
            {prefix_pages.empty() ? unbound : prefix_pages.back() * page_size() + page_size() - 1});
        if (!calls_.timed([&] {
                return pair_.alloc_extend(calls_.space(), {prefix}, {prefix + tokens}, last_loc,
                                          out);
            }))
            return false;
        take_prefill_ids(kv, prefix_pages, calls_.download(out), tokens, page_size());
        kv.window_released_window_pages = kv.window_released_pages * window_ratio();
        return true;
    }

    // Every page of the request but its shared prefix; a sliding-window side
    // skips the pages already out of the window.
    void free_pages(const RequestKv& kv) { free_page_ids(page_ids(kv, kv.shared_pages)); }

    void free_page_ids(const std::vector<index_t>& pages) {
        if (pages.empty())
            return;
        const auto tokens = first_tokens(pages);
        calls_.timed([&] {
            pair_.free(calls_.space(), tokens);
            return 0;
        });
    }

    // The sliding-window copies of these pages (those still held): every
    // sliding-window page under each.
    void free_window_page_ids(const std::vector<index_t>& pages) {
        std::vector<index_t> tokens;
        for (index_t page : pages)
            for (index_t i = 0; i < window_ratio(); ++i)
                tokens.push_back(page * page_size() + i * this->window_page_size());
        free_window_tokens(tokens);
    }

    // The request's sliding-window pages [window_released_window_pages,
    // window_pages) but those of the kept pages. A page whose window copy is
    // released in part counts as released (window_released_pages).
    void free_window_pages(RequestKv& kv, index_t window_pages) {
        if (window_pages <= kv.window_released_window_pages)
            return;
        const index_t ratio = window_ratio();
        std::vector<index_t> leaving;
        for (index_t i = kv.window_released_window_pages; i < window_pages; ++i) {
            const index_t page = i / ratio;
            if (page < kv.window_keep_begin || page >= kv.window_keep_end)
                leaving.push_back(kv.pages[static_cast<std::size_t>(page)] * page_size() +
                                  i % ratio * this->window_page_size());
        }
        free_window_tokens(leaving);
        kv.window_released_window_pages = window_pages;
        kv.window_released_pages = (window_pages + ratio - 1) / ratio;
    }

    // A state slot, then the request's KV: both or neither.
    bool prefill_with_state_slot(RequestKv& kv, const std::vector<index_t>& prefix_pages,
                                 index_t tokens) {
        const auto slot = calls_.timed([&] { return pair_.alloc_state_slots(calls_.space(), 1); });
        if (!slot)
            return false;
        const index_t slot_id = calls_.download(*slot)[0];
        if (!extend(kv, prefix_pages, tokens)) {
            free_state_slot(slot_id);
            return false;
        }
        kv.state_slot = slot_id;
        return true;
    }

    // The request's KV and its state slot, if it holds one.
    void release_with_state_slot(RequestKv& kv) {
        free_pages(kv);
        if (kv.state_slot != unbound)
            free_state_slot(kv.state_slot);
        kv = RequestKv{};
    }

    UnifiedKVPool<typename ExecutionSpace::memory_space> pool_;
    Pair pair_;
    CompactionMode mode_;
    RealPageBytes real_;
    DeviceCalls<ExecutionSpace> calls_;

    void free_state_slot(index_t slot) {
        calls_.timed([&] {
            pair_.free_state_slots(calls_.space(), {slot});
            return 0;
        });
    }

private:
    index_t window_ratio() const { return page_size() / this->window_page_size(); }

    // One token per sliding-window page: freeing a token frees its page.
    void free_window_tokens(const std::vector<index_t>& tokens) {
        if (tokens.empty())
            return;
        calls_.timed([&] {
            pair_.free_swa(calls_.space(), tokens);
            return 0;
        });
    }

    static std::vector<index_t> page_ids(const RequestKv& kv, index_t from) {
        return {kv.pages.begin() + from, kv.pages.end()};
    }
    // One token per page: freeing a token frees its page.
    std::vector<index_t> first_tokens(const std::vector<index_t>& pages) const {
        std::vector<index_t> tokens;
        tokens.reserve(pages.size());
        for (index_t page : pages)
            tokens.push_back(page * page_size());
        return tokens;
    }
};

} // namespace kvpool::sim
