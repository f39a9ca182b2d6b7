// UnifiedMambaAllocator, the Mamba pair: full-attention KV (paged) and
// per-request recurrent state slots (page size 1) in one unified buffer, each
// side owning its own ids.
#pragma once

#include <kvpool/detail/library_spaces.hpp>
#include <kvpool/detail/pair_checks.hpp>
#include <kvpool/eviction.hpp>
#include <kvpool/multi_ended_allocator.hpp>
#include <kvpool/pair_snapshot.hpp>

namespace kvpool {

template <class ExecutionSpace> class UnifiedMambaAllocator {
public:
    using side_type = MultiEndedAllocator<ExecutionSpace>;
    using pool_type = typename side_type::pool_type;
    using index_view = typename side_type::index_view;
    using const_index_view = typename side_type::const_index_view;

    // The layout must hold full_name (any page size) and state_name (page size
    // 1). Each side takes its own options; both own their ids.
    UnifiedMambaAllocator(pool_type& pool, const AllocatorOptions& full_options,
                          const AllocatorOptions& state_options,
                          const std::string& full_name = "full",
                          const std::string& state_name = "mamba")
        : full_(pool, full_name, detail::with_role(full_options, true)),
          state_(pool, state_name, detail::with_role(state_options, true)) {
        if (state_.page_size() != 1)
            throw Error(ErrorCode::invalid_argument, "Mamba pair: the state side '" + state_name +
                                                         "' must have page size 1, not " +
                                                         std::to_string(state_.page_size()));
        full_.bind_peer(state_);
    }
    // Both sides in one compaction mode, with the default options otherwise.
    UnifiedMambaAllocator(pool_type& pool, CompactionMode mode,
                          const std::string& full_name = "full",
                          const std::string& state_name = "mamba")
        : UnifiedMambaAllocator(pool, AllocatorOptions{mode}, AllocatorOptions{mode}, full_name,
                                state_name) {}

    side_type& full() { return full_; }
    side_type& state() { return state_; }
    const side_type& full() const { return full_; }
    const side_type& state() const { return state_; }
    // Both sides' state digests (MultiEndedAllocator::state_digest), the
    // state slots' tables with them: equal on tensor-parallel ranks that made
    // the same calls. Host only, no fence.
    std::uint64_t state_digest() const {
        return detail::combine_digests("mamba_pair", {full_.state_digest(), state_.state_digest()});
    }

    // Full-token equivalents of gap one state slot costs, rounded up: what an
    // admission planner reserves per new request.
    index_t state_slot_full_token_cost() const {
        const index_t state_bytes = state_.geometry().page_bytes;
        const index_t token_bytes = full_.geometry().spec.entry_bytes;
        return (state_bytes + token_bytes - 1) / token_bytes;
    }

    // Full tokens admissible once the state side's holes are compacted.
    index_t available_size() const { return full_.schedulable_available_size(); }
    index_t state_slots_available() const { return state_.available_size(); }
    // The known starvation case: the full side still has room, but the gap,
    // even with the full side's holes compacted away, is narrower than one
    // state slot and the state side has no hole to reuse. (A state side that
    // has used up its own id cap is full, not starved.)
    bool state_slot_starved() const {
        const auto& state = state_.core();
        const auto& full = full_.core();
        const index_t full_hole_bytes =
            full.is_lazy() ? full.hole_pages() * full.geometry().page_bytes : 0;
        return state.hole_pages() == 0 &&
               state.gap_bytes() + full_hole_bytes < state.geometry().page_bytes &&
               full_.available_size() > 0;
    }

    // ---- full KV: the full side's calls. Short, an installed eviction
    // callback is asked to free and the allocation is tried again
    // (kvpool/eviction.hpp); so are the state-slot allocations below.
    std::optional<index_view> alloc(const ExecutionSpace& space, index_t need_size) {
        full_.check_alloc_size("alloc", need_size);
        return evicting_full("alloc", need_size / full_.page_size(),
                             [&] { return full_.alloc(space, need_size); });
    }
    bool alloc(const ExecutionSpace& space, index_t need_size, const index_view& out) {
        full_.check_alloc("alloc", need_size, out);
        return evicting_full("alloc", need_size / full_.page_size(),
                             [&] { return full_.alloc(space, need_size, out); });
    }
    bool alloc_extend(const ExecutionSpace& space, const std::vector<index_t>& prefix_lens,
                      const std::vector<index_t>& seq_lens, const const_index_view& last_loc,
                      const index_view& out) {
        const index_t pages = full_.extend_pages(prefix_lens, seq_lens, last_loc, out);
        return evicting_full("alloc_extend", pages, [&] {
            return full_.alloc_extend(space, prefix_lens, seq_lens, last_loc, out);
        });
    }
    bool alloc_decode(const ExecutionSpace& space, const std::vector<index_t>& seq_lens,
                      const const_index_view& last_loc, const index_view& out) {
        const index_t pages = full_.decode_pages(seq_lens, last_loc, out);
        return evicting_full("alloc_decode", pages,
                             [&] { return full_.alloc_decode(space, seq_lens, last_loc, out); });
    }
    void free(const ExecutionSpace& space, const std::vector<index_t>& virtual_tokens) {
        full_.free(space, virtual_tokens);
    }
    void translate(const ExecutionSpace& space, const const_index_view& virtual_tokens,
                   const index_view& out) const {
        full_.translate(space, virtual_tokens, out);
    }

    // ---- state slots: one per running request
    std::optional<index_view> alloc_state_slots(const ExecutionSpace& space, index_t count) {
        state_.check_alloc_size("alloc_state_slots", count);
        return evicting_state("alloc_state_slots", count,
                              [&] { return state_.alloc(space, count); });
    }
    // As above into out (count entries), or false when there is no room.
    bool alloc_state_slots(const ExecutionSpace& space, index_t count, const index_view& out) {
        state_.check_alloc("alloc_state_slots", count, out);
        return evicting_state("alloc_state_slots", count,
                              [&] { return state_.alloc(space, count, out); });
    }
    void free_state_slots(const ExecutionSpace& space, const std::vector<index_t>& slots) {
        state_.free(space, slots);
    }
    void translate_state_slots(const ExecutionSpace& space, const const_index_view& virtual_slots,
                               const index_view& out) const {
        state_.translate(space, virtual_slots, out);
    }

    // ---- move gate (MultiEndedAllocator::gate_transfer)
    // A transfer reads these full-side tokens' pages and these state slots
    // (the state side's ids) until token completes. Checked on both sides
    // before either changes.
    void gate_transfer(const CompletionTokenPtr& token, const std::vector<index_t>& virtual_tokens,
                       const std::vector<index_t>& state_slots = {}) {
        full_.core().check_gate_transfer(token, virtual_tokens.data(),
                                         static_cast<index_t>(virtual_tokens.size()), false);
        state_.core().check_gate_transfer(token, state_slots.data(),
                                          static_cast<index_t>(state_slots.size()), false);
        full_.gate_transfer(token, virtual_tokens);
        state_.gate_transfer(token, state_slots);
    }

    // ---- lazy compaction and state, forwarded to both sides
    index_t flush_opportunistic(const ExecutionSpace& space) {
        return full_.transaction(space, [&] {
            return full_.flush_opportunistic(space) + state_.flush_opportunistic(space);
        });
    }
    void set_latest_forward_done(const CompletionTokenPtr& token) {
        full_.set_latest_forward_done(token);
        state_.set_latest_forward_done(token);
    }
    // Only the full side gets a write set: state slots are not written through
    // the forward's KV locations (the reference passes none for them either).
    void set_inflight_forward(const CompletionTokenPtr& token,
                              const std::vector<index_t>& virtual_tokens) {
        full_.set_inflight_forward(token, virtual_tokens);
    }
    void drain_pending_reuse() {
        full_.drain_pending_reuse();
        state_.drain_pending_reuse();
    }
    // ---- speculative decoding: a backup window over the full side and the
    // state slots. Inside it, allocations on either side (state slots
    // included) are undone by restore_state; frees are refused and flushes
    // move nothing. A bad or stale snapshot is an error that changes neither side.
    PairSnapshot backup_state() { return detail::backup_pair(full_, state_); }
    void restore_state(const ExecutionSpace& space, const PairSnapshot& snapshot) {
        full_.transaction(space, [&] { detail::restore_pair(space, full_, state_, snapshot); });
    }
    // Keeps the allocations since the snapshot; closes the windows it opened.
    void commit_state(const PairSnapshot& snapshot) {
        detail::commit_pair(full_, state_, snapshot);
    }

    // ---- eviction across the sides (kvpool/eviction.hpp): called when an
    // allocation of either falls short, before it fails. An empty callback
    // removes it.
    void set_eviction_callback(EvictionCallback callback) { eviction_.set(std::move(callback)); }
    bool has_eviction_callback() const { return eviction_.installed(); }

    void free_group_begin() { full_.free_group_begin(); }
    void free_group_end(const ExecutionSpace& space) { full_.free_group_end(space); }
    void clear(const ExecutionSpace& space) {
        full_.transaction(space, [&] {
            full_.clear(space);
            state_.clear(space);
        });
    }
    void check_invariants(const ExecutionSpace& space = ExecutionSpace()) const {
        full_.check_invariants(space);
        state_.check_invariants(space);
    }

private:
    template <class Attempt>
    auto evicting_full(const char* call, index_t pages, const Attempt& attempt) {
        return eviction_.run(
            call, attempt,
            [&] {
                return detail::side_shortfall(full_, pages,
                                              full_.available_size() / full_.page_size());
            },
            [&] { return live(); });
    }
    template <class Attempt>
    auto evicting_state(const char* call, index_t count, const Attempt& attempt) {
        return eviction_.run(
            call, attempt,
            [&] { return detail::side_shortfall(state_, count, state_.available_size()); },
            [&] { return live(); });
    }
    index_t live() const { return full_.allocated_count() + state_.allocated_count(); }

    side_type full_;
    side_type state_;
    detail::EvictionLoop eviction_;
};

KVPOOL_EXTERN_LIBRARY_INSTANCES(UnifiedMambaAllocator)

} // namespace kvpool
