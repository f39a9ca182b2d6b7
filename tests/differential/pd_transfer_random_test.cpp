// PD transfers under randomised traffic: two pools, requests coming and going
// on both, each round one transfer from the sender to the receiver (a prefix
// of a random request, whole pages or layer by layer, the copy split at a
// random point), random frees, flushes and prefills on both ends while it is
// in flight, then completion (the receiver publishes) or cancellation (it
// frees what it allocated). After every round: both pools' invariants and
// every live token's and slot's bytes through translate.
//
// Reproduce one seed: kvpool_tests_<backend> "[pd-transfer][randomised]" --kvpool-seed N
#include "pd_transfer_support.hpp"
#include "test_config.hpp"
#include "test_random.hpp"
#include <kvpool/completion_token.hpp>

#include <cstdio>
#include <memory>

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::pd;

namespace {

struct Held {
    std::vector<index_t> tokens;
    index_t slot = 0;
};

class TransferRun {
public:
    TransferRun(std::uint64_t seed, index_t page_size)
        : rng_(seed), ps_(page_size), a_(page_size, 1 << 15), b_(page_size, 1 << 15) {}

    void run(int rounds) {
        for (int i = 0; i < 6; ++i)
            prefill(a_, 1, on_a_);
        for (int i = 0; i < 3; ++i)
            prefill(b_, 2, on_b_);
        for (int round = 0; round < rounds; ++round) {
            INFO("round " << round);
            transfer();
            REQUIRE(a_.check() == 0);
            REQUIRE(b_.check() == 0);
        }
        while (!on_a_.empty())
            release(a_, on_a_, 0);
        while (!on_b_.empty())
            release(b_, on_b_, 0);
        REQUIRE(a_.full.allocated_count() == 0);
        REQUIRE(b_.full.allocated_count() == 0);
        REQUIRE(a_.check() == 0);
        REQUIRE(b_.check() == 0);
    }

    int completed = 0, cancelled = 0;

private:
    void prefill(End& end, int tag, std::vector<Held>& held) {
        auto [tokens, slot] = end.prefill(tag, rng_.uniform(1, 6) * ps_);
        if (!tokens.empty())
            held.push_back({tokens, slot});
    }
    void release(End& end, std::vector<Held>& held, std::size_t k) {
        end.release(held[k].tokens, held[k].slot);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
    }
    // Traffic on one end while a transfer is in flight, leaving the request
    // at index busy of held alone (none: past the end); returns its index after.
    std::size_t traffic(End& end, int tag, std::vector<Held>& held, std::size_t busy) {
        const index_t steps = rng_.uniform(0, 4);
        for (index_t s = 0; s < steps; ++s) {
            const index_t what = rng_.uniform(0, 2);
            if (what == 0 && !held.empty()) {
                const auto k = static_cast<std::size_t>(
                    rng_.uniform(0, static_cast<index_t>(held.size()) - 1));
                if (k == busy)
                    continue;
                release(end, held, k);
                if (k < busy)
                    --busy;
            } else if (what == 1) {
                end.full.flush(Space(), rng_.chance(0.5));
                end.state.flush(Space(), rng_.chance(0.5));
            } else {
                prefill(end, tag, held);
            }
        }
        return busy;
    }

