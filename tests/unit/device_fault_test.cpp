// Device failures injected through the seam (device_faults.hpp) at every
// device operation of every allocator call in turn, each kind (allocation,
// upload, copy, launch) on its own: the call reports Error(ErrorCode::device)
// and leaves every side exactly as it was (host state, hole and free-id
// order, pending batches, every v2p entry, device tables, stamped KV bytes);
// the allocator stays usable: the same call then succeeds and leaves the sides
// as a twin that never saw a fault. Runs on every backend; on CUDA the faults
// take the runtime's own error codes and messages.
#include "atomicity_harness.hpp"
#include "device_fault_support.hpp"
#include <kvpool/device_faults.hpp>
#include <kvpool/mamba_pair.hpp>
#include <kvpool/swa_pair.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;
using MambaPair = UnifiedMambaAllocator<Space>;

// A call's own check: a CHECK would catch the injected fault, which must
// leave the call instead.
void expect(bool ok) {
    if (!ok)
        FAIL("the call returned no allocation");
}
template <class T> void expect(const std::optional<T>& result) {
    expect(result.has_value());
}

// Two requests of the live tokens grown by alloc_extend: one holding the
// first live page's tokens, one new.
template <class Side> void extend_on(Side& side, const std::vector<index_t>& live, index_t ps) {
    const std::vector<index_t> prefix = {ps, 0}, seq = {ps + 3, 2 * ps + 1};
    const std::vector<index_t> last = {live[static_cast<std::size_t>(ps) - 1], unbound};
    IndexView out("out", static_cast<std::size_t>(seq[0] - prefix[0] + seq[1] - prefix[1]));
    expect(side.alloc_extend(Space(), prefix, seq, to_device(last), out));
}
// A decode step: requests whose next token starts a page, and one that fills its tail.
template <class Side> void decode_on(Side& side, const std::vector<index_t>& live, index_t ps) {
    const std::vector<index_t> seq = {ps + 1, 2 * ps + 1, ps};
    const std::vector<index_t> last = {live[static_cast<std::size_t>(ps) - 1],
                                       live[static_cast<std::size_t>(2 * ps) - 1],
                                       live[static_cast<std::size_t>(3 * ps) - 2]};
    IndexView out("out", seq.size());
    expect(side.alloc_decode(Space(), seq, to_device(last), out));
}

std::vector<index_t> every_other_page(const std::vector<index_t>& live, index_t ps) {
    std::vector<index_t> out;
    for (std::size_t i = 0; i < live.size(); ++i)
        if (i / static_cast<std::size_t>(ps) % 2 == 0)
            out.push_back(live[i]);
    return out;
}

// The calls of a side checked. Each case below prepares a call (a snapshot,
// an open free group), runs it, and may name a partial outcome a failure
// may leave instead of the state before.
enum class SideCall {
    alloc,
    alloc_into,
    alloc_extend,
    alloc_decode,
    free,
    free_group_end,
    urgent_flush,
    opportunistic_flush,
    alloc_compacting_peer,
    alloc_with_virtual,
    restore_state,
    clear,
};
constexpr SideCall side_calls[] = {SideCall::alloc,
                                   SideCall::alloc_into,
                                   SideCall::alloc_extend,
                                   SideCall::alloc_decode,
                                   SideCall::free,
                                   SideCall::free_group_end,
                                   SideCall::urgent_flush,
                                   SideCall::opportunistic_flush,
                                   SideCall::alloc_compacting_peer,
                                   SideCall::alloc_with_virtual,
                                   SideCall::restore_state,
                                   SideCall::clear};
const char* name_of(SideCall call) {
    static const char* const names[] = {"alloc",
                                        "alloc into out",
                                        "alloc_extend",
                                        "alloc_decode",
                                        "free",
                                        "free_group_end",
                                        "urgent flush",
                                        "opportunistic flush",
                                        "alloc that compacts the peer",
                                        "alloc_with_virtual",
                                        "restore_state",
                                        "clear"};
    return names[static_cast<int>(call)];
}

