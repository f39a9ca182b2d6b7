// The request table of a hybrid (attention + Mamba) model, SGLang's
// HybridReqToTokenPool: the token rows of ReqToTokenPool plus, per request
// slot, the Mamba state slot that holds its recurrent state and, with the
// extra buffer, its ping-pong track slots (where the scheduler checkpoints the
// state at track boundaries for the prefix cache). State slots come from a
// StateSlotAllocator; the pool keeps which slots each request holds on the
// host (the reference keeps them on the Req object) and mirrors them into
// device tables with kernels on the caller's instance.
#pragma once

#include <kvpool/detail/library_spaces.hpp>
#include <kvpool/kernels/portable/state_tables.hpp>
#include <kvpool/requests/req_to_token_pool.hpp>
#include <kvpool/requests/state_slot_allocator.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace kvpool {

struct HybridReqToTokenPoolOptions {
    // Ping-pong track slots per request (SGLang's enable_mamba_extra_buffer).
    bool enable_mamba_extra_buffer = false;
    // A request starts with one track slot; the other is allocated at a track
    // boundary (alloc_mamba_ping_pong_slot), and the tracked state stays at
    // next_track_idx instead of being swapped to the other index.
    bool enable_mamba_extra_buffer_lazy = false;
    // 2 with the overlap scheduler, 1 without.
    index_t mamba_ping_pong_track_buffer_size = 2;
};

template <class ExecutionSpace>
class HybridReqToTokenPool : private ReqToTokenPool<ExecutionSpace> {
    using Base = ReqToTokenPool<ExecutionSpace>;

public:
    using typename Base::const_index_view;
    using typename Base::execution_space;
    using typename Base::index_view;
    using typename Base::memory_space;
    using typename Base::table_view;
    using state_allocator = StateSlotAllocator<ExecutionSpace>;
    // (size + 1) x mamba_ping_pong_track_buffer_size, row-major.
    using track_view = Kokkos::View<index_t**, Kokkos::LayoutRight, memory_space>;

    // The token table as in ReqToTokenPool; free/alloc/clear are this class's own.
    using Base::available_size;
    using Base::generation;
    using Base::host_row;
    using Base::is_allocated;
    using Base::max_context_len;
    using Base::req_to_token;
    using Base::row_length;
    using Base::size;
    using Base::state_string;
    using Base::write;

    HybridReqToTokenPool(index_t size, index_t max_context_len, state_allocator& states,
                         HybridReqToTokenPoolOptions options = {})
        : HybridReqToTokenPool(ExecutionSpace(), size, max_context_len, states, options) {}

