// One request's KV in the pool: the scheduler's host copy of its row in the
// request-to-token table, and the token arithmetic on it that both pools share.
#pragma once

#include <kvpool/types.hpp>

#include <vector>

namespace kvpool::sim {

struct RequestKv {
    std::vector<index_t> pages; // virtual page ids, in token order
    index_t tokens = 0;         // KV tokens held
    // Leading pages shared from the prefix cache: the cache's, never released by the request.
    index_t shared_pages = 0;
    // Pages below this one have had their sliding-window copy released, wholly or in part
    // (or are shared).
    index_t window_released_pages = 0;
    // The same in pages of the sliding-window side, which may be smaller (a divisor).
    index_t window_released_window_pages = 0;
    // Pages [begin, end) keep their sliding-window copy until the request ends:
    // the window before the prefix it will leave in the cache.
    index_t window_keep_begin = 0;
    index_t window_keep_end = 0;
    index_t state_slot = unbound; // the request's Mamba state slot
};

// The virtual id of the request's last token.
index_t last_token(const RequestKv& kv, index_t page_size);

// Fills kv from the shared prefix's pages and the ids a prefill allocation
// wrote (one per new token).
void take_prefill_ids(RequestKv& kv, const std::vector<index_t>& prefix_pages,
                      const std::vector<index_t>& ids, index_t tokens, index_t page_size);

// Appends the token a decode allocation gave each request (ids[r] for batch[r]).
void take_decode_ids(const std::vector<RequestKv*>& batch, const std::vector<index_t>& ids,
                     index_t page_size);

} // namespace kvpool::sim
