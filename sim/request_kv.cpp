#include "request_kv.hpp"

namespace kvpool::sim {

index_t last_token(const RequestKv& kv, index_t page_size) {
    const index_t t = kv.tokens - 1;
    return kv.pages[static_cast<std::size_t>(t / page_size)] * page_size + t % page_size;
}

void take_prefill_ids(RequestKv& kv, const std::vector<index_t>& ids, index_t tokens,
                      index_t page_size) {
    kv.pages.clear();
    for (index_t t = 0; t < tokens; t += page_size)
        kv.pages.push_back(ids[static_cast<std::size_t>(t)] / page_size);
    kv.tokens = tokens;
    kv.window_released_pages = 0;
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

std::vector<index_t> page_tokens(const RequestKv& kv, index_t from, index_t page_size) {
    std::vector<index_t> tokens;
    for (std::size_t i = static_cast<std::size_t>(from); i < kv.pages.size(); ++i)
        tokens.push_back(kv.pages[i] * page_size);
    return tokens;
}

} // namespace kvpool::sim
