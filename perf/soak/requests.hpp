// The scheduler's host record of its running requests: each request's
// virtual token ids, and the token arithmetic the soak's calls need (one
// token per page frees the page; leading pages leave the sliding window).
#pragma once

#include <kvpool/types.hpp>

#include <vector>

namespace kvpool::soak {

struct Request {
    std::vector<index_t> tokens;       // virtual token ids, in order
    index_t target_tokens = 0;         // finished at this length
    index_t window_released_pages = 0; // leading pages whose SWA copy is released
    index_t state_slot = unbound;      // Mamba pair: the request's state slot
};

// One token per page of pages [from, to): what free and free_swa take.
inline void append_page_tokens(const Request& r, index_t page_size, index_t from, index_t to,
                               std::vector<index_t>& out) {
    for (index_t p = from; p < to; ++p)
        out.push_back(r.tokens[static_cast<std::size_t>(p * page_size)]);
}

inline index_t pages_of(const Request& r, index_t page_size) {
    return (static_cast<index_t>(r.tokens.size()) + page_size - 1) / page_size;
}

// Leading pages wholly outside a window of the last window_tokens tokens.
inline index_t expired_pages(const Request& r, index_t page_size, index_t window_tokens) {
    const index_t outside = static_cast<index_t>(r.tokens.size()) - window_tokens;
    return outside > 0 ? outside / page_size : 0;
}

// The tokens whose SWA pages are still bound.
inline void append_window_tokens(const Request& r, index_t page_size, std::vector<index_t>& out) {
    const auto first = static_cast<std::ptrdiff_t>(r.window_released_pages * page_size);
    out.insert(out.end(), r.tokens.begin() + first, r.tokens.end());
}

} // namespace kvpool::soak
