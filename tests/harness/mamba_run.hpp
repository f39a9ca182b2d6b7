// One randomised run of the Mamba pair against the reference model, driven by an Rng: shared
// by the differential test and the fuzz target.
#pragma once

#include "differential_harness.hpp"
#include <algorithm>
#include <kvpool/mamba_pair.hpp>
#include <tuple>

namespace kvpool::test::mamba_run {

using MambaPair = UnifiedMambaAllocator<Space>;

constexpr int full_tag = 0;
constexpr int state_tag = 1;

// A running request: its virtual token ids in position order and its state slot.
struct Request {
    std::vector<index_t> tokens;
    index_t slot = unbound;
};

class MambaRun final : public PairRun<MambaPair, ReferenceMambaPair> {
public:
    // input: a fuzzer's bytes to draw every decision from, instead of the seed.
    MambaRun(std::uint64_t seed, const PairConfig& config, int ops, const Rng* input = nullptr)
        : PairRun("mamba-differential", seed, config, "state", ops,
                  input ? *input : Rng(seed ^ 0x4d414d4241504149ull ^ config.salt())) {
        // A state slot costs a few to many full tokens of gap, not a whole
        // number of them; the buffer holds a few hundred full pages and a few
        // dozen slots, so slots and KV starve each other in turn.
        static const std::vector<index_t> full_entries = {16, 12, 20, 24, 9};
        static const std::vector<index_t> slot_costs = {3, 7, 20, 45};
        const index_t ps = config.page_size;
        const index_t e_full = entry_bytes(rng_.pick(full_entries));
        const index_t state_bytes = rng_.pick(slot_costs) * e_full - rng_.uniform(1, e_full - 1);
        const index_t total = pool_pages(120, 240) * e_full * ps + pool_pages(8, 40) * state_bytes +
                              rng_.uniform(0, state_bytes - 1);
        const bool full_up = rng_.chance(0.7);
        SubPoolSpec full =
            spec("full", e_full, ps, full_up ? GrowDirection::up : GrowDirection::down);
        SubPoolSpec state =
            spec("mamba", state_bytes, 1, full_up ? GrowDirection::down : GrowDirection::up);
        if (rng_.chance(0.2))
            full.max_tokens = total / (e_full * ps) * ps * 2 / 5;
        if (rng_.chance(0.2))
            state.max_tokens = rng_.uniform(4, 12);
        // Each side its own options: its mode and, now and then, a small flush cap.
        const AllocatorOptions full_options = side_options(config.full_mode),
                               state_options = side_options(config.other_mode);
        pool_ = std::make_unique<Pool>(PoolLayout(total, {full, state}));
        pair_ = std::make_unique<MambaPair>(*pool_, full_options, state_options);
        model_ = std::make_unique<ReferenceMambaPair>(pool_->layout().sub_pool("full"),
                                                      pool_->layout().sub_pool("mamba"), total,
                                                      full_options, state_options);
        add_side("full", pair_->full(), model_->full());
        add_side("state", pair_->state(), model_->state());
        const auto& f = pool_->layout().sub_pool("full");
        const auto& s = pool_->layout().sub_pool("mamba");
        geometry_ = fmt::format(
            "total_bytes={} full(entry={}, page_size={}, grows {}, pages={}, virtual_pages={}, "
            "max_moves_per_flush={}) state(entry={}, grows {}, slots={}, virtual_slots={}, "
            "max_moves_per_flush={})",
            total, e_full, ps, to_string(f.grow()), f.num_physical_pages, f.num_virtual_pages,
            full_options.max_moves_per_flush, state_bytes, to_string(s.grow()),
            s.num_physical_pages, s.num_virtual_pages, state_options.max_moves_per_flush);
    }

private:
    void compare() override {
        const ReferenceMambaPair& m = *model_;
        expect_eq(pair_->state_slot_full_token_cost(), m.state_slot_full_token_cost(),
                  "state_slot_full_token_cost()");
        expect_eq(pair_->available_size(), m.available_size(), "available_size()");
        expect_eq(pair_->state_slots_available(), m.state_slots_available(),
                  "state_slots_available()");
        expect_eq(pair_->state_slot_starved(), m.state_slot_starved(), "state_slot_starved()");
        compare_sides();
    }

