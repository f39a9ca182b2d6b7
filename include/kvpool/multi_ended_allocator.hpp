// One sub-allocator over a UnifiedKVPool: stable virtual page ids for the
// engine, physical pages compacted underneath. The host control plane
// (detail::AllocatorCore) decides; this class checks the arguments, keeps the
// sides of the buffer together (peers, neighbours, the follower, one
// transaction over them all) and has its device-table executor
// (detail::TableExecutor) apply each decision to the device tables and the KV
// bytes in batched launches on the caller's execution-space instance. No call
// here fences or copies device data to the host, except check_invariants().
//
// Terms (README, "Names"): a sub-pool is one kind of KV or state stored in the
// buffer (SubPoolSpec; its SubPoolGeometry in the PoolLayout). A side is this
// class over one sub-pool, named by its role beside its peers (the full, swa or
// state side of a composite): a role, not a second type. Its band is the range
// of physical pages it spans now, which grows, compacts and shifts: a region of
// the buffer, not an object. The composites (UnifiedSWAAllocator,
// UnifiedMambaAllocator, UnifiedMambaSWAAllocator: the SWA pair, the Mamba pair
// and the tri-pool in prose) hold two or three sides over one buffer.
#pragma once

#include <kvpool/allocator_occupancy.hpp>
#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/detail/follower_pages.hpp>
#include <kvpool/detail/library_spaces.hpp>
#include <kvpool/detail/state_digest.hpp>
#include <kvpool/detail/table_executor.hpp>
#include <kvpool/error.hpp>
#include <kvpool/kokkos_compat.hpp>
#include <kvpool/storage/unified_kv_pool.hpp>

#include <algorithm>
#include <deque>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvpool {

