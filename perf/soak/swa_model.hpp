// The SWA pair at the peer's geometry (peer-baseline.md): full and SWA sides
// each 32 layers x 8 KV heads x head_dim 128, bf16, K and V (128 KiB per token
// per side). The second side holds the same tokens while they are in the
// sliding window; the soak releases them with free_swa when they leave it.
#pragma once

#include "pair_model.hpp"

#include <kvpool/swa_pair.hpp>

#include <cstdint>

namespace kvpool::soak {

template <class ExecutionSpace>
class SwaModel : public PairModel<UnifiedSWAAllocator<ExecutionSpace>,
                                  kk::View<std::int32_t*, typename ExecutionSpace::memory_space>> {
    using Base = PairModel<UnifiedSWAAllocator<ExecutionSpace>,
                           kk::View<std::int32_t*, typename ExecutionSpace::memory_space>>;
    using Base::pair_;

public:
    using typename Base::index_view;
    using typename Base::second_physical_view;
    using typename Base::side_type;
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
        : Base(layout(tokens_per_side, page_size), mode) {}

    const side_type& second() const { return pair_.swa(); }
    side_type& second() { return pair_.swa(); }

    void translate_full(const ExecutionSpace& space, const index_view& ids,
                        const index_view& out) const {
        pair_.translate_full(space, ids, out);
    }
    // The SWA layers' read path: int32 physical ids.
    second_physical_view translate_second(const ExecutionSpace& space,
                                          const index_view& ids) const {
        const auto out = this->second_physical(static_cast<index_t>(ids.extent(0)));
        pair_.translate_swa(space, ids, out);
        return out;
    }
};

} // namespace kvpool::soak
