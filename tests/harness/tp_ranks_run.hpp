// Tensor-parallel ranks (tests/tp_ranks_test.cpp): one rank of each kind the
// test drives (two sides bound as peers, the SWA pair, the tri-pool) behind
// one interface, each over its own pool, stamping what it allocates for the
// data check.
#pragma once

#include <kvpool/mamba_swa_allocator.hpp>
#include <kvpool/swa_pair.hpp>

#include "test_support.hpp"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace kvpool::test::tp_ranks {

using SwaPair = UnifiedSWAAllocator<Space>;
using TriPool = UnifiedMambaSWAAllocator<Space>;
using Tokens = std::vector<index_t>;

inline constexpr int full_tag = 0, swa_tag = 1, other_tag = 2;

// What the driver keeps of the engine's requests (the same on every rank).
struct Request {
    Tokens tokens;    // every id, in order
    Tokens in_window; // those whose SWA pages are still bound (SWA kinds)
};
struct Book {
    std::vector<Request> requests;
    Tokens slots;              // the tri-pool's state slots
    std::vector<Tokens> other; // the peer side's own allocations (two sides)
};

// The interface the driver calls, one implementation per kind. Each rank owns
// its pool; nothing is shared between ranks.
struct Rank {
    virtual ~Rank() = default;
    virtual index_t page_size() const = 0;
    virtual std::uint64_t digest() const = 0;
    virtual bool extend(const Tokens& prefix, const Tokens& seq, const Tokens& last,
                        Tokens& out) = 0;
    virtual bool decode(const Tokens& seq, const Tokens& last, Tokens& out) = 0;
    virtual std::optional<Tokens> alloc(index_t tokens) = 0;
    virtual void free(const std::vector<Tokens>& requests, bool group) = 0;
    virtual void flush(bool urgent) = 0;
    virtual void forward(const CompletionTokenPtr& token, const Tokens& writes) = 0;
    virtual void drain() = 0;
    virtual void backup() = 0;
    virtual void restore() = 0;
    virtual void commit() = 0;
    virtual index_t available() const = 0;
    // Kind-specific calls (a kind without them is never asked).
    virtual void free_swa(const Tokens&) {}
    virtual std::optional<Tokens> alloc_slots(index_t) { return std::nullopt; }
    virtual void free_slots(const Tokens&) {}
    virtual std::optional<Tokens> alloc_other(index_t) { return std::nullopt; }
    virtual void free_other(const Tokens&) {}
    // check_invariants(), then the bad tokens of the data check.
    virtual std::size_t check(const Book& book) = 0;

protected:
    DataCheckScratch scratch_;
};

inline std::optional<Tokens> host_ids(const std::optional<IndexView>& ids) {
    if (!ids)
        return std::nullopt;
    return to_host(*ids);
}

// What the SWA pair and the tri-pool share: one composite over full and swa.
template <class Composite, class Snapshot> struct KvRank : Rank {
    KvRank(const PoolLayout& layout, CompactionMode mode) : pool(layout), kv(pool, mode) {}
    Pool pool;
    Composite kv;
    std::optional<Snapshot> snapshot;

    index_t page_size() const override { return kv.page_size(); }
    std::uint64_t digest() const override { return kv.state_digest(); }
    bool extend(const Tokens& prefix, const Tokens& seq, const Tokens& last, Tokens& out) override {
        auto view = kk::uninitialized<IndexView>("tp::extend", out.size());
        if (!kv.alloc_extend(Space(), prefix, seq, to_device(last), view))
            return false;
        out = to_host(view);
        stamp(out);
        return true;
    }
    bool decode(const Tokens& seq, const Tokens& last, Tokens& out) override {
        auto view = kk::uninitialized<IndexView>("tp::decode", out.size());
        if (!kv.alloc_decode(Space(), seq, to_device(last), view))
            return false;
        out = to_host(view);
        stamp(out);
        return true;
    }
    std::optional<Tokens> alloc(index_t tokens) override {
        auto ids = host_ids(kv.alloc(Space(), tokens));
        if (ids)
            stamp(*ids);
        return ids;
    }
    void free(const std::vector<Tokens>& requests, bool group) override {
        if (group)
            kv.free_group_begin();
        for (const Tokens& r : requests)
            kv.free(Space(), r);
        if (group)
            kv.free_group_end(Space());
    }
    void flush(bool urgent) override {
        if (urgent) {
            kv.full().flush(Space(), true);
            kv.swa().flush(Space(), true);
        } else {
            kv.flush_opportunistic(Space());
        }
    }
    void forward(const CompletionTokenPtr& token, const Tokens& writes) override {
        kv.set_latest_forward_done(token);
        kv.set_inflight_forward(token, writes);
    }
    void drain() override { kv.drain_pending_reuse(); }
    void backup() override { snapshot = kv.backup_state(); }
    void restore() override { kv.restore_state(Space(), *std::exchange(snapshot, std::nullopt)); }
    void commit() override { kv.commit_state(*std::exchange(snapshot, std::nullopt)); }
    index_t available() const override { return kv.available_size(); }
    void free_swa(const Tokens& tokens) override { kv.free_swa(Space(), tokens); }
    std::size_t check(const Book& book) override {
        kv.check_invariants();
        std::size_t bad = 0;
        for (const Request& r : book.requests) {
            bad += check_stamps(pool, kv.full(), full_tag, r.tokens, scratch_);
            bad += check_stamps(pool, kv.swa(), swa_tag, r.in_window, scratch_);
        }
        return bad;
    }
    void stamp(const Tokens& ids) {
        stamp_tokens(pool, kv.full(), full_tag, ids, scratch_);
        stamp_tokens(pool, kv.swa(), swa_tag, ids, scratch_);
    }
};

