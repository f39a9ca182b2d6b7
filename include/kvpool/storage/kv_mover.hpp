// Wiring of a per-layer KV pool to an allocator: the pool's rows follow the
// allocator's page compaction.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/storage/pool_layout.hpp>
#include <kvpool/types.hpp>

#include <string>

namespace kvpool {

// A MultiEndedAllocator move callback (space, src_pages, dst_pages) that moves
// every layer's rows of the relocated pages in pool, for engines that keep KV
// in a per-layer pool instead of the unified buffer's pages. The callback holds
// a shallow copy of the pool (its Views), so the memory outlives it.
template <class Pool> auto make_page_mover(const Pool& pool, index_t page_size) {
    return [pool, page_size](const auto& space, const auto& src_pages, const auto& dst_pages) {
        pool.move_page_rows(space, dst_pages, src_pages, page_size);
    };
}

// Installs make_page_mover(pool, ...) on allocator, after checking that pool
// holds every physical page of the allocator's side.
template <class Allocator, class Pool> void set_kv_mover(Allocator& allocator, const Pool& pool) {
    const index_t page_size = allocator.page_size();
    const SubPoolGeometry& side = allocator.geometry();
    if (pool.num_slots() < side.num_physical_pages * page_size)
        throw Error(ErrorCode::invalid_argument,
                    "set_kv_mover: the pool holds " + std::to_string(pool.num_slots()) +
                        " token slots, but side '" + side.spec.name + "' has " +
                        std::to_string(side.num_physical_pages) + " pages of " +
                        std::to_string(page_size) + " tokens");
    allocator.set_move_callback(make_page_mover(pool, page_size));
}

} // namespace kvpool
