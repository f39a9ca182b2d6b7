// Comparing one allocator side with its reference model, shared by the
// differential tests.
#pragma once

#include "reference_model.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

namespace kvpool::test {

// One allocator side against its model: sizes, band, gap, the hole list and
// the free ids in the order later allocations take them, the pages pending
// reuse batch by batch, virtual <-> physical pages both ways, then the
// library's own invariants. Returns the first difference, or an empty string.
inline std::string side_mismatch(const std::string& n, const Allocator& r, const ReferenceSide& m) {
    const auto& core = r.core();
    struct Value {
        const char* what;
        index_t real, model;
    };
    const Value values[] = {
        {".available_size()", r.available_size(), m.available_size()},
        {".schedulable_available_size()", r.schedulable_available_size(),
         m.schedulable_available_size()},
        {".allocated_count()", r.allocated_count(), m.allocated_count()},
        {" band pages", core.band_pages(), m.allocated_pages()},
        {" pending-reuse pages", core.pending_reuse_pages(), m.pending_pages()},
        {" free virtual ids", core.free_virtual_page_count(), m.free_id_count()},
        {" gap bytes", core.gap_bytes(), m.gap_bytes()},
        {" virtual table pages", core.virtual_table_pages(), m.virtual_table_pages()},
    };
    for (const Value& v : values)
        if (v.real != v.model)
            return fmt::format("{}{}: real {} != model {}", n, v.what, v.real, v.model);

    const auto& holes = core.hole_list();
    if (!std::equal(holes.begin(), holes.end(), m.hole_list().begin(), m.hole_list().end()))
        return fmt::format("{}: hole list (reuse order) {} (real) vs {} (model)", n, holes,
                           m.hole_list());
    if (!std::equal(core.free_virtual_pages().begin(), core.free_virtual_pages().end(),
                    m.free_ids().begin(), m.free_ids().end()))
        return fmt::format("{}: free virtual ids differ in order or content", n);
    const auto& batches = core.pending_batches();
    bool pending_same = batches.size() == m.pending_batches().size();
    for (std::size_t i = 0; pending_same && i < batches.size(); ++i)
        pending_same = batches[i].readers_done == m.pending_batches()[i].event &&
                       batches[i].pages == m.pending_batches()[i].pages;
    if (!pending_same)
        return fmt::format("{}: the batches of pages pending reuse differ", n);

    auto it = m.live().begin();
    for (index_t v = 0; v < core.virtual_table_pages(); ++v) {
        index_t expected = v == 0 ? 0 : unbound;
        if (it != m.live().end() && it->first == v)
            expected = (it++)->second;
        const index_t got = core.physical_page_of(v);
        if (got != expected)
            return fmt::format(
                "{}: virtual page {} -> physical {} (real) vs {} (model; -1 = not live)", n, v, got,
                expected);
    }
    if (it != m.live().end())
        return fmt::format("{}: model has live virtual page {} beyond the id space", n, it->first);
    for (index_t p = 0; p < r.geometry().num_physical_pages; ++p) {
        const index_t got = core.virtual_page_of(p);
        const index_t expected = m.virtual_of_physical(p);
        if (got != expected)
            return fmt::format("{}: physical page {} -> virtual {} (real) vs {} (model)", n, p, got,
                               expected);
    }
    try {
        r.check_invariants();
    } catch (const std::exception& e) {
        return fmt::format("{}.check_invariants() threw: {}", n, e.what());
    }
    return {};
}

} // namespace kvpool::test
