// The pages an id-following side (a pair's SWA side) binds for the pages its
// owner just allocated, and the tokens it frees with the owner's. A follower
// with pages `ratio` times smaller than the owner's binds owner page v as its
// pages v * ratio, ..., v * ratio + ratio - 1 (the same tokens: its id space
// is the owner's in its own pages). Host only.
#pragma once

#include <kvpool/detail/page_run_list.hpp>
#include <kvpool/types.hpp>

#include <vector>

namespace kvpool::detail {

// owner_pages itself for a follower of the owner's page size; else the
// follower's pages, written to scratch: a run of owner pages is one run of
// follower pages, ratio times longer.
inline const PageRunList& follower_pages(const PageRunList& owner_pages, index_t ratio,
                                         PageRunList& scratch) {
    if (ratio == 1)
        return owner_pages;
    scratch.clear();
    for (const SteppedRun& r : owner_pages.runs()) {
        if (r.step == 1) {
            scratch.append_run(r.first * ratio, r.count * ratio);
            continue;
        }
        for (index_t k = 0; k < r.count; ++k)
            scratch.append_run(r.at(k) * ratio, ratio);
    }
    return scratch;
}

// The follower's tokens to free with these owner tokens: the first token of
// each of its pages under the owner pages the tokens lie on (the follower
// holds all of them, written or not), in the tokens' order; tokens itself for
// a follower of the owner's page size.
inline const std::vector<index_t>& follower_tokens(const std::vector<index_t>& tokens,
                                                   index_t owner_page_size,
                                                   index_t follower_page_size,
                                                   std::vector<index_t>& scratch) {
    if (owner_page_size == follower_page_size)
        return tokens;
    scratch.clear();
    index_t last_page = -1;
    for (index_t t : tokens) {
        const index_t page = t / owner_page_size;
        if (page == last_page)
            continue;
        last_page = page;
        for (index_t first = page * owner_page_size; first < (page + 1) * owner_page_size;
             first += follower_page_size)
            scratch.push_back(first);
    }
    return scratch;
}

} // namespace kvpool::detail