    void after_step() override {
        if (step_ % 50 == 0)
            data_check_due_ = true;
        if (!data_check_due_)
            return;
        data_check_due_ = false;
        std::vector<index_t> tokens, slots;
        for (const auto& req : requests_) {
            tokens.insert(tokens.end(), req.tokens.begin(), req.tokens.end());
            slots.push_back(req.slot);
        }
        expect_live_data("full", pair_->full(), model_->full(), full_tag, tokens);
        expect_live_data("state", pair_->state(), model_->state(), state_tag, slots);
    }

    void one_step() override {
        // Weights per regime: 0 grow, 1 shrink, 2 churn.
        static const double weights[3][9] = {
            // admit extend decode free flush beyond forward complete drain
            {30, 18, 18, 12, 10, 6, 8, 5, 2},
            {10, 8, 12, 40, 14, 6, 8, 5, 2},
            {22, 14, 18, 24, 12, 6, 8, 5, 2},
        };
        int kind = pick_kind(weights[regime_], 9);
        if (requests_.empty() && kind >= 1 && kind <= 3)
            kind = 0;
        switch (kind) {
        case 0:
            return op_admit();
        case 1:
            return op_extend();
        case 2:
            return op_decode();
        case 3:
            return op_free();
        case 4:
            return flush_opportunistic([&] { return pair_->flush_opportunistic(Space()); });
        case 5:
            return rng_.chance(0.5) ? op_slots_beyond() : op_kv_beyond();
        case 6:
            return op_forward(false);
        case 7:
            return op_complete();
        default:
            return drain([&] { pair_->drain_pending_reuse(); });
        }
    }

    // State slots: count of them, beyond: the count exceeds schedulable.
    std::optional<std::vector<index_t>> alloc_slots(index_t count, const char* what) {
        const bool beyond = count > model_->state().schedulable_available_size();
        auto [got, expected] =
            replay_allocation([&] { return model_->state().alloc(count); },
                              [&] { return pair_->alloc_state_slots(Space(), count); });
        const std::vector<index_t> slots = got ? to_host(*got) : std::vector<index_t>{};
        expect_allocation(what, got.has_value(), expected, slots, beyond);
        after_allocation(model_->state().last_alloc_flushed_peer(), got.has_value());
        if (!got)
            return std::nullopt;
        stamp_tokens(*pool_, pair_->state(), state_tag, slots, data_scratch_);
        return slots;
    }