    void transfer() {
        if (on_a_.empty())
            prefill(a_, 1, on_a_);
        if (on_a_.empty())
            return;
        auto k = static_cast<std::size_t>(rng_.uniform(0, static_cast<index_t>(on_a_.size()) - 1));
        const Held sent = on_a_[k];
        const auto n =
            static_cast<std::size_t>(rng_.uniform(1, static_cast<index_t>(sent.tokens.size())));
        const std::vector<index_t> src(sent.tokens.begin(),
                                       sent.tokens.begin() + static_cast<std::ptrdiff_t>(n));
        const bool whole_pages = rng_.chance(0.5);

        auto done = std::make_shared<ManualToken>();
        const auto src_full = gate_and_describe(a_.full, a_.full_layout, done, src);
        const auto src_state = gate_and_describe(a_.state, a_.state_layout, done, {sent.slot});
        const index_t pages = (static_cast<index_t>(n) + ps_ - 1) / ps_;
        const auto dst_alloc = b_.full.alloc(Space(), pages * ps_);
        const auto dst_slot_alloc = dst_alloc ? b_.state.alloc(Space(), 1) : std::nullopt;
        if (!dst_slot_alloc) {
            // No room on the receiver: it refuses, the sender's gate goes, and the
            // receiver makes room for the next round.
            if (dst_alloc)
                b_.full.free(Space(), to_host(*dst_alloc));
            done->complete();
            if (!on_b_.empty())
                release(b_, on_b_, 0);
            return;
        }
        const auto dst_all = to_host(*dst_alloc);
        const index_t dst_slot = to_host(*dst_slot_alloc)[0];
        const std::vector<index_t> dst(dst_all.begin(),
                                       dst_all.begin() + static_cast<std::ptrdiff_t>(n));
        const auto dst_full = gate_and_describe(b_.full, b_.full_layout, done, dst);
        const auto dst_state = gate_and_describe(b_.state, b_.state_layout, done, {dst_slot});
        auto copies = whole_pages ? pair_pages(src_full, dst_full)
                                  : layer_copies(a_.full_layout, src_full, dst_full);
        const auto state = whole_pages ? pair_pages(src_state, dst_state)
                                       : layer_copies(a_.state_layout, src_state, dst_state);
        copies.insert(copies.end(), state.begin(), state.end());
        const auto split =
            static_cast<std::ptrdiff_t>(rng_.uniform(0, static_cast<index_t>(copies.size())));
        copy_runs(a_, b_, {copies.begin(), copies.begin() + split});

        const auto src_where = host_physical_tokens(a_.full, src);
        const auto dst_where = host_physical_tokens(b_.full, dst);
        k = traffic(a_, 1, on_a_, k);
        traffic(b_, 2, on_b_, static_cast<std::size_t>(-1));
        REQUIRE(host_physical_tokens(a_.full, src) == src_where);
        REQUIRE(host_physical_tokens(b_.full, dst) == dst_where);

        if (rng_.chance(0.25)) {
            // Cancelled: the engine stops, the receiver frees all it allocated.
            done->complete();
            b_.full.free(Space(), dst_all);
            b_.state.free(Space(), {dst_slot});
            ++cancelled;
            return;
        }
        copy_runs(a_, b_, {copies.begin() + split, copies.end()});
        done->complete();
        for (std::size_t i = 0; i < n; ++i)
            b_.live_tokens[dst[i]] = {1, src[i]};
        b_.live_slots[dst_slot] = {1, sent.slot};
        on_b_.push_back({dst_all, dst_slot});
        if (rng_.chance(0.5))
            release(a_, on_a_, k);
        ++completed;
    }

    Rng rng_;
    index_t ps_;
    End a_, b_;
    std::vector<Held> on_a_, on_b_;
};

} // namespace

TEST_CASE("pd transfer: randomised transfers while both pools compact",
          "[pd-transfer][randomised]") {
    const auto& config = randomised_config();
    int completed = 0, cancelled = 0;
    for (const std::uint64_t seed : config.seed_list()) {
        std::printf("[pd-transfer] seed %llu; reproduce: kvpool_tests_%s "
                    "\"[pd-transfer][randomised]\" --kvpool-seed %llu\n",
                    static_cast<unsigned long long>(seed), KVPOOL_TEST_BACKEND_NAME,
                    static_cast<unsigned long long>(seed));
        std::fflush(stdout);
        for (const index_t ps : {index_t(1), index_t(2), index_t(4)}) {
            INFO("seed " << seed << ", page size " << ps);
            TransferRun run(seed, ps);
            run.run(40);
            completed += run.completed;
            cancelled += run.cancelled;
        }
    }
    std::printf("[pd-transfer] transfers completed %d, cancelled %d\n", completed, cancelled);
    CHECK(completed > 0);
    CHECK(cancelled > 0);
}
