// Differential test of the Mamba pair (UnifiedMambaAllocator) against the
// reference model's ReferenceMambaPair: random operation mixes of admissions
// (a state slot, then the prompt's KV), extends, decodes, frees and flushes,
// with the engine's forward events set, pending and fired across allocations,
// and allocations beyond schedulable_available_size() (which succeed when an
// urgent flush of the other side reclaims pages pending reuse, exactly as the
// reference's do). After every step both sides are compared with the model,
// an allocation of each side's schedulable_available_size() is probed on
// copies of the cores, check_invariants() runs, and the KV data check runs
// after every step that can compact and every 50th step.
//
// Reproduce one seed: kvpool_tests_<backend> "[mamba-differential]" --kvpool-seed N
#include "mamba_run.hpp"
#include <kvpool/completion_token.hpp>

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::mamba_run;

TEST_CASE("mamba pair differential: the Mamba pair against the reference model",
          "[mamba-differential][pair-differential]") {
    run_pair_differential<MambaRun>("mamba-differential");
}

// The case found when the pair was driven as an engine drives it: a lazy
// Mamba pair whose state side holds slots pending reuse behind a forward; a
// full allocation
// beyond schedulable_available_size() (which does not credit them) but within
// what an urgent flush of the state side reclaims succeeds, as the
// reference's does, and one page more fails; both sides stay intact.
TEST_CASE("mamba pair: an allocation beyond the schedulable size succeeds when the state side's "
          "pending slots are reclaimed",
          "[mamba-differential][pair][lazy]") {
    for (const index_t ps : {index_t(1), index_t(16)}) {
        INFO("page size " << ps);
        const index_t e_full = 16, e_state = 100;
        Pool pool(PoolLayout(64 * 1024, {spec("full", e_full, ps, GrowDirection::up),
                                         spec("mamba", e_state, 1, GrowDirection::down)}));
        const AllocatorOptions lazy = options(CompactionMode::lazy);
        MambaPair pair(pool, lazy, lazy);
        ReferenceMambaPair model(pool.layout().sub_pool("full"), pool.layout().sub_pool("mamba"),
                                 pool.total_bytes(), lazy, lazy);
        auto slots = to_host(*pair.alloc_state_slots(Space(), 12));
        REQUIRE(model.state().alloc(12) == slots);
        stamp_tokens(pool, pair.state(), state_tag, slots);
        // The full side takes the rest of the gap.
        const index_t rest = pair.full().available_size();
        auto kv = to_host(*pair.alloc(Space(), rest));
        REQUIRE(model.full().alloc(rest) == kv);
        stamp_tokens(pool, pair.full(), full_tag, kv);
        // The last slots (bound at the state band's far end) finish; a forward still
        // reads the band when the opportunistic flush moves the survivors down
        // the band, so the moved-from slots wait for it.
        const std::vector<index_t> finished(slots.end() - 4, slots.end());
        pair.free_state_slots(Space(), finished);
        model.state().free(finished);
        slots.resize(slots.size() - 4);
        auto forward = std::make_shared<ManualToken>();
        pair.set_latest_forward_done(forward);
        model.full().set_latest_forward_done(forward);
        model.state().set_latest_forward_done(forward);
        REQUIRE(pair.flush_opportunistic(Space()) == model.flush_opportunistic());
        REQUIRE(pair.state().core().pending_reuse_pages() == 4);
        forward->complete(); // done, but the slots wait until a drain or flush

        const index_t schedulable = pair.available_size();
        const index_t reclaimable =
            (pair.full().core().gap_bytes() + 4 * e_state) / (e_full * ps) * ps;
        REQUIRE(schedulable == model.available_size());
        REQUIRE(reclaimable > schedulable);
        CHECK_FALSE(pair.alloc(Space(), reclaimable + ps).has_value());
        CHECK_FALSE(model.full().alloc(reclaimable + ps).has_value());
        auto more = pair.alloc(Space(), reclaimable);
        REQUIRE(more.has_value());
        const auto ids = to_host(*more);
        CHECK(model.full().alloc(reclaimable) == ids);
        CHECK(pair.state().core().pending_reuse_pages() == 0);
        stamp_tokens(pool, pair.full(), full_tag, ids);
        kv.insert(kv.end(), ids.begin(), ids.end());
        CHECK(side_mismatch("full", pair.full(), model.full()).empty());
        CHECK(side_mismatch("state", pair.state(), model.state()).empty());
        check_all(pool, pair.full(), full_tag, kv);
        check_all(pool, pair.state(), state_tag, slots);
    }
}