    // New requests, as the engine admits them: their state slots first, then
    // their prompts' KV (alloc_extend from prefix 0, or alloc of whole pages);
    // without room for the prompts the slots go back.
    void op_admit() {
        const index_t ps = pair_->full().page_size();
        const index_t k = rng_.uniform(1, 3);
        const bool whole_pages = k == 1 && rng_.chance(0.3);
        std::vector<index_t> seq;
        for (index_t i = 0; i < k; ++i)
            seq.push_back(whole_pages ? rng_.uniform(1, 6) * ps : rng_.uniform(1, 3 * ps + 5));
        begin_op(fmt::format("admit {} request(s) of {} tokens{} [slots available {}, full "
                             "available {}, starved {}]",
                             k, seq, whole_pages ? " (alloc)" : " (alloc_extend)",
                             model_->state_slots_available(), model_->full().available_size(),
                             model_->state_slot_starved()));
        const auto slots = alloc_slots(k, "alloc_state_slots");
        if (!slots)
            return;

        std::vector<index_t> ids;
        bool ok;
        std::optional<std::vector<index_t>> expected;
        index_t pages = 0;
        for (index_t s : seq)
            pages += (s + ps - 1) / ps;
        const bool beyond = pages * ps > model_->available_size();
        if (whole_pages) {
            auto [got, model] = replay_allocation([&] { return model_->full().alloc(seq[0]); },
                                                  [&] { return pair_->alloc(Space(), seq[0]); });
            ok = got.has_value();
            expected = model;
            if (ok)
                ids = to_host(*got);
        } else {
            const std::vector<index_t> prefix(seq.size(), 0), last_loc(seq.size(), unbound);
            index_t tokens = 0;
            for (index_t s : seq)
                tokens += s;
            auto out =
                kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
            std::tie(ok, expected) = replay_allocation(
                [&] { return model_->full().alloc_extend(prefix, seq, last_loc); },
                [&] {
                    return pair_->alloc_extend(Space(), prefix, seq, to_device(last_loc), out);
                });
            if (ok)
                ids = to_host(out);
        }
        expect_allocation(whole_pages ? "alloc" : "alloc_extend", ok, expected, ids, beyond);
        after_allocation(model_->full().last_alloc_flushed_peer(), ok);
        if (!ok) {
            replay_void([&] { model_->state().free(*slots); },
                        [&] { pair_->free_state_slots(Space(), *slots); });
            data_check_due_ = true;
            return;
        }
        stamp_tokens(*pool_, pair_->full(), full_tag, ids, data_scratch_);
        last_allocated_ = ids;
        auto next = ids.begin();
        for (index_t i = 0; i < k; ++i) {
            const auto n = static_cast<std::ptrdiff_t>(seq[static_cast<std::size_t>(i)]);
            requests_.push_back(
                {std::vector<index_t>(next, next + n), (*slots)[static_cast<std::size_t>(i)]});
            next += n;
        }
    }