// Two sides of one buffer with live stamped tokens, holes and (lazy) pages
// that waited for reuse: the atomicity harness's Sides (the other side a
// follower without ids of its own for alloc_with_virtual).
struct SideCase {
    using call_type = SideCall;
    Sides sides;
    Pool& pool = sides.pool;
    std::optional<AllocatorSnapshot> snapshot;
    index_t ps;

    SideCase(CompactionMode mode, index_t page_size, SideCall call)
        : sides(mode, page_size, call != SideCall::alloc_with_virtual), ps(page_size) {}
    std::vector<Watched> watched() const {
        return {{sides.full, 0, sides.full_live}, {sides.other, 1, sides.other_live}};
    }
    bool applies(SideCall call) const {
        const bool lazy = sides.full.core().is_lazy();
        return lazy || (call != SideCall::alloc_compacting_peer &&
                        call != SideCall::opportunistic_flush && call != SideCall::urgent_flush);
    }
    void prepare(SideCall call) {
        Allocator& a = sides.full;
        if (call == SideCall::free_group_end) {
            const auto gone = every_other_page(sides.full_live, ps);
            a.free_group_begin();
            a.free(Space(), {gone.begin(), gone.begin() + ps});
            a.free(Space(), {gone.begin() + ps, gone.end()});
        } else if (call == SideCall::restore_state) {
            snapshot = a.backup_state();
            expect(a.alloc(Space(), 2 * ps));
            extend_on(a, sides.full_live, ps);
        }
    }
    void run(SideCall call) {
        Allocator& a = sides.full;
        switch (call) {
        case SideCall::alloc:
            return expect(a.alloc(Space(), 3 * ps));
        case SideCall::alloc_into: {
            IndexView out("out", static_cast<std::size_t>(2 * ps));
            return expect(a.alloc(Space(), 2 * ps, out));
        }
        case SideCall::alloc_extend:
            return extend_on(a, sides.full_live, ps);
        case SideCall::alloc_decode:
            return decode_on(a, sides.full_live, ps);
        case SideCall::free:
            return a.free(Space(), every_other_page(sides.full_live, ps));
        case SideCall::free_group_end:
            return a.free_group_end(Space());
        case SideCall::urgent_flush:
            sides.other.flush(Space(), true);
            return;
        case SideCall::opportunistic_flush:
            a.flush_opportunistic(Space());
            return;
        case SideCall::alloc_compacting_peer: {
            const index_t need = sides.other.schedulable_available_size();
            REQUIRE(need > sides.other.available_size());
            return expect(sides.other.alloc(Space(), need));
        }
        case SideCall::alloc_with_virtual: {
            const auto& free_ids = a.free_virtual_pages();
            return expect(
                sides.other.alloc_with_virtual(Space(), {free_ids.begin(), free_ids.begin() + 3}));
        }
        case SideCall::restore_state:
            return a.restore_state(Space(), *snapshot);
        case SideCall::clear:
            return sides.other.clear(Space());
        }
    }
    bool has_partial(SideCall) const { return false; }
    void partial(SideCall) {}
};

enum class PairCall {
    alloc,
    alloc_extend,
    alloc_decode,
    free,
    free_swa,
    free_group_end,
    flush_opportunistic,
    restore_state,
    clear,
};
constexpr PairCall pair_calls[] = {PairCall::alloc,
                                   PairCall::alloc_extend,
                                   PairCall::alloc_decode,
                                   PairCall::free,
                                   PairCall::free_swa,
                                   PairCall::free_group_end,
                                   PairCall::flush_opportunistic,
                                   PairCall::restore_state,
                                   PairCall::clear};
const char* name_of(PairCall call) {
    static const char* const names[] = {
        "alloc",          "alloc_extend",        "alloc_decode",  "free", "free_swa",
        "free_group_end", "flush_opportunistic", "restore_state", "clear"};
    return names[static_cast<int>(call)];
}

