// C API: the KV-allocator handle (c_api_kv.h). Every allocator answers the
// shared ops through one interface, KvAllocator; KvOn<S, C> implements it for
// each allocator type C (a side, the SWA pair, the Mamba pair, the tri-pool)
// by calling C's own member, or refusing an op C has no part for (told at
// compile time). An op is one entry point, one virtual and one member of KvOn
// here, whatever the number of composites.
#include "pairs.hpp"
#include "side_calls.hpp"

#include <kvpool/c_api_kv.h>

#include <variant>

namespace kvpool::capi {

using KvSnapshotState = std::variant<AllocatorSnapshot, PairSnapshot, MambaSWASnapshot>;

class KvAllocator {
public:
    virtual ~KvAllocator() = default;
    virtual int kind() const = 0;
    virtual int sides() const = 0;
    virtual kvpool_multi_ended_allocator* side(int which) const = 0;
    virtual index_t available_size() const = 0;
    virtual bool alloc(void* stream, const AllocCall& call) = 0;
    virtual bool alloc_extend(void* stream, const ExtendCall& call) = 0;
    virtual bool alloc_decode(void* stream, const DecodeCall& call) = 0;
    virtual bool alloc_state_slots(void* stream, const StateSlotsCall& call) = 0;
    virtual void free(void* stream, const std::vector<index_t>& tokens) = 0;
    virtual void free_swa(void* stream, const std::vector<index_t>& tokens) = 0;
    virtual void free_group_begin() = 0;
    virtual void free_group_end(void* stream) = 0;
    virtual index_t flush(void* stream) = 0;
    virtual void drain_pending_reuse() = 0;
    virtual void set_latest_forward_done(const CompletionTokenPtr& token) = 0;
    virtual void set_inflight_forward(const CompletionTokenPtr& token,
                                      const std::vector<index_t>& tokens) = 0;
    virtual void gate_transfer(const CompletionTokenPtr& token, const std::vector<index_t>& tokens,
                               const std::vector<index_t>& slots) = 0;
    virtual void translate(void* stream, const std::int64_t* tokens, std::int64_t n, void* out,
                           bool out_int32) const = 0;
    virtual void set_eviction_callback(EvictionCallback callback) = 0;
    virtual std::uint64_t state_digest() const = 0;
    virtual KvSnapshotState backup_state() = 0;
    virtual void restore_state(void* stream, const KvSnapshotState& snapshot) = 0;
    virtual void commit_state(const KvSnapshotState& snapshot) = 0;
    virtual void clear(void* stream) = 0;
    virtual void check_invariants(void* stream) const = 0;
};

namespace {

template <class S> using Side = MultiEndedAllocator<S>;
template <class S> using Sides = std::vector<Side<S>*>;

// Each allocator type's KVPOOL_KV_* kind, name (for messages) and sides, in
// the order kvpool_*_side numbers them.
template <class S> int kind_of(const Side<S>&) {
    return KVPOOL_KV_MULTI_ENDED_ALLOCATOR;
}
template <class S> int kind_of(const UnifiedSWAAllocator<S>&) {
    return KVPOOL_KV_UNIFIED_SWA_ALLOCATOR;
}
template <class S> int kind_of(const UnifiedMambaAllocator<S>&) {
    return KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR;
}
template <class S> int kind_of(const UnifiedMambaSWAAllocator<S>&) {
    return KVPOOL_KV_UNIFIED_MAMBA_SWA_ALLOCATOR;
}
constexpr const char* kind_names[] = {"a side", "the SWA pair", "the Mamba pair", "the tri-pool"};

template <class S> Sides<S> sides_of(Side<S>& side) {
    return {&side};
}
template <class S> Sides<S> sides_of(UnifiedSWAAllocator<S>& p) {
    return {&p.full(), &p.swa()};
}
template <class S> Sides<S> sides_of(UnifiedMambaAllocator<S>& p) {
    return {&p.full(), &p.state()};
}
template <class S> Sides<S> sides_of(UnifiedMambaSWAAllocator<S>& t) {
    return {&t.full(), &t.swa(), &t.state()};
}

// Whether C has a part for an op (its member compiles with these arguments).
template <class C, class S, class = void> struct HasFreeSwa : std::false_type {};
template <class C, class S>
struct HasFreeSwa<C, S,
                  std::void_t<decltype(std::declval<C&>().free_swa(
                      std::declval<const S&>(), std::declval<const std::vector<index_t>&>()))>>
    : std::true_type {};
template <class C, class S, class = void> struct HasStateSlots : std::false_type {};
template <class C, class S>
struct HasStateSlots<C, S,
                     std::void_t<decltype(std::declval<C&>().alloc_state_slots(
                         std::declval<const S&>(), index_t(0),
                         std::declval<const typename Side<S>::index_view&>()))>> : std::true_type {
};
template <class C, class = void> struct HasEviction : std::false_type {};
template <class C>
struct HasEviction<C, std::void_t<decltype(std::declval<C&>().set_eviction_callback(
                          std::declval<EvictionCallback>()))>> : std::true_type {};

template <class S, class C> class KvOn final : public KvAllocator {
public:
    KvOn(std::shared_ptr<SideOwner> owner, C& c, std::shared_ptr<PoolOn<S>> pool)
        : owner_(std::move(owner)), c_(c), pool_(std::move(pool)), sides_(sides_of(c)) {}

    int kind() const override { return kind_of(c_); }
    int sides() const override { return static_cast<int>(sides_.size()); }
    kvpool_multi_ended_allocator* side(int which) const override {
        require(which >= 0 && which < sides(),
                "kvpool_kv_side: " + std::string(name()) + " has no side " + std::to_string(which) +
                    " (its sides are 0 to " + std::to_string(sides() - 1) + ")");
        return new_side_handle(owner_, *sides_[static_cast<std::size_t>(which)], pool_);
    }
    index_t available_size() const override { return c_.available_size(); }
    bool alloc(void* stream, const AllocCall& call) override {
        return call.run(c_, space_of<S>(stream));
    }
    bool alloc_extend(void* stream, const ExtendCall& call) override {
        return call.run(c_, space_of<S>(stream));
    }
    bool alloc_decode(void* stream, const DecodeCall& call) override {
        return call.run(c_, space_of<S>(stream));
    }
    bool alloc_state_slots(void* stream, const StateSlotsCall& call) override {
        if constexpr (HasStateSlots<C, S>::value)
            return call.run(c_, space_of<S>(stream));
        else
            refuse("alloc_state_slots", "has no state slots");
    }
    void free(void* stream, const std::vector<index_t>& tokens) override {
        c_.free(space_of<S>(stream), tokens);
    }
    void free_swa(void* stream, const std::vector<index_t>& tokens) override {
        if constexpr (HasFreeSwa<C, S>::value)
            c_.free_swa(space_of<S>(stream), tokens);
        else
            refuse("free_swa", "has no sliding-window side");
    }
    void free_group_begin() override { c_.free_group_begin(); }
    void free_group_end(void* stream) override { c_.free_group_end(space_of<S>(stream)); }
    index_t flush(void* stream) override { return c_.flush_opportunistic(space_of<S>(stream)); }
    void drain_pending_reuse() override { c_.drain_pending_reuse(); }
    void set_latest_forward_done(const CompletionTokenPtr& token) override {
        c_.set_latest_forward_done(token);
    }
    void set_inflight_forward(const CompletionTokenPtr& token,
                              const std::vector<index_t>& tokens) override {
        c_.set_inflight_forward(token, tokens);
    }
    void gate_transfer(const CompletionTokenPtr& token, const std::vector<index_t>& tokens,
                       const std::vector<index_t>& slots) override {
        if constexpr (HasStateSlots<C, S>::value) {
            c_.gate_transfer(token, tokens, slots);
        } else {
            if (!slots.empty())
                refuse("gate_transfer", "has no state slots to gate");
            c_.gate_transfer(token, tokens);
        }
    }
    void translate(void* stream, const std::int64_t* tokens, std::int64_t n, void* out,
                   bool out_int32) const override {
        translate_into(*sides_.front(), space_of<S>(stream), tokens, n, out, out_int32);
    }
    void set_eviction_callback(EvictionCallback callback) override {
        if constexpr (HasEviction<C>::value)
            c_.set_eviction_callback(std::move(callback));
        else
            refuse("set_eviction_callback", "takes no eviction callback (a composite does)");
    }
    std::uint64_t state_digest() const override { return c_.state_digest(); }
    KvSnapshotState backup_state() override { return c_.backup_state(); }
    void restore_state(void* stream, const KvSnapshotState& snapshot) override {
        c_.restore_state(space_of<S>(stream), own(snapshot, "restore_state"));
    }
    void commit_state(const KvSnapshotState& snapshot) override {
        c_.commit_state(own(snapshot, "commit_state"));
    }
    void clear(void* stream) override { c_.clear(space_of<S>(stream)); }
    void check_invariants(void* stream) const override { c_.check_invariants(space_of<S>(stream)); }

private:
    using Snapshot = decltype(std::declval<C&>().backup_state());

    const char* name() const { return kind_names[kind()]; }
    [[noreturn]] void refuse(const char* op, const char* why) const {
        argument_error("kvpool_kv_" + std::string(op) + ": " + name() + " " + why);
    }
    // The snapshot as C's own; one of another kind of allocator is refused (C
    // itself refuses one of another allocator of its kind).
    const Snapshot& own(const KvSnapshotState& snapshot, const char* op) const {
        const auto* s = std::get_if<Snapshot>(&snapshot);
        if (s == nullptr)
            throw Error(ErrorCode::invalid_state,
                        "kvpool_kv_" + std::string(op) + ": the snapshot is not of " + name());
        return *s;
    }

    std::shared_ptr<SideOwner> owner_;
    C& c_;
    std::shared_ptr<PoolOn<S>> pool_;
    Sides<S> sides_;
};

template <class S, class C>
std::unique_ptr<KvAllocator> kv_on(std::shared_ptr<SideOwner> owner, C& c,
                                   std::shared_ptr<PoolOn<S>> pool) {
    return std::make_unique<KvOn<S, C>>(std::move(owner), c, std::move(pool));
}

} // namespace
} // namespace kvpool::capi

