// The device side of one MultiEndedAllocator: its v2p / p2v tables, the
// staging of the id arrays a call hands over, and every launch that applies
// the host core's decisions (plans, allocations, undo, translation) on the
// caller's execution-space instance. It decides no allocation: what to launch
// comes from the AllocatorCore it serves (its plan and the binding it filled),
// which calls to make, in what order, from MultiEndedAllocator; it picks only a
// launch's shape (runs or lists, early moves) from the measured tuning.
#pragma once

#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/detail/kernel_page_runs.hpp>
#include <kvpool/detail/library_spaces.hpp>
#include <kvpool/detail/staging.hpp>
#include <kvpool/error.hpp>
#include <kvpool/kernels/dispatch.hpp>
#include <kvpool/kernels/page_runs.hpp>
#include <kvpool/kernels/stream_wait.hpp>
#include <kvpool/kokkos_compat.hpp>
#include <kvpool/storage/unified_kv_pool.hpp>

#include <array>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace kvpool::detail {

template <class ExecutionSpace> class TableExecutor {
public:
    using memory_space = typename ExecutionSpace::memory_space;
    using pool_type = UnifiedKVPool<memory_space>;
    using index_view = kk::View<index_t*, memory_space>;
    using const_index_view = kk::View<const index_t*, memory_space>;
    using page_list_view = kk::View<const index_t*, typename Staging<ExecutionSpace>::memory_space>;
    using move_callback = std::function<void(const ExecutionSpace&, const page_list_view& src_pages,
                                             const page_list_view& dst_pages)>;

    // Makes the tables (p2v, then v2p at the id space the core has now).
    TableExecutor(const ExecutionSpace& space, const pool_type& pool, AllocatorCore& core)
        : pool_(&pool), core_(core),
          p2v_table_(new_table(space, "kvpool::p2v", core.geometry().num_physical_pages)),
          p2v_(rows_of(p2v_table_)) {
        core_.set_stream_wait_check(&kernels::orders_on_stream<ExecutionSpace>);
        resize_virtual_table(space);
    }

    TableExecutor(const TableExecutor&) = delete;
    TableExecutor& operator=(const TableExecutor&) = delete;

    // The follower's tables are written by this side's allocation launches.
    void set_follower(TableExecutor& follower) { follower_ = &follower; }
    // The follower's pages bind in this side's launch when they are this side's
    // size; smaller ones bind in a launch of their own.
    bool fused_follower() const {
        return follower_ && follower_->core_.page_size() == core_.page_size();
    }
    void set_move_callback(move_callback callback) { move_ = std::move(callback); }

    // The pages the core's last allocation bound (it fills them), which the
    // next allocation launch writes to the tables.
    PageBinding& binding() { return binding_; }
    const PageBinding& binding() const { return binding_; }

    const index_view& virtual_to_physical() const { return v2p_table_; }
    const index_view& physical_to_virtual() const { return p2v_table_; }

    // (Re)creates the device v2p table at the size of the id owner's space.
    void resize_virtual_table(const ExecutionSpace& space = ExecutionSpace()) {
        const auto rows = static_cast<std::size_t>(core_.virtual_table_pages());
        if (v2p_table_.extent(0) == rows + 1)
            return;
        v2p_table_ = new_table(space, "kvpool::v2p", core_.virtual_table_pages());
        v2p_ = rows_of(v2p_table_);
    }

    // ---------------------------------------------------------------- plans
    // Applies the core's pending plan: waits, KV moves, table writes.
    void submit(const ExecutionSpace& space) {
        DevicePlan& plan = core_.plan();
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

    // Installs start_moves as the core's move starter for one call (not with
    // a move callback, which must follow the table writes).
    class EarlyMoves {
    public:
        EarlyMoves(TableExecutor& executor, const ExecutionSpace& space) : core_(executor.core_) {
            if (!executor.move_)
                core_.set_move_starter([&executor, space] { executor.start_moves(space); });
        }
        ~EarlyMoves() { core_.set_move_starter(nullptr); }
        EarlyMoves(const EarlyMoves&) = delete;
        EarlyMoves& operator=(const EarlyMoves&) = delete;

    private:
        AllocatorCore& core_;
    };

    // Device v2p / p2v rows rewritten from the host mirror.
    void restore_rows(const ExecutionSpace& space, const AllocatorCore::ChangedRows& rows) {
        std::vector<index_t> vi = rows.v2p, pi = rows.p2v;
        if (rows.all) {
            vi.resize(static_cast<std::size_t>(core_.virtual_table_pages()));
            pi.resize(static_cast<std::size_t>(core_.geometry().num_physical_pages));
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

    // ---------------------------------------------------------------- allocations
    // Each binds the pages of binding() (and a fused follower's) on the device.

    // out(t) = the t-th token of the pages just bound.
    void emit_allocated_tokens(const ExecutionSpace& space, const index_view& out) {
        const StagedBinding staged = stage_binding();
        if (staged.runs.count == 0)
            staging_.upload(space);
        const auto n = binding_.virtual_pages.size();
        kernels::bind_pages_emit_tokens(space, kernels::AllocTokens{new_pages(staged, n), out});
    }

    // Prefill's token ids: request r's new tokens at out_start[r] in out, its
    // new pages from page_start[r] among the pages just bound.
    void bind_extend(const ExecutionSpace& space, const std::vector<index_t>& prefix_lens,
                     const std::vector<index_t>& seq_lens, const std::vector<index_t>& out_start,
                     const std::vector<index_t>& page_start, const const_index_view& last_loc,
                     const index_view& out, index_t pages) {
        const StagedBinding staged = stage_binding();
        const std::size_t pre = staging_.add(prefix_lens);
        const std::size_t seq = staging_.add(seq_lens);
        const std::size_t os = staging_.add(out_start);
        const std::size_t ps = staging_.add(page_start);
        staging_.upload(space);
        const auto n = static_cast<std::size_t>(pages), b = seq_lens.size();
        kernels::alloc_extend_bind(
            space, kernels::AllocExtend{new_pages(staged, n), staging_.slice(pre, b),
                                        staging_.slice(seq, b), staging_.slice(os, b),
                                        staging_.slice(ps, b), last_loc, out});
    }

    // Decode's token ids: one per request, a new page (when it needs one) at
    // page_start[r] among the pages just bound.
    void bind_decode(const ExecutionSpace& space, const std::vector<index_t>& seq_lens,
                     const std::vector<index_t>& page_start, const const_index_view& last_loc,
                     const index_view& out, index_t pages) {
        const StagedBinding staged = stage_binding();
        const std::size_t seq = staging_.add(seq_lens);
        const std::size_t ps = staging_.add(page_start);
        staging_.upload(space);
        const auto n = static_cast<std::size_t>(pages), b = seq_lens.size();
        kernels::alloc_decode_bind(
            space, kernels::AllocDecode{new_pages(staged, n), staging_.slice(seq, b),
                                        staging_.slice(ps, b), last_loc, out});
    }

    // A non-owner's binding written as table rows (no tokens, no zeroing).
    void apply_binding(const ExecutionSpace& space) {
        const std::size_t v = stage_pages(binding_.virtual_pages);
        const std::size_t p = stage_pages(binding_.physical_pages);
        staging_.upload(space);
        const auto n = binding_.virtual_pages.size();
        kernels::apply_table_writes(
            space, kernels::TableWrites{v2p_, staging_.slice(v, n), staging_.slice(p, n), p2v_,
                                        staging_.slice(p, n), staging_.slice(v, n)});
    }

    // ---------------------------------------------------------------- reads
    // Virtual token ids -> physical (or dense) token ids; see
    // MultiEndedAllocator::translate_dense for kernel_page_multiplier.
    template <class OutView>
    void translate(const ExecutionSpace& space, const const_index_view& virtual_tokens,
                   const OutView& out, index_t kernel_page_multiplier = 1) const {
        kernels::translate_tokens(space,
                                  kernels::Translation{v2p_, core_.page_size(), virtual_tokens, out,
                                                       kernel_page_multiplier});
    }

    // The device tables against the core's host mirror. Fences.
    void check_tables(const ExecutionSpace& space) const {
        space.fence();
        auto v2p = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v2p_table_);
        auto p2v = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p2v_table_);
        if (v2p(v2p_.extent(0)) != unbound || p2v(p2v_.extent(0)) != unbound)
            throw Error(ErrorCode::internal,
                        "a table's sentinel row is bound. " + core_.state_string());
        for (index_t v = 0; v < static_cast<index_t>(v2p_.extent(0)); ++v)
            if (v2p(v) != core_.physical_page_of(v))
                throw Error(ErrorCode::internal,
                            "device v2p[" + std::to_string(v) + "] = " + std::to_string(v2p(v)) +
                                ", host mirror " + std::to_string(core_.physical_page_of(v)) +
                                ". " + core_.state_string());
        for (index_t p = 0; p < static_cast<index_t>(p2v_.extent(0)); ++p)
            if (p2v(p) != core_.virtual_page_of(p))
                throw Error(ErrorCode::internal,
                            "device p2v[" + std::to_string(p) + "] = " + std::to_string(p2v(p)) +
                                ", host mirror " + std::to_string(core_.virtual_page_of(p)) + ". " +
                                core_.state_string());
    }

private:
    // The core's move starter: launches the plan's waits and moves now and
    // takes them out of the plan (its table writes follow with the rest).
    // Fewer than early_move_min_pages moves stay in the plan and go with its
    // table writes in one launch.
    void start_moves(const ExecutionSpace& space) {
        DevicePlan& plan = core_.plan();
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

    static void enqueue_waits(const ExecutionSpace& space, DevicePlan& plan) {
        for (const auto& token : plan.waits)
            kernels::enqueue_wait(space, *token);
        plan.waits.clear();
    }

    // Moves in a few runs go to the kernel by value: no lists to stage or to read.
    static kernels::MoveRuns move_runs(const DevicePlan& plan) {
        return kernels::find_move_runs(plan.move_src.data(), plan.move_dst.data(),
                                       static_cast<index_t>(plan.move_src.size()));
    }

    // Calls apply with the PageMoves of a plan's moves, their lists (staged
    // back to back at src and dst, after the last upload) read where the page
    // size says; none when they form runs.
    template <class Apply>
    void with_move_lists(const ExecutionSpace& space, const kernels::MoveRuns& runs,
                         std::size_t src, std::size_t dst, std::size_t moves, const Apply& apply) {
        const index_t page_bytes = core_.geometry().page_bytes;
        const auto moved = [&](const auto& src_pages, const auto& dst_pages) {
            apply(kernels::PageMoves{pool_->bytes(), page_bytes, src_pages, dst_pages, runs});
        };
        if (runs.count > 0) {
            moved(staging_.slice(0, 0), staging_.slice(0, 0));
        } else if (page_bytes < device_move_list_min_page_bytes) {
            moved(staging_.slice(src, moves), staging_.slice(dst, moves));
        } else {
            // Sources and destinations staged back to back: one copy to the device.
            const auto move_lists = staging_.device_slice(space, src, 2 * moves);
            moved(Kokkos::subview(move_lists, std::make_pair(std::size_t(0), moves)),
                  Kokkos::subview(move_lists, std::make_pair(moves, 2 * moves)));
        }
    }

    // Where the allocation being applied is staged: its virtual and physical
    // pages, and the follower's physical pages when there is a follower; or,
    // when they form a few runs, the runs alone (handed to the kernel by value).
    struct StagedBinding {
        std::size_t virtual_pages, physical_pages, follower_pages;
        kernels::PageRuns runs;
    };
    StagedBinding stage_binding() {
        const PageRunList* const follower_pages =
            fused_follower() ? &follower_->binding_.physical_pages : nullptr;
        // Without a follower its pages are the physical ones: the runs stay the same.
        const std::array<const PageRunList*, 3> lists{
            &binding_.virtual_pages, &binding_.physical_pages,
            follower_pages ? follower_pages : &binding_.physical_pages};
        const kernels::PageRuns runs = kernel_page_runs(lists);
        if (runs.count > 0 || binding_.virtual_pages.empty())
            return {0, 0, 0, runs};
        const std::size_t v = stage_pages(binding_.virtual_pages);
        const std::size_t p = stage_pages(binding_.physical_pages);
        return {v, p, follower_pages ? stage_pages(*follower_pages) : 0, kernels::PageRuns{}};
    }
    // A page list for the kernels, written out for the next upload.
    std::size_t stage_pages(const PageRunList& pages) {
        listed_.clear();
        pages.append_to(listed_);
        return staging_.add(listed_);
    }
    using staged_view = decltype(std::declval<const Staging<ExecutionSpace>&>().slice(0, 0));
    // The n pages of a staged binding, for the kernels (after the upload).
    kernels::NewPages<index_view, staged_view> new_pages(const StagedBinding& staged,
                                                         std::size_t n) const {
        const std::size_t listed = staged.runs.count > 0 ? 0 : n;
        kernels::NewPages<index_view, staged_view> pages{
            v2p_,
            p2v_,
            staging_.slice(staged.virtual_pages, listed),
            staging_.slice(staged.physical_pages, listed),
            core_.page_size(),
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
            pages.zero_page_bytes = zero_own ? core_.geometry().page_bytes : 0;
            pages.zero_follower_page_bytes =
                zero_follower ? follower_->core_.geometry().page_bytes : 0;
        }
        return pages;
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

    // Measured thresholds: kernels/tuning.hpp says where and why.
    using tuning = typename kernels::NativeBackend<ExecutionSpace>::tuning;
    static constexpr std::size_t early_move_min_pages = tuning::early_move_min_pages;
    static constexpr index_t device_move_list_min_page_bytes =
        tuning::device_move_list_min_page_bytes;

    const pool_type* pool_;
    AllocatorCore& core_;
    TableExecutor* follower_ = nullptr;
    // The tables with their sentinel row, and the rows the kernels index.
    index_view v2p_table_;
    index_view p2v_table_;
    index_view v2p_;
    index_view p2v_;
    Staging<ExecutionSpace> staging_;
    PageBinding binding_;
    std::vector<index_t> listed_; // a binding's pages written out for staging
    move_callback move_;
};

KVPOOL_EXTERN_LIBRARY_INSTANCES(TableExecutor)

} // namespace kvpool::detail
