// One randomised run of the SWA pair against the reference model, driven by an Rng: shared
// by the differential test and the fuzz target.
#pragma once

#include "differential_harness.hpp"
#include <algorithm>
#include <kvpool/swa_pair.hpp>
#include <set>

namespace kvpool::test::swa_run {

using SwaPair = UnifiedSWAAllocator<Space>;

constexpr int full_tag = 0;
constexpr int swa_tag = 1;

// A running request: its virtual token ids in position order; its first token
// starts a page, so position i lies on the request's page i / page_size.
struct Request {
    std::vector<index_t> tokens;
    index_t swa_from = 0; // tokens [0, swa_from) left the window
};

class SwaRun final : public PairRun<SwaPair, ReferenceSwaPair> {
public:
    // input: a fuzzer's bytes to draw every decision from, instead of the seed.
    SwaRun(std::uint64_t seed, const PairConfig& config, int ops, const Rng* input = nullptr)
        : PairRun("swa-differential", seed, config, "swa", ops,
                  input ? *input : Rng(seed ^ 0x5357415f50414952ull ^ config.salt())) {
        // Entry bytes small and not multiples of each other; now and then the
        // full side grows down, and a side capped below its bytes (a fixed
        // split's cap: the conservation views and the joint size's id caps).
        static const std::vector<std::pair<index_t, index_t>> entry_pairs = {
            {24, 40}, {40, 24}, {12, 20}, {36, 28}, {20, 13}, {17, 24}, {48, 30}, {9, 14}};
        const auto picked = rng_.pick(entry_pairs);
        const std::pair<index_t, index_t> entries(entry_bytes(picked.first),
                                                  entry_bytes(picked.second));
        const index_t ps = config.page_size;
        const index_t swa_ps = config.other_page_size ? config.other_page_size : ps;
        const index_t page_bytes_max = std::max(entries.first * ps, entries.second * swa_ps);
        const index_t total =
            pool_pages(160, 320) * page_bytes_max + rng_.uniform(0, page_bytes_max - 1);
        const bool full_up = rng_.chance(0.7);
        SubPoolSpec full =
            spec("full", entries.first, ps, full_up ? GrowDirection::up : GrowDirection::down);
        SubPoolSpec swa =
            spec("swa", entries.second, swa_ps, full_up ? GrowDirection::down : GrowDirection::up);
        if (rng_.chance(0.2))
            full.max_tokens = total / (entries.first * ps) * ps * 2 / 5;
        if (rng_.chance(0.2))
            swa.max_tokens = total / (entries.second * swa_ps) * swa_ps * rng_.uniform(2, 5) / 10;
        // Each side its own options: its mode and, now and then, a small flush cap.
        const AllocatorOptions full_options = side_options(config.full_mode),
                               swa_options = side_options(config.other_mode);
        pool_ = std::make_unique<Pool>(PoolLayout(total, {full, swa}));
        pair_ = std::make_unique<SwaPair>(*pool_, full_options, swa_options);
        model_ = std::make_unique<ReferenceSwaPair>(pool_->layout().sub_pool("full"),
                                                    pool_->layout().sub_pool("swa"), total,
                                                    full_options, swa_options);
        add_side("full", pair_->full(), model_->full());
        add_side("swa", pair_->swa(), model_->swa());
        const auto& f = pool_->layout().sub_pool("full");
        const auto& s = pool_->layout().sub_pool("swa");
        geometry_ = fmt::format("total_bytes={} full(entry={}, grows {}, pages={}, "
                                "virtual_pages={}, max_moves_per_flush={}) "
                                "swa(entry={}, grows {}, pages={}, virtual_pages={}, "
                                "max_moves_per_flush={}) page_size={} swa_page_size={}",
                                total, entries.first, to_string(f.grow()), f.num_physical_pages,
                                f.num_virtual_pages, full_options.max_moves_per_flush,
                                entries.second, to_string(s.grow()), s.num_physical_pages,
                                s.num_virtual_pages, swa_options.max_moves_per_flush, ps, swa_ps);
    }

private:
    enum class Size { random, beyond };

