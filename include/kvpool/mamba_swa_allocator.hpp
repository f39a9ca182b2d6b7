// UnifiedMambaSWAAllocator, the tri-pool, for models with full attention,
// sliding-window attention and Mamba (or linear-attention) state: three bands
// in one unified buffer,
//
//   [ state slots (up) | sliding-window KV (floating) | full KV (down) ]
//
// The full side mints the virtual token ids; the sliding-window side binds the
// same ids to pages of its own (both or neither, as in the SWA pair, its page
// size the full side's or a divisor of it: decoupled page sizes); state
// slots (page size 1) have their own ids. The sliding-window band floats: it
// grows into the wider of its two gaps and shifts away (relocating its edge
// pages, ids stable) when the full side or the state slots need its bytes.
//
// Shortfall ladder. A KV allocation first tries what the joint lower bound
// (available_size()) promises: the full side takes its holes, then its gap,
// then shifts the sliding-window band down; the sliding-window side takes its
// holes, then the wider gap, then the other, flushing a lazy state side.
// Short of the bound, every lazy side flushes urgently first, and the
// allocation is then tried. A state-slot allocation takes the state side's
// holes and gap, then shifts the sliding-window band up; short, a lazy full
// side flushes (widening the gap the band shifts into) and it is tried again.
// Either gives up with "no allocation" when the bytes are not there; what it
// leaves changed is relocations only (flushed or shifted bands: every id and
// every byte where translate finds it).
#pragma once

#include <kvpool/allocator_snapshot.hpp>
#include <kvpool/detail/library_spaces.hpp>
#include <kvpool/detail/pair_checks.hpp>
#include <kvpool/detail/unified_mamba_swa_capacity.hpp>
#include <kvpool/eviction.hpp>
#include <kvpool/multi_ended_allocator.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvpool {

// The marker the tri-pool's backup_state() returns: one snapshot per band.
struct MambaSWASnapshot {
    AllocatorSnapshot full;
    AllocatorSnapshot swa;
    AllocatorSnapshot state;
};

