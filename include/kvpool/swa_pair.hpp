// UnifiedSWAAllocator, the SWA pair: the full side mints virtual ids, the SWA
// side binds the same ids to pages of its own, both in one unified buffer.
// Every allocation binds both sides or neither.
#pragma once

#include <kvpool/detail/library_spaces.hpp>
#include <kvpool/detail/pair_checks.hpp>
#include <kvpool/detail/unified_swa_capacity.hpp>
#include <kvpool/eviction.hpp>
#include <kvpool/multi_ended_allocator.hpp>
#include <kvpool/pair_snapshot.hpp>

#include <cstdint>

namespace kvpool {

template <class ExecutionSpace> class UnifiedSWAAllocator {
public:
    using side_type = MultiEndedAllocator<ExecutionSpace>;
    using pool_type = typename side_type::pool_type;
    using index_view = typename side_type::index_view;
    using const_index_view = typename side_type::const_index_view;

    // The pool's layout must hold sub-pools named full_name and swa_name; the
    // SWA side's page size divides the full side's (a smaller one frees the
    // window's pages at a finer grain: each full page has page-ratio SWA
    // pages, bound with it and released by free_swa one by one). Each side
    // takes its own options; the pair sets their roles (the full side owns
    // the ids).
    UnifiedSWAAllocator(pool_type& pool, const AllocatorOptions& full_options,
                        const AllocatorOptions& swa_options, const std::string& full_name = "full",
                        const std::string& swa_name = "swa")
        : full_(pool, full_name, detail::with_role(full_options, true)),
          swa_(pool, swa_name, detail::with_role(swa_options, false)) {
        detail::check_follower_page_size(full_, swa_, "SWA pair");
        full_.bind_peer(swa_);
        full_.bind_follower(swa_);
    }
    // Both sides in one compaction mode, with the default options otherwise.
    UnifiedSWAAllocator(pool_type& pool, CompactionMode mode, const std::string& full_name = "full",
                        const std::string& swa_name = "swa")
        : UnifiedSWAAllocator(pool, AllocatorOptions{mode}, AllocatorOptions{mode}, full_name,
                              swa_name) {}

    side_type& full() { return full_; }
    side_type& swa() { return swa_; }
    const side_type& full() const { return full_; }
    const side_type& swa() const { return swa_; }
    // The allocation granularity: the full side's page.
    index_t page_size() const { return full_.page_size(); }
    // Both sides' state digests (MultiEndedAllocator::state_digest): equal on
    // tensor-parallel ranks that made the same calls. Host only, no fence.
    std::uint64_t state_digest() const {
        return detail::combine_digests("swa_pair", {full_.state_digest(), swa_.state_digest()});
    }

    // ---- capacity views, in tokens
    // Joint: what one alloc/alloc_extend can take now. The only safe pre-check.
    index_t available_size() const {
        return detail::unified_swa_available_pages(full_.core(), swa_.core()) * page_size();
    }
    // Slot conservation against each side's static cap (for leak checks).
    index_t conserve_full_available_size() const {
        return full_.geometry().page_capacity() * page_size() - full_.allocated_count();
    }
    index_t conserve_swa_available_size() const {
        return swa_.geometry().page_capacity() * swa_.page_size() - swa_.allocated_count();
    }
    // Realizable once the peer's holes are compacted (for admission).
    index_t schedulable_full_available_size() const { return full_.schedulable_available_size(); }
    index_t schedulable_swa_available_size() const { return swa_.schedulable_available_size(); }
    // What the scheduler reads per side: the tighter of the two.
    index_t full_available_size() const {
        return std::min(conserve_full_available_size(), schedulable_full_available_size());
    }
    index_t swa_available_size() const {
        return std::min(conserve_swa_available_size(), schedulable_swa_available_size());
    }

    // ---- allocation: both sides or neither
    // need_size virtual token ids into out (a caller-owned View), or false.
    // Each checks its arguments, then the joint room (a shortfall flushes both
    // sides urgently, as the reference does), then allocates on both sides.
    // Still short, an installed eviction callback is asked to free and the
    // allocation is tried again (kvpool/eviction.hpp).
    bool alloc(const ExecutionSpace& space, index_t need_size, const index_view& out) {
        full_.check_alloc("alloc", need_size, out);
        return evicting("alloc", need_size / page_size(), [&] {
            return full_.transaction(space, [&] {
                return make_room(space, need_size / page_size()) &&
                       full_.alloc(space, need_size, out);
            });
        });
    }
    std::optional<index_view> alloc(const ExecutionSpace& space, index_t need_size) {
        full_.check_alloc_size("alloc", need_size);
        return evicting("alloc", need_size / page_size(), [&] {
            return full_.transaction(space, [&]() -> std::optional<index_view> {
                if (!make_room(space, need_size / page_size()))
                    return std::nullopt;
                return full_.alloc(space, need_size);
            });
        });
    }

    bool alloc_extend(const ExecutionSpace& space, const std::vector<index_t>& prefix_lens,
                      const std::vector<index_t>& seq_lens, const const_index_view& last_loc,
                      const index_view& out) {
        const index_t pages = full_.extend_pages(prefix_lens, seq_lens, last_loc, out);
        return evicting("alloc_extend", pages, [&] {
            return full_.transaction(space, [&] {
                return make_room(space, pages) &&
                       full_.alloc_extend(space, prefix_lens, seq_lens, last_loc, out);
            });
        });
    }

    bool alloc_decode(const ExecutionSpace& space, const std::vector<index_t>& seq_lens,
                      const const_index_view& last_loc, const index_view& out) {
        const index_t pages = full_.decode_pages(seq_lens, last_loc, out);
        return evicting("alloc_decode", pages, [&] {
            return full_.transaction(space, [&] {
                return make_room(space, pages) &&
                       full_.alloc_decode(space, seq_lens, last_loc, out);
            });
        });
    }

    // ---- eviction across the sides (kvpool/eviction.hpp): called when an
    // allocation falls short, before it fails. An empty callback removes it.
    void set_eviction_callback(EvictionCallback callback) { eviction_.set(std::move(callback)); }
    bool has_eviction_callback() const { return eviction_.installed(); }

    // ---- free
    // Releases both sides; SWA pages already released by free_swa are skipped.
    // Checked on both sides before either changes.
    // The SWA side is freed first: should the full side's part then fail on
    // the device, the pair is left as free_swa(ids) leaves it, which a
    // repeated free completes (the other order would leave SWA pages bound to
    // ids the full side has given back).
    // With smaller SWA pages, every SWA page under the freed full pages goes.
    void free(const ExecutionSpace& space, const std::vector<index_t>& virtual_tokens) {
        const std::vector<index_t>& swa_tokens =
            detail::checked_follower_free(full_, swa_, virtual_tokens, swa_tokens_scratch_);
        full_.transaction(space, [&] {
            swa_.free_if_bound(space, swa_tokens);
            full_.free(space, virtual_tokens);
        });
    }
    // Tokens that left the window: the SWA side only; the virtual ids stay live.
    void free_swa(const ExecutionSpace& space, const std::vector<index_t>& virtual_tokens) {
        detail::check_window_tokens_allocated(full_, virtual_tokens);
        swa_.free_if_bound(space, virtual_tokens);
    }
    void free_group_begin() {
        full_.free_group_begin();
        swa_.free_group_begin();
    }
    // The SWA side first, as in free().
    void free_group_end(const ExecutionSpace& space) {
        detail::check_follower_free_group_end(full_, swa_);
        full_.transaction(space, [&] {
            swa_.free_group_end(space);
            full_.free_group_end(space);
        });
    }

    // ---- move gate (MultiEndedAllocator::gate_transfer)
    // A transfer reads these ids' pages on both sides: the full side's, and
    // the SWA side's where still bound (ids that left the window have none
    // there). Checked on both sides before either changes.
    void gate_transfer(const CompletionTokenPtr& token,
                       const std::vector<index_t>& virtual_tokens) {
        const auto count = static_cast<index_t>(virtual_tokens.size());
        full_.core().check_gate_transfer(token, virtual_tokens.data(), count, false);
        swa_.core().check_gate_transfer(token, virtual_tokens.data(), count, true);
        full_.gate_transfer(token, virtual_tokens);
        swa_.gate_transfer_if_bound(token, virtual_tokens);
    }

    // ---- translate
    void translate_full(const ExecutionSpace& space, const const_index_view& virtual_tokens,
                        const index_view& out) const {
        full_.translate(space, virtual_tokens, out);
    }
    // The SWA layers' read path: physical SWA token ids as int32.
    void translate_swa(const ExecutionSpace& space, const const_index_view& virtual_tokens,
                       const kk::View<std::int32_t*, typename side_type::memory_space>& out) const {
        swa_.translate(space, virtual_tokens, out);
    }

    // ---- lazy compaction, forwarded to both sides
    index_t flush_opportunistic(const ExecutionSpace& space) {
        return full_.transaction(space, [&] {
            return full_.flush_opportunistic(space) + swa_.flush_opportunistic(space);
        });
    }
    void set_latest_forward_done(const CompletionTokenPtr& token) {
        full_.set_latest_forward_done(token);
        swa_.set_latest_forward_done(token);
    }
    // The forward writes the same virtual ids on both sides.
    void set_inflight_forward(const CompletionTokenPtr& token,
                              const std::vector<index_t>& virtual_tokens) {
        full_.set_inflight_forward(token, virtual_tokens);
        swa_.set_inflight_forward(token, virtual_tokens);
    }
    void drain_pending_reuse() {
        full_.drain_pending_reuse();
        swa_.drain_pending_reuse();
    }

    // ---- speculative decoding: a backup window over both sides
    // Inside it, allocations on either side are undone by restore_state (ids,
    // pages, tables); frees are refused and flushes move nothing, on both
    // sides. A bad or stale snapshot is an error that changes neither side.
    PairSnapshot backup_state() { return detail::backup_pair(full_, swa_); }
    void restore_state(const ExecutionSpace& space, const PairSnapshot& snapshot) {
        full_.transaction(space, [&] { detail::restore_pair(space, full_, swa_, snapshot); });
    }
    // Keeps the allocations since the snapshot; closes the windows it opened.
    void commit_state(const PairSnapshot& snapshot) { detail::commit_pair(full_, swa_, snapshot); }

    void clear(const ExecutionSpace& space) {
        full_.transaction(space, [&] {
            full_.clear(space);
            swa_.clear(space);
        });
    }
    void check_invariants(const ExecutionSpace& space = ExecutionSpace()) const {
        full_.check_invariants(space);
        swa_.check_invariants(space);
    }

private:
    template <class Attempt>
    auto evicting(const char* call, index_t pages, const Attempt& attempt) {
        return eviction_.run(
            call, attempt,
            [&] {
                return detail::kv_pair_shortfall(full_, swa_, pages,
                                                 available_size() / page_size());
            },
            [&] { return full_.allocated_count() + swa_.allocated_count(); });
    }

    // Either side's compaction opens gap for the other: flush both when short.
    bool make_room(const ExecutionSpace& space, index_t pages) {
        if (pages * page_size() <= available_size())
            return true;
        full_.flush(space, true);
        swa_.flush(space, true);
        return pages * page_size() <= available_size();
    }

    side_type full_;
    side_type swa_;
    detail::EvictionLoop eviction_;
    std::vector<index_t> swa_tokens_scratch_;
};

KVPOOL_EXTERN_LIBRARY_INSTANCES(UnifiedSWAAllocator)

} // namespace kvpool