    void compare() override {
        const ReferenceSwaPair& m = *model_;
        expect_eq(pair_->available_size(), m.available_size(), "available_size() (joint)");
        expect_eq(pair_->conserve_full_available_size(), m.conserve_full_available_size(),
                  "conserve_full_available_size()");
        expect_eq(pair_->conserve_swa_available_size(), m.conserve_swa_available_size(),
                  "conserve_swa_available_size()");
        expect_eq(pair_->schedulable_full_available_size(), m.full().schedulable_available_size(),
                  "schedulable_full_available_size()");
        expect_eq(pair_->schedulable_swa_available_size(), m.swa().schedulable_available_size(),
                  "schedulable_swa_available_size()");
        expect_eq(pair_->full_available_size(), m.full_available_size(), "full_available_size()");
        expect_eq(pair_->swa_available_size(), m.swa_available_size(), "swa_available_size()");
        compare_sides();
        probe_joint();
        // The tombstones: the library's tables, the model and the windows the
        // requests' bookkeeping says have passed.
        expect_tombstones(pair_->full().core(), pair_->swa().core(), m.tombstones(), requests_);
    }

    // The joint available_size() is what one allocation takes now, with no
    // flush: on copies of the cores, the full side allocates it and the SWA
    // side binds the same pages.
    void probe_joint() const {
        probe_cores_.copy(pair_->full().core(), pair_->swa().core());
        detail::AllocatorCore& full = *probe_cores_.first;
        detail::AllocatorCore& swa = *probe_cores_.second;
        const index_t pages = pair_->available_size() / pair_->page_size();
        full.hold_relocations(true);
        swa.hold_relocations(true);
        bool ok = full.alloc_pages(pages, probe_cores_.first_pages);
        if (ok) {
            const detail::PageRunList& swa_pages =
                detail::follower_pages(probe_cores_.first_pages.virtual_pages,
                                       full.page_size() / swa.page_size(), probe_swa_pages_);
            ok = swa.bind_virtual_pages(swa_pages, probe_cores_.second_pages);
        }
        if (!ok)
            fail(fmt::format("a joint allocation of available_size() = {} tokens failed",
                             pages * pair_->page_size()));
    }

    void after_step() override {
        if (step_ % 50 == 0)
            data_check_due_ = true;
        if (!data_check_due_)
            return;
        data_check_due_ = false;
        expect_window_data(*pair_, model_->full(), model_->swa(), full_tag, swa_tag, requests_);
    }

    void one_step() override {
        // Weights per regime: 0 grow, 1 shrink, 2 churn.
        static const double weights[3][10] = {
            // alloc extend decode free free_swa flush beyond forward complete drain
            {26, 20, 18, 8, 10, 8, 6, 7, 5, 2},
            {8, 8, 12, 30, 22, 12, 6, 7, 5, 2},
            {18, 14, 18, 16, 18, 8, 6, 7, 5, 2},
        };
        int kind = pick_kind(weights[regime_], 10);
        if (requests_.empty() && (kind == 3 || kind == 4))
            kind = 0;
        switch (kind) {
        case 0:
            return op_alloc(Size::random);
        case 1:
            return op_extend(Size::random);
        case 2:
            return op_decode();
        case 3:
            return op_free();
        case 4:
            return op_free_swa();
        case 5:
            return flush_opportunistic([&] { return pair_->flush_opportunistic(Space()); });
        case 6:
            return rng_.chance(0.5) ? op_alloc(Size::beyond) : op_extend(Size::beyond);
        case 7:
            return op_forward(true);
        case 8:
            return op_complete();
        default:
            return drain([&] { pair_->drain_pending_reuse(); });
        }
    }

    void stamp(const std::vector<index_t>& ids) {
        stamp_tokens(*pool_, pair_->full(), full_tag, ids, data_scratch_);
        stamp_tokens(*pool_, pair_->swa(), swa_tag, ids, data_scratch_);
        last_allocated_ = ids;
    }

