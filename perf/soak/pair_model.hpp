// What the soak's pair models share: the unified pool and the pair over it,
// the full side (first in the layout), and a buffer for the second side's
// translated ids, as large as that side's capacity in entries (tokens or
// state slots).
#pragma once

#include "device_ids.hpp"

#include <kvpool/storage/pool_layout.hpp>

#include <utility>

namespace kvpool::soak {

template <class Pair, class SecondPhysicalView> class PairModel {
public:
    using pair_type = Pair;
    using pool_type = typename Pair::pool_type;
    using side_type = typename Pair::side_type;
    using index_view = typename Pair::index_view;
    using second_physical_view = SecondPhysicalView;

    pool_type& pool() { return pool_; }
    pair_type& pair() { return pair_; }
    const side_type& full() const { return pair_.full(); }
    index_t full_capacity_tokens() const {
        return pair_.full().geometry().page_capacity() * pair_.full().page_size();
    }

protected:
    // The layout's second side is the pair's second side.
    PairModel(PoolLayout layout, CompactionMode mode)
        : pool_(std::move(layout)), pair_(pool_, mode),
          second_physical_(kk::uninitialized<SecondPhysicalView>(
              "kvpool_soak::second_physical",
              static_cast<std::size_t>(pool_.layout().sub_pool(1).page_capacity() *
                                       pool_.layout().sub_pool(1).page_size()))) {}

    // A view of n translated ids of the second side.
    SecondPhysicalView second_physical(index_t n) const { return slice(second_physical_, n); }

    pool_type pool_;
    pair_type pair_;

private:
    SecondPhysicalView second_physical_;
};

} // namespace kvpool::soak