struct SwaRank final : KvRank<SwaPair, PairSnapshot> {
    SwaRank(index_t ps, index_t bytes, CompactionMode mode)
        : KvRank(PoolLayout(bytes, {spec("full", 24, ps, GrowDirection::up),
                                    spec("swa", 40, ps, GrowDirection::down)}),
                 mode) {}
};

struct TriRank final : KvRank<TriPool, MambaSWASnapshot> {
    TriRank(index_t ps, index_t bytes, CompactionMode mode)
        : KvRank(PoolLayout(bytes, {spec("mamba", 256, 1, GrowDirection::up),
                                    floating_spec("swa", 16, ps, 0.5),
                                    spec("full", 32, ps, GrowDirection::down)}),
                 mode) {}
    std::optional<Tokens> alloc_slots(index_t n) override {
        auto ids = host_ids(kv.alloc_state_slots(Space(), n));
        if (ids)
            stamp_tokens(pool, kv.state(), other_tag, *ids, scratch_);
        return ids;
    }
    void free_slots(const Tokens& slots) override { kv.free_state_slots(Space(), slots); }
    void flush(bool urgent) override {
        KvRank::flush(urgent);
        if (urgent)
            kv.state().flush(Space(), true);
    }
    std::size_t check(const Book& book) override {
        return KvRank::check(book) +
               check_stamps(pool, kv.state(), other_tag, book.slots, scratch_);
    }
};

// Two sides bound as peers, each owning its ids: the KV calls go to "full",
// the peer ("other") allocates and frees its own pages beside them.
struct SidesRank final : Rank {
    SidesRank(index_t ps, index_t bytes, CompactionMode mode)
        : pool(PoolLayout(bytes, {spec("full", 24, ps, GrowDirection::up),
                                  spec("other", 40, ps, GrowDirection::down)})),
          full(pool, "full", options(mode)), other(pool, "other", options(mode)) {
        full.bind_peer(other);
    }
    Pool pool;
    Allocator full, other;
    std::optional<std::pair<AllocatorSnapshot, AllocatorSnapshot>> snapshot;

    index_t page_size() const override { return full.page_size(); }
    std::uint64_t digest() const override {
        return detail::combine_digests("sides", {full.state_digest(), other.state_digest()});
    }
    bool extend(const Tokens& prefix, const Tokens& seq, const Tokens& last, Tokens& out) override {
        auto view = kk::uninitialized<IndexView>("tp::extend", out.size());
        if (!full.alloc_extend(Space(), prefix, seq, to_device(last), view))
            return false;
        out = to_host(view);
        stamp_tokens(pool, full, full_tag, out, scratch_);
        return true;
    }
    bool decode(const Tokens& seq, const Tokens& last, Tokens& out) override {
        auto view = kk::uninitialized<IndexView>("tp::decode", out.size());
        if (!full.alloc_decode(Space(), seq, to_device(last), view))
            return false;
        out = to_host(view);
        stamp_tokens(pool, full, full_tag, out, scratch_);
        return true;
    }
    std::optional<Tokens> alloc(index_t tokens) override {
        auto ids = host_ids(full.alloc(Space(), tokens));
        if (ids)
            stamp_tokens(pool, full, full_tag, *ids, scratch_);
        return ids;
    }
    void free(const std::vector<Tokens>& requests, bool group) override {
        if (group)
            full.free_group_begin();
        for (const Tokens& r : requests)
            full.free(Space(), r);
        if (group)
            full.free_group_end(Space());
    }
    void flush(bool urgent) override {
        full.flush(Space(), urgent);
        other.flush(Space(), urgent);
    }
    void forward(const CompletionTokenPtr& token, const Tokens& writes) override {
        full.set_latest_forward_done(token);
        other.set_latest_forward_done(token);
        full.set_inflight_forward(token, writes);
    }
    void drain() override {
        full.drain_pending_reuse();
        other.drain_pending_reuse();
    }
    void backup() override { snapshot.emplace(full.backup_state(), other.backup_state()); }
    void restore() override {
        full.restore_state(Space(), snapshot->first);
        other.restore_state(Space(), snapshot->second);
        snapshot.reset();
    }
    void commit() override {
        full.commit_state(snapshot->first);
        other.commit_state(snapshot->second);
        snapshot.reset();
    }
    index_t available() const override { return full.available_size(); }
    std::optional<Tokens> alloc_other(index_t tokens) override {
        auto ids = host_ids(other.alloc(Space(), tokens));
        if (ids)
            stamp_tokens(pool, other, other_tag, *ids, scratch_);
        return ids;
    }
    void free_other(const Tokens& tokens) override { other.free(Space(), tokens); }
    std::size_t check(const Book& book) override {
        full.check_invariants();
        other.check_invariants();
        std::size_t bad = 0;
        for (const Request& r : book.requests)
            bad += check_stamps(pool, full, full_tag, r.tokens, scratch_);
        for (const Tokens& o : book.other)
            bad += check_stamps(pool, other, other_tag, o, scratch_);
        return bad;
    }
};

enum class Kind { sides, swa, tri };
inline const char* name_of(Kind k) {
    return k == Kind::sides ? "sides" : k == Kind::swa ? "swa-pair" : "tri-pool";
}

inline std::unique_ptr<Rank> make_rank(Kind kind, index_t ps, index_t bytes, CompactionMode mode) {
    switch (kind) {
    case Kind::sides:
        return std::make_unique<SidesRank>(ps, bytes, mode);
    case Kind::swa:
        return std::make_unique<SwaRank>(ps, bytes, mode);
    case Kind::tri:
        return std::make_unique<TriRank>(ps, bytes, mode);
    }
    return nullptr;
}

} // namespace kvpool::test::tp_ranks
