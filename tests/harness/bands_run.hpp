// One randomised run of N independent bands in one buffer (one growing up,
// one to three floating, one growing down, each owning its ids) against the
// reference model's ReferenceSides linked as neighbours, driven by an Rng:
// shared by the differential test and the fuzz target.
#pragma once

#include "differential_harness.hpp"
#include <algorithm>

namespace kvpool::test::bands_run {

// Every side in one mode; each side's page size from the seed, up to this one.
struct Config {
    CompactionMode mode;
    index_t page_size;
    std::string name() const { return fmt::format("{}/page_size<={}", to_string(mode), page_size); }
    std::uint64_t salt() const {
        return (mode == CompactionMode::lazy ? 0x3full : 0x11ull) * 0x9e3779b97f4a7c15ull ^
               static_cast<std::uint64_t>(page_size) * 0x100000001b3ull;
    }
};

inline std::vector<Config> all_configs() {
    std::vector<Config> configs;
    for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t page_size : {index_t(1), index_t(16)})
            configs.push_back({mode, page_size});
    return configs;
}

class BandsRun final : public DifferentialRun {
public:
    // input: a fuzzer's bytes to draw every decision from, instead of the seed.
    BandsRun(std::uint64_t seed, const Config& config, int ops, const Rng* input = nullptr)
        : DifferentialRun("bands-differential", seed, config.name(), ops,
                          input ? *input : Rng(seed ^ 0x42414e44535f4e4eull ^ config.salt())),
          eager_(config.mode == CompactionMode::eager) {
        // Entry bytes not multiples of each other; floating bands start at
        // random places, in order; a few hundred pages of the largest size.
        static const std::vector<index_t> entries = {9, 12, 13, 17, 20, 24, 28, 36, 40};
        const auto floating = static_cast<std::size_t>(rng_.uniform(1, 3));
        const std::size_t n = floating + 2;
        // Each floating band starts inside its own slice of the buffer, so the
        // starts increase strictly (as a layout requires) whatever is drawn.
        std::vector<double> starts;
        const double slice = 0.8 / static_cast<double>(floating);
        for (std::size_t i = 0; i < floating; ++i)
            starts.push_back(0.1 + slice * (static_cast<double>(i) + 0.05 + 0.9 * uniform01()));
        std::vector<SubPoolSpec> specs;
        index_t page_bytes_max = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const index_t ps =
                rng_.chance(0.5) ? config.page_size : std::max<index_t>(1, config.page_size / 4);
            const index_t entry = entry_bytes(rng_.pick(entries));
            const std::string name = fmt::format("band{}", i);
            specs.push_back(i == 0       ? spec(name, entry, ps, GrowDirection::up)
                            : i == n - 1 ? spec(name, entry, ps, GrowDirection::down)
                                         : floating_spec(name, entry, ps, starts[i - 1]));
            if (rng_.chance(0.15))
                specs.back().max_tokens = rng_.uniform(20, 120) * ps;
            page_bytes_max = std::max(page_bytes_max, entry * ps);
        }
        const index_t total =
            pool_pages(160, 320) * page_bytes_max + rng_.uniform(0, page_bytes_max - 1);
        pool_ = std::make_unique<Pool>(PoolLayout(total, specs));
        std::string sides;
        for (std::size_t i = 0; i < n; ++i) {
            const AllocatorOptions o = side_options(config.mode);
            real_sides_.push_back(std::make_unique<Allocator>(*pool_, specs[i].name, o));
            model_sides_.push_back(
                std::make_unique<ReferenceSide>(pool_->layout().sub_pool(i), total, o));
            const SubPoolGeometry& g = pool_->layout().sub_pool(i);
            sides += fmt::format(" {}(entry={}, page_size={}, grows {}, pages={}, "
                                 "virtual_pages={}, starts at page {}, moves={})",
                                 g.spec.name, g.spec.entry_bytes, g.page_size(),
                                 to_string(g.grow()), g.num_physical_pages, g.num_virtual_pages,
                                 g.start_page, o.max_moves_per_flush);
        }
        for (std::size_t i = 0; i + 1 < n; ++i) {
            real_sides_[i]->bind_neighbour(*real_sides_[i + 1]);
            model_sides_[i]->bind_peer(*model_sides_[i + 1]);
        }
        for (std::size_t i = 0; i < n; ++i)
            add_side(specs[i].name, *real_sides_[i], *model_sides_[i]);
        live_.resize(n);
        copies_.resize(n);
        geometry_ = fmt::format("total_bytes={}{}", total, sides);
    }