// An SWA pair with live stamped tokens on both sides and holes in both.
struct PairCase {
    using call_type = PairCall;
    Pool pool;
    SwaPair pair;
    std::vector<index_t> live;
    std::optional<PairSnapshot> snapshot;
    index_t ps;

    PairCase(CompactionMode mode, index_t page_size, PairCall)
        : pool(PoolLayout(48 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("swa", 8, page_size, GrowDirection::down)})),
          pair(pool, mode), ps(page_size) {
        const auto ids = pair.alloc(Space(), 24 * page_size);
        REQUIRE(ids);
        std::vector<index_t> gone;
        for (index_t t : to_host(*ids))
            (t / page_size % 3 == 1 ? gone : live).push_back(t);
        stamp_tokens(pool, pair.full(), 0, live);
        stamp_tokens(pool, pair.swa(), 1, live);
        pair.free(Space(), gone);
        auto forward = std::make_shared<ManualToken>();
        pair.set_latest_forward_done(forward);
        pair.flush_opportunistic(Space());
        forward->complete();
    }
    std::vector<Watched> watched() const { return {{pair.full(), 0, live}, {pair.swa(), 1, live}}; }
    bool applies(PairCall) const { return true; }
    void prepare(PairCall call) {
        if (call == PairCall::free_group_end) {
            pair.free_group_begin();
            pair.free(Space(), every_other_page(live, ps));
        } else if (call == PairCall::restore_state) {
            snapshot = pair.backup_state();
            expect(pair.alloc(Space(), 2 * ps));
        }
    }
    void run(PairCall call) {
        switch (call) {
        case PairCall::alloc:
            return expect(pair.alloc(Space(), 2 * ps));
        case PairCall::alloc_extend:
            return extend_on(pair, live, ps);
        case PairCall::alloc_decode:
            return decode_on(pair, live, ps);
        case PairCall::free:
            return pair.free(Space(), every_other_page(live, ps));
        case PairCall::free_swa:
            return pair.free_swa(Space(), every_other_page(live, ps));
        case PairCall::free_group_end:
            return pair.free_group_end(Space());
        case PairCall::flush_opportunistic:
            pair.flush_opportunistic(Space());
            return;
        case PairCall::restore_state:
            return pair.restore_state(Space(), *snapshot);
        case PairCall::clear:
            return pair.clear(Space());
        }
    }
    // A failure after the SWA side's eager compaction leaves the pair as
    // freeing that side alone does (see UnifiedSWAAllocator::free).
    bool has_partial(PairCall call) const {
        return call == PairCall::free || call == PairCall::free_group_end;
    }
    void partial(PairCall call) {
        if (call == PairCall::free)
            pair.free_swa(Space(), every_other_page(live, ps));
        else
            pair.swa().free_group_end(Space());
    }
};

// The SWA pair's frees of a request whose pages are one run on both sides
// (a fresh band's), long enough for the core's run paths: each table's rows
// written as one stretch, journaled as one while a transaction is open.
enum class RunFreeCall { free, free_swa };
constexpr RunFreeCall run_free_calls[] = {RunFreeCall::free, RunFreeCall::free_swa};
const char* name_of(RunFreeCall call) {
    static const char* const names[] = {"free of a run", "free_swa of a run"};
    return names[static_cast<int>(call)];
}

struct RunFreeCase {
    using call_type = RunFreeCall;
    Pool pool;
    SwaPair pair;
    std::vector<index_t> live, request;
    index_t ps;