    // alloc_extend over running requests (prefix > 0, last_loc their last token).
    void op_extend() {
        const index_t ps = pair_->full().page_size();
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 4));
        std::vector<index_t> prefix, seq, last_loc;
        index_t tokens = 0, pages = 0;
        for (std::size_t i : chosen) {
            const auto len = static_cast<index_t>(requests_[i].tokens.size());
            prefix.push_back(len);
            seq.push_back(len + (rng_.chance(0.1) ? 0 : rng_.uniform(1, 2 * ps + 3)));
            last_loc.push_back(requests_[i].tokens.back());
            tokens += seq.back() - len;
            pages += (seq.back() + ps - 1) / ps - (len + ps - 1) / ps;
        }
        begin_op(fmt::format(
            "alloc_extend(prefix_lens={}, seq_lens={}, last_loc={}) [full available {}]", prefix,
            seq, last_loc, model_->full().available_size()));
        auto out =
            kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
        const bool beyond = pages * ps > model_->available_size();
        auto [ok, expected] = replay_allocation(
            [&] { return model_->full().alloc_extend(prefix, seq, last_loc); },
            [&] { return pair_->alloc_extend(Space(), prefix, seq, to_device(last_loc), out); });
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_allocation("alloc_extend", ok, expected, ids, beyond);
        after_allocation(model_->full().last_alloc_flushed_peer(), ok);
        if (!ok)
            return;
        stamp_tokens(*pool_, pair_->full(), full_tag, ids, data_scratch_);
        last_allocated_ = ids;
        auto next = ids.begin();
        for (std::size_t b = 0; b < chosen.size(); ++b) {
            const auto n = static_cast<std::ptrdiff_t>(seq[b] - prefix[b]);
            auto& req = requests_[chosen[b]];
            req.tokens.insert(req.tokens.end(), next, next + n);
            next += n;
        }
    }

    void op_decode() {
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 8));
        std::vector<index_t> seq, last_loc;
        for (std::size_t i : chosen) {
            seq.push_back(static_cast<index_t>(requests_[i].tokens.size()) + 1);
            last_loc.push_back(requests_[i].tokens.back());
        }
        begin_op(fmt::format("alloc_decode(seq_lens={}, last_loc={}) [full available {}]", seq,
                             last_loc, model_->full().available_size()));
        auto out = kk::uninitialized<IndexView>("test::decode_out", seq.size());
        auto [ok, expected] = replay_allocation(
            [&] { return model_->full().alloc_decode(seq, last_loc); },
            [&] { return pair_->alloc_decode(Space(), seq, to_device(last_loc), out); });
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_allocation("alloc_decode", ok, expected, ids);
        after_allocation(model_->full().last_alloc_flushed_peer(), ok);
        if (!ok)
            return;
        stamp_tokens(*pool_, pair_->full(), full_tag, ids, data_scratch_);
        last_allocated_ = ids;
        for (std::size_t k = 0; k < chosen.size(); ++k)
            requests_[chosen[k]].tokens.push_back(ids[k]);
    }

    // Finished requests: their KV and their state slots, either first.
    void op_free() {
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 3));
        std::vector<index_t> tokens, slots;
        for (std::size_t i : chosen) {
            tokens.insert(tokens.end(), requests_[i].tokens.begin(), requests_[i].tokens.end());
            slots.push_back(requests_[i].slot);
        }
        const bool slots_first = rng_.chance(0.5);
        begin_op(fmt::format("free of {} request(s): {} KV tokens, state slots {}{}", chosen.size(),
                             tokens.size(), slots, slots_first ? " (slots first)" : ""));
        const auto free_slots = [&] {
            replay_void([&] { model_->state().free(slots); },
                        [&] { pair_->free_state_slots(Space(), slots); });
        };
        if (slots_first)
            free_slots();
        replay_void([&] { model_->full().free(tokens); }, [&] { pair_->free(Space(), tokens); });
        if (!slots_first)
            free_slots();
        std::vector<std::size_t> finished = chosen;
        std::sort(finished.rbegin(), finished.rend());
        for (std::size_t i : finished)
            requests_.erase(requests_.begin() + static_cast<std::ptrdiff_t>(i));
        ++stats_.frees;
        data_check_due_ = data_check_due_ || eager_;
    }

    // State slots beyond what the state side can schedule: granted exactly when
    // the model grants them (the full side's pages pending reuse may make room).
    void op_slots_beyond() {
        const index_t count = model_->state().schedulable_available_size() + rng_.uniform(1, 3);
        begin_op(fmt::format(
            "alloc_state_slots({}) beyond schedulable [slots available {}, schedulable {}, full "
            "pending {}]",
            count, model_->state_slots_available(), model_->state().schedulable_available_size(),
            model_->full().pending_pages()));
        if (const auto slots = alloc_slots(count, "alloc_state_slots beyond schedulable")) {
            replay_void([&] { model_->state().free(*slots); },
                        [&] { pair_->free_state_slots(Space(), *slots); });
            data_check_due_ = true;
        }
    }

    // Full KV beyond available_size() (the full side's schedulable view): a new
    // request of whole pages, granted exactly when the model grants it (the
    // state side's slots pending reuse may make room).
    void op_kv_beyond() {
        const index_t ps = pair_->full().page_size();
        const index_t need = (model_->available_size() / ps + rng_.uniform(1, 4)) * ps;
        begin_op(fmt::format(
            "alloc({} tokens) beyond schedulable [available_size() {}, state pending {}]", need,
            model_->available_size(), model_->state().pending_pages()));
        auto [got, expected] = replay_allocation([&] { return model_->full().alloc(need); },
                                                 [&] { return pair_->alloc(Space(), need); });
        const std::vector<index_t> ids = got ? to_host(*got) : std::vector<index_t>{};
        expect_allocation("alloc beyond schedulable", got.has_value(), expected, ids, true);
        after_allocation(model_->full().last_alloc_flushed_peer(), got.has_value());
        if (!got)
            return;
        // The request it would be has no state slot: give the KV back.
        stamp_tokens(*pool_, pair_->full(), full_tag, ids, data_scratch_);
        replay_void([&] { model_->full().free(ids); }, [&] { pair_->free(Space(), ids); });
        data_check_due_ = true;
    }

    std::vector<Request> requests_;
};

} // namespace kvpool::test::mamba_run
