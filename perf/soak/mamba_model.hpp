// The Mamba pair at the peer's geometry (peer-baseline.md): a full side of 8
// layers (32 KiB per token) and 640 state slots of 25 MiB, one per running
// request. --tokens shrinks the slots' size with the full side (the count
// stays 640), so a small host run keeps the peer's proportions.
#pragma once

#include "pair_model.hpp"

#include <kvpool/mamba_pair.hpp>

#include <algorithm>

namespace kvpool::soak {

template <class ExecutionSpace>
class MambaModel : public PairModel<UnifiedMambaAllocator<ExecutionSpace>,
                                    typename UnifiedMambaAllocator<ExecutionSpace>::index_view> {
    using Base = PairModel<UnifiedMambaAllocator<ExecutionSpace>,
                           typename UnifiedMambaAllocator<ExecutionSpace>::index_view>;
    using Base::pair_;

public:
    using typename Base::index_view;
    using typename Base::second_physical_view;
    using typename Base::side_type;
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
        : Base(layout(tokens_per_side, page_size), mode) {}

    const side_type& second() const { return pair_.state(); }
    side_type& second() { return pair_.state(); }

    void translate_full(const ExecutionSpace& space, const index_view& ids,
                        const index_view& out) const {
        pair_.translate(space, ids, out);
    }
    second_physical_view translate_second(const ExecutionSpace& space,
                                          const index_view& ids) const {
        const auto out = this->second_physical(static_cast<index_t>(ids.extent(0)));
        pair_.translate_state_slots(space, ids, out);
        return out;
    }
};

} // namespace kvpool::soak
