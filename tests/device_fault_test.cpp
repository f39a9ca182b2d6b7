// Device failures injected through the seam (device_faults.hpp) at every
// device operation of every allocator call in turn, each kind (allocation,
// upload, copy, launch) on its own: the call reports Error(ErrorCode::device)
// and leaves every side exactly as it was (host state, hole and free-id
// order, pending batches, every v2p entry, device tables, stamped KV bytes);
// the allocator stays usable: the same call then succeeds and leaves the sides
// as a twin that never saw a fault. Runs on every backend; on CUDA the faults
// take the runtime's own error codes and messages.
#include "atomicity_harness.hpp"
#include <kvpool/device_faults.hpp>
#include <kvpool/mamba_pair.hpp>
#include <kvpool/swa_pair.hpp>

#include <memory>
#include <optional>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;
using MambaPair = UnifiedMambaAllocator<Space>;

constexpr DeviceOp device_ops[] = {DeviceOp::allocation, DeviceOp::upload, DeviceOp::copy,
                                   DeviceOp::launch};

// Faults are disarmed and counts zeroed however a check ends.
struct FaultScope {
    FaultScope() { device_faults::reset(); }
    ~FaultScope() { device_faults::reset(); }
};

// Two sides of one buffer with live stamped tokens, holes and (lazy) pages
// that waited for reuse: the atomicity harness's Sides, plus what a call
// prepares (a snapshot, an open free group).
struct SideCase {
    Sides sides;
    Pool& pool = sides.pool;
    std::optional<AllocatorSnapshot> snapshot;
    SideCase(CompactionMode mode, index_t page_size, bool other_owns_ids = true)
        : sides(mode, page_size, other_owns_ids) {}
    std::vector<Watched> watched() const {
        return {{sides.full, 0, sides.full_live}, {sides.other, 1, sides.other_live}};
    }
};

// An SWA pair with live stamped tokens on both sides and holes in both.
struct PairCase {
    Pool pool;
    SwaPair pair;
    std::vector<index_t> live;
    std::optional<PairSnapshot> snapshot;
    PairCase(CompactionMode mode, index_t page_size)
        : pool(PoolLayout(48 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("swa", 8, page_size, GrowDirection::down)})),
          pair(pool, mode) {
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
};