struct kvpool_kv_allocator {
    kvpool::capi::LiveHandle live;
    std::unique_ptr<kvpool::capi::KvAllocator> kv;
    bool caller_checks_memory = false; // kvpool_kv_set_caller_checks_memory
};

struct kvpool_kv_snapshot {
    kvpool::capi::KvSnapshotState snapshot;
};

using namespace kvpool::capi;
using kvpool::index_t;

namespace {

// Runs f(the handle's allocator) inside guarded(), the reachability checks
// skipped where its caller checks memory itself; NULL: invalid_argument.
template <class F> kvpool_status on_kv(const kvpool_kv_allocator* kv, F&& f) {
    return guarded([&] {
        const kvpool_kv_allocator& handle = deref(kv, "kv");
        const CallerChecksMemory checks(handle.caller_checks_memory);
        f(*handle.kv);
    });
}

void hand_out(std::unique_ptr<KvAllocator> allocator, kvpool_kv_allocator** out) {
    auto handle = std::make_unique<kvpool_kv_allocator>();
    handle->kv = std::move(allocator);
    *out = handle.release();
}

// A KV handle on a composite, which it keeps alive.
template <class Handle> kvpool_status pair_kv(Handle* pair, kvpool_kv_allocator** out) {
    return on_pair(pair, [&](auto& p, auto& ref) {
        using S = typename std::decay_t<decltype(ref)>::execution_space;
        require(out != nullptr, "out is NULL");
        hand_out(kv_on<S>(ref.holder, p, ref.holder->pool), out);
    });
}

kvpool::CompletionTokenPtr token_of(const kvpool_completion_token* token) {
    return token != nullptr ? token->token : nullptr;
}

} // namespace

