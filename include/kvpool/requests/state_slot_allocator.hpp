// The source of Mamba state slots for a HybridReqToTokenPool.
#pragma once

#include <kvpool/types.hpp>

#include <functional>
#include <optional>
#include <vector>

namespace kvpool {

// Where Mamba state slots come from: a host free list, or (later) a
// MultiEndedAllocator of page size 1. alloc returns nullopt when there is no
// room (nothing changed); free is given only slots alloc returned.
template <class ExecutionSpace> class StateSlotAllocator {
public:
    virtual ~StateSlotAllocator() = default;
    virtual std::optional<std::vector<index_t>> alloc(const ExecutionSpace& space, index_t n) = 0;
    virtual void free(const ExecutionSpace& space, const std::vector<index_t>& slots) = 0;
    // Every slot free, including slots handed on by the pool (kept or donated
    // track slots): the reference's clear() resets its whole Mamba allocator.
    virtual void clear(const ExecutionSpace& space) = 0;
    // Runs body so that, should it throw, what it allocated here is taken
    // back and the allocator is exactly as before (a request table's device
    // write after the allocation may fail). An allocator whose free does not
    // undo an alloc exactly (one that compacts, or reorders its free list)
    // overrides this; the default runs body as it is.
    virtual void atomically(const ExecutionSpace& space, const std::function<void()>& body) {
        (void)space;
        body();
    }
};

} // namespace kvpool