template <class ExecutionSpace> class MultiEndedAllocator {
public:
    using execution_space = ExecutionSpace;
    using memory_space = typename ExecutionSpace::memory_space;
    using executor_type = detail::TableExecutor<ExecutionSpace>;
    using pool_type = typename executor_type::pool_type;
    using index_view = typename executor_type::index_view;
    using const_index_view = typename executor_type::const_index_view;
    // Page lists handed to a move callback: host-pinned memory the kernels of
    // ExecutionSpace read directly (see detail::Staging).
    using page_list_view = typename executor_type::page_list_view;
    // Moves KV data of whole pages, src[i] -> dst[i] (physical page ids), as one
    // batch on the instance. The default moves the pages' bytes inside the
    // unified buffer; per-layer pools install their own.
    using move_callback = typename executor_type::move_callback;

    MultiEndedAllocator(pool_type& pool, const std::string& side_name,
                        AllocatorOptions options = {})
        : MultiEndedAllocator(ExecutionSpace(), pool, side_name, options) {}

    MultiEndedAllocator(const ExecutionSpace& space, pool_type& pool, const std::string& side_name,
                        AllocatorOptions options = {})
        : pool_(&pool), core_(pool.layout().sub_pool(side_name), pool.total_bytes(), options),
          tables_(space, pool, core_) {}

    MultiEndedAllocator(const MultiEndedAllocator&) = delete;
    MultiEndedAllocator& operator=(const MultiEndedAllocator&) = delete;

    // Two sides of one buffer share the gap between their frontiers. Binding
    // binds both; the symmetric second call (b.bind_peer(a) after
    // a.bind_peer(b), as SGLang pairs its allocators) finds them bound and
    // changes nothing. A side bound to another peer is refused.
    void bind_peer(MultiEndedAllocator& peer) {
        if (peer.pool_ != pool_ || &peer == this)
            throw Error(ErrorCode::invalid_argument,
                        "bind_peer: the peer must be the other side of the same unified buffer");
        if (peer_ == &peer && peer.peer_ == this)
            return;
        if (peer_ != nullptr || peer.peer_ != nullptr)
            throw Error(ErrorCode::invalid_argument,
                        "bind_peer: '" + geometry().spec.name + "' or '" +
                            peer.geometry().spec.name +
                            "' is bound to another peer already; a side can be bound to one "
                            "peer only");
        core_.bind_peer(&peer.core_);
        peer.core_.bind_peer(&core_);
        peer_ = &peer;
        peer.peer_ = this;
        link_neighbour(peer);
        tables_.resize_virtual_table();
        peer.tables_.resize_virtual_table();
    }

    // Bands next to each other in a buffer of more than two (the layout's
    // positions differ by one) share the gap between them; each keeps its
    // own ids. A floating band shifts away when its neighbour falls short.
    void bind_neighbour(MultiEndedAllocator& neighbour) {
        const auto distance = static_cast<long long>(neighbour.geometry().position) -
                              static_cast<long long>(geometry().position);
        if (neighbour.pool_ != pool_ || (distance != 1 && distance != -1))
            throw Error(ErrorCode::invalid_argument,
                        "bind_neighbour: '" + neighbour.geometry().spec.name +
                            "' is not next to '" + geometry().spec.name +
                            "' in the same unified buffer");
        for (const MultiEndedAllocator* n : neighbours_)
            if (n == &neighbour)
                throw Error(ErrorCode::invalid_argument, "bind_neighbour: '" +
                                                             neighbour.geometry().spec.name +
                                                             "' is bound already");
        core_.bind_neighbour(&neighbour.core_);
        neighbour.core_.bind_neighbour(&core_);
        link_neighbour(neighbour);
    }

    // The pair's id-following side (the SWA side): every allocation of this
    // (owning) side binds the same virtual pages there as well, in the same
    // launch, or fails on both sides.
    void bind_follower(MultiEndedAllocator& follower) {
        if (&follower != peer_ || !core_.options().is_id_owner ||
            follower.core_.options().is_id_owner)
            throw Error(
                ErrorCode::invalid_argument,
                "bind_follower: the follower must be the bound peer, and must not own its ids "
                "while this side does");
        follower_ = &follower;
        tables_.set_follower(follower.tables_);
    }

    // Refused on a side that zeroes its handouts: the zeroing reaches the
    // unified buffer only, not KV kept elsewhere.
    void set_move_callback(move_callback callback) {
        if (callback && core_.options().zero_on_alloc)
            throw Error(ErrorCode::invalid_argument,
                        "set_move_callback: side '" + geometry().spec.name +
                            "' zeroes the pages it hands out (zero_on_alloc), in the unified "
                            "buffer; KV kept elsewhere would not be zeroed");
        tables_.set_move_callback(std::move(callback));
    }

    // ---------------------------------------------------------------- sizes
    index_t available_size() const { return core_.available_size(); }
    index_t schedulable_available_size() const { return core_.schedulable_available_size(); }
    index_t allocated_count() const { return core_.allocated_count(); }
    index_t page_size() const { return core_.page_size(); }
    const SubPoolGeometry& geometry() const { return core_.geometry(); }
    const AllocatorCounters& counters() const { return core_.counters(); }
    std::string state_string() const { return core_.state_string(); }
    // A 64-bit digest of the host tables that decide this side's future calls
    // (AllocatorCore::state_digest) and whether it leads a follower: equal on
    // tensor-parallel ranks that made the same calls. Host only, no fence.
    std::uint64_t state_digest() const {
        return detail::combine_digests("side", {core_.state_digest(), follower_ != nullptr});
    }
    bool is_slot_allocated(index_t virtual_token) const {
        return core_.is_slot_allocated(virtual_token);
    }
    const detail::AllocatorCore& core() const { return core_; }
    const AllocatorOptions& options() const { return core_.options(); }
    bool has_peer() const { return peer_ != nullptr; }
    bool is_peer_of(const MultiEndedAllocator& other) const { return peer_ == &other; }
    // Where this side stands, for capacity planners (kvpool-sim's admission check).
    AllocatorOccupancy occupancy() const {
        return {core_.free_virtual_page_count(), core_.hole_pages(), core_.gap_bytes(),
                geometry().page_bytes,           core_.watermark(),  core_.live_pages(),
                core_.pending_reuse_pages()};
    }
    // The id owner's free virtual pages, in the order allocations take them.
    const detail::JournaledRuns<index_t>& free_virtual_pages() const {
        return core_.free_virtual_pages();
    }
    // Virtual pages the last successful allocation bound (the ids a non-owner
    // peer binds next).
    std::vector<index_t> last_allocated_virtual_pages() const {
        return tables_.binding().virtual_pages.to_vector();
    }

    // Device tables, one row per virtual (resp. physical) page; -1 is unbound.
    // A trailing row stays -1, as in the reference, so an engine indexing with
    // a -1 padding id (Python's last row) reads unbound.
    const index_view& virtual_to_physical() const { return tables_.virtual_to_physical(); }
    const index_view& physical_to_virtual() const { return tables_.physical_to_virtual(); }

    // ---------------------------------------------------------------- alloc
    // need_size virtual token ids (a multiple of the page size) into out, or
    // false when there is no room (nothing changed).
    bool alloc(const ExecutionSpace& space, index_t need_size, const index_view& out) {
        check_alloc("alloc", need_size, out);
        return transaction(space, [&] {
            if (!allocate_pages(space, need_size / page_size(), Request::whole_pages))
                return fail_alloc(space);
            emit_allocated_tokens(space, out);
            return true;
        });
    }
    // As above into a new View. The View is made before anything changes, so
    // that its failure changes nothing; a request beyond the side's capacity,
    // which no state grants, gets none and fails in the core like any other
    // shortfall (flushing the peer first, as the reference does).
    std::optional<index_view> alloc(const ExecutionSpace& space, index_t need_size) {
        check_alloc_size("alloc", need_size);
        const bool within_capacity = need_size <= geometry().page_capacity() * page_size();
        const index_view out =
            within_capacity ? kk::uninitialized<index_view>("kvpool::alloc_out",
                                                            static_cast<std::size_t>(need_size))
                            : index_view();
        return transaction(space, [&]() -> std::optional<index_view> {
            if (!allocate_pages(space, need_size / page_size(), Request::whole_pages)) {
                fail_alloc(space);
                return std::nullopt;
            }
            emit_allocated_tokens(space, out);
            return out;
        });
    }
    std::optional<index_view> alloc(index_t need_size) {
        return alloc(ExecutionSpace(), need_size);
    }

    // Non-owner side: bind the peer-minted virtual PAGE ids to physical pages of
    // this side. False when there is no room (nothing changed).
    bool alloc_with_virtual(const ExecutionSpace& space,
                            const std::vector<index_t>& virtual_pages) {
        return transaction(space, [&] {
            if (!core_.bind_virtual_pages(virtual_pages.data(),
                                          static_cast<index_t>(virtual_pages.size()),
                                          tables_.binding()))
                return fail_alloc(space);
            submit_peer(space);
            apply_own_binding(space);
            return true;
        });
    }

    // Prefill: request i grows from prefix_lens[i] to seq_lens[i] tokens; its
    // last prefix token is last_loc(i) (device). Lengths are host arrays (the
    // scheduler's copies). Writes sum(seq - prefix) virtual token ids to out.
    bool alloc_extend(const ExecutionSpace& space, const std::vector<index_t>& prefix_lens,
                      const std::vector<index_t>& seq_lens, const const_index_view& last_loc,
                      const index_view& out) {
        const index_t batch = static_cast<index_t>(seq_lens.size());
        std::vector<index_t> out_start(static_cast<std::size_t>(batch)),
            page_start(out_start.size());
        const index_t pages =
            extend_layout(prefix_lens, seq_lens, last_loc, out, out_start, page_start);
        return transaction(space, [&] {
            if (!allocate_pages(space, pages, Request::per_request))
                return fail_alloc(space);
            submit_peer(space);
            tables_.bind_extend(space, prefix_lens, seq_lens, out_start, page_start, last_loc, out,
                                pages);
            return true;
        });
    }

    // Decode: one new token per request; seq_lens count it already.
    bool alloc_decode(const ExecutionSpace& space, const std::vector<index_t>& seq_lens,
                      const const_index_view& last_loc, const index_view& out) {
        const index_t batch = static_cast<index_t>(seq_lens.size());
        std::vector<index_t> page_start(static_cast<std::size_t>(batch));
        const index_t pages = decode_layout(seq_lens, last_loc, out, page_start);
        return transaction(space, [&] {
            if (!allocate_pages(space, pages, Request::per_request))
                return fail_alloc(space);
            submit_peer(space);
            tables_.bind_decode(space, seq_lens, page_start, last_loc, out, pages);
            return true;
        });
    }

    // ---- the checks of the calls above, for a composite that must decide
    // before the first change (each throws what the call would throw)
    void check_alloc_size(const char* what, index_t need_size) const {
        require_page_multiple(what, need_size);
    }
    void check_alloc(const char* what, index_t need_size, const index_view& out) const {
        require_page_multiple(what, need_size);
        require_length(what, out, need_size);
    }
    // Pages alloc_extend needs for these arguments.
    index_t extend_pages(const std::vector<index_t>& prefix_lens,
                         const std::vector<index_t>& seq_lens, const const_index_view& last_loc,
                         const index_view& out) const {
        std::vector<index_t> out_start(seq_lens.size()), page_start(seq_lens.size());
        return extend_layout(prefix_lens, seq_lens, last_loc, out, out_start, page_start);
    }
    // Pages alloc_decode needs for these arguments.
    index_t decode_pages(const std::vector<index_t>& seq_lens, const const_index_view& last_loc,
                         const index_view& out) const {
        std::vector<index_t> page_start(seq_lens.size());
        return decode_layout(seq_lens, last_loc, out, page_start);
    }

    // ---------------------------------------------------------------- free
    // Frees the pages holding these virtual token ids (host array). Eager mode
    // compacts at once; lazy mode leaves holes for a flush.
    void free(const ExecutionSpace& space, const std::vector<index_t>& virtual_tokens) {
        transaction(space, [&] {
            core_.free_tokens(virtual_tokens.data(), static_cast<index_t>(virtual_tokens.size()));
            tables_.submit(space);
        });
    }
    void free(const std::vector<index_t>& virtual_tokens) {
        free(ExecutionSpace(), virtual_tokens);
    }
    // Like free, but ids already unbound are skipped (SWA tokens that left the window).
    void free_if_bound(const ExecutionSpace& space, const std::vector<index_t>& virtual_tokens) {
        transaction(space, [&] {
            core_.free_tokens(virtual_tokens.data(), static_cast<index_t>(virtual_tokens.size()),
                              true);
            tables_.submit(space);
        });
    }
    // Throws what free (or free_if_bound) of these ids would throw now, changing nothing.
    void check_free(const std::vector<index_t>& virtual_tokens, bool skip_unbound = false) const {
        core_.check_free_tokens(virtual_tokens.data(), static_cast<index_t>(virtual_tokens.size()),
                                skip_unbound);
    }
    void free_group_begin() { core_.free_group_begin(); }
    void free_group_end(const ExecutionSpace& space) {
        transaction(space, [&] {
            core_.free_group_end();
            tables_.submit(space);
        });
    }
    // Throws what free_group_end would throw now, changing nothing.
    void check_free_group_end() const { core_.check_free_group_end(); }

    // ---------------------------------------------------------------- lazy compaction
    index_t flush(const ExecutionSpace& space, bool urgent) {
        return transaction(space, [&] {
            const typename executor_type::EarlyMoves early(tables_, space);
            const index_t moved = core_.flush(urgent);
            tables_.submit(space);
            return moved;
        });
    }
    // Capped, never waits: for quiescent points of the scheduler loop.
    index_t flush_opportunistic(const ExecutionSpace& space) { return flush(space, false); }
    void drain_pending_reuse() { core_.drain_pending_reuse(); }
    void set_latest_forward_done(CompletionTokenPtr token) {
        core_.set_latest_forward_done(std::move(token));
    }
    void set_inflight_forward(CompletionTokenPtr token,
                              const std::vector<index_t>& virtual_tokens) {
        core_.set_inflight_forward(std::move(token), virtual_tokens.data(),
                                   static_cast<index_t>(virtual_tokens.size()));
    }

    // Pages an engine copies out while the pool runs (disaggregated prefill,
    // host offload, a radix cache writing back): until token completes, no
    // compaction moves or overwrites the pages now holding these virtual
    // tokens. A lazy side leaves them where they are (an allocation that needs
    // them returns no allocation); an eager free that touches them makes this
    // instance wait for the token (an event token on a GPU backend) and is
    // refused where it cannot. See AllocatorCore::gate_transfer.
    void gate_transfer(CompletionTokenPtr token, const std::vector<index_t>& virtual_tokens) {
        core_.gate_transfer(std::move(token), virtual_tokens.data(),
                            static_cast<index_t>(virtual_tokens.size()));
    }
    // As gate_transfer, for the ids still bound here (a pair's SWA side).
    void gate_transfer_if_bound(CompletionTokenPtr token,
                                const std::vector<index_t>& virtual_tokens) {
        core_.gate_transfer(std::move(token), virtual_tokens.data(),
                            static_cast<index_t>(virtual_tokens.size()), true);
    }

    // ---------------------------------------------------------------- translate
    // Virtual token ids -> physical token ids into a caller-owned View of the
    // same length (may be in itself; int32 Views for the SWA read path): no
    // allocation, safe under graph capture.
    template <class OutView>
    void translate(const ExecutionSpace& space, const const_index_view& virtual_tokens,
                   const OutView& out) const {
        require_length("translate: out", out, static_cast<index_t>(virtual_tokens.extent(0)));
        tables_.translate(space, virtual_tokens, out);
    }
    index_view translate(const ExecutionSpace& space,
                         const const_index_view& virtual_tokens) const {
        index_view out =
            kk::uninitialized<index_view>("kvpool::translate_out", virtual_tokens.extent(0));
        translate(space, virtual_tokens, out);
        return out;
    }
    // Virtual token ids -> dense ids, for a side whose pages are read through
    // per-layer dense views (MLA: page p's rows of every layer form one run of
    // page_size * layers rows, so one block table serves every layer): physical
    // page * page_size * kernel_page_multiplier + offset. Tombstones and -1
    // clamp to 0, as translate does; kernel_page_multiplier 1 is translate.
    template <class OutView>
    void translate_dense(const ExecutionSpace& space, const const_index_view& virtual_tokens,
                         const OutView& out, index_t kernel_page_multiplier) const {
        require_length("translate_dense: out", out, static_cast<index_t>(virtual_tokens.extent(0)));
        if (kernel_page_multiplier < 1)
            throw Error(ErrorCode::invalid_argument,
                        "translate_dense: kernel_page_multiplier must be >= 1, got " +
                            std::to_string(kernel_page_multiplier));
        tables_.translate(space, virtual_tokens, out, kernel_page_multiplier);
    }

    // ---------------------------------------------------------------- state
    AllocatorSnapshot backup_state() { return core_.backup_state(); }
    // Whether a backup_state() window is open (nothing may take ids from under a restore).
    bool backup_window_open() const { return core_.backup_window_open(); }
    void restore_state(const ExecutionSpace& space, const AllocatorSnapshot& snapshot) {
        transaction(space, [&] {
            core_.restore_state(snapshot);
            tables_.submit(space);
        });
    }
    // Keeps the allocations since the snapshot and closes the window it opened.
    void commit_state(const AllocatorSnapshot& snapshot) { core_.commit_state(snapshot); }
    void clear(const ExecutionSpace& space) {
        transaction(space, [&] {
            core_.clear();
            tables_.submit(space);
        });
    }

    // ---------------------------------------------------------------- device failures
    // Runs body as one transaction over this side and its neighbours. When
    // anything in it throws (a device failure after the host decided, most of
    // all), every side's host state goes back to where it was and the device table
    // rows it changed are rewritten from the host, so the error leaves the
    // sides as they were. One exception: a side whose eager compaction ran on
    // the device keeps it (the freed pages' bytes are overwritten), which is
    // why composites compact that side last but one (see the SWA pair's free).
    // A call inside another joins it. For composites of both sides.
    template <class Body> auto transaction(const ExecutionSpace& space, const Body& body) {
        if (core_.transaction_open())
            return body();
        for_each_side([](MultiEndedAllocator& s) { s.core_.open_transaction(); });
        try {
            if constexpr (std::is_void_v<decltype(body())>) {
                body();
                for_each_side([](MultiEndedAllocator& s) { s.core_.close_transaction(); });
            } else {
                auto result = body();
                for_each_side([](MultiEndedAllocator& s) { s.core_.close_transaction(); });
                return result;
            }
        } catch (...) {
            roll_back(space);
            throw;
        }
    }

    // Host invariants, then the device tables against the host mirror. Fences.
    void check_invariants(const ExecutionSpace& space) const {
        core_.check_invariants();
        tables_.check_tables(space);
    }
    void check_invariants() const { check_invariants(ExecutionSpace()); }

private:
    template <class View>
    static void require_length(const char* what, const View& view, index_t length) {
        if (static_cast<index_t>(view.extent(0)) != length)
            throw Error(ErrorCode::invalid_argument, std::string(what) + ": expected length " +
                                                         std::to_string(length) + ", got " +
                                                         std::to_string(view.extent(0)));
    }
    void require_page_multiple(const char* what, index_t size) const {
        if (size < 0 || size % page_size() != 0)
            throw Error(ErrorCode::misaligned,
                        std::string(what) + " of " + std::to_string(size) +
                            " tokens, which is not a non-negative multiple of "
                            "page_size " +
                            std::to_string(page_size()) + ". " + state_string());
    }

    // This side first, then every band bound to it, directly or through
    // another (a call here may flush or shift a neighbour, whose own call may
    // reach the next one): worked out at each binding.
    void link_neighbour(MultiEndedAllocator& neighbour) {
        neighbours_.push_back(&neighbour);
        neighbour.neighbours_.push_back(this);
        update_sides_of_buffer();
    }
    void update_sides_of_buffer() {
        std::vector<MultiEndedAllocator*> sides{this};
        for (std::size_t i = 0; i < sides.size(); ++i)
            for (MultiEndedAllocator* n : sides[i]->neighbours_)
                if (std::find(sides.begin(), sides.end(), n) == sides.end())
                    sides.push_back(n);
        for (MultiEndedAllocator* side : sides) {
            side->sides_of_buffer_ = sides;
            std::stable_partition(side->sides_of_buffer_.begin(), side->sides_of_buffer_.end(),
                                  [side](MultiEndedAllocator* s) { return s == side; });
        }
    }
    template <class F> void for_each_side(const F& f) {
        for (MultiEndedAllocator* side : sides_of_buffer_)
            f(*side);
    }

    // Undoes an open transaction on both sides (see transaction()). Called
    // while its exception propagates: a failure to restore the device tables
    // is reported with it, and the sides must then be cleared.
    void roll_back(const ExecutionSpace& space) {
        std::vector<std::pair<MultiEndedAllocator*, detail::AllocatorCore::ChangedRows>> changed;
        for_each_side([&](MultiEndedAllocator& s) {
            changed.emplace_back(&s, s.core_.changed_rows());
            s.core_.rollback_transaction();
        });
        try {
            for (const auto& [side, rows] : changed)
                side->tables_.restore_rows(space, rows);
        } catch (const Error& e) {
            throw Error(ErrorCode::device,
                        std::string("kvpool: undoing a call after a failure: restoring the device "
                                    "tables failed: ") +
                            e.what() + "; the allocator must be cleared");
        }
    }

    // out(t) = the t-th token of the pages just bound, binding them on the device.
    void emit_allocated_tokens(const ExecutionSpace& space, const index_view& out) {
        submit_peer(space);
        tables_.emit_allocated_tokens(space, out);
    }

    // The pages this side's core just bound (no follower of its own), on the
    // device; the other bands' plans are submitted already.
    void apply_own_binding(const ExecutionSpace& space) {
        if (core_.options().zero_on_alloc)
            // The alloc-bind launch binds and zeroes; it emits no token ids here.
            emit_allocated_tokens(space, index_view());
        else
            tables_.apply_binding(space);
    }

    // Where request arrays start: out_start[r] in out, page_start[r] among the
    // new pages. Returns the pages needed; malformed input throws first.
    index_t extend_layout(const std::vector<index_t>& prefix_lens,
                          const std::vector<index_t>& seq_lens, const const_index_view& last_loc,
                          const index_view& out, std::vector<index_t>& out_start,
                          std::vector<index_t>& page_start) const {
        const index_t batch = static_cast<index_t>(seq_lens.size());
        if (static_cast<index_t>(prefix_lens.size()) != batch)
            throw Error(ErrorCode::invalid_argument,
                        "alloc_extend: prefix_lens and seq_lens differ in length");
        require_length("alloc_extend: last_loc", last_loc, batch);
        index_t tokens = 0, pages = 0;
        for (index_t r = 0; r < batch; ++r) {
            if (prefix_lens[r] < 0 || seq_lens[r] < prefix_lens[r])
                throw Error(ErrorCode::invalid_argument,
                            "alloc_extend: request " + std::to_string(r) + " has prefix_len " +
                                std::to_string(prefix_lens[r]) + " and seq_len " +
                                std::to_string(seq_lens[r]));
            out_start[r] = tokens;
            page_start[r] = pages;
            tokens += seq_lens[r] - prefix_lens[r];
            pages += detail::pages_needed_for_extend(&prefix_lens[r], &seq_lens[r], 1, page_size());
        }
        require_length("alloc_extend: out", out, tokens);
        return pages;
    }
    index_t decode_layout(const std::vector<index_t>& seq_lens, const const_index_view& last_loc,
                          const index_view& out, std::vector<index_t>& page_start) const {
        const index_t batch = static_cast<index_t>(seq_lens.size());
        require_length("alloc_decode: last_loc", last_loc, batch);
        require_length("alloc_decode: out", out, batch);
        const index_t page_tokens = page_size();
        index_t pages = 0;
        for (index_t r = 0; r < batch; ++r) {
            if (seq_lens[r] < 1)
                throw Error(ErrorCode::invalid_argument,
                            "alloc_decode: request " + std::to_string(r) + " has seq_len " +
                                std::to_string(seq_lens[r]) + " (must count the new token)");
            page_start[r] = pages;
            pages += detail::decode_opens_page(seq_lens[r], page_tokens) ? 1 : 0;
        }
        return pages;
    }

    // alloc takes whole pages; alloc_extend and alloc_decode serve requests,
    // and (as the reference's) fail at once when the free ids run short.
    enum class Request { whole_pages, per_request };

    // num_pages new pages on this side and, with a follower, the same virtual
    // pages bound there: both or neither (the follower may lack room).
    bool allocate_pages(const ExecutionSpace& space, index_t num_pages, Request request) {
        detail::PageBinding& binding = tables_.binding();
        const bool allocated = request == Request::whole_pages
                                   ? core_.alloc_pages(num_pages, binding)
                                   : core_.alloc_request_pages(num_pages, binding);
        if (!allocated)
            return false;
        if (!follower_)
            return true;
        const auto undo = [&] {
            core_.undo_allocation(binding);
            tables_.submit(space);
        };
        // The follower's lack of room may flush this side; the pages just
        // taken must stay where they are until the follower has answered.
        core_.hold_relocations(true);
        bool ok = false;
        try {
            const detail::PageRunList& pages = detail::follower_pages(
                binding.virtual_pages, page_size() / follower_->page_size(), follower_scratch_);
            ok = follower_->core_.bind_virtual_pages(pages, follower_->tables_.binding());
            // A follower of smaller pages binds in a launch of its own, the
            // other bands' plans first (as alloc_with_virtual).
            if (ok && !tables_.fused_follower()) {
                submit_peer(space);
                follower_->apply_own_binding(space);
            }
        } catch (...) {
            core_.hold_relocations(false);
            undo();
            throw;
        }
        core_.hold_relocations(false);
        if (!ok)
            undo();
        return ok;
    }

    // A failed allocation may still have compacted the peer.
    bool fail_alloc(const ExecutionSpace& space) {
        submit_peer(space);
        return false;
    }

    // The other bands' plans (a flush, a shift) before this side's own.
    void submit_peer(const ExecutionSpace& space) {
        for (std::size_t i = 1; i < sides_of_buffer_.size(); ++i)
            sides_of_buffer_[i]->tables_.submit(space);
    }

    pool_type* pool_;
    detail::AllocatorCore core_;
    executor_type tables_; // after core_, which it serves
    MultiEndedAllocator* peer_ = nullptr;
    std::vector<MultiEndedAllocator*> neighbours_;            // the peer, or up to two neighbours
    std::vector<MultiEndedAllocator*> sides_of_buffer_{this}; // this side first
    MultiEndedAllocator* follower_ = nullptr;
    detail::PageRunList follower_scratch_; // the follower's pages of one allocation
};

KVPOOL_EXTERN_LIBRARY_INSTANCES(MultiEndedAllocator)

} // namespace kvpool
