// Inputs of the kernel tests: a prefill's random requests with the decode
// step after it, the lengths of a few runs of ids, and page lists as runs.
#pragma once

#include <kvpool/detail/kernel_page_runs.hpp>
#include <kvpool/types.hpp>

#include <random>
#include <vector>

namespace kvpool::test {

// A prefill's requests: prefix and total lengths, each one's last token
// before the new ones (-1 without a prefix), where its output and its new
// pages start; then the decode step after it, where every request whose new
// token starts a page takes one.
struct PrefillRequests {
    std::vector<index_t> prefix, seq, last, out_start, page_start;
    index_t tokens = 0, pages = 0;
    std::vector<index_t> decode_seq, decode_page_start;
    index_t decode_pages = 0;
};

// count requests: prefixes below max_prefix, below max_grow new tokens, last
// tokens from [last_first, last_first + last_spread).
inline PrefillRequests random_prefill_requests(std::mt19937_64& rng, int count, index_t page_size,
                                               index_t max_prefix, index_t max_grow,
                                               index_t last_first, index_t last_spread) {
    PrefillRequests r;
    for (int i = 0; i < count; ++i) {
        const auto p = static_cast<index_t>(rng() % static_cast<std::uint64_t>(max_prefix));
        const auto grow = static_cast<index_t>(rng() % static_cast<std::uint64_t>(max_grow));
        r.prefix.push_back(p);
        r.seq.push_back(p + grow);
        r.last.push_back(p == 0
                             ? -1
                             : last_first + static_cast<index_t>(
                                                rng() % static_cast<std::uint64_t>(last_spread)));
        r.out_start.push_back(r.tokens);
        r.page_start.push_back(r.pages);
        r.tokens += grow;
        r.pages += (p + grow + page_size - 1) / page_size - (p + page_size - 1) / page_size;
        r.decode_seq.push_back(p + grow + 1);
        r.decode_page_start.push_back(r.decode_pages);
        r.decode_pages += (p + grow) % page_size == 0 ? 1 : 0;
    }
    return r;
}

// 1 to 12 runs, each of min_length to min_length + 39 ids.
inline std::vector<index_t> random_run_lengths(std::mt19937_64& rng, index_t min_length) {
    const int run_count = 1 + static_cast<int>(rng() % 12);
    std::vector<index_t> lengths;
    for (int j = 0; j < run_count; ++j)
        lengths.push_back(min_length + static_cast<index_t>(rng() % 40));
    return lengths;
}

// The kernels' runs of the lists, as the table executor makes them: from the
// lists held as run lists (the physical list again for no follower).
inline kernels::PageRuns runs_of(const std::vector<index_t>& virtual_pages,
                                 const std::vector<index_t>& physical_pages,
                                 const std::vector<index_t>* follower_pages) {
    kvpool::detail::PageRunList v, p, f;
    v.assign(virtual_pages.data(), virtual_pages.size());
    p.assign(physical_pages.data(), physical_pages.size());
    if (follower_pages)
        f.assign(follower_pages->data(), follower_pages->size());
    return kvpool::detail::kernel_page_runs({&v, &p, follower_pages ? &f : &p});
}

} // namespace kvpool::test
