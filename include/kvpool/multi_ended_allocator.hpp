// One sub-allocator over a UnifiedKVPool: stable virtual page ids for the
// engine, physical pages compacted underneath. The host control plane
// (detail::AllocatorCore) decides; this class applies each decision to the
// device tables and the KV bytes in batched launches on the caller's
// execution-space instance. No call here fences or copies device data to the
// host, except check_invariants().
#pragma once

#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/detail/follower_pages.hpp>
#include <kvpool/detail/staging.hpp>
#include <kvpool/error.hpp>
#include <kvpool/kernels/dispatch.hpp>
#include <kvpool/kernels/page_runs.hpp>
#include <kvpool/kernels/stream_wait.hpp>
#include <kvpool/kokkos_compat.hpp>
#include <kvpool/side_occupancy.hpp>
#include <kvpool/unified_kv_pool.hpp>

#include <algorithm>
#include <deque>
#include <functional>
#include <numeric>
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
    using pool_type = UnifiedKVPool<memory_space>;
    using index_view = kk::View<index_t*, memory_space>;
    using const_index_view = kk::View<const index_t*, memory_space>;
    // Page lists handed to a move callback: host-pinned memory the kernels of
    // ExecutionSpace read directly (see detail::Staging).
    using page_list_view =
        kk::View<const index_t*, typename detail::Staging<ExecutionSpace>::memory_space>;
    // Moves KV data of whole pages, src[i] -> dst[i] (physical page ids), as one
    // batch on the instance. The default moves the pages' bytes inside the
    // unified buffer; per-layer pools install their own.
    using move_callback = std::function<void(const ExecutionSpace&, const page_list_view& src_pages,
                                             const page_list_view& dst_pages)>;

    MultiEndedAllocator(pool_type& pool, const std::string& side_name,
                        AllocatorOptions options = {})
        : MultiEndedAllocator(ExecutionSpace(), pool, side_name, options) {}

    MultiEndedAllocator(const ExecutionSpace& space, pool_type& pool, const std::string& side_name,
                        AllocatorOptions options = {})
        : pool_(&pool), core_(pool.layout().side(side_name), pool.total_bytes(), options),
          p2v_table_(new_table(space, "kvpool::p2v", core_.geometry().num_physical_pages)),
          p2v_(rows_of(p2v_table_)) {
        core_.set_stream_wait_check(&kernels::orders_on_stream<ExecutionSpace>);
        resize_virtual_table(space);
    }

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
        resize_virtual_table();
        peer.resize_virtual_table();
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
    }

    // Refused on a side that zeroes its handouts: the zeroing reaches the
    // unified buffer only, not KV kept elsewhere.
    void set_move_callback(move_callback callback) {
        if (callback && core_.options().zero_on_alloc)
            throw Error(ErrorCode::invalid_argument,
                        "set_move_callback: side '" + geometry().spec.name +
                            "' zeroes the pages it hands out (zero_on_alloc), in the unified "
                            "buffer; KV kept elsewhere would not be zeroed");
        move_ = std::move(callback);
    }

    // ---------------------------------------------------------------- sizes
    index_t available_size() const { return core_.available_size(); }
    index_t schedulable_available_size() const { return core_.schedulable_available_size(); }
    index_t allocated_count() const { return core_.allocated_count(); }
    index_t page_size() const { return core_.page_size(); }
    const SideGeometry& geometry() const { return core_.geometry(); }
    const AllocatorCounters& counters() const { return core_.counters(); }
    std::string state_string() const { return core_.state_string(); }
    bool is_slot_allocated(index_t virtual_token) const {
        return core_.is_slot_allocated(virtual_token);
    }
    const detail::AllocatorCore& core() const { return core_; }
    const AllocatorOptions& options() const { return core_.options(); }
    bool has_peer() const { return peer_ != nullptr; }
    bool is_peer_of(const MultiEndedAllocator& other) const { return peer_ == &other; }
    // Where this side stands, for capacity planners (kvpool-sim's admission check).
    SideOccupancy occupancy() const {
        return {core_.free_virtual_page_count(), core_.hole_pages(), core_.gap_bytes(),
                geometry().page_bytes,           core_.watermark(),  core_.live_pages(),
                core_.pending_reuse_pages()};
    }
    // The id owner's free virtual pages, in the order allocations take them.
    const std::deque<index_t>& free_virtual_pages() const { return core_.free_virtual_pages(); }
    // Virtual pages the last successful allocation bound (the ids a non-owner
    // peer binds next).
    const std::vector<index_t>& last_allocated_virtual_pages() const {
        return binding_.virtual_pages;
    }

    // Device tables, one row per virtual (resp. physical) page; -1 is unbound.
    // A trailing row stays -1, as in the reference, so an engine indexing with
    // a -1 padding id (Python's last row) reads unbound.
    const index_view& virtual_to_physical() const { return v2p_table_; }
    const index_view& physical_to_virtual() const { return p2v_table_; }

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
                                          static_cast<index_t>(virtual_pages.size()), binding_))
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
            const StagedBinding staged = stage_binding();
            const std::size_t pre = staging_.add(prefix_lens);
            const std::size_t seq = staging_.add(seq_lens);
            const std::size_t os = staging_.add(out_start);
            const std::size_t ps = staging_.add(page_start);
            staging_.upload(space);
            const auto n = static_cast<std::size_t>(pages), b = static_cast<std::size_t>(batch);
            kernels::alloc_extend_bind(
                space, kernels::AllocExtend{new_pages(staged, n), staging_.slice(pre, b),
                                            staging_.slice(seq, b), staging_.slice(os, b),
                                            staging_.slice(ps, b), last_loc, out});
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
            const StagedBinding staged = stage_binding();
            const std::size_t seq = staging_.add(seq_lens);
            const std::size_t ps = staging_.add(page_start);
            staging_.upload(space);
            const auto n = static_cast<std::size_t>(pages), b = static_cast<std::size_t>(batch);
            kernels::alloc_decode_bind(
                space, kernels::AllocDecode{new_pages(staged, n), staging_.slice(seq, b),
                                            staging_.slice(ps, b), last_loc, out});
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
            submit(space);
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
            submit(space);
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
            submit(space);
        });
    }
    // Throws what free_group_end would throw now, changing nothing.
    void check_free_group_end() const { core_.check_free_group_end(); }

    // ---------------------------------------------------------------- lazy compaction
    index_t flush(const ExecutionSpace& space, bool urgent) {
        return transaction(space, [&] {
            const EarlyMoves early(*this, space);
            const index_t moved = core_.flush(urgent);
            submit(space);
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
        kernels::translate_tokens(space,
                                  kernels::Translation{v2p_, page_size(), virtual_tokens, out});
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
        kernels::translate_tokens(space, kernels::Translation{v2p_, page_size(), virtual_tokens,
                                                              out, kernel_page_multiplier});
    }

    // ---------------------------------------------------------------- state
    AllocatorSnapshot backup_state() { return core_.backup_state(); }
    // Whether a backup_state() window is open (nothing may take ids from under a restore).
    bool backup_window_open() const { return core_.backup_window_open(); }
    void restore_state(const ExecutionSpace& space, const AllocatorSnapshot& snapshot) {
        transaction(space, [&] {
            core_.restore_state(snapshot);
            submit(space);
        });
    }
    // Keeps the allocations since the snapshot and closes the window it opened.
    void commit_state(const AllocatorSnapshot& snapshot) { core_.commit_state(snapshot); }
    void clear(const ExecutionSpace& space) {
        transaction(space, [&] {
            core_.clear();
            submit(space);
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
        space.fence();
        auto v2p = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v2p_table_);
        auto p2v = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p2v_table_);
        if (v2p(v2p_.extent(0)) != unbound || p2v(p2v_.extent(0)) != unbound)
            throw Error(ErrorCode::internal, "a table's sentinel row is bound. " + state_string());
        for (index_t v = 0; v < static_cast<index_t>(v2p_.extent(0)); ++v)
            if (v2p(v) != core_.physical_page_of(v))
                throw Error(ErrorCode::internal,
                            "device v2p[" + std::to_string(v) + "] = " + std::to_string(v2p(v)) +
                                ", host mirror " + std::to_string(core_.physical_page_of(v)) +
                                ". " + state_string());
        for (index_t p = 0; p < static_cast<index_t>(p2v_.extent(0)); ++p)
            if (p2v(p) != core_.virtual_page_of(p))
                throw Error(ErrorCode::internal,
                            "device p2v[" + std::to_string(p) + "] = " + std::to_string(p2v(p)) +
                                ", host mirror " + std::to_string(core_.virtual_page_of(p)) + ". " +
                                state_string());
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
                side->restore_device_rows(space, rows);
        } catch (const Error& e) {
            throw Error(ErrorCode::device,
                        std::string("kvpool: undoing a call after a failure: restoring the device "
                                    "tables failed: ") +
                            e.what() + "; the allocator must be cleared");
        }
    }

    // Device v2p / p2v rows rewritten from the host mirror.
    void restore_device_rows(const ExecutionSpace& space,
                             const detail::AllocatorCore::ChangedRows& rows) {
        std::vector<index_t> vi = rows.v2p, pi = rows.p2v;
        if (rows.all) {
            vi.resize(static_cast<std::size_t>(core_.virtual_table_pages()));
            pi.resize(static_cast<std::size_t>(geometry().num_physical_pages));
            std::iota(vi.begin(), vi.end(), index_t(0));
            std::iota(pi.begin(), pi.end(), index_t(0));
        }
        if (vi.empty() && pi.empty())
            return;
        std::vector<index_t> vv(vi.size()), pv(pi.size());
        for (std::size_t k = 0; k < vi.size(); ++k)
            vv[k] = core_.physical_page_of(vi[k]);
        for (std::size_t k = 0; k < pi.size(); ++k)
            pv[k] = core_.virtual_page_of(pi[k]);
        const std::size_t a = staging_.add(vi), b = staging_.add(vv);
        const std::size_t c = staging_.add(pi), d = staging_.add(pv);
        staging_.upload(space);
        kernels::apply_table_writes(space, kernels::TableWrites{v2p_, staging_.slice(a, vi.size()),
                                                                staging_.slice(b, vv.size()), p2v_,
                                                                staging_.slice(c, pi.size()),
                                                                staging_.slice(d, pv.size())});
    }

    // out(t) = the t-th token of the pages just bound, binding them on the device.
    void emit_allocated_tokens(const ExecutionSpace& space, const index_view& out) {
        submit_peer(space);
        const StagedBinding staged = stage_binding();
        if (staged.runs.count == 0)
            staging_.upload(space);
        const auto n = binding_.virtual_pages.size();
        kernels::bind_pages_emit_tokens(space, kernels::AllocTokens{new_pages(staged, n), out});
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
        index_t pages = 0;
        for (index_t r = 0; r < batch; ++r) {
            if (seq_lens[r] < 1)
                throw Error(ErrorCode::invalid_argument,
                            "alloc_decode: request " + std::to_string(r) + " has seq_len " +
                                std::to_string(seq_lens[r]) + " (must count the new token)");
            page_start[r] = pages;
            pages += detail::pages_needed_for_decode(&seq_lens[r], 1, page_size());
        }
        return pages;
    }

    // alloc takes whole pages; alloc_extend and alloc_decode serve requests,
    // and (as the reference's) fail at once when the free ids run short.
    enum class Request { whole_pages, per_request };

    // num_pages new pages on this side and, with a follower, the same virtual
    // pages bound there: both or neither (the follower may lack room).
    bool allocate_pages(const ExecutionSpace& space, index_t num_pages, Request request) {
        const bool allocated = request == Request::whole_pages
                                   ? core_.alloc_pages(num_pages, binding_)
                                   : core_.alloc_request_pages(num_pages, binding_);
        if (!allocated)
            return false;
        if (!follower_)
            return true;
        const auto undo = [&] {
            core_.undo_allocation(binding_);
            submit(space);
        };
        // The follower's lack of room may flush this side; the pages just
        // taken must stay where they are until the follower has answered.
        core_.hold_relocations(true);
        bool ok = false;
        try {
            const std::vector<index_t>& pages = detail::follower_pages(
                binding_.virtual_pages, page_size() / follower_->page_size(), follower_scratch_);
            ok = follower_->core_.bind_virtual_pages(
                pages.data(), static_cast<index_t>(pages.size()), follower_->binding_);
            // A follower of smaller pages binds in a launch of its own, the
            // other bands' plans first (as alloc_with_virtual).
            if (ok && !fused_follower()) {
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

    // Where the allocation being applied is staged: its virtual and physical
    // pages, and the follower's physical pages when there is a follower; or,
    // when they form a few runs, the runs alone (handed to the kernel by value).
    struct StagedBinding {
        std::size_t virtual_pages, physical_pages, follower_pages;
        kernels::PageRuns runs;
    };
    StagedBinding stage_binding() {
        const auto& pages = binding_.virtual_pages;
        const index_t* const follower_pages =
            fused_follower() ? follower_->binding_.physical_pages.data() : nullptr;
        const kernels::PageRuns runs =
            kernels::find_page_runs(pages.data(), binding_.physical_pages.data(), follower_pages,
                                    static_cast<index_t>(pages.size()));
        if (runs.count > 0)
            return {0, 0, 0, runs};
        const std::size_t v = staging_.add(binding_.virtual_pages);
        const std::size_t p = staging_.add(binding_.physical_pages);
        return {v, p, fused_follower() ? staging_.add(follower_->binding_.physical_pages) : 0,
                runs};
    }
    using staged_view =
        decltype(std::declval<const detail::Staging<ExecutionSpace>&>().slice(0, 0));
    // The n pages of a staged binding, for the kernels (after the upload).
    kernels::NewPages<index_view, staged_view> new_pages(const StagedBinding& staged,
                                                         std::size_t n) const {
        const std::size_t listed = staged.runs.count > 0 ? 0 : n;
        kernels::NewPages<index_view, staged_view> pages{
            v2p_,
            p2v_,
            staging_.slice(staged.virtual_pages, listed),
            staging_.slice(staged.physical_pages, listed),
            page_size(),
            {},
            staged.runs,
            {},
            0,
            0};
        if (fused_follower())
            pages.follower = {follower_->v2p_, follower_->p2v_,
                              staging_.slice(staged.follower_pages, listed)};
        const bool zero_own = core_.options().zero_on_alloc;
        const bool zero_follower = fused_follower() && follower_->core_.options().zero_on_alloc;
        if (zero_own || zero_follower) {
            pages.zero_bytes = pool_->bytes();
            pages.zero_page_bytes = zero_own ? geometry().page_bytes : 0;
            pages.zero_follower_page_bytes = zero_follower ? follower_->geometry().page_bytes : 0;
        }
        return pages;
    }

    // (Re)creates the device v2p table at the size of the id owner's space.
    void resize_virtual_table(const ExecutionSpace& space = ExecutionSpace()) {
        const auto rows = static_cast<std::size_t>(core_.virtual_table_pages());
        if (v2p_table_.extent(0) == rows + 1)
            return;
        v2p_table_ = new_table(space, "kvpool::v2p", core_.virtual_table_pages());
        v2p_ = rows_of(v2p_table_);
    }

    // rows entries and the trailing sentinel, all unbound but row 0 (page 0 <->
    // page 0: the padding anchor).
    static index_view new_table(const ExecutionSpace& space, const char* label, index_t rows) {
        const auto table = kk::uninitialized<index_view>(label, static_cast<std::size_t>(rows) + 1);
        kernels::launch_fault_point<ExecutionSpace>("kvpool::fill_table");
        Kokkos::deep_copy(space, table, unbound);
        Kokkos::deep_copy(space, Kokkos::subview(table, 0), index_t(0));
        return table;
    }
    static index_view rows_of(const index_view& table) {
        return Kokkos::subview(table, std::make_pair(std::size_t(0), table.extent(0) - 1));
    }

    // The pages this side's core just bound (no follower of its own), on the
    // device; the other bands' plans are submitted already.
    void apply_own_binding(const ExecutionSpace& space) {
        if (core_.options().zero_on_alloc)
            // The alloc-bind launch binds and zeroes; it emits no token ids here.
            emit_allocated_tokens(space, index_view());
        else
            apply_binding(space);
    }
    // The follower's pages bind in the owner's launch when they are the owner's size.
    bool fused_follower() const { return follower_ && follower_->page_size() == page_size(); }

    // A failed allocation may still have compacted the peer.
    bool fail_alloc(const ExecutionSpace& space) {
        submit_peer(space);
        return false;
    }

    void apply_binding(const ExecutionSpace& space) {
        const std::size_t v = staging_.add(binding_.virtual_pages);
        const std::size_t p = staging_.add(binding_.physical_pages);
        staging_.upload(space);
        const auto n = binding_.virtual_pages.size();
        kernels::apply_table_writes(
            space, kernels::TableWrites{v2p_, staging_.slice(v, n), staging_.slice(p, n), p2v_,
                                        staging_.slice(p, n), staging_.slice(v, n)});
    }

    // The other bands' plans (a flush, a shift) before this side's own.
    void submit_peer(const ExecutionSpace& space) {
        for (std::size_t i = 1; i < sides_of_buffer_.size(); ++i)
            sides_of_buffer_[i]->submit(space);
    }

    // Applies the core's pending plan: waits, KV moves, table writes.
    void submit(const ExecutionSpace& space) {
        detail::DevicePlan& plan = core_.plan();
        if (plan.empty())
            return;
        enqueue_waits(space, plan);
        const std::size_t moves = plan.move_src.size();
        const kernels::MoveRuns runs = move_ ? kernels::MoveRuns{} : move_runs(plan);
        const std::size_t src = runs.count > 0 ? 0 : staging_.add(plan.move_src);
        const std::size_t dst = runs.count > 0 ? 0 : staging_.add(plan.move_dst);
        const std::size_t vi = staging_.add(plan.v2p_index);
        const std::size_t vv = staging_.add(plan.v2p_value);
        const std::size_t pi = staging_.add(plan.p2v_index);
        const std::size_t pv = staging_.add(plan.p2v_value);
        staging_.upload(space);
        const kernels::TableWrites writes{v2p_,
                                          staging_.slice(vi, plan.v2p_index.size()),
                                          staging_.slice(vv, plan.v2p_value.size()),
                                          p2v_,
                                          staging_.slice(pi, plan.p2v_index.size()),
                                          staging_.slice(pv, plan.p2v_value.size())};
        if (moves > 0 && !move_) {
            with_move_lists(space, runs, src, dst, moves, [&](const auto& moved) {
                kernels::apply_plan(space, kernels::CompactionPlan{moved, writes});
            });
        } else {
            // The writes first: the moves are the one step an undo cannot take back.
            kernels::apply_table_writes(space, writes);
            if (moves > 0)
                move_(space, staging_.slice(src, moves), staging_.slice(dst, moves));
        }
        const bool keep = plan.overwrites_freed_pages;
        plan.clear();
        // An eager compaction overwrote the freed pages: it stays, whatever fails next.
        if (keep && core_.transaction_open())
            core_.checkpoint_transaction();
    }

    // The core's move starter: launches the plan's waits and moves now and
    // takes them out of the plan (its table writes follow with the rest).
    // Fewer than early_move_min_pages moves stay in the plan and go with its
    // table writes in one launch.
    void start_moves(const ExecutionSpace& space) {
        detail::DevicePlan& plan = core_.plan();
        const std::size_t moves = plan.move_src.size();
        if (moves < early_move_min_pages)
            return;
        enqueue_waits(space, plan);
        const kernels::MoveRuns runs = move_runs(plan);
        const std::size_t src = runs.count > 0 ? 0 : staging_.add(plan.move_src);
        const std::size_t dst = runs.count > 0 ? 0 : staging_.add(plan.move_dst);
        if (runs.count == 0)
            staging_.upload(space);
        with_move_lists(space, runs, src, dst, moves,
                        [&](const auto& moved) { kernels::move_pages(space, moved); });
        plan.move_src.clear();
        plan.move_dst.clear();
    }

    // Installs start_moves as the core's move starter for one call (not with
    // a move callback, which must follow the table writes).
    class EarlyMoves {
    public:
        EarlyMoves(MultiEndedAllocator& side, const ExecutionSpace& space) : core_(side.core_) {
            if (!side.move_)
                core_.set_move_starter([&side, space] { side.start_moves(space); });
        }
        ~EarlyMoves() { core_.set_move_starter(nullptr); }
        EarlyMoves(const EarlyMoves&) = delete;
        EarlyMoves& operator=(const EarlyMoves&) = delete;

    private:
        detail::AllocatorCore& core_;
    };

    void enqueue_waits(const ExecutionSpace& space, detail::DevicePlan& plan) {
        for (const auto& token : plan.waits)
            kernels::enqueue_wait(space, *token);
        plan.waits.clear();
    }

    // Moves in a few runs go to the kernel by value: no lists to stage or to read.
    static kernels::MoveRuns move_runs(const detail::DevicePlan& plan) {
        return kernels::find_move_runs(plan.move_src.data(), plan.move_dst.data(),
                                       static_cast<index_t>(plan.move_src.size()));
    }

    // Calls apply with the PageMoves of a plan's moves, their lists (staged
    // back to back at src and dst, after the last upload) read where the page
    // size says; none when they form runs.
    template <class Apply>
    void with_move_lists(const ExecutionSpace& space, const kernels::MoveRuns& runs,
                         std::size_t src, std::size_t dst, std::size_t moves, const Apply& apply) {
        const auto moved = [&](const auto& src_pages, const auto& dst_pages) {
            apply(kernels::PageMoves{pool_->bytes(), geometry().page_bytes, src_pages, dst_pages,
                                     runs});
        };
        if (runs.count > 0) {
            moved(staging_.slice(0, 0), staging_.slice(0, 0));
        } else if (geometry().page_bytes < device_move_list_min_page_bytes) {
            moved(staging_.slice(src, moves), staging_.slice(dst, moves));
        } else {
            // Sources and destinations staged back to back: one copy to the device.
            const auto move_lists = staging_.device_slice(space, src, 2 * moves);
            moved(Kokkos::subview(move_lists, std::make_pair(std::size_t(0), moves)),
                  Kokkos::subview(move_lists, std::make_pair(moves, 2 * moves)));
        }
    }

    // Measured thresholds: kernels/tuning.hpp says where and why.
    using tuning = typename kernels::NativeBackend<ExecutionSpace>::tuning;
    static constexpr std::size_t early_move_min_pages = tuning::early_move_min_pages;
    static constexpr index_t device_move_list_min_page_bytes =
        tuning::device_move_list_min_page_bytes;

    pool_type* pool_;
    detail::AllocatorCore core_;
    MultiEndedAllocator* peer_ = nullptr;
    std::vector<MultiEndedAllocator*> neighbours_;            // the peer, or up to two neighbours
    std::vector<MultiEndedAllocator*> sides_of_buffer_{this}; // this side first
    MultiEndedAllocator* follower_ = nullptr;
    std::vector<index_t> follower_scratch_;
    // The tables with their sentinel row, and the rows the kernels index.
    index_view v2p_table_;
    index_view p2v_table_;
    index_view v2p_;
    index_view p2v_;
    detail::Staging<ExecutionSpace> staging_;
    detail::PageBinding binding_;
    move_callback move_;
};

} // namespace kvpool
