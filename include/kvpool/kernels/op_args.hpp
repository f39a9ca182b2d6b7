// The argument of each device op: the Views it reads and writes, in one struct
// that the portable kernel takes as it is, the native kernel through raw(), and
// dispatch's checks through views(). View types are template parameters, so a
// caller passes staging slices, device Views or subviews alike.
#pragma once

#include <kvpool/kernels/native_kernels.hpp>
#include <kvpool/kernels/page_runs.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstdint>
#include <tuple>
#include <type_traits>

namespace kvpool::kernels {

template <class View> index_t length(const View& view) {
    return static_cast<index_t>(view.extent(0));
}

// Page src(i) onto page dst(i), page_bytes each, inside bytes. Sources and
// destinations are disjoint sets, so all copies run in parallel. With
// runs.count > 0 the moves are runs.at(i) and src, dst are not read.
template <class BytesView, class PageView> struct PageMoves {
    BytesView bytes;
    index_t page_bytes = 0;
    PageView src;
    PageView dst;
    MoveRuns runs{};

    index_t size() const { return runs.count > 0 ? runs.moves : length(src); }
    KOKKOS_INLINE_FUNCTION MoveRuns::Move at(index_t k) const {
        return runs.count > 0 ? runs.at(k) : MoveRuns::Move{src(k), dst(k)};
    }
    auto views() const { return std::tie(bytes, src, dst); }
    native::PageMoves raw() const {
        return {bytes.data(), page_bytes, src.data(), dst.data(), size(), runs};
    }
};
template <class BytesView, class PageView>
PageMoves(BytesView, index_t, PageView, PageView) -> PageMoves<BytesView, PageView>;
template <class BytesView, class PageView>
PageMoves(BytesView, index_t, PageView, PageView, MoveRuns) -> PageMoves<BytesView, PageView>;

// table(index(i)) = value(i) for the v2p and the p2v table. Indices within a
// table are distinct (the host plan guarantees it), so the writes do not race.
template <class TableView, class IndexView> struct TableWrites {
    TableView v2p;
    IndexView v2p_index;
    IndexView v2p_value;
    TableView p2v;
    IndexView p2v_index;
    IndexView p2v_value;

    auto views() const { return std::tie(v2p, v2p_index, v2p_value, p2v, p2v_index, p2v_value); }
    native::TableWrites raw() const {
        return {v2p.data(), v2p_index.data(), v2p_value.data(), length(v2p_index),
                p2v.data(), p2v_index.data(), p2v_value.data(), length(p2v_index)};
    }
};
template <class TableView, class IndexView>
TableWrites(TableView, IndexView, IndexView, TableView, IndexView, IndexView)
    -> TableWrites<TableView, IndexView>;

// A compaction plan: the page moves, then the table writes.
template <class Moves, class Writes> struct CompactionPlan {
    Moves moves;
    Writes writes;

    auto views() const { return std::tuple_cat(moves.views(), writes.views()); }
};
template <class Moves, class Writes> CompactionPlan(Moves, Writes) -> CompactionPlan<Moves, Writes>;

// Virtual token ids -> physical token ids; tombstones (and the -1 padding ids
// engines use) clamp to the sink slot 0. out may alias in. page_multiplier > 1
// gives dense ids instead: page p's tokens start at p * page_size *
// page_multiplier (an MLA side's per-layer dense views, one row run per layer
// and page).
template <class TableView, class InView, class OutView> struct Translation {
    TableView v2p;
    index_t page_size = 1;
    InView in;
    OutView out;
    index_t page_multiplier = 1;

    using out_type = std::remove_const_t<typename OutView::value_type>;
    auto views() const { return std::tie(v2p, in, out); }
    native::Translation<out_type> raw() const {
        return {v2p.data(),
                length(v2p),
                page_size,
                in.data(),
                length(in),
                out.data(),
                page_size * page_multiplier};
    }
};
template <class TableView, class InView, class OutView>
Translation(TableView, index_t, InView, OutView) -> Translation<TableView, InView, OutView>;
template <class TableView, class InView, class OutView>
Translation(TableView, index_t, InView, OutView, index_t)
    -> Translation<TableView, InView, OutView>;

// The id-following side of a pair (the SWA side), bound in the same launch as
// the owner's pages: v2p(v) = physical_pages(k), p2v(physical_pages(k)) = v for
// the owner's k-th new virtual page v. Default-constructed: there is none.
template <class TableView, class PageView> struct Follower {
    TableView v2p;
    TableView p2v;
    PageView physical_pages;

    KOKKOS_INLINE_FUNCTION void bind(index_t k, index_t v) const {
        if (v2p.data() != nullptr)
            bind_to(v, physical_pages(k));
    }
    KOKKOS_INLINE_FUNCTION void bind_to(index_t v, index_t p) const {
        if (v2p.data() == nullptr)
            return;
        v2p(v) = p;
        p2v(p) = v;
    }
    native::Follower raw() const { return {v2p.data(), p2v.data(), physical_pages.data()}; }
};

// Pages one allocation takes: virtual_pages(k) <-> physical_pages(k) on this
// side's tables and on the follower's; with runs.count > 0, runs.at(k) instead
// (the lists are then empty). With handout zeroing (zero_page_bytes, and
// zero_follower_page_bytes for the follower's pages, > 0), the alloc-bind
// launch also zeroes every byte of the new pages in zero_bytes: zero_chunks()
// work items more, zero_chunk(i) each (native::zero_chunk_at).
template <class TableView, class PageView,
          class BytesView = kk::View<std::uint8_t*, typename TableView::memory_space>>
struct NewPages {
    TableView v2p;
    TableView p2v;
    PageView virtual_pages;
    PageView physical_pages;
    index_t page_size = 1;
    Follower<TableView, PageView> follower;
    PageRuns runs;
    BytesView zero_bytes;
    index_t zero_page_bytes = 0;
    index_t zero_follower_page_bytes = 0;