    RunFreeCase(CompactionMode mode, index_t page_size, RunFreeCall)
        : pool(PoolLayout(64 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("swa", 8, page_size, GrowDirection::down)})),
          pair(pool, mode), ps(page_size) {
        const auto ids = pair.alloc(Space(), 60 * page_size);
        REQUIRE(ids);
        live = to_host(*ids);
        stamp_tokens(pool, pair.full(), 0, live);
        stamp_tokens(pool, pair.swa(), 1, live);
        // Pages [10, 30): inside the band, so that an eager free compacts.
        request.assign(live.begin() + 10 * page_size, live.begin() + 30 * page_size);
    }
    std::vector<Watched> watched() const { return {{pair.full(), 0, live}, {pair.swa(), 1, live}}; }
    bool applies(RunFreeCall) const { return true; }
    void prepare(RunFreeCall) {}
    void run(RunFreeCall call) {
        switch (call) {
        case RunFreeCall::free:
            return pair.free(Space(), request);
        case RunFreeCall::free_swa:
            return pair.free_swa(Space(), request);
        }
    }
    bool has_partial(RunFreeCall call) const { return call == RunFreeCall::free; }
    void partial(RunFreeCall) { pair.free_swa(Space(), request); }
};

enum class MambaCall {
    alloc_state_slots,
    free_state_slots,
    free,
    flush_opportunistic,
    restore_state,
    clear
};
constexpr MambaCall mamba_calls[] = {
    MambaCall::alloc_state_slots,   MambaCall::free_state_slots, MambaCall::free,
    MambaCall::flush_opportunistic, MambaCall::restore_state,    MambaCall::clear};
const char* name_of(MambaCall call) {
    static const char* const names[] = {"alloc_state_slots",   "free_state_slots", "free",
                                        "flush_opportunistic", "restore_state",    "clear"};
    return names[static_cast<int>(call)];
}

// A Mamba pair with live stamped tokens and state slots, and holes in both.
struct MambaCase {
    using call_type = MambaCall;
    Pool pool;
    MambaPair pair;
    std::vector<index_t> live, slots;
    std::optional<PairSnapshot> snapshot;
    index_t ps;

    MambaCase(CompactionMode mode, index_t page_size, MambaCall)
        : pool(PoolLayout(48 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("mamba", 64, 1, GrowDirection::down)})),
          pair(pool, mode), ps(page_size) {
        const auto ids = pair.alloc(Space(), 12 * page_size);
        const auto state = pair.alloc_state_slots(Space(), 12);
        REQUIRE(ids);
        REQUIRE(state);
        std::vector<index_t> gone, gone_slots;
        for (index_t t : to_host(*ids))
            (t / page_size % 3 == 1 ? gone : live).push_back(t);
        for (index_t s : to_host(*state))
            (s % 3 == 1 ? gone_slots : slots).push_back(s);
        stamp_tokens(pool, pair.full(), 0, live);
        stamp_tokens(pool, pair.state(), 1, slots);
        pair.free(Space(), gone);
        pair.free_state_slots(Space(), gone_slots);
    }
    std::vector<Watched> watched() const {
        return {{pair.full(), 0, live}, {pair.state(), 1, slots}};
    }
    bool applies(MambaCall) const { return true; }
    void prepare(MambaCall call) {
        if (call == MambaCall::restore_state) {
            snapshot = pair.backup_state();
            expect(pair.alloc(Space(), 2 * ps));
            expect(pair.alloc_state_slots(Space(), 2));
        }
    }
    void run(MambaCall call) {
        switch (call) {
        case MambaCall::alloc_state_slots:
            return expect(pair.alloc_state_slots(Space(), 3));
        case MambaCall::free_state_slots:
            return pair.free_state_slots(Space(), {slots[0], slots[2]});
        case MambaCall::free:
            return pair.free(Space(), every_other_page(live, ps));
        case MambaCall::flush_opportunistic:
            pair.flush_opportunistic(Space());
            return;
        case MambaCall::restore_state:
            return pair.restore_state(Space(), *snapshot);
        case MambaCall::clear:
            return pair.clear(Space());
        }
    }
    bool has_partial(MambaCall) const { return false; }
    void partial(MambaCall) {}
};

// A flush of 400 pages, enough for MultiEndedAllocator to launch its moves
// ahead of its table writes: a failure after the moves must still leave the
// side as it was. The holes are every other page of the band's lower part
// (moves read from lists) or its lower third (one run of moves).
enum class LargeFlushCall { scattered_holes, one_run };
constexpr LargeFlushCall large_flush_calls[] = {LargeFlushCall::scattered_holes,
                                                LargeFlushCall::one_run};