    // alloc(n): a new request of whole pages. Beyond: more than even the
    // urgent flushes could make room for: it must fail.
    void op_alloc(Size size) {
        const index_t ps = pair_->page_size();
        const index_t available = model_->available_size() / ps;
        const index_t after_flush = model_->available_after_flush_size() / ps;
        index_t pages;
        bool must_succeed = false;
        const double u = uniform01();
        if (size == Size::beyond)
            pages = after_flush + rng_.uniform(1, 6);
        else if (u < 0.55)
            pages = rng_.uniform(1, 4);
        else if (u < 0.85)
            pages = rng_.uniform(5, 16);
        else if (u < 0.93)
            pages = rng_.uniform(0, std::max<index_t>(available / 2, 1));
        else {
            pages = u < 0.97 ? available : after_flush;
            must_succeed = true;
        }
        begin_op(fmt::format("alloc({} tokens){} [available {}, after flush {}]", pages * ps,
                             size == Size::beyond ? " beyond capacity" : "", available * ps,
                             after_flush * ps));
        auto [got, expected] = replay_allocation([&] { return model_->alloc(pages * ps); },
                                                 [&] { return pair_->alloc(Space(), pages * ps); });
        const std::vector<index_t> ids = got ? to_host(*got) : std::vector<index_t>{};
        expect_allocation("alloc", got.has_value(), expected, ids, pages > available);
        if (must_succeed && !got)
            fail("an allocation of at most available_size() (after the flush) failed");
        if (size == Size::beyond && got)
            fail("an allocation beyond what the flushes can free succeeded");
        after_allocation(model_->last_alloc_flushed(), got.has_value());
        if (!got || ids.empty())
            return;
        stamp(ids);
        requests_.push_back({ids, 0});
    }

    // alloc_extend over new (prefix 0) and running (prefix > 0, last_loc their
    // last token) requests; beyond: plus a new request longer than everything.
    void op_extend(Size size) {
        const index_t ps = pair_->page_size();
        const index_t batch = rng_.chance(0.03) ? 0 : rng_.uniform(1, 4);
        std::vector<index_t> prefix, seq, last_loc;
        std::vector<std::ptrdiff_t> which; // request index, -1: a new request
        for (std::size_t i : pick_distinct(requests_.size(), rng_.uniform(0, batch))) {
            const Request& req = requests_[i];
            const auto len = static_cast<index_t>(req.tokens.size());
            prefix.push_back(len);
            seq.push_back(len + (rng_.chance(0.1) ? 0 : rng_.uniform(1, 2 * ps + 3)));
            last_loc.push_back(req.tokens.back());
            which.push_back(static_cast<std::ptrdiff_t>(i));
        }
        while (static_cast<index_t>(seq.size()) < batch) {
            prefix.push_back(0);
            seq.push_back(rng_.uniform(1, 3 * ps + 5));
            last_loc.push_back(unbound);
            which.push_back(-1);
        }
        if (size == Size::beyond) {
            prefix.push_back(0);
            seq.push_back(model_->available_after_flush_size() + rng_.uniform(1, 3 * ps));
            last_loc.push_back(unbound);
            which.push_back(-1);
        }
        index_t tokens = 0;
        for (std::size_t b = 0; b < seq.size(); ++b)
            tokens += seq[b] - prefix[b];
        const index_t pages = detail::pages_needed_for_extend(prefix.data(), seq.data(),
                                                              static_cast<index_t>(seq.size()), ps);
        begin_op(fmt::format("alloc_extend{}(prefix_lens={}, seq_lens={}, last_loc={}) [available "
                             "{}, after flush {}]",
                             size == Size::beyond ? " beyond capacity" : "", prefix, seq, last_loc,
                             model_->available_size(), model_->available_after_flush_size()));
        auto out =
            kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
        const bool beyond = pages * ps > model_->available_size();
        auto [ok, expected] = replay_allocation(
            [&] { return model_->alloc_extend(prefix, seq, last_loc); },
            [&] { return pair_->alloc_extend(Space(), prefix, seq, to_device(last_loc), out); });
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_allocation("alloc_extend", ok, expected, ids, beyond);
        if (size == Size::beyond && ok)
            fail("alloc_extend beyond what the flushes can free succeeded");
        after_allocation(model_->last_alloc_flushed(), ok);
        if (!ok)
            return;
        stamp(ids);
        auto next = ids.begin();
        for (std::size_t b = 0; b < seq.size(); ++b) {
            const auto n = static_cast<std::ptrdiff_t>(seq[b] - prefix[b]);
            if (which[b] >= 0) {
                auto& req = requests_[static_cast<std::size_t>(which[b])];
                req.tokens.insert(req.tokens.end(), next, next + n);
            } else if (n > 0) {
                requests_.push_back({std::vector<index_t>(next, next + n), 0});
            }
            next += n;
        }
    }