// A Mamba pair with live stamped tokens and state slots, and holes in both.
struct MambaCase {
    Pool pool;
    MambaPair pair;
    std::vector<index_t> live, slots;
    std::optional<PairSnapshot> snapshot;
    MambaCase(CompactionMode mode, index_t page_size)
        : pool(PoolLayout(48 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("mamba", 64, 1, GrowDirection::down)})),
          pair(pool, mode) {
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

// For every device operation kind and every position n of that kind in the
// call: on a fresh case (made by make, then prepare), the nth operation fails.
// A side whose state after the failure may instead be that of a twin after
// `partial` (a documented partial outcome) is allowed it.
template <class Case>
void check_every_fault(const std::string& name, const std::function<std::unique_ptr<Case>()>& make,
                       const std::function<void(Case&)>& prepare,
                       const std::function<void(Case&)>& call,
                       const std::function<void(Case&)>& partial = {}) {
    for (DeviceOp op : device_ops) {
        std::uint64_t ops = 0;
        {
            auto dry = make();
            prepare(*dry);
            FaultScope scope;
            call(*dry);
            ops = device_faults::count(op);
        }
        for (std::uint64_t n = 1; n <= ops; ++n) {
            INFO(name << ": " << to_string(op) << " " << n << " of " << ops);
            auto c = make(), twin = make();
            prepare(*c);
            prepare(*twin);
            const std::vector<std::string> before = states(c->watched());
            std::vector<std::string> allowed = before;
            if (partial) {
                auto other = make();
                prepare(*other);
                partial(*other);
                allowed = states(other->watched());
            }
            FaultScope scope;
            device_faults::fail_nth(op, n);
            try {
                call(*c);
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
            call(*c);
            call(*twin);
            CHECK(states(c->watched()) == states(twin->watched()));
            check_data(c->pool, c->watched());
        }
    }
}

// A call's own check: a CHECK would catch the injected fault, which must
// leave the call instead.
void expect(bool ok) {
    if (!ok)
        FAIL("the call returned no allocation");
}
template <class T> void expect(const std::optional<T>& result) {
    expect(result.has_value());
}

// Requests of the live tokens, grown by alloc_extend / alloc_decode.
struct Growth {
    std::vector<index_t> prefix, seq, last;
    index_t total = 0;
};
Growth grow(const std::vector<index_t>& live, index_t page_size) {
    Growth g;
    // Two requests: one holding the first live page's tokens, one new.
    g.prefix = {page_size, 0};
    g.seq = {page_size + 3, 2 * page_size + 1};
    g.last = {live[static_cast<std::size_t>(page_size) - 1], unbound};
    g.total = g.seq[0] - g.prefix[0] + g.seq[1] - g.prefix[1];
    return g;
}

template <class Side> void extend_on(Side& side, const std::vector<index_t>& live, index_t ps) {
    const Growth g = grow(live, ps);
    IndexView out("out", static_cast<std::size_t>(g.total));
    expect(side.alloc_extend(Space(), g.prefix, g.seq, to_device(g.last), out));
}
template <class Side> void decode_on(Side& side, const std::vector<index_t>& live, index_t ps) {
    // Requests whose next token starts a page, and one that fills its tail.
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

} // namespace

TEST_CASE("device faults: every call of a side reports the failure and changes nothing",
          "[device-faults]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t ps : {index_t(1), index_t(16)}) {
            const std::string where = fmt::format("{}, page size {}", to_string(mode), ps);
            const auto make = [&] { return std::make_unique<SideCase>(mode, ps); };
            const auto none = [](SideCase&) {};
            check_every_fault<SideCase>(where + ", alloc", make, none, [&](SideCase& c) {
                expect(c.sides.full.alloc(Space(), 3 * ps));
            });
            check_every_fault<SideCase>(where + ", alloc into out", make, none, [&](SideCase& c) {
                IndexView out("out", static_cast<std::size_t>(2 * ps));
                expect(c.sides.full.alloc(Space(), 2 * ps, out));
            });
            check_every_fault<SideCase>(where + ", alloc_extend", make, none, [&](SideCase& c) {
                extend_on(c.sides.full, c.sides.full_live, ps);
            });
            check_every_fault<SideCase>(where + ", alloc_decode", make, none, [&](SideCase& c) {
                decode_on(c.sides.full, c.sides.full_live, ps);
            });
            check_every_fault<SideCase>(where + ", free", make, none, [&](SideCase& c) {
                c.sides.full.free(Space(), every_other_page(c.sides.full_live, ps));
            });
            check_every_fault<SideCase>(
                where + ", free group", make,
                [&](SideCase& c) {
                    const auto gone = every_other_page(c.sides.full_live, ps);
                    c.sides.full.free_group_begin();
                    c.sides.full.free(Space(), {gone.begin(), gone.begin() + ps});
                    c.sides.full.free(Space(), {gone.begin() + ps, gone.end()});
                },
                [&](SideCase& c) { c.sides.full.free_group_end(Space()); });
            check_every_fault<SideCase>(where + ", urgent flush", make, none,
                                        [&](SideCase& c) { c.sides.other.flush(Space(), true); });
            check_every_fault<SideCase>(
                where + ", restore_state", make,
                [&](SideCase& c) {
                    c.snapshot = c.sides.full.backup_state();
                    REQUIRE(c.sides.full.alloc(Space(), 2 * ps));
                    extend_on(c.sides.full, c.sides.full_live, ps);
                },
                [&](SideCase& c) { c.sides.full.restore_state(Space(), *c.snapshot); });
            check_every_fault<SideCase>(where + ", clear", make, none,
                                        [&](SideCase& c) { c.sides.other.clear(Space()); });
            if (mode == CompactionMode::lazy) {
                check_every_fault<SideCase>(
                    where + ", alloc that compacts the peer", make, none, [&](SideCase& c) {
                        const index_t room = c.sides.other.available_size();
                        const index_t need = c.sides.other.schedulable_available_size();
                        REQUIRE(need > room);
                        expect(c.sides.other.alloc(Space(), need));
                    });
                check_every_fault<SideCase>(
                    where + ", opportunistic flush", make, none,
                    [&](SideCase& c) { c.sides.full.flush_opportunistic(Space()); });
            }
            const auto make_follower = [&] { return std::make_unique<SideCase>(mode, ps, false); };
            check_every_fault<SideCase>(
                where + ", alloc_with_virtual", make_follower, none, [&](SideCase& c) {
                    const auto& free_ids = c.sides.full.free_virtual_pages();
                    expect(c.sides.other.alloc_with_virtual(
                        Space(), {free_ids.begin(), free_ids.begin() + 3}));
                });
        }
}

TEST_CASE("device faults: translate reports the failure and changes nothing", "[device-faults]") {
    SideCase c(CompactionMode::lazy, 4);
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
    check_data(c.sides.pool, c.watched());
}

TEST_CASE("device faults: every call of the SWA pair changes neither side", "[device-faults]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t ps : {index_t(1), index_t(8)}) {
            const std::string where =
                fmt::format("SWA pair, {}, page size {}", to_string(mode), ps);
            const auto make = [&] { return std::make_unique<PairCase>(mode, ps); };
            const auto none = [](PairCase&) {};
            check_every_fault<PairCase>(where + ", alloc", make, none, [&](PairCase& c) {
                expect(c.pair.alloc(Space(), 2 * ps));
            });
            check_every_fault<PairCase>(where + ", alloc_extend", make, none,
                                        [&](PairCase& c) { extend_on(c.pair, c.live, ps); });
            check_every_fault<PairCase>(where + ", alloc_decode", make, none,
                                        [&](PairCase& c) { decode_on(c.pair, c.live, ps); });
            // A failure after the SWA side's eager compaction leaves the pair
            // as free_swa of the same ids does (see UnifiedSWAAllocator::free).
            const auto gone = [ps](const PairCase& c) { return every_other_page(c.live, ps); };
            check_every_fault<PairCase>(
                where + ", free", make, none, [&](PairCase& c) { c.pair.free(Space(), gone(c)); },
                [&](PairCase& c) { c.pair.free_swa(Space(), gone(c)); });
            check_every_fault<PairCase>(where + ", free_swa", make, none,
                                        [&](PairCase& c) { c.pair.free_swa(Space(), gone(c)); });
            check_every_fault<PairCase>(
                where + ", free group", make,
                [&](PairCase& c) {
                    c.pair.free_group_begin();
                    c.pair.free(Space(), gone(c));
                },
                [&](PairCase& c) { c.pair.free_group_end(Space()); },
                [&](PairCase& c) { c.pair.swa().free_group_end(Space()); });
            check_every_fault<PairCase>(where + ", flush_opportunistic", make, none,
                                        [&](PairCase& c) { c.pair.flush_opportunistic(Space()); });
            check_every_fault<PairCase>(
                where + ", restore_state", make,
                [&](PairCase& c) {
                    c.snapshot = c.pair.backup_state();
                    REQUIRE(c.pair.alloc(Space(), 2 * ps));
                },
                [&](PairCase& c) { c.pair.restore_state(Space(), *c.snapshot); });
            check_every_fault<PairCase>(where + ", clear", make, none,
                                        [&](PairCase& c) { c.pair.clear(Space()); });
        }
}