const char* name_of(LargeFlushCall call) {
    return call == LargeFlushCall::one_run ? "urgent flush of 400 pages, one run"
                                           : "urgent flush of 400 pages, scattered holes";
}

struct LargeFlushCase {
    using call_type = LargeFlushCall;
    Pool pool;
    Allocator full, other;
    std::vector<index_t> live, other_live;

    LargeFlushCase(CompactionMode mode, index_t page_size, LargeFlushCall call)
        : pool(PoolLayout(64 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("other", 24, page_size, GrowDirection::down)})),
          full(pool, "full", options(mode)), other(pool, "other", options(mode)) {
        full.bind_peer(other);
        const std::vector<index_t> taken = to_host(*full.alloc(Space(), 1200 * page_size));
        stamp_tokens(pool, full, 0, taken);
        std::vector<index_t> gone;
        for (std::size_t i = 0; i < taken.size(); ++i) {
            const auto page = static_cast<index_t>(i) / page_size;
            const bool freed =
                call == LargeFlushCall::one_run ? page < 400 : page < 800 && page % 2 == 0;
            (freed ? gone : live).push_back(taken[i]);
        }
        full.free(Space(), gone);
    }
    std::vector<Watched> watched() const { return {{full, 0, live}, {other, 1, other_live}}; }
    bool applies(LargeFlushCall) const { return full.core().is_lazy(); }
    void prepare(LargeFlushCall) {}
    void run(LargeFlushCall) { full.flush(Space(), true); }
    bool has_partial(LargeFlushCall) const { return false; }
    void partial(LargeFlushCall) {}
};

std::vector<std::string> states(const std::vector<Watched>& sides) {
    std::vector<std::string> out;
    for (const Watched& w : sides)
        out.push_back(side_state(w.side));
    return out;
}

// Device tables and the stamped bytes of the tokens still live.
void check_data(const Pool& pool, const std::vector<Watched>& sides) {
    for (const Watched& w : sides) {
        std::vector<index_t> still_live;
        for (index_t t : w.live)
            if (w.side.is_slot_allocated(t))
                still_live.push_back(t);
        check_all(pool, w.side, w.tag, still_live);
    }
}

template <class Case>
std::unique_ptr<Case> prepared(CompactionMode mode, index_t ps, typename Case::call_type call) {
    auto c = std::make_unique<Case>(mode, ps, call);
    c->prepare(call);
    return c;
}

// For every device operation kind and every position n of that kind in the
// call: on a fresh, prepared case the nth operation fails.
template <class Case>
void check_every_fault(CompactionMode mode, index_t ps, typename Case::call_type call) {
    if (!Case(mode, ps, call).applies(call))
        return;
    const auto dry_run = [&] {
        auto dry = prepared<Case>(mode, ps, call);
        device_faults::reset();
        dry->run(call);
    };
    for_each_device_fault(dry_run, [&](DeviceOp op, std::uint64_t n, std::uint64_t ops) {
        INFO(name_of(call) << ", " << to_string(mode) << ", page size " << ps << ": "
                           << to_string(op) << " " << n << " of " << ops);
        auto c = prepared<Case>(mode, ps, call), twin = prepared<Case>(mode, ps, call);
        const std::vector<std::string> before = states(c->watched());
        std::vector<std::string> allowed = before;
        if (c->has_partial(call)) {
            auto other = prepared<Case>(mode, ps, call);
            other->partial(call);
            allowed = states(other->watched());
        }
        device_faults::fail_nth(op, n);
        try {
            c->run(call);
            FAIL("the call succeeded");
        } catch (const Error& e) {
            INFO(e.what());
            CHECK(e.code() == ErrorCode::device);
            CHECK(std::string(e.what()).find("failed: ") != std::string::npos);
        }
        const std::vector<std::string> after = states(c->watched());
        for (std::size_t i = 0; i < after.size(); ++i) {
            INFO("side " << i);
            CHECK((after[i] == before[i] || after[i] == allowed[i]));
        }
        check_data(c->pool, c->watched());
        device_faults::reset();
        c->run(call);
        twin->run(call);
        CHECK(states(c->watched()) == states(twin->watched()));
        check_data(c->pool, c->watched());
    });
}

} // namespace

