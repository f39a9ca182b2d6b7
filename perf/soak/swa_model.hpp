// The SWA pair at the peer's geometry (peer-baseline.md): full and SWA sides
// each 32 layers x 8 KV heads x head_dim 128, bf16, K and V (128 KiB per token
// per side). The second side holds the same tokens while they are in the
// sliding window; the soak releases them with free_swa when they leave it.
#pragma once

#include "device_ids.hpp"

#include <kvpool/swa_pair.hpp>

#include <cstdint>

namespace kvpool::soak {

template <class ExecutionSpace> class SwaModel {
public:
    using pair_type = UnifiedSWAAllocator<ExecutionSpace>;
    using pool_type = typename pair_type::pool_type;
    using index_view = typename pair_type::index_view;
    using second_physical_view = kk::View<std::int32_t*, typename ExecutionSpace::memory_space>;
    static constexpr const char* name = "swa";
    static constexpr bool windowed = true;     // tokens leave the SWA side's window
    static constexpr bool state_slots = false; // the second side holds tokens
    static constexpr index_t bytes_per_token = 32 * 8 * 128 * 2 * 2;

    static PoolLayout layout(index_t tokens_per_side, index_t page_size) {
        // Both sides' tokens plus one page of sink for each.
        const index_t bytes = 2 * (tokens_per_side + page_size) * bytes_per_token;
        return PoolLayout(bytes, {{"full", bytes_per_token, page_size, GrowDirection::up, 0},
                                  {"swa", bytes_per_token, page_size, GrowDirection::down, 0}});
    }

    SwaModel(index_t tokens_per_side, index_t page_size, CompactionMode mode)
        : pool_(layout(tokens_per_side, page_size)), pair_(pool_, mode),
          second_physical_(kk::uninitialized<second_physical_view>(
              "kvpool_soak::swa_physical", static_cast<std::size_t>(full_capacity_tokens()))) {}

    pool_type& pool() { return pool_; }
    pair_type& pair() { return pair_; }
    const typename pair_type::side_type& full() const { return pair_.full(); }
    const typename pair_type::side_type& second() const { return pair_.swa(); }
    typename pair_type::side_type& second() { return pair_.swa(); }
    // More than tokens_per_side once free_swa has released SWA pages.
    index_t full_capacity_tokens() const {
        return pair_.full().geometry().page_capacity() * pair_.page_size();
    }

    void translate_full(const ExecutionSpace& space, const index_view& ids,
                        const index_view& out) const {
        pair_.translate_full(space, ids, out);
    }
    // The SWA layers' read path: int32 physical ids.
    second_physical_view translate_second(const ExecutionSpace& space,
                                          const index_view& ids) const {
        const auto out = slice(second_physical_, static_cast<index_t>(ids.extent(0)));
        pair_.translate_swa(space, ids, out);
        return out;
    }

private:
    pool_type pool_;
    pair_type pair_;
    second_physical_view second_physical_;
};

} // namespace kvpool::soak
