// What the scheduler model needs from a pool, as a host-side interface: the
// scheduler stays free of Kokkos, and the implementations (swa_sim_pool.hpp,
// mamba_sim_pool.hpp, tri_sim_pool.hpp) drive the real kvpool allocators.
#pragma once

#include "prefix_cache.hpp"
#include "request_kv.hpp"

#include <kvpool/types.hpp>

#include <functional>
#include <vector>

namespace kvpool::sim {

// Room asked for at once: tokens on the full side, tokens on the sliding-window
// side, state slots.
struct PoolDemand {
    index_t full_tokens = 0;
    index_t window_tokens = 0;
    index_t state_slots = 0;
};

struct PoolStats {
    index_t pages_moved = 0;        // by compaction, every side
    double bytes_moved = 0.0;       // those pages' size in the model's real bytes
    double allocator_seconds = 0.0; // wall time inside allocator calls, device work included
    index_t live_full_tokens = 0;
    index_t live_second_entries = 0; // sliding-window tokens or state slots
    index_t live_third_entries = 0;  // the tri-pool's state slots
    index_t pages_allocated = 0;     // every side, cumulative
    index_t pages_freed = 0;
};

// The real (unscaled) page sizes of the pool's sides, for bytes-moved reports:
// the full side, the second side, and the tri-pool's third (state slots).
struct RealPageBytes {
    double first = 0.0;
    double second = 0.0;
    double third = 0.0;
};

// The pool also releases what the prefix cache evicts (CacheStore).
class SimPool : public CacheStore {
public:
    virtual index_t page_size() const = 0;
    // Tokens per page of the sliding-window side: a divisor of page_size().
    virtual index_t window_page_size() const { return page_size(); }
    // Could all of this be allocated now, on top of what is live?
    virtual bool fits(const PoolDemand& demand) const = 0;
    // A new request's KV: the shared prefix's pages (page-aligned, the prefix
    // cache's) and `tokens` new tokens after them, and its state slot when the
    // model has Mamba layers. False: no room, nothing changed.
    virtual bool prefill(RequestKv& kv, const std::vector<index_t>& prefix_pages,
                         index_t tokens) = 0;
    bool prefill(RequestKv& kv, index_t tokens) { return prefill(kv, {}, tokens); }
    // One token for every request of the batch. False: no room, nothing changed.
    virtual bool decode(const std::vector<RequestKv*>& batch) = 0;
    // Everything the request holds but its shared prefix; kv is empty afterwards.
    virtual void release(RequestKv& kv) = 0;
    // Sliding-window copies of the request's sliding-window pages (of
    // window_page_size() tokens) [window_released_window_pages, window_pages) but
    // those of the pages it keeps ([window_keep_begin, window_keep_end)).
    virtual void release_window(RequestKv& kv, index_t window_pages) = 0;
    // Releases between these two calls are applied together (one compaction).
    virtual void begin_releases() = 0;
    virtual void end_releases() = 0;
    // The engine has nothing to run until the next arrival: the lazy pool's
    // bounded flush packs holes there (otherwise only an allocation that falls
    // short packs them).
    virtual void idle_point() = 0;
    virtual PoolStats stats() const = 0;
    // The composite's eviction callback (kvpool/eviction.hpp): an allocation
    // short of room calls evict() (true: something was freed) before it fails,
    // and tries again. Empty: none.
    virtual void set_eviction(std::function<bool()> evict) = 0;
    // Throws kvpool::Error when an allocator invariant is broken.
    virtual void check_invariants() const = 0;
};

} // namespace kvpool::sim
