// The Mamba pair at the peer's geometry (peer-baseline.md): a full side of 8
// layers (32 KiB per token) and 640 state slots of 25 MiB, one per running
// request. --tokens shrinks the slots' size with the full side (the count
// stays 640), so a small host run keeps the peer's proportions.
#pragma once

#include "device_ids.hpp"

#include <kvpool/mamba_pair.hpp>

#include <algorithm>

namespace kvpool::soak {

template <class ExecutionSpace> class MambaModel {
public:
    using pair_type = UnifiedMambaAllocator<ExecutionSpace>;
    using pool_type = typename pair_type::pool_type;
    using index_view = typename pair_type::index_view;
    using second_physical_view = index_view;
    static constexpr const char* name = "mamba";
    static constexpr bool windowed = false;
    static constexpr bool state_slots = true; // the second side holds one slot per request
    static constexpr index_t bytes_per_token = 8 * 8 * 128 * 2 * 2;
    static constexpr index_t slots = 640;
    static constexpr index_t peer_tokens = 262144;
    static constexpr index_t peer_slot_bytes = index_t(25) << 20;

    static index_t slot_bytes(index_t tokens_per_side) {
        return std::max<index_t>(4096, peer_slot_bytes / peer_tokens * tokens_per_side) / 8 * 8;
    }
    static PoolLayout layout(index_t tokens_per_side, index_t page_size) {
        const index_t state = slot_bytes(tokens_per_side);
        const index_t bytes = (tokens_per_side + page_size) * bytes_per_token + (slots + 1) * state;
        return PoolLayout(bytes, {{"full", bytes_per_token, page_size, GrowDirection::up, 0},
                                  {"mamba", state, 1, GrowDirection::down, 0}});
    }

    MambaModel(index_t tokens_per_side, index_t page_size, CompactionMode mode)
        : pool_(layout(tokens_per_side, page_size)), pair_(pool_, mode),
          second_physical_(kk::uninitialized<second_physical_view>(
              "kvpool_soak::state_physical",
              static_cast<std::size_t>(pair_.state().geometry().page_capacity()))) {}

    pool_type& pool() { return pool_; }
    pair_type& pair() { return pair_; }
    const typename pair_type::side_type& full() const { return pair_.full(); }
    const typename pair_type::side_type& second() const { return pair_.state(); }
    typename pair_type::side_type& second() { return pair_.state(); }
    index_t full_capacity_tokens() const {
        return pair_.full().geometry().page_capacity() * pair_.full().page_size();
    }

    void translate_full(const ExecutionSpace& space, const index_view& ids,
                        const index_view& out) const {
        pair_.translate(space, ids, out);
    }
    second_physical_view translate_second(const ExecutionSpace& space,
                                          const index_view& ids) const {
        const auto out = slice(second_physical_, static_cast<index_t>(ids.extent(0)));
        pair_.translate_state_slots(space, ids, out);
        return out;
    }

private:
    pool_type pool_;
    pair_type pair_;
    second_physical_view second_physical_;
};

} // namespace kvpool::soak
