// One request's KV in the pool: the scheduler's host copy of its row in the
// request-to-token table, and the token arithmetic on it that both pools share.
#pragma once

#include <kvpool/types.hpp>

#include <vector>

namespace kvpool::sim {

struct RequestKv {
    std::vector<index_t> pages;        // virtual page ids, in token order
    index_t tokens = 0;                // KV tokens held
    index_t window_released_pages = 0; // leading pages whose sliding-window copy is released
    index_t state_slot = unbound;      // the request's Mamba state slot
};

// The virtual id of the request's last token.
index_t last_token(const RequestKv& kv, index_t page_size);

// Fills kv from the ids a prefill allocation wrote (one per token).
void take_prefill_ids(RequestKv& kv, const std::vector<index_t>& ids, index_t tokens,
                      index_t page_size);

// Appends the token a decode allocation gave each request (ids[r] for batch[r]).
void take_decode_ids(const std::vector<RequestKv*>& batch, const std::vector<index_t>& ids,
                     index_t page_size);

// One token id per page from page `from` on (freeing a token frees its page).
std::vector<index_t> page_tokens(const RequestKv& kv, index_t from, index_t page_size);

} // namespace kvpool::sim