private:
    void finish() override {
        for (const auto& side : real_sides_)
            stats_.band_shifts += side->counters().shifts;
    }

    void compare() override {
        bool pending = false;
        for (std::size_t i = 0; i < real_sides_.size(); ++i) {
            const Allocator& real = *real_sides_[i];
            const ReferenceSide& model = *model_sides_[i];
            const std::string name = real.geometry().spec.name;
            compare_side(name, real, model);
            if (model.floating()) {
                expect_eq(real.core().anchor(), model.anchor(), name + ": anchor");
                expect_eq(real.core().gap_below_bytes(), model.gap_below_bytes(),
                          name + ": gap below");
            }
            pending = pending || model.pending_pages() > 0;
            probe(i);
        }
        stats_.pending_seen += pending;
        // The bands lie in order, each clear of the next.
        for (std::size_t i = 0; i + 1 < real_sides_.size(); ++i)
            if (real_sides_[i]->core().byte_high_frontier() >
                real_sides_[i + 1]->core().byte_low_frontier())
                fail(fmt::format("bands {} and {} overlap", i, i + 1));
    }

    // schedulable_available_size() of side i is what its allocation gets
    // (its neighbours flushed or shifted): tried on copies of every core.
    void probe(std::size_t i) {
        for (std::size_t k = 0; k < copies_.size(); ++k) {
            if (copies_[k])
                *copies_[k] = real_sides_[k]->core();
            else
                copies_[k].emplace(real_sides_[k]->core());
        }
        for (std::size_t k = 0; k + 1 < copies_.size(); ++k) {
            copies_[k]->bind_neighbour(&*copies_[k + 1]);
            copies_[k + 1]->bind_neighbour(&*copies_[k]);
        }
        const Allocator& side = *real_sides_[i];
        const index_t pages = side.schedulable_available_size() / side.page_size();
        probe_pages_.clear();
        if (!copies_[i]->alloc_pages(pages, probe_pages_))
            fail(fmt::format("{}: an allocation of schedulable_available_size() = {} tokens failed",
                             side.geometry().spec.name, pages * side.page_size()));
    }

    void after_step() override {
        if (step_ % 50 == 0)
            data_check_due_ = true;
        if (!data_check_due_)
            return;
        data_check_due_ = false;
        for (std::size_t i = 0; i < real_sides_.size(); ++i)
            expect_live_data(real_sides_[i]->geometry().spec.name, *real_sides_[i],
                             *model_sides_[i], static_cast<int>(i), live_[i]);
    }

    void one_step() override {
        // Weights per regime: 0 grow, 1 shrink, 2 churn.
        static const double weights[3][7] = {
            // alloc free flush beyond forward complete drain
            {40, 12, 8, 6, 7, 5, 2},
            {12, 40, 12, 6, 7, 5, 2},
            {28, 28, 8, 6, 7, 5, 2},
        };
        const auto s =
            static_cast<std::size_t>(rng_.uniform(0, static_cast<index_t>(real_sides_.size()) - 1));
        switch (pick_kind(weights[regime_], 7)) {
        case 0:
            return op_alloc(s, false);
        case 1:
            return live_[s].empty() ? op_alloc(s, false) : op_free(s);
        case 2:
            return flush_opportunistic([&] {
                index_t moved = 0;
                for (const auto& side : real_sides_)
                    moved += side->flush_opportunistic(Space());
                return moved;
            });
        case 3:
            return op_alloc(s, true);
        case 4:
            return op_forward();
        case 5:
            return op_complete();
        default:
            return drain([&] {
                for (const auto& side : real_sides_)
                    side->drain_pending_reuse();
            });
        }
    }

    // Whole pages on side s: few, or as many as its views promise, or
    // (beyond) more than its schedulable size, granted exactly when the model
    // grants them.
    void op_alloc(std::size_t s, bool beyond) {
        Allocator& real = *real_sides_[s];
        ReferenceSide& model = *model_sides_[s];
        const index_t ps = model.page_size();
        const index_t schedulable = model.schedulable_available_size() / ps;
        const double u = uniform01();
        const index_t pages = beyond     ? schedulable + rng_.uniform(1, 6)
                              : u < 0.6  ? rng_.uniform(1, 4)
                              : u < 0.85 ? rng_.uniform(5, 16)
                                         : schedulable;
        begin_op(fmt::format("{}.alloc({} tokens) [available {}, schedulable {}]",
                             real.geometry().spec.name, pages * ps, model.available_size(),
                             schedulable * ps));
        auto [got, expected] = replay_allocation([&] { return model.alloc(pages * ps); },
                                                 [&] { return real.alloc(Space(), pages * ps); });
        const std::vector<index_t> ids = got ? to_host(*got) : std::vector<index_t>{};
        expect_allocation("alloc", got.has_value(), expected, ids, pages > schedulable);
        if (!beyond && pages <= schedulable && !got)
            fail("an allocation of at most schedulable_available_size() failed");
        after_allocation(model.last_alloc_flushed_peer(), got.has_value());
        if (!got)
            return;
        stamp_tokens(*pool_, real, static_cast<int>(s), ids, data_scratch_);
        live_[s].insert(live_[s].end(), ids.begin(), ids.end());
        last_allocated_ = ids;
        last_side_ = s;
    }

    // A few whole pages of side s, in random order.
    void op_free(std::size_t s) {
        const index_t ps = real_sides_[s]->page_size();
        std::vector<index_t> pages;
        for (index_t t : live_[s])
            if (t % ps == 0)
                pages.push_back(t / ps);
        std::vector<index_t> freed_pages;
        for (std::size_t k : pick_distinct(pages.size(), rng_.uniform(1, 6)))
            freed_pages.push_back(pages[k]);
        std::vector<index_t> tokens, kept;
        for (index_t t : live_[s])
            (std::find(freed_pages.begin(), freed_pages.end(), t / ps) != freed_pages.end() ? tokens
                                                                                            : kept)
                .push_back(t);
        begin_op(
            fmt::format("{}.free of pages {}", real_sides_[s]->geometry().spec.name, freed_pages));
        replay_void([&] { model_sides_[s]->free(tokens); },
                    [&] { real_sides_[s]->free(Space(), tokens); });
        live_[s] = kept;
        ++stats_.frees;
        data_check_due_ = data_check_due_ || eager_;
    }

    // A forward writes the last allocation's tokens still live (on its side).
    void op_forward() {
        std::vector<std::vector<index_t>> written(real_sides_.size());
        if (last_side_ < real_sides_.size())
            written[last_side_] = still_live(last_allocated_, *model_sides_[last_side_]);
        forward(written, [&](const CompletionTokenPtr& token) {
            for (std::size_t i = 0; i < real_sides_.size(); ++i) {
                real_sides_[i]->set_latest_forward_done(token);
                if (token)
                    real_sides_[i]->set_inflight_forward(token, written[i]);
            }
        });
    }

    std::vector<std::unique_ptr<Allocator>> real_sides_;
    std::vector<std::unique_ptr<ReferenceSide>> model_sides_;
    std::vector<std::vector<index_t>> live_; // each side's live tokens, stamped
    std::vector<index_t> last_allocated_;
    std::size_t last_side_ = ~std::size_t(0);
    bool eager_;
    std::vector<std::optional<detail::AllocatorCore>> copies_;
    detail::PageBinding probe_pages_;
};

} // namespace kvpool::test::bands_run