    // states must outlive the pool.
    HybridReqToTokenPool(const ExecutionSpace& space, index_t size, index_t max_context_len,
                         state_allocator& states, HybridReqToTokenPoolOptions options = {})
        : Base(space, size, max_context_len), states_(&states), options_(require_valid(options)),
          track_columns_(
              options.enable_mamba_extra_buffer ? options.mamba_ping_pong_track_buffer_size : 0),
          mamba_map_(kk::uninitialized<index_view>("kvpool::req_index_to_mamba_index", rows())),
          track_map_(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                        "kvpool::req_index_to_mamba_ping_pong_track_buffer"),
                     rows(), static_cast<std::size_t>(track_columns_)) {
        reset_host_state();
        zero_device_maps(space);
    }

    // ---------------------------------------------------------------- device tables
    // Request slot -> Mamba state slot. Rows of requests without state are stale.
    const index_view& req_index_to_mamba_index() const { return mamba_map_; }
    // Request slot -> its track slots (unbound: not allocated yet, lazy mode).
    // Zero columns without the extra buffer.
    const track_view& req_index_to_mamba_ping_pong_track_buffer() const { return track_map_; }

    // out(i) = the Mamba state slot of request req_indices(i), in one launch.
    void get_mamba_indices(const ExecutionSpace& space, const const_index_view& req_indices,
                           const index_view& out) const {
        if (out.extent(0) != req_indices.extent(0))
            throw Error(ErrorCode::invalid_argument,
                        "get_mamba_indices: out has length " + std::to_string(out.extent(0)) +
                            ", expected " + std::to_string(req_indices.extent(0)));
        kernels::portable::gather_state_slots(space, mamba_map_, req_indices, out);
    }

    // ---------------------------------------------------------------- alloc / free
    // n request slots, each with a fresh Mamba state slot and (extra buffer)
    // its track slots: all of them in lazy mode's first, or normal mode's whole,
    // ping-pong buffer. nullopt when either kind runs short (nothing changed).
    std::optional<std::vector<index_t>> alloc(const ExecutionSpace& space, index_t n) {
        if (n < 0)
            throw Error(ErrorCode::invalid_argument,
                        "alloc of " + std::to_string(n) + " request slots. " + state_string());
        return alloc_requests(space, std::vector<index_t>(static_cast<std::size_t>(n), unbound));
    }
    std::optional<std::vector<index_t>> alloc(index_t n) { return alloc(ExecutionSpace(), n); }

    // One request per entry of mamba_slots. An entry >= 0 is a state slot the
    // caller already holds (e.g. a prefix-cache hit copied into it) and becomes
    // that request's Mamba slot; unbound allocates a fresh one. Track slots are
    // always fresh. nullopt when something runs short (nothing changed).
    std::optional<std::vector<index_t>>
    alloc_adopting_mamba(const ExecutionSpace& space, const std::vector<index_t>& mamba_slots) {
        std::unordered_set<index_t> named;
        for (const index_t m : mamba_slots) {
            if (m == unbound)
                continue;
            if (m < 0)
                throw Error(ErrorCode::invalid_argument, "alloc_adopting_mamba: state slot " +
                                                             std::to_string(m) +
                                                             " is neither a slot nor unbound");
            require_not_held("alloc_adopting_mamba", m);
            if (!named.insert(m).second)
                throw Error(ErrorCode::invalid_argument, "alloc_adopting_mamba: state slot " +
                                                             std::to_string(m) + " is named twice");
        }
        return alloc_requests(space, mamba_slots);
    }

    // Frees request slots. Each must have released its state first
    // (free_mamba_cache), as the engine does before freeing a finished request:
    // otherwise the state slots would leak. Errors change nothing.
    void free(index_t slot) { free(std::vector<index_t>{slot}); }
    void free(const std::vector<index_t>& slots) {
        for (const index_t s : slots) {
            this->slots_.require_allocated("free", s);
            if (holds_state(s))
                throw Error(ErrorCode::invalid_state,
                            "free: request slot " + std::to_string(s) +
                                " still holds Mamba state slot " +
                                std::to_string(mamba_[static_cast<std::size_t>(s)]) +
                                "; call free_mamba_cache first");
        }
        Base::free(slots);
    }

    // Releases the request's Mamba slot and its track slots, except the one at
    // keep_idx (0 or 1; 0 with a buffer of one), which passes to the caller
    // (for the prefix cache) and is returned; unbound when nothing is kept (or
    // the kept entry was empty, lazy mode). The request slot itself stays
    // allocated. A request without state (double free) throws not_allocated.
    index_t free_mamba_cache(const ExecutionSpace& space, index_t req,
                             std::optional<index_t> keep_idx = std::nullopt) {
        require_state("free_mamba_cache", req);
        if (keep_idx)
            require_track_index("free_mamba_cache", *keep_idx);
        std::vector<index_t> to_free{mamba_[static_cast<std::size_t>(req)]};
        index_t kept = unbound;
        for (index_t j = 0; j < track_columns_; ++j) {
            const index_t slot = track(req, j);
            if (keep_idx && *keep_idx == j)
                kept = slot;
            else if (slot != unbound)
                to_free.push_back(slot);
        }
        states_->free(space, to_free);
        for (const index_t s : to_free)
            held_.erase(s);
        if (kept != unbound)
            held_.erase(kept);
        release_host_state(req);
        return kept;
    }
    index_t free_mamba_cache(index_t req, std::optional<index_t> keep_idx = std::nullopt) {
        return free_mamba_cache(ExecutionSpace(), req, keep_idx);
    }

    // Every request slot free, the state allocator cleared, the device maps zeroed.
    // Every request slot and the state slots they hold free again, both device
    // maps zeroed. The device work (the state allocator's clear, the maps'
    // one-launch zeroing) runs first, atomically: a device failure there
    // changes nothing, and only then does the host forget the requests.
    void clear(const ExecutionSpace& space) {
        states_->atomically(space, [&] {
            states_->clear(space);
            zero_device_maps(space);
        });
        Base::clear();
        reset_host_state();
    }
    void clear() { clear(ExecutionSpace()); }

    // ---------------------------------------------------------------- host state
    const HybridReqToTokenPoolOptions& options() const { return options_; }
    // The request's Mamba state slot; unbound after free_mamba_cache.
    index_t mamba_slot(index_t req) const {
        this->slots_.require_allocated("mamba_slot", req);
        return mamba_[static_cast<std::size_t>(req)];
    }
    // The request's track slots, mamba_ping_pong_track_buffer_size of them
    // (unbound: empty).
    std::vector<index_t> mamba_ping_pong_track_buffer(index_t req) const {
        require_extra_buffer("mamba_ping_pong_track_buffer");
        this->slots_.require_allocated("mamba_ping_pong_track_buffer", req);
        const auto first = track_.begin() + static_cast<std::ptrdiff_t>(req * track_columns_);
        return std::vector<index_t>(first, first + static_cast<std::ptrdiff_t>(track_columns_));
    }

    // ---------------------------------------------------------------- ping-pong tracking
    index_t mamba_ping_pong_track_buffer_size() const {
        return options_.mamba_ping_pong_track_buffer_size;
    }

    // The index the scheduler tracks into next; 0 after alloc.
    index_t mamba_next_track_idx(index_t req) const {
        require_tracking("mamba_next_track_idx", req);
        return next_track_[static_cast<std::size_t>(req)];
    }
    void set_mamba_next_track_idx(index_t req, index_t idx) {
        require_tracking("set_mamba_next_track_idx", req);
        require_track_index("set_mamba_next_track_idx", idx);
        next_track_[static_cast<std::size_t>(req)] = idx;
    }

    // The other half of the ping-pong pair (itself with a buffer of one).
    index_t get_mamba_ping_pong_other_idx(index_t mamba_next_track_idx) const {
        require_track_index("get_mamba_ping_pong_other_idx", mamba_next_track_idx);
        return mamba_ping_pong_track_buffer_size() == 2 ? 1 - mamba_next_track_idx
                                                        : mamba_next_track_idx;
    }

    // The index holding the most recent tracked state: next_track_idx in lazy
    // mode (no eager swap), the other index in normal mode (swapped after each track).
    index_t get_mamba_ping_pong_keep_idx(index_t req) const {
        const index_t next = mamba_next_track_idx(req);
        return options_.enable_mamba_extra_buffer_lazy ? next : get_mamba_ping_pong_other_idx(next);
    }

    // Puts value (a state slot the caller holds, or unbound in lazy mode) at
    // track index idx and returns the slot that was there, which passes to the
    // caller (unbound if the entry was empty or already held value).
    [[nodiscard]] index_t set_mamba_ping_pong_slot(const ExecutionSpace& space, index_t req,
                                                   index_t idx, index_t value) {
        require_tracking("set_mamba_ping_pong_slot", req);
        require_track_index("set_mamba_ping_pong_slot", idx);
        const index_t old = track(req, idx);
        if (value == old)
            return unbound;
        if (value == unbound) {
            if (!options_.enable_mamba_extra_buffer_lazy)
                throw Error(ErrorCode::invalid_argument,
                            "set_mamba_ping_pong_slot: only lazy mode leaves track entries empty");
        } else {
            require_state_slot("set_mamba_ping_pong_slot", value);
        }
        put_track(space, req, idx, value);
        return old;
    }

    // Hands the slot holding the most recent tracked state (keep index) to the
    // caller, for the prefix cache, and puts new_slot (a state slot the caller
    // holds) in its place so the request keeps tracking. Returns the donated slot.
    index_t donate_mamba_ping_pong_slot(const ExecutionSpace& space, index_t req,
                                        index_t new_slot) {
        const index_t idx = get_mamba_ping_pong_keep_idx(req);
        const index_t donated = track(req, idx);
        if (donated == unbound)
            throw Error(ErrorCode::invalid_state,
                        "donate_mamba_ping_pong_slot: track index " + std::to_string(idx) +
                            " of request slot " + std::to_string(req) +
                            " is empty (next_track_idx " +
                            std::to_string(mamba_next_track_idx(req)) + ")");
        require_state_slot("donate_mamba_ping_pong_slot", new_slot);
        put_track(space, req, idx, new_slot);
        return donated;
    }

    // Lazy mode: fills the empty track entry idx with a fresh state slot at a
    // track boundary. False when there is none (nothing changed).
    bool alloc_mamba_ping_pong_slot(const ExecutionSpace& space, index_t req, index_t idx) {
        require_tracking("alloc_mamba_ping_pong_slot", req);
        require_track_index("alloc_mamba_ping_pong_slot", idx);
        if (track(req, idx) != unbound)
            throw Error(ErrorCode::invalid_state, "alloc_mamba_ping_pong_slot: track index " +
                                                      std::to_string(idx) + " of request slot " +
                                                      std::to_string(req) + " holds slot " +
                                                      std::to_string(track(req, idx)));
        bool got = false;
        states_->atomically(space, [&] {
            auto slot = states_->alloc(space, 1);
            if (!slot)
                return;
            require_fresh(*slot, 1);
            put_track(space, req, idx, slot->front());
            got = true;
        });
        return got;
    }

    // ---------------------------------------------------------------- checks
    // Host bookkeeping, then the device maps against it, then the token rows. Fences.
    void check_invariants(const ExecutionSpace& space) const {
        std::unordered_set<index_t> seen;
        const auto claim = [&](index_t req, index_t slot) {
            if (slot == unbound)
                return;
            if (!seen.insert(slot).second || held_.count(slot) == 0)
                throw Error(ErrorCode::internal, "state slot " + std::to_string(slot) +
                                                     " of request slot " + std::to_string(req) +
                                                     " is held twice or not recorded");
        };
        for (index_t r = 0; r < static_cast<index_t>(rows()); ++r) {
            if (!holds_state(r))
                continue;
            if (!is_allocated(r) || mamba_[static_cast<std::size_t>(r)] == unbound)
                throw Error(ErrorCode::internal,
                            "request slot " + std::to_string(r) +
                                " holds track slots without being allocated with state");
            claim(r, mamba_[static_cast<std::size_t>(r)]);
            for (index_t j = 0; j < track_columns_; ++j) {
                if (track(r, j) == unbound && !options_.enable_mamba_extra_buffer_lazy)
                    throw Error(ErrorCode::internal,
                                "request slot " + std::to_string(r) + " has an empty track entry");
                claim(r, track(r, j));
            }
        }
        if (seen.size() != held_.size())
            throw Error(ErrorCode::internal, std::to_string(held_.size()) +
                                                 " state slots recorded as held, " +
                                                 std::to_string(seen.size()) + " held by requests");
        space.fence();
        auto map = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), mamba_map_);
        auto tracks = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), track_map_);
        for (index_t r = 0; r < static_cast<index_t>(rows()); ++r) {
            if (!holds_state(r))
                continue;
            if (map(r) != mamba_[static_cast<std::size_t>(r)])
                throw Error(ErrorCode::internal,
                            "req_index_to_mamba_index(" + std::to_string(r) +
                                ") = " + std::to_string(map(r)) + ", host " +
                                std::to_string(mamba_[static_cast<std::size_t>(r)]));
            for (index_t j = 0; j < track_columns_; ++j)
                if (tracks(r, j) != track(r, j))
                    throw Error(ErrorCode::internal, "req_index_to_mamba_ping_pong_track_buffer(" +
                                                         std::to_string(r) + ", " +
                                                         std::to_string(j) +
                                                         ") = " + std::to_string(tracks(r, j)) +
                                                         ", host " + std::to_string(track(r, j)));
        }
        Base::check_invariants(space);
    }
    void check_invariants() const { check_invariants(ExecutionSpace()); }