    index_t size() const { return runs.count > 0 ? runs.pages : length(virtual_pages); }
    KOKKOS_INLINE_FUNCTION index_t virtual_page(index_t k) const {
        return runs.count > 0 ? runs.at(k).virtual_page : virtual_pages(k);
    }
    KOKKOS_INLINE_FUNCTION index_t bind(index_t k) const {
        if (runs.count > 0) {
            const PageRuns::Page page = runs.at(k);
            v2p(page.virtual_page) = page.physical_page;
            p2v(page.physical_page) = page.virtual_page;
            follower.bind_to(page.virtual_page, page.follower_page);
            return page.virtual_page;
        }
        const index_t v = virtual_pages(k);
        v2p(v) = physical_pages(k);
        p2v(physical_pages(k)) = v;
        follower.bind(k, v);
        return v;
    }
    index_t zero_chunks() const {
        return native::zero_chunks(size(), zero_page_bytes, zero_follower_page_bytes);
    }
    KOKKOS_INLINE_FUNCTION void zero_chunk(index_t i) const {
        const index_t pages =
            runs.count > 0 ? runs.pages : static_cast<index_t>(virtual_pages.extent(0));
        const native::ZeroChunk chunk =
            native::zero_chunk_at(pages, zero_page_bytes, zero_follower_page_bytes, i);
        index_t physical = 0;
        if (runs.count > 0) {
            const PageRuns::Page page = runs.at(chunk.page);
            physical = chunk.follower ? page.follower_page : page.physical_page;
        } else {
            physical =
                chunk.follower ? follower.physical_pages(chunk.page) : physical_pages(chunk.page);
        }
        const index_t page_bytes = chunk.follower ? zero_follower_page_bytes : zero_page_bytes;
        std::uint8_t* const page = zero_bytes.data() + physical * page_bytes;
        for (index_t b = chunk.begin; b < chunk.end; ++b)
            page[b] = 0;
    }
    auto views() const {
        return std::tie(v2p, p2v, virtual_pages, physical_pages, follower.v2p, follower.p2v,
                        follower.physical_pages, zero_bytes);
    }
    native::NewPages raw() const {
        return {v2p.data(),
                p2v.data(),
                virtual_pages.data(),
                physical_pages.data(),
                size(),
                page_size,
                follower.raw(),
                runs,
                {zero_bytes.data(), zero_page_bytes, zero_follower_page_bytes}};
    }
};
template <class TableView, class PageView>
NewPages(TableView, TableView, PageView, PageView, index_t) -> NewPages<TableView, PageView>;
template <class TableView, class PageView>
NewPages(TableView, TableView, PageView, PageView, index_t, Follower<TableView, PageView>)
    -> NewPages<TableView, PageView>;

// alloc(n): out(t) = virtual_pages(t / ps) * ps + t % ps, binding each page;
// an empty out binds the pages and emits nothing (a non-owner's binding).
template <class Pages, class OutView> struct AllocTokens {
    Pages pages;
    OutView out;

    auto views() const { return std::tuple_cat(pages.views(), std::tie(out)); }
    native::AllocTokens raw() const {
        return {pages.raw(), length(out) > 0 ? out.data() : nullptr};
    }
};
template <class Pages, class OutView> AllocTokens(Pages, OutView) -> AllocTokens<Pages, OutView>;

// alloc_extend: request r grows from prefix_lens(r) to seq_lens(r) tokens, its
// last prefix token being last_loc(r); it owns out[out_start(r), out_start(r) +
// seq - prefix) and the new pages from page_start(r) on.
template <class Pages, class IndexView, class LastLocView, class OutView> struct AllocExtend {
    Pages pages;
    IndexView prefix_lens;
    IndexView seq_lens;
    IndexView out_start;
    IndexView page_start;
    LastLocView last_loc;
    OutView out;

    auto views() const {
        return std::tuple_cat(
            pages.views(), std::tie(prefix_lens, seq_lens, out_start, page_start, last_loc, out));
    }
    native::AllocExtend raw() const {
        return {pages.raw(),       prefix_lens.data(), seq_lens.data(),  out_start.data(),
                page_start.data(), last_loc.data(),    length(seq_lens), out.data()};
    }
};
template <class Pages, class IndexView, class LastLocView, class OutView>
AllocExtend(Pages, IndexView, IndexView, IndexView, IndexView, LastLocView, OutView)
    -> AllocExtend<Pages, IndexView, LastLocView, OutView>;

// alloc_decode: one token per request (seq_lens count it); a new page, from
// page_start(r), only when the token starts one.
template <class Pages, class IndexView, class LastLocView, class OutView> struct AllocDecode {
    Pages pages;
    IndexView seq_lens;
    IndexView page_start;
    LastLocView last_loc;
    OutView out;

    auto views() const {
        return std::tuple_cat(pages.views(), std::tie(seq_lens, page_start, last_loc, out));
    }
    native::AllocDecode raw() const {
        return {pages.raw(),     seq_lens.data(),  page_start.data(),
                last_loc.data(), length(seq_lens), out.data()};
    }
};
template <class Pages, class IndexView, class LastLocView, class OutView>
AllocDecode(Pages, IndexView, IndexView, LastLocView, OutView)
    -> AllocDecode<Pages, IndexView, LastLocView, OutView>;

} // namespace kvpool::kernels
