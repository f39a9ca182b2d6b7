// The band's tables: what the allocator core and each of its parts (move gate,
// compaction, backup window, transaction log) read and write. The parts keep
// their own state and are handed these per call, so that a copy of the core
// is a whole copy.
#pragma once

#include <kvpool/allocator_options.hpp>
#include <kvpool/counters.hpp>
#include <kvpool/detail/device_plan.hpp>
#include <kvpool/detail/journal.hpp>
#include <kvpool/storage/pool_layout.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvpool::detail {

class StateDigest;

enum class PageState : std::uint8_t { outside, live, hole, pending, moved_out };

// Runs of pages at least this long have their table rows written (and
// journaled) as one stretch per table; shorter ones row by row, where a
// stretch each would cost more.
constexpr std::size_t min_stretch_pages = 16;
// A free whose tokens come in more runs than this takes the token-by-token
// walk: a list that scattered gains nothing from runs.
constexpr std::size_t max_free_runs = 64;

// A page id in the host mirror's rows: 32 bits, so that a page-1 prefill's
// thousands of rows are half the bytes to write and twice the ids to a vector
// (the device tables keep index_t; a band's pages fit, see AllocatorCore).
using mirror_index_t = std::int32_t;

// The host mirror of the device tables, each physical page's state, the free
// ids, the hole list and the band's extent.
struct BandTables {
    index_t virtual_table_pages = 0; // the owner's virtual page space
    index_t min_virtual_page = 0;    // below this, virtual pages are never minted
    index_t watermark = 0;           // up: first page past the band; down: last page below it
    index_t anchor = 0;              // see AllocatorCore::anchor()
    JournaledRuns<index_t> free_virtual_pages; // id owner only
    JournaledTable<mirror_index_t> v2p;
    JournaledTable<mirror_index_t> p2v;
    JournaledTable<PageState> page_state;
    JournaledDeque<index_t> holes;
    index_t live_pages = 0;

    // Whether the virtual token's page is bound (false outside the id range).
    bool is_bound(index_t virtual_token, index_t page_size) const {
        const index_t page = virtual_token / page_size;
        if (virtual_token < 0 || page >= virtual_table_pages)
            return false;
        return page >= min_virtual_page && v2p[page] != unbound;
    }
    // Whether every v2p row of [first, first + count) is bound (resp. unbound),
    // rows inside the table: one pass over them that compilers vectorise,
    // where a run's free or its peer binding checks thousands.
    bool rows_bound(index_t first, index_t count) const {
        // Bound rows hold pages (>= 0) and unbound is negative: the OR of the
        // rows is negative exactly when one is unbound.
        static_assert(unbound < 0);
        const mirror_index_t* const rows = v2p.data() + first;
        mirror_index_t rows_or = 0;
        for (index_t k = 0; k < count; ++k)
            rows_or |= rows[k];
        return rows_or >= 0;
    }
    bool rows_unbound(index_t first, index_t count) const {
        const mirror_index_t* const rows = v2p.data() + first;
        mirror_index_t bound = 0;
        for (index_t k = 0; k < count; ++k)
            bound |= rows[k] ^ mirror_index_t(unbound);
        return bound == 0;
    }
    // Appends the physical pages bound to the n virtual pages, in their
    // order: the rows of each run of virtual pages copied as one.
    void append_physical(const index_t* virtual_pages, std::size_t n,
                         std::vector<index_t>& physical) const;
    // Likewise the virtual pages bound to the n physical pages.
    void append_virtual(const index_t* physical_pages, std::size_t n,
                        std::vector<index_t>& virtual_pages) const;
    // Binds virtual_pages.at(k) to physical_pages.at(k) (a paired run, each
    // going up or down), the physical pages live; unbind_run takes them back,
    // each physical page left in state. Each table's rows are a stretch
    // either way: one journaled stretch when min_stretch_pages or more, else
    // row by row.
    void bind_run(const SteppedRun& virtual_pages, const SteppedRun& physical_pages);
    void unbind_run(const SteppedRun& virtual_pages, const SteppedRun& physical_pages,
                    PageState state);
    // Unbinds virtual_pages[k] from physical_pages[k] in the host mirror, each
    // physical page left in state. Each table's rows are written by the runs
    // (up or down) of the pages indexing it: runs of min_stretch_pages or more
    // as one journaled stretch, shorter ones row by row.
    void unbind(const index_t* virtual_pages, const index_t* physical_pages, std::size_t n,
                PageState state);
    // Takes back the pages binding bound (host tables and plan), holes and
    // free ids back where they were, the extent as before it.
    void undo_binding(const PageBinding& binding, bool from_free_list, DevicePlan& plan);
    // Every field, tables in row order and lists in their order (see StateDigest).
    void add_to(StateDigest& digest) const;
};

// How the parts word their errors: the core's state as every message carries
// it, and the internal error a broken invariant raises.
class BandReport {
public:
    virtual std::string state_string() const = 0;
    [[noreturn]] virtual void fail(const std::string& what) const = 0;

protected:
    BandReport() = default;
    BandReport(const BandReport&) = default;
    BandReport& operator=(const BandReport&) = default;
    ~BandReport() = default;
};

// One call's view of the band for a part that only reads it.
struct BandView {
    const SubPoolGeometry& geometry;
    const BandTables& tables;
    const BandReport& report;

    index_t page_size() const { return geometry.spec.page_size; }
};

// One call's view of the band for a part that changes it: what the band is,
// its tables, and where the decisions go.
struct Band {
    const SubPoolGeometry& geometry;
    const AllocatorOptions& options;
    BandTables& tables;
    DevicePlan& plan;
    AllocatorCounters& counters;
    const BandReport& report;

    index_t page_size() const { return geometry.spec.page_size; }
    bool is_lazy() const { return options.mode == CompactionMode::lazy; }
    BandView view() const { return {geometry, tables, report}; }
};

} // namespace kvpool::detail