TEST_CASE("device faults: every call of the Mamba pair changes neither side", "[device-faults]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        const index_t ps = 4;
        const std::string where = fmt::format("Mamba pair, {}", to_string(mode));
        const auto make = [&] { return std::make_unique<MambaCase>(mode, ps); };
        const auto none = [](MambaCase&) {};
        check_every_fault<MambaCase>(where + ", alloc_state_slots", make, none, [&](MambaCase& c) {
            expect(c.pair.alloc_state_slots(Space(), 3));
        });
        check_every_fault<MambaCase>(where + ", free_state_slots", make, none, [&](MambaCase& c) {
            c.pair.free_state_slots(Space(), {c.slots[0], c.slots[2]});
        });
        check_every_fault<MambaCase>(where + ", free", make, none, [&](MambaCase& c) {
            c.pair.free(Space(), every_other_page(c.live, ps));
        });
        check_every_fault<MambaCase>(where + ", flush_opportunistic", make, none,
                                     [&](MambaCase& c) { c.pair.flush_opportunistic(Space()); });
        check_every_fault<MambaCase>(
            where + ", restore_state", make,
            [&](MambaCase& c) {
                c.snapshot = c.pair.backup_state();
                REQUIRE(c.pair.alloc(Space(), 2 * ps));
                REQUIRE(c.pair.alloc_state_slots(Space(), 2));
            },
            [&](MambaCase& c) { c.pair.restore_state(Space(), *c.snapshot); });
        check_every_fault<MambaCase>(where + ", clear", make, none,
                                     [&](MambaCase& c) { c.pair.clear(Space()); });
    }
}

TEST_CASE("device faults: the seam counts each kind and fails the armed operation once",
          "[device-faults]") {
    FaultScope scope;
    CHECK_THROWS_AS(device_faults::fail_nth(DeviceOp::launch, 0), Error);
    SideCase c(CompactionMode::eager, 1);
    device_faults::reset();
    expect(c.sides.full.alloc(Space(), 2));
    const std::uint64_t launches = device_faults::count(DeviceOp::launch);
    CHECK(launches >= 1);
    CHECK(device_faults::count(DeviceOp::upload) >= 1);
    device_faults::fail_nth(DeviceOp::launch, 1);
    CHECK_THROWS_AS(c.sides.full.alloc(Space(), 2), Error);
    expect(c.sides.full.alloc(Space(), 2));
    device_faults::reset();
    for (DeviceOp op : device_ops)
        CHECK(device_faults::count(op) == 0);
    c.sides.full.check_invariants();
}
