#include "prefix_cache.hpp"

#include <kvpool/error.hpp>

#include <algorithm>

namespace kvpool::sim {

PrefixCache::PrefixCache(PrefixCacheConfig config, CacheStore& store)
    : config_(config), store_(store), nodes_(1) {
    if (config_.page_size <= 0 || config_.block_tokens <= 0 ||
        config_.block_tokens % config_.page_size != 0)
        throw Error(ErrorCode::invalid_argument,
                    "PrefixCache: the page size must divide the block's tokens");
    nodes_[0].alive = true;
}

index_t PrefixCache::cacheable_tokens(const std::vector<std::uint64_t>& blocks,
                                      index_t prompt) const {
    return std::min(static_cast<index_t>(blocks.size()), prompt / config_.block_tokens) *
           config_.block_tokens;
}

// Are the window copies of the pages holding the `window` tokens before the
// end of path[0, depth) held?
bool PrefixCache::window_held(const std::vector<CacheNodeId>& path, std::size_t depth) const {
    const index_t ppb = pages_per_block();
    const index_t end = static_cast<index_t>(depth) * config_.block_tokens;
    const index_t first_page = std::max<index_t>(0, end - config_.window) / config_.page_size;
    for (std::size_t j = static_cast<std::size_t>(first_page / ppb); j < depth; ++j) {
        const index_t needed_from =
            std::max<index_t>(0, first_page - static_cast<index_t>(j) * ppb);
        if (nodes_[path[j]].window_from > needed_from)
            return false;
    }
    return true;
}

PrefixMatch PrefixCache::match(const std::vector<std::uint64_t>& blocks, index_t max_tokens) {
    PrefixMatch m;
    const auto max_blocks = static_cast<std::size_t>(
        std::min(static_cast<index_t>(blocks.size()), max_tokens / config_.block_tokens));
    CacheNodeId node = 0;
    for (std::size_t b = 0; b < max_blocks; ++b) {
        const auto child = nodes_[node].children.find(blocks[b]);
        if (child == nodes_[node].children.end())
            break;
        node = child->second;
        m.path.push_back(node);
    }
    std::size_t usable = m.path.size();
    for (; usable > 0; --usable) {
        const bool state_ok =
            !config_.state_slots || nodes_[m.path[usable - 1]].state_slot != unbound;
        if (state_ok && (config_.window == 0 || window_held(m.path, usable)))
            break;
    }
    m.path.resize(usable);
    const std::uint64_t now = ++clock_;
    for (CacheNodeId id : m.path) {
        unlist(id);
        nodes_[id].last_used = now;
        list(id);
        m.pages.insert(m.pages.end(), nodes_[id].pages.begin(), nodes_[id].pages.end());
    }
    m.hit_tokens = static_cast<index_t>(usable) * config_.block_tokens;
    return m;
}

void PrefixCache::lock(const PrefixMatch& match) {
    for (CacheNodeId id : match.path) {
        unlist(id);
        ++nodes_[id].locks;
    }
}

void PrefixCache::unlock(const PrefixMatch& match) {
    for (CacheNodeId id : match.path) {
        if (nodes_[id].locks == 0)
            throw Error(ErrorCode::invalid_state, "PrefixCache::unlock: the block is not locked");
        --nodes_[id].locks;
        list(id);
    }
}

CacheNodeId PrefixCache::new_node(CacheNodeId parent, std::uint64_t hash,
                                  std::vector<index_t> pages) {
    CacheNodeId id;
    if (!free_ids_.empty()) {
        id = free_ids_.back();
        free_ids_.pop_back();
    } else {
        id = static_cast<CacheNodeId>(nodes_.size());
        nodes_.emplace_back();
    }
    Node& n = nodes_[id];
    n = Node{};
    n.parent = parent;
    n.hash = hash;
    n.pages = std::move(pages);
    n.window_from = config_.window > 0 ? 0 : pages_per_block();
    n.alive = true;
    nodes_[parent].children.emplace(hash, id);
    ++stats_.blocks;
    return id;
}

CacheInsertion PrefixCache::insert(const std::vector<std::uint64_t>& blocks, index_t prompt,
                                   const PrefixMatch& match, const RequestKv& kv) {
    const index_t ppb = pages_per_block();
    const index_t end_blocks = cacheable_tokens(blocks, prompt) / config_.block_tokens;
    const auto page_at = [&](index_t i) { return kv.pages[static_cast<std::size_t>(i)]; };
    // The request holds the window copy of page i (a global index) still.
    const auto window_copy_held = [&](index_t i) {
        return (i >= kv.window_keep_begin && i < kv.window_keep_end) ||
               i >= kv.window_released_pages;
    };
    CacheInsertion out;
    std::vector<CacheNodeId> touched(match.path.begin(), match.path.end());
    std::vector<std::pair<CacheNodeId, index_t>> created; // node, block
    CacheNodeId node = match.path.empty() ? 0 : match.path.back();
    for (auto b = static_cast<index_t>(match.path.size()); b < end_blocks; ++b) {
        std::vector<index_t> pages;
        for (index_t i = b * ppb; i < (b + 1) * ppb; ++i)
            pages.push_back(page_at(i));
        unlist(node);
        const auto child = nodes_[node].children.find(blocks[static_cast<std::size_t>(b)]);
        if (child != nodes_[node].children.end()) {
            // Cached since this request matched: its own copy is not needed.
            out.pages_to_release.insert(out.pages_to_release.end(), pages.begin(), pages.end());
            node = child->second;
            unlist(node);
        } else {
            node = new_node(node, blocks[static_cast<std::size_t>(b)], std::move(pages));
            created.emplace_back(node, b);
            out.tokens_taken += config_.block_tokens;
        }
        touched.push_back(node);
    }
    for (auto i = static_cast<std::size_t>(end_blocks * ppb); i < kv.pages.size(); ++i)
        out.pages_to_release.push_back(kv.pages[i]);

    // Window copies: only those of the window before the inserted end stay.
    if (config_.window > 0) {
        const index_t first_kept =
            std::max<index_t>(0, end_blocks * config_.block_tokens - config_.window) /
            config_.page_size;
        for (const auto& [id, b] : created) {
            Node& n = nodes_[id];
            index_t from = std::clamp<index_t>(first_kept - b * ppb, 0, ppb);
            for (index_t i = from; i < ppb; ++i)
                if (!window_copy_held(b * ppb + i))
                    from = i + 1;
            n.window_from = 0;
            release_window(n, from);
        }
    }
    if (config_.state_slots && node != 0 && nodes_[node].state_slot == unbound &&
        kv.state_slot != unbound) {
        nodes_[node].state_slot = kv.state_slot;
        out.took_state_slot = true;
    }
    const std::uint64_t now = ++clock_;
    for (CacheNodeId id : touched) {
        unlist(id);
        nodes_[id].last_used = now;
    }
    unlock(match);
    for (CacheNodeId id : touched)
        list(id);
    return out;
}

void PrefixCache::release_window(Node& node, index_t to) {
    if (to <= node.window_from)
        return;
    store_.release_window_pages(
        std::vector<index_t>(node.pages.begin() + node.window_from, node.pages.begin() + to));
    node.window_from = to;
}

bool PrefixCache::can_evict(EvictionKind kind) const {
    switch (kind) {
    case EvictionKind::entry:
        return !entries_.empty();
    case EvictionKind::window:
        return !windows_.empty();
    case EvictionKind::state:
        break;
    }
    return !states_.empty();
}

bool PrefixCache::evict(EvictionKind kind) {
    if (!can_evict(kind))
        return false;
    switch (kind) {
    case EvictionKind::entry: {
        const CacheNodeId id = entries_.begin()->second;
        unlist(id);
        Node& n = nodes_[id];
        store_.release_pages(n.pages);
        if (n.state_slot != unbound)
            store_.release_state_slot(n.state_slot);
        remove_leaf(id);
        ++stats_.evicted_blocks;
        return true;
    }
    case EvictionKind::window: {
        const CacheNodeId id = windows_.begin()->second;
        unlist(id);
        release_window(nodes_[id], pages_per_block());
        list(id);
        ++stats_.evicted_windows;
        return true;
    }
    case EvictionKind::state:
        break;
    }
    const CacheNodeId id = states_.begin()->second;
    unlist(id);
    store_.release_state_slot(nodes_[id].state_slot);
    nodes_[id].state_slot = unbound;
    list(id);
    ++stats_.evicted_states;
    return true;
}

void PrefixCache::remove_leaf(CacheNodeId id) {
    const CacheNodeId parent = nodes_[id].parent;
    unlist(parent);
    nodes_[parent].children.erase(nodes_[id].hash);
    nodes_[id] = Node{};
    free_ids_.push_back(id);
    --stats_.blocks;
    list(parent);
}

void PrefixCache::clear() {
    while (evict(EvictionKind::entry)) {
    }
    if (stats_.blocks != 0)
        throw Error(ErrorCode::invalid_state, "PrefixCache::clear: blocks are still locked");
}

std::vector<std::uint64_t> PrefixCache::eviction_order() const {
    std::vector<std::uint64_t> out;
    for (const Key& key : entries_)
        out.push_back(nodes_[key.second].hash);
    return out;
}

void PrefixCache::unlist(CacheNodeId id) {
    const Key key{nodes_[id].last_used, id};
    entries_.erase(key);
    windows_.erase(key);
    states_.erase(key);
}

void PrefixCache::list(CacheNodeId id) {
    const Node& n = nodes_[id];
    if (id == 0 || !n.alive || n.locks > 0)
        return;
    const Key key{n.last_used, id};
    if (n.children.empty())
        entries_.insert(key);
    if (n.window_from < pages_per_block())
        windows_.insert(key);
    if (n.state_slot != unbound)
        states_.insert(key);
}

} // namespace kvpool::sim