extern "C" {

kvpool_status kvpool_multi_ended_allocator_kv(kvpool_multi_ended_allocator* a,
                                              kvpool_kv_allocator** out) {
    return on(a, "allocator", [&](auto& ref) {
        using S = typename std::decay_t<decltype(ref)>::execution_space;
        require(out != nullptr, "out is NULL");
        hand_out(kv_on<S>(ref.owner, *ref.side, ref.pool), out);
    });
}

kvpool_status kvpool_unified_swa_allocator_kv(kvpool_unified_swa_allocator* pair,
                                              kvpool_kv_allocator** out) {
    return pair_kv(pair, out);
}

kvpool_status kvpool_unified_mamba_allocator_kv(kvpool_unified_mamba_allocator* pair,
                                                kvpool_kv_allocator** out) {
    return pair_kv(pair, out);
}

kvpool_status kvpool_unified_mamba_swa_allocator_kv(kvpool_unified_mamba_swa_allocator* tri,
                                                    kvpool_kv_allocator** out) {
    return pair_kv(tri, out);
}

void kvpool_kv_destroy(kvpool_kv_allocator* kv) {
    delete kv;
}

kvpool_status kvpool_kv_kind(const kvpool_kv_allocator* kv, int* kind, int* sides) {
    return on_kv(kv, [&](const KvAllocator& k) {
        deref(kind, "kind") = k.kind();
        deref(sides, "sides") = k.sides();
    });
}

kvpool_status kvpool_kv_side(kvpool_kv_allocator* kv, int which,
                             kvpool_multi_ended_allocator** out) {
    return on_kv(kv, [&](const KvAllocator& k) {
        require(out != nullptr, "out is NULL");
        *out = k.side(which);
    });
}

kvpool_status kvpool_kv_set_caller_checks_memory(kvpool_kv_allocator* kv, int caller_checks) {
    return guarded([&] {
        require(caller_checks == 0 || caller_checks == 1,
                "kvpool_kv_set_caller_checks_memory: caller_checks is 0 or 1");
        deref(kv, "kv").caller_checks_memory = caller_checks == 1;
    });
}

kvpool_status kvpool_kv_available_size(const kvpool_kv_allocator* kv, int64_t* out) {
    return on_kv(kv, [&](const KvAllocator& k) { deref(out, "out") = k.available_size(); });
}

kvpool_status kvpool_kv_alloc(kvpool_kv_allocator* kv, void* stream, int64_t need_size,
                              int64_t* out, int* allocated) {
    return on_kv(kv, [&](KvAllocator& k) {
        int& ok = deref(allocated, "allocated");
        ok = k.alloc(stream, AllocCall(need_size, out)) ? 1 : 0;
    });
}

kvpool_status kvpool_kv_alloc_extend(kvpool_kv_allocator* kv, void* stream,
                                     const int64_t* prefix_lens_host, const int64_t* seq_lens_host,
                                     int64_t batch, const int64_t* last_loc, int64_t* out,
                                     int64_t out_length, int* allocated) {
    return on_kv(kv, [&](KvAllocator& k) {
        int& ok = deref(allocated, "allocated");
        ok = k.alloc_extend(stream, ExtendCall(prefix_lens_host, seq_lens_host, batch, last_loc,
                                               out, out_length))
                 ? 1
                 : 0;
    });
}

kvpool_status kvpool_kv_alloc_decode(kvpool_kv_allocator* kv, void* stream,
                                     const int64_t* seq_lens_host, int64_t batch,
                                     const int64_t* last_loc, int64_t* out, int* allocated) {
    return on_kv(kv, [&](KvAllocator& k) {
        int& ok = deref(allocated, "allocated");
        ok = k.alloc_decode(stream, DecodeCall(seq_lens_host, batch, last_loc, out)) ? 1 : 0;
    });
}

kvpool_status kvpool_kv_alloc_state_slots(kvpool_kv_allocator* kv, void* stream, int64_t count,
                                          int64_t* out, int* allocated) {
    return on_kv(kv, [&](KvAllocator& k) {
        int& ok = deref(allocated, "allocated");
        ok = k.alloc_state_slots(stream, StateSlotsCall(count, out)) ? 1 : 0;
    });
}

kvpool_status kvpool_kv_free(kvpool_kv_allocator* kv, void* stream,
                             const int64_t* virtual_tokens_host, int64_t count) {
    return on_kv(kv, [&](KvAllocator& k) { k.free(stream, host_ids(virtual_tokens_host, count)); });
}

kvpool_status kvpool_kv_free_swa(kvpool_kv_allocator* kv, void* stream,
                                 const int64_t* virtual_tokens_host, int64_t count) {
    return on_kv(kv,
                 [&](KvAllocator& k) { k.free_swa(stream, host_ids(virtual_tokens_host, count)); });
}

kvpool_status kvpool_kv_free_group_begin(kvpool_kv_allocator* kv) {
    return on_kv(kv, [&](KvAllocator& k) { k.free_group_begin(); });
}

kvpool_status kvpool_kv_free_group_end(kvpool_kv_allocator* kv, void* stream) {
    return on_kv(kv, [&](KvAllocator& k) { k.free_group_end(stream); });
}

kvpool_status kvpool_kv_flush(kvpool_kv_allocator* kv, void* stream, int64_t* moved) {
    return on_kv(kv, [&](KvAllocator& k) {
        const index_t n = k.flush(stream);
        if (moved != nullptr)
            *moved = n;
    });
}

kvpool_status kvpool_kv_drain_pending_reuse(kvpool_kv_allocator* kv) {
    return on_kv(kv, [&](KvAllocator& k) { k.drain_pending_reuse(); });
}

kvpool_status kvpool_kv_set_latest_forward_done(kvpool_kv_allocator* kv,
                                                const kvpool_completion_token* token) {
    return on_kv(kv, [&](KvAllocator& k) { k.set_latest_forward_done(token_of(token)); });
}

kvpool_status kvpool_kv_set_inflight_forward(kvpool_kv_allocator* kv,
                                             const kvpool_completion_token* token,
                                             const int64_t* virtual_tokens_host, int64_t count) {
    return on_kv(kv, [&](KvAllocator& k) {
        k.set_inflight_forward(token_of(token), host_ids(virtual_tokens_host, count));
    });
}

kvpool_status kvpool_kv_gate_transfer(kvpool_kv_allocator* kv, const kvpool_completion_token* token,
                                      const int64_t* virtual_tokens_host, int64_t count,
                                      const int64_t* state_slots_host, int64_t slot_count) {
    return on_kv(kv, [&](KvAllocator& k) {
        k.gate_transfer(token_of(token), host_ids(virtual_tokens_host, count),
                        host_ids(state_slots_host, slot_count));
    });
}

kvpool_status kvpool_kv_translate(const kvpool_kv_allocator* kv, void* stream,
                                  const int64_t* virtual_tokens, int64_t n, void* out,
                                  int out_int32) {
    return on_kv(kv, [&](const KvAllocator& k) {
        k.translate(stream, virtual_tokens, n, out, out_int32 != 0);
    });
}

kvpool_status kvpool_kv_set_eviction_callback(kvpool_kv_allocator* kv, kvpool_evict_fn evict,
                                              void* user) {
    return on_kv(
        kv, [&](KvAllocator& k) { k.set_eviction_callback(eviction_callback_of(evict, user)); });
}

kvpool_status kvpool_kv_state_digest(const kvpool_kv_allocator* kv, uint64_t* out) {
    return on_kv(kv, [&](const KvAllocator& k) { deref(out, "out") = k.state_digest(); });
}

kvpool_status kvpool_kv_backup_state(kvpool_kv_allocator* kv, kvpool_kv_snapshot** out) {
    return on_kv(kv, [&](KvAllocator& k) {
        require(out != nullptr, "kvpool_kv_backup_state: out is NULL");
        auto snapshot = std::make_unique<kvpool_kv_snapshot>();
        snapshot->snapshot = k.backup_state();
        *out = snapshot.release();
    });
}

kvpool_status kvpool_kv_restore_state(kvpool_kv_allocator* kv, void* stream,
                                      const kvpool_kv_snapshot* snapshot) {
    return on_kv(
        kv, [&](KvAllocator& k) { k.restore_state(stream, deref(snapshot, "snapshot").snapshot); });
}

kvpool_status kvpool_kv_commit_state(kvpool_kv_allocator* kv, const kvpool_kv_snapshot* snapshot) {
    return on_kv(kv, [&](KvAllocator& k) { k.commit_state(deref(snapshot, "snapshot").snapshot); });
}

void kvpool_kv_snapshot_destroy(kvpool_kv_snapshot* snapshot) {
    delete snapshot;
}

kvpool_status kvpool_kv_clear(kvpool_kv_allocator* kv, void* stream) {
    return on_kv(kv, [&](KvAllocator& k) { k.clear(stream); });
}

kvpool_status kvpool_kv_check_invariants(const kvpool_kv_allocator* kv, void* stream) {
    return on_kv(kv, [&](const KvAllocator& k) { k.check_invariants(stream); });
}

} // extern "C"