TEST_CASE("device faults: every call of a side reports the failure and changes nothing",
          "[device-faults]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t ps : {index_t(1), index_t(16)})
            for (SideCall call : side_calls)
                check_every_fault<SideCase>(mode, ps, call);
}

TEST_CASE("device faults: a flush that launches its moves ahead of its table writes changes "
          "nothing",
          "[device-faults]") {
    for (LargeFlushCall call : large_flush_calls) {
        INFO(name_of(call));
        LargeFlushCase c(CompactionMode::lazy, 1, call);
        FaultScope scope;
        c.run(call);
        // The moves and the table writes: a launch each.
        CHECK(device_faults::count(DeviceOp::launch) == 2);
        CHECK(c.full.core().hole_pages() == 0);
        CHECK(c.full.counters().pages_moved == 400);
        c.full.check_invariants();
        check_data(c.pool, c.watched());
        check_every_fault<LargeFlushCase>(CompactionMode::lazy, 1, call);
    }
}

TEST_CASE("device faults: every call of the SWA pair changes neither side", "[device-faults]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t ps : {index_t(1), index_t(8)})
            for (PairCall call : pair_calls)
                check_every_fault<PairCase>(mode, ps, call);
}

TEST_CASE("device faults: a free of pages bound as one run changes neither side",
          "[device-faults]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t ps : {index_t(1), index_t(4)})
            for (RunFreeCall call : run_free_calls)
                check_every_fault<RunFreeCase>(mode, ps, call);
}

TEST_CASE("device faults: every call of the Mamba pair changes neither side", "[device-faults]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (MambaCall call : mamba_calls)
            check_every_fault<MambaCase>(mode, 4, call);
}

TEST_CASE("device faults: translate reports the failure and changes nothing", "[device-faults]") {
    SideCase c(CompactionMode::lazy, 4, SideCall::alloc);
    const IndexView ids = to_device(c.sides.full_live);
    const auto expected = to_host(c.sides.full.translate(Space(), ids));
    for (DeviceOp op : {DeviceOp::allocation, DeviceOp::launch}) {
        INFO(to_string(op));
        FaultScope scope;
        device_faults::fail_nth(op, 1);
        try {
            c.sides.full.translate(Space(), ids);
            FAIL("translate succeeded");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::device);
        }
        device_faults::reset();
        CHECK(to_host(c.sides.full.translate(Space(), ids)) == expected);
    }
    check_data(c.pool, c.watched());
}

TEST_CASE("device faults: the seam counts each kind and fails the armed operation once",
          "[device-faults]") {
    FaultScope scope;
    CHECK_THROWS_AS(device_faults::fail_nth(DeviceOp::launch, 0), Error);
    SideCase c(CompactionMode::eager, 1, SideCall::alloc);
    device_faults::reset();
    expect(c.sides.full.alloc(Space(), 2));
    CHECK(device_faults::count(DeviceOp::launch) >= 1);
    // Pages in a run reach the kernel by value; an extend's lengths are staged.
    extend_on(c.sides.full, c.sides.full_live, c.ps);
    CHECK(device_faults::count(DeviceOp::upload) >= 1);
    device_faults::fail_nth(DeviceOp::launch, 1);
    CHECK_THROWS_AS(c.sides.full.alloc(Space(), 2), Error);
    expect(c.sides.full.alloc(Space(), 2));
    device_faults::reset();
    for (DeviceOp op : device_ops)
        CHECK(device_faults::count(op) == 0);
    check_data(c.pool, c.watched());
}
