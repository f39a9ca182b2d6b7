// The prefix (radix) cache of the scheduler model: finished requests leave the
// KV of their prompt's full blocks here, keyed by the blocks' hashes (a trie
// of blocks: a radix tree cut at block boundaries), new requests share the
// longest usable cached prefix instead of prefilling it, and entries are
// evicted least recently used when the pool runs short.
//  - Full-attention KV: every cached block holds its pages.
//  - Sliding-window KV: only what the window needs, as SGLang's SWA radix
//    cache keeps it: the window before the end of each inserted prefix; the
//    rest of a block's window copies is released on insertion. A prefix is
//    usable only up to an end whose window is held.
//  - Mamba state: one state slot per inserted prefix end (SGLang's
//    MambaRadixCache keeps the state there); a prefix is usable only up to an
//    end with a state. Simplification: the finished request's slot becomes the
//    state of its cached prompt prefix (the simulator does not tell the state
//    after the prompt's last full block from the state at the request's end).
// Blocks a running request uses are locked and never evicted.
#pragma once

#include "request_kv.hpp"

#include <kvpool/types.hpp>

#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvpool::sim {

// What the cache releases through: the pool.
class CacheStore {
public:
    virtual ~CacheStore() = default;
    // Pages (virtual page ids): the full-attention KV and any window copy still held.
    virtual void release_pages(const std::vector<index_t>& pages) = 0;
    // The window copies of pages, the full-attention KV stays.
    virtual void release_window_pages(const std::vector<index_t>& pages) = 0;
    virtual void release_state_slot(index_t slot) = 0;
};

struct PrefixCacheConfig {
    index_t block_tokens = 512; // tokens per hashed block
    index_t page_size = 16;     // must divide block_tokens
    index_t window = 0;         // sliding window in tokens; 0: none
    bool state_slots = false;   // a Mamba state per usable prefix end
};

// What can be evicted, and what evicting it frees.
enum class EvictionKind {
    entry,  // a least recently used block without cached children: all it holds
    window, // the window copies of a block (fixed splits whose window side is short)
    state,  // the state slot of a prefix end (fixed splits whose state side is short)
};

using CacheNodeId = std::uint32_t;

struct PrefixMatch {
    std::vector<CacheNodeId> path; // the blocks shared, from the root's child on
    index_t hit_tokens = 0;
    std::vector<index_t> pages; // their pages, in token order
};

struct CacheInsertion {
    std::vector<index_t> pages_to_release; // the request's pages the cache did not take
    bool took_state_slot = false;
    index_t tokens_taken = 0; // of the request's own: its new cached blocks'
};

struct PrefixCacheStats {
    std::size_t blocks = 0; // cached
    std::size_t evicted_blocks = 0;
    std::size_t evicted_windows = 0;
    std::size_t evicted_states = 0;
};

class PrefixCache {
public:
    PrefixCache(PrefixCacheConfig config, CacheStore& store);

    // The longest usable cached prefix of these blocks, at most max_tokens long
    // (a request always prefills at least one token); marks it used now.
    PrefixMatch match(const std::vector<std::uint64_t>& blocks, index_t max_tokens);
    // A running request's prefix: locked while it runs.
    void lock(const PrefixMatch& match);
    void unlock(const PrefixMatch& match);

    // The prefix's end (in tokens) a request with these blocks and this prompt
    // will insert: its prompt's full blocks.
    index_t cacheable_tokens(const std::vector<std::uint64_t>& blocks, index_t prompt) const;

    // A request finished: its prompt's full blocks (blocks[0, cacheable_tokens
    // / block_tokens)) are cached with its pages, those already cached are
    // not; unlocks its match. kv: the request's pages, the first
    // kv.shared_pages of which are the match's; its window copies held are
    // those of the pages in [kv.window_keep_begin, kv.window_keep_end) and
    // from kv.window_released_pages on.
    CacheInsertion insert(const std::vector<std::uint64_t>& blocks, index_t prompt,
                          const PrefixMatch& match, const RequestKv& kv);

    // Evicts the least recently used unlocked item of this kind; false when
    // there is none.
    bool evict(EvictionKind kind);
    bool can_evict(EvictionKind kind) const;
    // Evicts everything; every lock must have been released.
    void clear();

    const PrefixCacheStats& stats() const { return stats_; }
    // The block hashes of the evictable blocks (entry kind), least recently used first.
    std::vector<std::uint64_t> eviction_order() const;

private:
    struct Node {
        CacheNodeId parent = 0;
        std::uint64_t hash = 0;
        std::unordered_map<std::uint64_t, CacheNodeId> children;
        std::vector<index_t> pages;
        index_t window_from = 0; // local index of the first page whose window copy is held
        index_t state_slot = unbound;
        std::uint32_t locks = 0;
        std::uint64_t last_used = 0;
        bool alive = false;
    };
    using Key = std::pair<std::uint64_t, CacheNodeId>; // (last used, id): LRU order

    index_t pages_per_block() const { return config_.block_tokens / config_.page_size; }
    bool window_held(const std::vector<CacheNodeId>& path, std::size_t depth) const;
    CacheNodeId new_node(CacheNodeId parent, std::uint64_t hash, std::vector<index_t> pages);
    void unlist(CacheNodeId id);
    void list(CacheNodeId id);
    void remove_leaf(CacheNodeId id);
    void release_window(Node& node, index_t to);

    PrefixCacheConfig config_;
    CacheStore& store_;
    std::vector<Node> nodes_; // nodes_[0]: the root
    std::vector<CacheNodeId> free_ids_;
    std::uint64_t clock_ = 0;
    std::set<Key> entries_; // unlocked blocks without children
    std::set<Key> windows_; // unlocked blocks holding window copies
    std::set<Key> states_;  // unlocked blocks holding a state slot
    PrefixCacheStats stats_;
};

} // namespace kvpool::sim