template <class ExecutionSpace> class UnifiedMambaSWAAllocator {
public:
    using side_type = MultiEndedAllocator<ExecutionSpace>;
    using pool_type = typename side_type::pool_type;
    using index_view = typename side_type::index_view;
    using const_index_view = typename side_type::const_index_view;

    // The layout must hold state_name (up, page size 1), swa_name (floating)
    // and full_name (down) in that order, the sliding-window side's page size
    // dividing the full side's (as in the SWA pair: each full page has
    // page-ratio sliding-window pages, bound with it and released by free_swa
    // one by one). Each side takes its own options; the tri-pool sets their roles.
    UnifiedMambaSWAAllocator(pool_type& pool, const AllocatorOptions& full_options,
                             const AllocatorOptions& swa_options,
                             const AllocatorOptions& state_options,
                             const std::string& full_name = "full",
                             const std::string& swa_name = "swa",
                             const std::string& state_name = "mamba")
        : state_(pool, state_name, detail::with_role(state_options, true)),
          swa_(pool, swa_name, detail::with_role(swa_options, false)),
          full_(pool, full_name, detail::with_role(full_options, true)) {
        require(state_.geometry().grow() == GrowDirection::up && state_.page_size() == 1,
                "the state side '" + state_name + "' must grow up with page size 1");
        require(swa_.geometry().grow() == GrowDirection::floating,
                "the sliding-window side '" + swa_name + "' must float");
        require(full_.geometry().grow() == GrowDirection::down,
                "the full side '" + full_name + "' must grow down");
        detail::check_follower_page_size(full_, swa_, "Mamba + SWA tri-pool");
        require(state_.geometry().position + 1 == swa_.geometry().position &&
                    swa_.geometry().position + 1 == full_.geometry().position,
                "the sides must lie state, sliding window, full from the low end up");
        full_.bind_peer(swa_);
        full_.bind_follower(swa_);
        state_.bind_neighbour(swa_);
    }
    // All sides in one compaction mode, with the default options otherwise.
    UnifiedMambaSWAAllocator(pool_type& pool, CompactionMode mode,
                             const std::string& full_name = "full",
                             const std::string& swa_name = "swa",
                             const std::string& state_name = "mamba")
        : UnifiedMambaSWAAllocator(pool, AllocatorOptions{mode}, AllocatorOptions{mode},
                                   AllocatorOptions{mode}, full_name, swa_name, state_name) {}

    side_type& full() { return full_; }
    side_type& swa() { return swa_; }
    side_type& state() { return state_; }
    const side_type& full() const { return full_; }
    const side_type& swa() const { return swa_; }
    const side_type& state() const { return state_; }
    // The three sides' state digests (MultiEndedAllocator::state_digest), the
    // state slots' tables with them: equal on tensor-parallel ranks that made
    // the same calls. Host only, no fence.
    std::uint64_t state_digest() const {
        return detail::combine_digests(
            "mamba_swa", {full_.state_digest(), swa_.state_digest(), state_.state_digest()});
    }
    index_t page_size() const { return full_.page_size(); }

    // ---- capacity views
    // KV tokens one allocation always gets now (both KV sides, shifts of the
    // sliding-window band included; see unified_mamba_swa_available_pages).
    index_t available_size() const {
        return detail::unified_mamba_swa_available_pages(full_.core(), swa_.core()) * page_size();
    }
    // State slots one allocation always gets now (the band's shift included).
    index_t state_slots_available() const { return state_.schedulable_available_size(); }
    // Full-token equivalents of free bytes one state slot costs, rounded up.
    index_t state_slot_full_token_cost() const {
        const index_t token_bytes = full_.geometry().spec.entry_bytes;
        return (state_.geometry().page_bytes + token_bytes - 1) / token_bytes;
    }
    // Each band's own view (live tokens, holes, gaps): the sides' occupancy().

    // ---- KV allocation: both KV sides or neither. Short after the ladder,
    // an installed eviction callback is asked to free and the allocation is
    // tried again (kvpool/eviction.hpp); so are the state-slot allocations.
    bool alloc(const ExecutionSpace& space, index_t need_size, const index_view& out) {
        full_.check_alloc("alloc", need_size, out);
        return evicting_kv("alloc", need_size / page_size(), [&] {
            return swa_.transaction(space, [&] {
                make_room(space, need_size / page_size());
                return full_.alloc(space, need_size, out);
            });
        });
    }
    std::optional<index_view> alloc(const ExecutionSpace& space, index_t need_size) {
        full_.check_alloc_size("alloc", need_size);
        return evicting_kv("alloc", need_size / page_size(), [&] {
            return swa_.transaction(space, [&]() -> std::optional<index_view> {
                make_room(space, need_size / page_size());
                return full_.alloc(space, need_size);
            });
        });
    }
    bool alloc_extend(const ExecutionSpace& space, const std::vector<index_t>& prefix_lens,
                      const std::vector<index_t>& seq_lens, const const_index_view& last_loc,
                      const index_view& out) {
        const index_t pages = full_.extend_pages(prefix_lens, seq_lens, last_loc, out);
        return evicting_kv("alloc_extend", pages, [&] {
            return swa_.transaction(space, [&] {
                make_room(space, pages);
                return full_.alloc_extend(space, prefix_lens, seq_lens, last_loc, out);
            });
        });
    }
    bool alloc_decode(const ExecutionSpace& space, const std::vector<index_t>& seq_lens,
                      const const_index_view& last_loc, const index_view& out) {
        const index_t pages = full_.decode_pages(seq_lens, last_loc, out);
        return evicting_kv("alloc_decode", pages, [&] {
            return swa_.transaction(space, [&] {
                make_room(space, pages);
                return full_.alloc_decode(space, seq_lens, last_loc, out);
            });
        });
    }

    // ---- eviction across the sides (kvpool/eviction.hpp): called when an
    // allocation falls short, before it fails. An empty callback removes it.
    void set_eviction_callback(EvictionCallback callback) { eviction_.set(std::move(callback)); }
    bool has_eviction_callback() const { return eviction_.installed(); }

    // ---- free: as the SWA pair's (the sliding-window side first, every page
    // of it under the freed full pages, those free_swa released skipped; both
    // checked before either changes)
    void free(const ExecutionSpace& space, const std::vector<index_t>& virtual_tokens) {
        const std::vector<index_t>& swa_tokens =
            detail::checked_follower_free(full_, swa_, virtual_tokens, swa_tokens_scratch_);
        swa_.transaction(space, [&] {
            swa_.free_if_bound(space, swa_tokens);
            full_.free(space, virtual_tokens);
        });
    }
    // Frees (KV and state slots) between these two calls compact together.
    void free_group_begin() {
        full_.free_group_begin();
        swa_.free_group_begin();
        state_.free_group_begin();
    }
    // The sliding-window side first, as in free().
    void free_group_end(const ExecutionSpace& space) {
        detail::check_follower_free_group_end(full_, swa_);
        state_.check_free_group_end();
        if (state_.core().in_free_group())
            state_.core().check_free_gates(nullptr, 0);
        swa_.transaction(space, [&] {
            swa_.free_group_end(space);
            full_.free_group_end(space);
            state_.free_group_end(space);
        });
    }
    // Tokens that left the window: the sliding-window side only, at its page grain.
    void free_swa(const ExecutionSpace& space, const std::vector<index_t>& virtual_tokens) {
        detail::check_window_tokens_allocated(full_, virtual_tokens);
        swa_.free_if_bound(space, virtual_tokens);
    }

    // ---- state slots: one per running request
    std::optional<index_view> alloc_state_slots(const ExecutionSpace& space, index_t count) {
        state_.check_alloc_size("alloc_state_slots", count);
        return evicting_state(
            count, [&] { return state_ladder(space, [&] { return state_.alloc(space, count); }); });
    }
    // As above into out (count entries), or false when there is no room.
    bool alloc_state_slots(const ExecutionSpace& space, index_t count, const index_view& out) {
        state_.check_alloc("alloc_state_slots", count, out);
        return evicting_state(count, [&] {
            return state_ladder(space, [&] { return state_.alloc(space, count, out); });
        });
    }
    void free_state_slots(const ExecutionSpace& space, const std::vector<index_t>& slots) {
        state_.free(space, slots);
    }

    // ---- translate
    void translate_full(const ExecutionSpace& space, const const_index_view& virtual_tokens,
                        const index_view& out) const {
        full_.translate(space, virtual_tokens, out);
    }
    // The sliding-window layers' read path: physical token ids as int32.
    void translate_swa(const ExecutionSpace& space, const const_index_view& virtual_tokens,
                       const kk::View<std::int32_t*, typename side_type::memory_space>& out) const {
        swa_.translate(space, virtual_tokens, out);
    }
    void translate_state_slots(const ExecutionSpace& space, const const_index_view& virtual_slots,
                               const index_view& out) const {
        state_.translate(space, virtual_slots, out);
    }

    // ---- move gate: these tokens' pages on both KV sides (the sliding-window
    // side's where still bound) and these state slots, checked on every side
    // before any changes.
    void gate_transfer(const CompletionTokenPtr& token, const std::vector<index_t>& virtual_tokens,
                       const std::vector<index_t>& state_slots = {}) {
        const auto count = static_cast<index_t>(virtual_tokens.size());
        full_.core().check_gate_transfer(token, virtual_tokens.data(), count, false);
        swa_.core().check_gate_transfer(token, virtual_tokens.data(), count, true);
        state_.core().check_gate_transfer(token, state_slots.data(),
                                          static_cast<index_t>(state_slots.size()), false);
        full_.gate_transfer(token, virtual_tokens);
        swa_.gate_transfer_if_bound(token, virtual_tokens);
        state_.gate_transfer(token, state_slots);
    }

    // ---- lazy compaction and the forward's hooks, over every side
    index_t flush_opportunistic(const ExecutionSpace& space) {
        return swa_.transaction(space, [&] {
            return full_.flush_opportunistic(space) + swa_.flush_opportunistic(space) +
                   state_.flush_opportunistic(space);
        });
    }
    void set_latest_forward_done(const CompletionTokenPtr& token) {
        full_.set_latest_forward_done(token);
        swa_.set_latest_forward_done(token);
        state_.set_latest_forward_done(token);
    }
    // The forward writes the same virtual ids on both KV sides; state slots
    // get no write set (as in the Mamba pair).
    void set_inflight_forward(const CompletionTokenPtr& token,
                              const std::vector<index_t>& virtual_tokens) {
        full_.set_inflight_forward(token, virtual_tokens);
        swa_.set_inflight_forward(token, virtual_tokens);
    }
    void drain_pending_reuse() {
        full_.drain_pending_reuse();
        swa_.drain_pending_reuse();
        state_.drain_pending_reuse();
    }

    // ---- speculative decoding: a backup window over all three sides. Inside
    // it allocations are undone by restore_state; frees are refused, flushes
    // and shifts move nothing. Every snapshot is checked before any side changes.
    MambaSWASnapshot backup_state() {
        return {full_.backup_state(), swa_.backup_state(), state_.backup_state()};
    }
    void restore_state(const ExecutionSpace& space, const MambaSWASnapshot& snapshot) {
        check_snapshot(snapshot, "restore_state");
        swa_.transaction(space, [&] {
            full_.restore_state(space, snapshot.full);
            swa_.restore_state(space, snapshot.swa);
            state_.restore_state(space, snapshot.state);
        });
    }
    void commit_state(const MambaSWASnapshot& snapshot) {
        check_snapshot(snapshot, "commit_state");
        full_.commit_state(snapshot.full);
        swa_.commit_state(snapshot.swa);
        state_.commit_state(snapshot.state);
    }

    // The floating band last: its empty band then starts where the layout
    // says, not where the neighbours' old bands ended.
    void clear(const ExecutionSpace& space) {
        swa_.transaction(space, [&] {
            state_.clear(space);
            full_.clear(space);
            swa_.clear(space);
        });
    }
    void check_invariants(const ExecutionSpace& space = ExecutionSpace()) const {
        full_.check_invariants(space);
        swa_.check_invariants(space);
        state_.check_invariants(space);
    }

private:
    static void require(bool ok, const std::string& what) {
        if (!ok)
            throw Error(ErrorCode::invalid_argument, "Mamba + SWA tri-pool: " + what);
    }
    void check_snapshot(const MambaSWASnapshot& snapshot, const char* call) const {
        full_.core().check_snapshot(snapshot.full, call);
        swa_.core().check_snapshot(snapshot.swa, call);
        state_.core().check_snapshot(snapshot.state, call);
    }

    template <class Attempt>
    auto evicting_kv(const char* call, index_t pages, const Attempt& attempt) {
        return eviction_.run(
            call, attempt,
            [&] {
                return detail::kv_pair_shortfall(full_, swa_, pages,
                                                 available_size() / page_size());
            },
            [&] { return live(); });
    }
    template <class Attempt> auto evicting_state(index_t count, const Attempt& attempt) {
        return eviction_.run(
            "alloc_state_slots", attempt,
            [&] { return detail::side_shortfall(state_, count, state_slots_available()); },
            [&] { return live(); });
    }
    index_t live() const {
        return full_.allocated_count() + swa_.allocated_count() + state_.allocated_count();
    }

    // A state-slot allocation: the state side's holes and gap, then the band's
    // shift; short, a lazy full side flushes (widening the gap the band shifts
    // into) and it is tried again.
    template <class Alloc> auto state_ladder(const ExecutionSpace& space, const Alloc& alloc) {
        return swa_.transaction(space, [&] {
            auto slots = alloc();
            if (slots || !full_.core().is_lazy())
                return slots;
            full_.flush(space, true);
            return alloc();
        });
    }

    // Short of the joint bound, every lazy side packs: each compaction opens
    // gap for a neighbour.
    void make_room(const ExecutionSpace& space, index_t pages) {
        if (pages * page_size() <= available_size())
            return;
        for (side_type* side : {&state_, &swa_, &full_})
            if (side->core().is_lazy())
                side->flush(space, true);
    }

    side_type state_;
    side_type swa_;
    side_type full_;
    detail::EvictionLoop eviction_;
    std::vector<index_t> swa_tokens_scratch_; // free()'s sliding-window tokens
};

KVPOOL_EXTERN_LIBRARY_INSTANCES(UnifiedMambaSWAAllocator)

} // namespace kvpool
