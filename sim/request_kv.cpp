#include "request_kv.hpp"

namespace kvpool::sim {

index_t last_token(const RequestKv& kv, index_t page_size) {
    const index_t t = kv.tokens - 1;
    return kv.pages[static_cast<std::size_t>(t / page_size)] * page_size + t % page_size;
}

void take_prefill_ids(RequestKv& kv, const std::vector<index_t>& prefix_pages,
                      const std::vector<index_t>& ids, index_t tokens, index_t page_size) {
    kv.pages = prefix_pages;
    for (index_t t = 0; t < tokens; t += page_size)
        kv.pages.push_back(ids[static_cast<std::size_t>(t)] / page_size);
    kv.shared_pages = static_cast<index_t>(prefix_pages.size());
    kv.tokens = kv.shared_pages * page_size + tokens;
    kv.window_released_pages = kv.shared_pages;
}

void take_decode_ids(const std::vector<RequestKv*>& batch, const std::vector<index_t>& ids,
                     index_t page_size) {
    for (std::size_t r = 0; r < batch.size(); ++r) {
        RequestKv& kv = *batch[r];
        if (kv.tokens % page_size == 0)
            kv.pages.push_back(ids[r] / page_size);
        ++kv.tokens;
    }
}

} // namespace kvpool::sim
