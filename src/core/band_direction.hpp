// Which way a side's band grows, in page terms. The band runs from its anchor
// (the side's end of the buffer) to its frontier, where it grows and shrinks;
// the watermark sits just past the frontier: on an up side the first page
// above the band, on a down side the page just below it. A floating band is an
// up band whose anchor moves (its first page).
#pragma once

#include <kvpool/storage/pool_layout.hpp>

#include <utility>

namespace kvpool::detail {

class BandDirection {
public:
    BandDirection(const SubPoolGeometry& geometry, index_t anchor)
        : up_(geometry.grow() != GrowDirection::down),
          first_page_(up_ ? anchor : geometry.min_page_index),
          end_page_(up_ ? geometry.num_physical_pages : anchor) {}

    bool up() const { return up_; }
    // The watermark of an empty band.
    index_t empty_watermark() const { return up_ ? first_page_ : end_page_ - 1; }
    // The watermark once the band has grown by this many pages (shrunk, when negative).
    index_t grown(index_t watermark, index_t pages) const {
        return up_ ? watermark + pages : watermark - pages;
    }
    // The band is the pages [band_begin, band_end).
    index_t band_begin(index_t watermark) const { return up_ ? first_page_ : watermark + 1; }
    index_t band_end(index_t watermark) const { return up_ ? watermark : end_page_; }
    // The band's pages nearest its frontier, this many, as [first, last).
    std::pair<index_t, index_t> frontier_pages(index_t watermark, index_t pages) const {
        return up_ ? std::make_pair(watermark - pages, watermark)
                   : std::make_pair(watermark + 1, watermark + 1 + pages);
    }
    // The band's page at its frontier, and from a page the next one toward the anchor.
    index_t frontier_page(index_t watermark) const { return up_ ? watermark - 1 : watermark + 1; }
    index_t toward_anchor(index_t page) const { return up_ ? page - 1 : page + 1; }
    // Whether page a lies nearer the anchor than page b.
    bool nearer_anchor(index_t a, index_t b) const { return up_ ? a < b : a > b; }
    // Whether the page is one of the side's own (past the padding sink).
    bool on_side(index_t page) const { return page >= first_page_ && page < end_page_; }

private:
    bool up_;
    index_t first_page_;
    index_t end_page_;
};

} // namespace kvpool::detail
