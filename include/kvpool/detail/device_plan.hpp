// The device work that one host-side allocator call decided on, in page ids.
// The host control plane fills it; a backend applies it in one batch.
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/detail/id_runs.hpp>
#include <kvpool/detail/page_run_list.hpp>
#include <kvpool/types.hpp>

#include <cstddef>
#include <vector>

namespace kvpool::detail {

// Applied in this order: stream waits, KV page moves, table writes. Move
// sources and destinations are disjoint sets, and every table index is written
// at most once per plan, so each step is one order-free parallel launch.
struct DevicePlan {
    std::vector<CompletionTokenPtr> waits;
    std::vector<index_t> move_src; // physical pages
    std::vector<index_t> move_dst;
    std::vector<index_t> v2p_index; // virtual page -> new physical page (or unbound)
    std::vector<index_t> v2p_value;
    std::vector<index_t> p2v_index; // physical page -> new virtual page (or unbound)
    std::vector<index_t> p2v_value;
    // An eager free's compaction: its moves overwrite the freed pages, whose
    // bytes an undo of the free would need. Other moves (a flush, a shift)
    // only overwrite pages nobody holds, so an undo may still take them back.
    bool overwrites_freed_pages = false;

    bool empty() const {
        return waits.empty() && move_src.empty() && v2p_index.empty() && p2v_index.empty();
    }
    void clear() {
        waits.clear();
        move_src.clear();
        move_dst.clear();
        v2p_index.clear();
        v2p_value.clear();
        p2v_index.clear();
        p2v_value.clear();
        overwrites_freed_pages = false;
    }
    void set_v2p(index_t virtual_page, index_t physical_page) {
        v2p_index.push_back(virtual_page);
        v2p_value.push_back(physical_page);
    }
    void set_p2v(index_t physical_page, index_t virtual_page) {
        p2v_index.push_back(physical_page);
        p2v_value.push_back(virtual_page);
    }
};

// Pages one allocation bound: virtual_pages' k-th id now maps to
// physical_pages' k-th, both held as runs (see PageRunList); with what
// AllocatorCore::undo_allocation needs to take it back.
struct PageBinding {
    PageRunList virtual_pages;
    PageRunList physical_pages;
    std::size_t drained_holes = 0; // physical_pages' first drained_holes came from holes
    // Where each drained hole stood in the hole list, ascending; empty when
    // they were its first drained_holes entries (no hole under a transfer
    // was passed over).
    std::vector<std::size_t> hole_positions;
    index_t watermark_before = 0;
    index_t anchor_before = 0;
    void clear() {
        virtual_pages.clear();
        physical_pages.clear();
        drained_holes = 0;
        hole_positions.clear();
    }
};

} // namespace kvpool::detail