    // alloc_decode: one token for each of several running requests.
    void op_decode() {
        if (requests_.empty())
            return op_extend(Size::random);
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 8));
        std::vector<index_t> seq, last_loc;
        for (std::size_t i : chosen) {
            seq.push_back(static_cast<index_t>(requests_[i].tokens.size()) + 1);
            last_loc.push_back(requests_[i].tokens.back());
        }
        begin_op(fmt::format(
            "alloc_decode(seq_lens={}, last_loc={}) [available {}, after flush {}]", seq, last_loc,
            model_->available_size(), model_->available_after_flush_size()));
        auto out = kk::uninitialized<IndexView>("test::decode_out", seq.size());
        auto [ok, expected] = replay_allocation(
            [&] { return model_->alloc_decode(seq, last_loc); },
            [&] { return pair_->alloc_decode(Space(), seq, to_device(last_loc), out); });
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_allocation("alloc_decode", ok, expected, ids);
        after_allocation(model_->last_alloc_flushed(), ok);
        if (!ok)
            return;
        stamp(ids);
        for (std::size_t k = 0; k < chosen.size(); ++k)
            requests_[chosen[k]].tokens.push_back(ids[k]);
    }

    // Drops finished requests from the bookkeeping.
    void forget(std::vector<std::size_t> finished) {
        std::sort(finished.rbegin(), finished.rend());
        for (std::size_t i : finished)
            requests_.erase(requests_.begin() + static_cast<std::ptrdiff_t>(i));
    }

    // Whole requests (their tombstoned SWA pages included), now and then as a
    // free group of one free per request.
    void op_free() {
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 3));
        const bool group = rng_.chance(0.2);
        std::vector<index_t> all;
        for (std::size_t i : chosen)
            all.insert(all.end(), requests_[i].tokens.begin(), requests_[i].tokens.end());
        if (rng_.chance(0.3))
            std::reverse(all.begin(), all.end());
        begin_op(fmt::format("free of {} whole request(s){}, {} tokens", chosen.size(),
                             group ? " in a free group" : "", all.size()));
        if (group)
            replay_void(
                [&] {
                    model_->free_group_begin();
                    for (std::size_t i : chosen)
                        model_->free(requests_[i].tokens);
                    model_->free_group_end();
                },
                [&] {
                    pair_->free_group_begin();
                    for (std::size_t i : chosen)
                        pair_->free(Space(), requests_[i].tokens);
                    pair_->free_group_end(Space());
                });
        else
            replay_void([&] { model_->free(all); }, [&] { pair_->free(Space(), all); });
        forget(chosen);
        ++stats_.frees;
        data_check_due_ = data_check_due_ || eager_;
    }

    // The oldest whole pages of a few requests leave the window (never the
    // page a decode appends to). Now and then the call names the pages that
    // left before again, which must be skipped.
    void op_free_swa() {
        evict_from_window(requests_, pair_->swa().page_size(),
                          [&](const std::vector<index_t>& tokens) {
                              replay_void([&] { model_->free_swa(tokens); },
                                          [&] { pair_->free_swa(Space(), tokens); });
                          });
        data_check_due_ = data_check_due_ || eager_;
    }

    std::vector<Request> requests_;
    mutable detail::PageRunList probe_swa_pages_;
};

} // namespace kvpool::test::swa_run