private:
    static const HybridReqToTokenPoolOptions&
    require_valid(const HybridReqToTokenPoolOptions& options) {
        const index_t size = options.mamba_ping_pong_track_buffer_size;
        if (size != 1 && size != 2)
            throw Error(ErrorCode::invalid_argument,
                        "mamba_ping_pong_track_buffer_size must be 1 or 2, got " +
                            std::to_string(size));
        if (options.enable_mamba_extra_buffer_lazy && !options.enable_mamba_extra_buffer)
            throw Error(ErrorCode::invalid_argument,
                        "enable_mamba_extra_buffer_lazy needs enable_mamba_extra_buffer");
        return options;
    }

    std::size_t rows() const { return static_cast<std::size_t>(size()) + 1; }
    index_t& track(index_t req, index_t j) {
        return track_[static_cast<std::size_t>(req * track_columns_ + j)];
    }
    index_t track(index_t req, index_t j) const {
        return track_[static_cast<std::size_t>(req * track_columns_ + j)];
    }

    // Any state slot at all: a Mamba slot, or (only as an internal error) a track slot.
    bool holds_state(index_t req) const {
        if (mamba_[static_cast<std::size_t>(req)] != unbound)
            return true;
        for (index_t j = 0; j < track_columns_; ++j)
            if (track(req, j) != unbound)
                return true;
        return false;
    }

    void require_extra_buffer(const char* what) const {
        if (!options_.enable_mamba_extra_buffer)
            throw Error(ErrorCode::invalid_state,
                        std::string(what) + ": the Mamba extra buffer is disabled");
    }
    void require_track_index(const char* what, index_t idx) const {
        require_extra_buffer(what);
        if (idx < 0 || idx >= track_columns_)
            throw Error(ErrorCode::out_of_range, std::string(what) + ": track index " +
                                                     std::to_string(idx) + " is outside 0.." +
                                                     std::to_string(track_columns_ - 1));
    }
    void require_state(const char* what, index_t req) const {
        this->slots_.require_allocated(what, req);
        if (mamba_[static_cast<std::size_t>(req)] == unbound)
            throw Error(ErrorCode::not_allocated, std::string(what) + ": request slot " +
                                                      std::to_string(req) +
                                                      " holds no Mamba state (double free?)");
    }
    void require_tracking(const char* what, index_t req) const {
        require_extra_buffer(what);
        require_state(what, req);
    }
    void require_not_held(const char* what, index_t slot) const {
        if (held_.count(slot) != 0)
            throw Error(ErrorCode::invalid_argument,
                        std::string(what) + ": state slot " + std::to_string(slot) +
                            " is already held by a request of this pool");
    }
    void require_state_slot(const char* what, index_t slot) const {
        if (slot < 0)
            throw Error(ErrorCode::invalid_argument,
                        std::string(what) + ": " + std::to_string(slot) + " is not a state slot");
        require_not_held(what, slot);
    }
    // The allocator must return n slots no request holds.
    void require_fresh(const std::vector<index_t>& slots, index_t n) const {
        std::unordered_set<index_t> distinct(slots.begin(), slots.end());
        bool ok = static_cast<index_t>(slots.size()) == n && distinct.size() == slots.size();
        for (const index_t s : slots)
            ok = ok && s >= 0 && held_.count(s) == 0;
        if (!ok)
            throw Error(ErrorCode::internal, "the state slot allocator returned " +
                                                 std::to_string(slots.size()) + " slots for " +
                                                 std::to_string(n) +
                                                 ", some negative, repeated or already held");
    }

    // mamba_slots[i]: adopted slot, or unbound for a fresh one. The device
    // maps are written before the host learns of the requests, inside the
    // state allocator's atomically(): a device failure takes the state slots
    // and the request slots back and leaves the pool as it was.
    std::optional<std::vector<index_t>> alloc_requests(const ExecutionSpace& space,
                                                       const std::vector<index_t>& mamba_slots) {
        const index_t n = static_cast<index_t>(mamba_slots.size());
        if (n > available_size())
            return std::nullopt;
        const index_t first_tracks = options_.enable_mamba_extra_buffer_lazy ? 1 : track_columns_;
        const index_t need =
            static_cast<index_t>(std::count(mamba_slots.begin(), mamba_slots.end(), unbound)) +
            n * first_tracks;
        std::optional<std::vector<index_t>> result;
        states_->atomically(space, [&] {
            std::vector<index_t> fresh;
            if (need > 0) {
                auto got = states_->alloc(space, need);
                if (!got)
                    return;
                require_fresh(*got, need);
                fresh = std::move(*got);
            }
            std::vector<index_t> reqs = *Base::alloc(n);
            // Fresh slots in the reference's order: each request's Mamba slot, then its tracks.
            std::vector<index_t> tracks(static_cast<std::size_t>(n * track_columns_), unbound);
            std::vector<index_t> mamba(mamba_slots);
            std::size_t next = 0;
            for (index_t i = 0; i < n; ++i) {
                index_t& m = mamba[static_cast<std::size_t>(i)];
                if (m == unbound)
                    m = fresh[next++];
                for (index_t j = 0; j < first_tracks; ++j)
                    tracks[static_cast<std::size_t>(i * track_columns_ + j)] = fresh[next++];
            }
            try {
                write_state_mapping(space, reqs, mamba, tracks);
            } catch (...) {
                this->slots_.undo_alloc(reqs);
                throw;
            }
            for (index_t i = 0; i < n; ++i) {
                const index_t r = reqs[static_cast<std::size_t>(i)];
                mamba_[static_cast<std::size_t>(r)] = mamba[static_cast<std::size_t>(i)];
                held_.insert(mamba[static_cast<std::size_t>(i)]);
                for (index_t j = 0; j < track_columns_; ++j) {
                    track(r, j) = tracks[static_cast<std::size_t>(i * track_columns_ + j)];
                    if (track(r, j) != unbound)
                        held_.insert(track(r, j));
                }
                next_track_[static_cast<std::size_t>(r)] = 0;
            }
            result = std::move(reqs);
        });
        return result;
    }

    void write_state_mapping(const ExecutionSpace& space, const std::vector<index_t>& reqs,
                             const std::vector<index_t>& mamba,
                             const std::vector<index_t>& tracks) {
        if (reqs.empty())
            return;
        auto& staging = this->staging_;
        const std::size_t at_reqs = staging.add(reqs);
        const std::size_t at_mamba = staging.add(mamba);
        const std::size_t at_tracks = staging.add(tracks);
        staging.upload(space);
        kernels::portable::set_state_mapping(
            space, mamba_map_, track_map_, staging.slice(at_reqs, reqs.size()),
            staging.slice(at_mamba, mamba.size()), staging.slice(at_tracks, tracks.size()));
    }

    // The device entry first: a failed write leaves the host as it was.
    void put_track(const ExecutionSpace& space, index_t req, index_t idx, index_t value) {
        kernels::launch_fault_point<ExecutionSpace>("kvpool::put_track");
        Kokkos::deep_copy(space, Kokkos::subview(track_map_, req, idx), value);
        index_t& entry = track(req, idx);
        if (entry != unbound)
            held_.erase(entry);
        if (value != unbound)
            held_.insert(value);
        entry = value;
    }

    void release_host_state(index_t req) {
        mamba_[static_cast<std::size_t>(req)] = unbound;
        for (index_t j = 0; j < track_columns_; ++j)
            track(req, j) = unbound;
        next_track_[static_cast<std::size_t>(req)] = 0;
    }

    void reset_host_state() {
        mamba_.assign(rows(), unbound);
        track_.assign(rows() * static_cast<std::size_t>(track_columns_), unbound);
        next_track_.assign(rows(), 0);
        held_.clear();
    }

    void zero_device_maps(const ExecutionSpace& space) {
        kernels::portable::clear_state_maps(space, mamba_map_, track_map_);
    }

    state_allocator* states_;
    HybridReqToTokenPoolOptions options_;
    index_t track_columns_; // 0 without the extra buffer
    index_view mamba_map_;
    track_view track_map_;
    // Host authority, per request slot: Mamba slot, track slots (row-major), next track index.
    std::vector<index_t> mamba_;
    std::vector<index_t> track_;
    std::vector<index_t> next_track_;
    // Every state slot some request holds, to refuse adopting or donating one twice.
    std::unordered_set<index_t> held_;
};

KVPOOL_EXTERN_LIBRARY_INSTANCES(HybridReqToTokenPool)

} // namespace kvpool
