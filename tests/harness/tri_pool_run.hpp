// One randomised run of the tri-pool (state slots, floating sliding-window KV,
// full KV) against the reference model's ReferenceTriPool, driven by an Rng:
// shared by the differential test and the fuzz target.
#pragma once

#include "differential_harness.hpp"
#include <algorithm>
#include <kvpool/mamba_swa_allocator.hpp>
#include <set>
#include <tuple>

namespace kvpool::test::tri_run {

using TriPool = UnifiedMambaSWAAllocator<Space>;

constexpr int full_tag = 0;
constexpr int swa_tag = 1;
constexpr int state_tag = 2;

// Each side's compaction mode and the KV page size.
struct Config {
    CompactionMode full_mode, swa_mode, state_mode;
    index_t page_size;
    // The sliding-window side's page size where it differs (decoupled page
    // sizes: a divisor of page_size); 0: page_size. Left 0, the name and the
    // salt are those of before, which the fuzz corpus's runs depend on.
    index_t swa_page_size = 0;
    std::string name() const {
        return fmt::format("full {}/swa {}/state {}/page_size={}{}", to_string(full_mode),
                           to_string(swa_mode), to_string(state_mode), page_size,
                           swa_page_size ? fmt::format("/swa_page_size={}", swa_page_size)
                                         : std::string());
    }
    std::uint64_t salt() const {
        const auto bit = [](CompactionMode m) { return m == CompactionMode::lazy ? 1ull : 0ull; };
        return (bit(full_mode) | bit(swa_mode) << 1 | bit(state_mode) << 2) *
                   0x9e3779b97f4a7c15ull ^
               static_cast<std::uint64_t>(page_size) * 0x100000001b3ull ^
               static_cast<std::uint64_t>(swa_page_size) * 0x5bd1e995ull;
    }
    bool any_eager() const {
        return full_mode == CompactionMode::eager || swa_mode == CompactionMode::eager ||
               state_mode == CompactionMode::eager;
    }
};

// Every side eager or every side lazy on page sizes 1 and 16, and two mixes.
inline std::vector<Config> all_configs() {
    std::vector<Config> configs;
    for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t page_size : {index_t(1), index_t(16)})
            configs.push_back({mode, mode, mode, page_size});
    configs.push_back({CompactionMode::lazy, CompactionMode::eager, CompactionMode::lazy, 1});
    configs.push_back({CompactionMode::eager, CompactionMode::lazy, CompactionMode::eager, 16});
    return configs;
}

// Decoupled page sizes: the sliding-window side's pages 4, 16 and 2 times
// smaller than the full side's, each mode. A list of its own, so that
// all_configs() (and the fuzz corpus's mapping onto it) stays as it was.
inline std::vector<Config> decoupled_configs() {
    return {{CompactionMode::eager, CompactionMode::eager, CompactionMode::eager, 16, 4},
            {CompactionMode::lazy, CompactionMode::lazy, CompactionMode::lazy, 16, 4},
            {CompactionMode::lazy, CompactionMode::eager, CompactionMode::lazy, 16, 1},
            {CompactionMode::eager, CompactionMode::lazy, CompactionMode::eager, 4, 2}};
}

// Copies of the three host cores, neighbours linked to each other, for the
// probes (kept across steps, as CoreCopies).
struct TriCopies {
    std::optional<detail::AllocatorCore> state, swa, full;
    detail::PageBinding first, second;

    void copy(const TriPool& tri) {
        if (full) {
            *state = tri.state().core();
            *swa = tri.swa().core();
            *full = tri.full().core();
        } else {
            state.emplace(tri.state().core());
            swa.emplace(tri.swa().core());
            full.emplace(tri.full().core());
        }
        state->bind_neighbour(&*swa);
        swa->bind_neighbour(&*state);
        swa->bind_neighbour(&*full);
        full->bind_neighbour(&*swa);
        first.clear();
        second.clear();
    }
};

// A running request: its full-side token ids in position order (its first
// token starts a page), the tokens that left the window, its state slot.
struct Request {
    std::vector<index_t> tokens;
    index_t swa_from = 0;
    index_t slot = unbound;
};

class TriRun final : public DifferentialRun {
public:
    // input: a fuzzer's bytes to draw every decision from, instead of the seed.
    TriRun(std::uint64_t seed, const Config& config, int ops, const Rng* input = nullptr)
        : DifferentialRun("tri-differential", seed, config.name(), ops,
                          input ? *input : Rng(seed ^ 0x5452495f504f4f4cull ^ config.salt())),
          eager_(config.any_eager()) {
        // Entry bytes not multiples of each other; a state slot costs a few to
        // many full tokens; a few hundred KV pages and a few dozen slots, so
        // the three kinds starve each other in turn; the band starts anywhere.
        static const std::vector<std::pair<index_t, index_t>> entry_pairs = {
            {24, 40}, {40, 24}, {12, 20}, {36, 28}, {20, 13}, {17, 24}, {9, 14}};
        static const std::vector<index_t> slot_costs = {3, 7, 20, 45};
        const index_t ps = config.page_size;
        const index_t swa_ps = config.swa_page_size ? config.swa_page_size : ps;
        const auto picked = rng_.pick(entry_pairs);
        const index_t e_full = entry_bytes(picked.first), e_swa = entry_bytes(picked.second);
        const index_t state_bytes = rng_.pick(slot_costs) * e_full - rng_.uniform(1, e_full - 1);
        const index_t kv_page = std::max(e_full * ps, e_swa * swa_ps);
        const index_t total = pool_pages(160, 320) * kv_page + pool_pages(8, 40) * state_bytes +
                              rng_.uniform(0, kv_page - 1);
        SubPoolSpec state = spec("mamba", state_bytes, 1, GrowDirection::up);
        SubPoolSpec swa = floating_spec("swa", e_swa, swa_ps, 0.15 + 0.7 * uniform01());
        SubPoolSpec full = spec("full", e_full, ps, GrowDirection::down);
        if (rng_.chance(0.2))
            full.max_tokens = total / (e_full * ps) * ps * 2 / 5;
        if (rng_.chance(0.2))
            state.max_tokens = rng_.uniform(4, 12);
        const AllocatorOptions full_options = side_options(config.full_mode),
                               swa_options = side_options(config.swa_mode),
                               state_options = side_options(config.state_mode);
        pool_ = std::make_unique<Pool>(PoolLayout(total, {state, swa, full}));
        tri_ = std::make_unique<TriPool>(*pool_, full_options, swa_options, state_options);
        const PoolLayout& layout = pool_->layout();
        model_ = std::make_unique<ReferenceTriPool>(
            layout.sub_pool("mamba"), layout.sub_pool("swa"), layout.sub_pool("full"), total,
            full_options, swa_options, state_options);
        add_side("full", tri_->full(), model_->full());
        add_side("swa", tri_->swa(), model_->swa());
        add_side("state", tri_->state(), model_->state());
        const auto& f = layout.sub_pool("full");
        const auto& w = layout.sub_pool("swa");
        const auto& s = layout.sub_pool("mamba");
        geometry_ = fmt::format(
            "total_bytes={} page_size={} swa_page_size={} state(entry={}, slots={}, "
            "virtual_slots={}, moves={}) swa(entry={}, pages={}, starts at page {}, moves={}) "
            "full(entry={}, pages={}, virtual_pages={}, moves={})",
            total, ps, swa_ps, state_bytes, s.num_physical_pages, s.num_virtual_pages,
            state_options.max_moves_per_flush, e_swa, w.num_physical_pages, w.start_page,
            swa_options.max_moves_per_flush, e_full, f.num_physical_pages, f.num_virtual_pages,
            full_options.max_moves_per_flush);
    }

private:
    void finish() override { stats_.band_shifts = tri_->swa().counters().shifts; }

    void compare() override {
        const ReferenceTriPool& m = *model_;
        expect_eq(tri_->available_size(), m.available_size(), "available_size() (joint)");
        expect_eq(tri_->state_slots_available(), m.state_slots_available(),
                  "state_slots_available()");
        expect_eq(tri_->state_slot_full_token_cost(), m.state_slot_full_token_cost(),
                  "state_slot_full_token_cost()");
        const auto& swa = tri_->swa().core();
        expect_eq(swa.anchor(), m.swa().anchor(), "swa: the floating band's anchor");
        expect_eq(swa.gap_below_bytes(), m.swa().gap_below_bytes(), "swa: gap below");
        expect_eq(swa.gap_above_bytes(), m.swa().gap_above_bytes(), "swa: gap above");
        bool pending = false;
        for (const auto& [name, real, model] :
             {std::make_tuple("full", &tri_->full(), &m.full()),
              std::make_tuple("swa", &tri_->swa(), &m.swa()),
              std::make_tuple("state", &tri_->state(), &m.state())}) {
            compare_side(name, *real, *model);
            pending = pending || model->pending_pages() > 0;
        }
        stats_.pending_seen += pending;
        probe_joint();
        probe_side("full");
        probe_side("swa");
        probe_side("state");
        expect_tombstones(tri_->full().core(), tri_->swa().core(), m.tombstones(), requests_);
    }

    // available_size() is what one KV allocation takes now with no flush (a
    // shift of the band allowed): on copies of the cores, the full side
    // allocates it and the sliding-window side binds the same pages (ratio of
    // its own per full page).
    void probe_joint() {
        copies_.copy(*tri_);
        const index_t pages = tri_->available_size() / tri_->page_size();
        copies_.state->hold_relocations(true);
        bool ok = copies_.full->alloc_pages(pages, copies_.first);
        copies_.full->hold_relocations(true);
        if (ok) {
            const detail::PageRunList& swa_pages =
                detail::follower_pages(copies_.first.virtual_pages, ratio(), probe_swa_pages_);
            ok = copies_.swa->bind_virtual_pages(swa_pages, copies_.second);
        }
        if (!ok)
            fail(fmt::format("a joint allocation of available_size() = {} tokens failed",
                             pages * tri_->page_size()));
    }

    // A side's schedulable_available_size() is what an allocation of its own
    // gets (its neighbours flushed or shifted), tried on copies of the cores.
    void probe_side(const std::string& name) {
        copies_.copy(*tri_);
        const Allocator& side = name == "full"  ? tri_->full()
                                : name == "swa" ? tri_->swa()
                                                : tri_->state();
        detail::AllocatorCore& core = name == "full"  ? *copies_.full
                                      : name == "swa" ? *copies_.swa
                                                      : *copies_.state;
        const index_t pages = side.schedulable_available_size() / side.page_size();
        bool ok;
        if (name == "swa") {
            std::vector<index_t> ids;
            for (index_t v = tri_->full().geometry().min_page_index * ratio();
                 v < core.virtual_table_pages() && static_cast<index_t>(ids.size()) < pages; ++v)
                if (core.physical_page_of(v) == unbound)
                    ids.push_back(v);
            ok = core.bind_virtual_pages(ids.data(), static_cast<index_t>(ids.size()),
                                         copies_.first);
        } else {
            ok = core.alloc_pages(pages, copies_.first);
        }
        if (!ok)
            fail(fmt::format("{}: an allocation of schedulable_available_size() = {} tokens failed",
                             name, pages * side.page_size()));
    }

    // Sliding-window pages per full page.
    index_t ratio() const { return tri_->page_size() / tri_->swa().page_size(); }

    void after_step() override {
        if (step_ % 50 == 0)
            data_check_due_ = true;
        if (!data_check_due_)
            return;
        data_check_due_ = false;
        expect_window_data(*tri_, model_->full(), model_->swa(), full_tag, swa_tag, requests_);
        std::vector<index_t> slots;
        for (const auto& req : requests_)
            slots.push_back(req.slot);
        expect_live_data("state", tri_->state(), model_->state(), state_tag, slots);
    }

    void one_step() override {
        // Weights per regime: 0 grow, 1 shrink, 2 churn.
        static const double weights[3][11] = {
            // admit extend decode free free_swa flush beyond forward complete drain window
            {26, 18, 18, 8, 10, 8, 5, 7, 5, 2, 3},
            {8, 8, 12, 32, 22, 12, 5, 7, 5, 2, 3},
            {18, 14, 18, 18, 18, 8, 5, 7, 5, 2, 3},
        };
        int kind = pick_kind(weights[regime_], 11);
        if (requests_.empty() && kind >= 1 && kind <= 4)
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
            return op_free_swa();
        case 5:
            return flush_opportunistic([&] { return tri_->flush_opportunistic(Space()); });
        case 6:
            return rng_.chance(0.5) ? op_slots_beyond() : op_kv_beyond();
        case 7:
            return op_forward();
        case 8:
            return op_complete();
        case 9:
            return drain([&] { tri_->drain_pending_reuse(); });
        default:
            return op_window();
        }
    }

    void stamp_kv(const std::vector<index_t>& ids) {
        stamp_tokens(*pool_, tri_->full(), full_tag, ids, data_scratch_);
        stamp_tokens(*pool_, tri_->swa(), swa_tag, ids, data_scratch_);
        last_allocated_ = ids;
    }

    // After an allocation: one that flushed or shifted a band may have moved
    // pages; a failure that did neither changed nothing.
    void after_tri_allocation(bool ok) { after_allocation(model_->last_alloc_relocated(), ok); }

    std::optional<std::vector<index_t>> alloc_slots(index_t count, const char* what) {
        const bool beyond = count > model_->state_slots_available();
        auto [got, expected] =
            replay_allocation([&] { return model_->alloc_state_slots(count); },
                              [&] { return tri_->alloc_state_slots(Space(), count); });
        const std::vector<index_t> slots = got ? to_host(*got) : std::vector<index_t>{};
        expect_allocation(what, got.has_value(), expected, slots, beyond);
        after_tri_allocation(got.has_value());
        if (!got)
            return std::nullopt;
        stamp_tokens(*pool_, tri_->state(), state_tag, slots, data_scratch_);
        return slots;
    }

    void free_slots(const std::vector<index_t>& slots) {
        replay_void([&] { model_->free_state_slots(slots); },
                    [&] { tri_->free_state_slots(Space(), slots); });
    }

    // A KV allocation of new requests (alloc of whole pages for one, else
    // alloc_extend from prefix 0): the ids, or none.
    std::optional<std::vector<index_t>> alloc_prompts(const std::vector<index_t>& seq,
                                                      bool whole_pages) {
        const index_t ps = tri_->page_size();
        index_t pages = 0, tokens = 0;
        for (index_t s : seq) {
            pages += (s + ps - 1) / ps;
            tokens += s;
        }
        const bool beyond = pages * ps > model_->available_size();
        std::optional<std::vector<index_t>> expected;
        std::vector<index_t> ids;
        bool ok;
        if (whole_pages) {
            auto [got, model] = replay_allocation([&] { return model_->alloc(seq[0]); },
                                                  [&] { return tri_->alloc(Space(), seq[0]); });
            ok = got.has_value();
            expected = model;
            if (ok)
                ids = to_host(*got);
        } else {
            const std::vector<index_t> prefix(seq.size(), 0), last_loc(seq.size(), unbound);
            auto out =
                kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
            std::tie(ok, expected) = replay_allocation(
                [&] { return model_->alloc_extend(prefix, seq, last_loc); },
                [&] { return tri_->alloc_extend(Space(), prefix, seq, to_device(last_loc), out); });
            if (ok)
                ids = to_host(out);
        }
        expect_allocation(whole_pages ? "alloc" : "alloc_extend", ok, expected, ids, beyond);
        after_tri_allocation(ok);
        if (!ok)
            return std::nullopt;
        stamp_kv(ids);
        return ids;
    }

    // New requests as the engine admits them: their state slots, then their
    // prompts' KV; without room for the prompts the slots go back.
    void op_admit() {
        const index_t ps = tri_->page_size();
        const index_t k = rng_.uniform(1, 3);
        const bool whole_pages = k == 1 && rng_.chance(0.3);
        std::vector<index_t> seq;
        for (index_t i = 0; i < k; ++i)
            seq.push_back(whole_pages ? rng_.uniform(1, 6) * ps : rng_.uniform(1, 3 * ps + 5));
        begin_op(fmt::format("admit {} request(s) of {} tokens{} [slots available {}, KV "
                             "available {}]",
                             k, seq, whole_pages ? " (alloc)" : " (alloc_extend)",
                             model_->state_slots_available(), model_->available_size()));
        const auto slots = alloc_slots(k, "alloc_state_slots");
        if (!slots)
            return;
        const auto ids = alloc_prompts(seq, whole_pages);
        if (!ids) {
            free_slots(*slots);
            data_check_due_ = true;
            return;
        }
        auto next = ids->begin();
        for (index_t i = 0; i < k; ++i) {
            const auto n = static_cast<std::ptrdiff_t>(seq[static_cast<std::size_t>(i)]);
            requests_.push_back(
                {std::vector<index_t>(next, next + n), 0, (*slots)[static_cast<std::size_t>(i)]});
            next += n;
        }
    }

    // alloc_extend over running requests (prefix > 0, last_loc their last token).
    bool extend(const std::vector<std::size_t>& chosen) {
        const index_t ps = tri_->page_size();
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
        begin_op(fmt::format("alloc_extend(prefix_lens={}, seq_lens={}, last_loc={}) [available "
                             "{}]",
                             prefix, seq, last_loc, model_->available_size()));
        auto out =
            kk::uninitialized<IndexView>("test::extend_out", static_cast<std::size_t>(tokens));
        const bool beyond = pages * ps > model_->available_size();
        auto [ok, expected] = replay_allocation(
            [&] { return model_->alloc_extend(prefix, seq, last_loc); },
            [&] { return tri_->alloc_extend(Space(), prefix, seq, to_device(last_loc), out); });
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_allocation("alloc_extend", ok, expected, ids, beyond);
        after_tri_allocation(ok);
        if (!ok)
            return false;
        stamp_kv(ids);
        auto next = ids.begin();
        for (std::size_t b = 0; b < chosen.size(); ++b) {
            const auto n = static_cast<std::ptrdiff_t>(seq[b] - prefix[b]);
            auto& req = requests_[chosen[b]];
            req.tokens.insert(req.tokens.end(), next, next + n);
            next += n;
        }
        return true;
    }
    void op_extend() { extend(pick_distinct(requests_.size(), rng_.uniform(1, 4))); }

    bool decode(const std::vector<std::size_t>& chosen) {
        std::vector<index_t> seq, last_loc;
        for (std::size_t i : chosen) {
            seq.push_back(static_cast<index_t>(requests_[i].tokens.size()) + 1);
            last_loc.push_back(requests_[i].tokens.back());
        }
        begin_op(fmt::format("alloc_decode(seq_lens={}, last_loc={}) [available {}]", seq, last_loc,
                             model_->available_size()));
        auto out = kk::uninitialized<IndexView>("test::decode_out", seq.size());
        auto [ok, expected] = replay_allocation(
            [&] { return model_->alloc_decode(seq, last_loc); },
            [&] { return tri_->alloc_decode(Space(), seq, to_device(last_loc), out); });
        const std::vector<index_t> ids = ok ? to_host(out) : std::vector<index_t>{};
        expect_allocation("alloc_decode", ok, expected, ids);
        after_tri_allocation(ok);
        if (!ok)
            return false;
        stamp_kv(ids);
        for (std::size_t k = 0; k < chosen.size(); ++k)
            requests_[chosen[k]].tokens.push_back(ids[k]);
        return true;
    }
    void op_decode() { decode(pick_distinct(requests_.size(), rng_.uniform(1, 8))); }

    // Finished requests: their KV (the window's pages first) and their state
    // slots, either first, now and then all in one free group.
    void op_free() {
        const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 3));
        const bool group = rng_.chance(0.2);
        const bool slots_first = rng_.chance(0.5);
        std::vector<index_t> tokens, slots;
        for (std::size_t i : chosen) {
            tokens.insert(tokens.end(), requests_[i].tokens.begin(), requests_[i].tokens.end());
            slots.push_back(requests_[i].slot);
        }
        if (rng_.chance(0.3))
            std::reverse(tokens.begin(), tokens.end());
        begin_op(fmt::format("free of {} request(s){}: {} KV tokens, state slots {}{}",
                             chosen.size(), group ? " in a free group" : "", tokens.size(), slots,
                             slots_first ? " (slots first)" : ""));
        replay_void(
            [&] {
                if (group)
                    model_->free_group_begin();
                if (slots_first)
                    model_->free_state_slots(slots);
                model_->free(tokens);
                if (!slots_first)
                    model_->free_state_slots(slots);
                if (group)
                    model_->free_group_end();
            },
            [&] {
                if (group)
                    tri_->free_group_begin();
                if (slots_first)
                    tri_->free_state_slots(Space(), slots);
                tri_->free(Space(), tokens);
                if (!slots_first)
                    tri_->free_state_slots(Space(), slots);
                if (group)
                    tri_->free_group_end(Space());
            });
        std::vector<std::size_t> finished = chosen;
        std::sort(finished.rbegin(), finished.rend());
        for (std::size_t i : finished)
            requests_.erase(requests_.begin() + static_cast<std::ptrdiff_t>(i));
        ++stats_.frees;
        data_check_due_ = data_check_due_ || eager_;
    }

    // The oldest whole sliding-window pages of a few requests leave the
    // window (never the page a decode appends to); now and then the pages
    // that left before are named again, and skipped.
    void op_free_swa() {
        evict_from_window(requests_, tri_->swa().page_size(),
                          [&](const std::vector<index_t>& tokens) {
                              replay_void([&] { model_->free_swa(tokens); },
                                          [&] { tri_->free_swa(Space(), tokens); });
                          });
        data_check_due_ = data_check_due_ || eager_;
    }

    // State slots beyond what can be scheduled: granted exactly when the
    // model grants them (pages pending reuse may make room); then given back.
    void op_slots_beyond() {
        const index_t count = model_->state_slots_available() + rng_.uniform(1, 3);
        begin_op(fmt::format("alloc_state_slots({}) beyond state_slots_available() {}", count,
                             model_->state_slots_available()));
        if (const auto slots = alloc_slots(count, "alloc_state_slots beyond")) {
            free_slots(*slots);
            data_check_due_ = true;
        }
    }

    // KV beyond available_size(): a request of whole pages, granted exactly
    // when the model grants it (flushes make room); then given back. Now and
    // then more than the whole buffer holds, which must fail.
    void op_kv_beyond() {
        const index_t ps = tri_->page_size();
        const index_t kv_pair_bytes =
            tri_->full().geometry().page_bytes + ratio() * tri_->swa().geometry().page_bytes;
        const bool impossible = rng_.chance(0.25);
        const index_t pages = impossible ? pool_->total_bytes() / kv_pair_bytes + 1
                                         : model_->available_size() / ps + rng_.uniform(1, 6);
        begin_op(fmt::format("alloc({} tokens) beyond available_size() {}{}", pages * ps,
                             model_->available_size(),
                             impossible ? " (more than the buffer holds)" : ""));
        auto [got, expected] = replay_allocation([&] { return model_->alloc(pages * ps); },
                                                 [&] { return tri_->alloc(Space(), pages * ps); });
        const std::vector<index_t> ids = got ? to_host(*got) : std::vector<index_t>{};
        expect_allocation("alloc beyond available_size()", got.has_value(), expected, ids, true);
        after_tri_allocation(got.has_value());
        if (impossible && got)
            fail("an allocation larger than the buffer succeeded");
        if (!got)
            return;
        stamp_kv(ids);
        replay_void([&] { model_->free(ids); }, [&] { tri_->free(Space(), ids); });
        data_check_due_ = true;
    }

    // A forward writes the last allocation's tokens still live on the full
    // side, at the same virtual ids on the sliding-window side; state slots
    // get no write set.
    void op_forward() {
        const std::vector<index_t> written = still_live(last_allocated_, model_->full());
        forward({written, written, {}}, [&](const CompletionTokenPtr& token) {
            tri_->set_latest_forward_done(token);
            if (token)
                tri_->set_inflight_forward(token, written);
        });
    }

    // Speculative decoding: a backup window over all three sides, a few
    // decodes and extends inside it, then restore_state (every allocation
    // undone, the requests as before) or commit_state (kept).
    void op_window() {
        if (requests_.empty())
            return op_admit();
        begin_op("backup_state()");
        const MambaSWASnapshot snapshot = tri_->backup_state();
        model_->backup();
        ++stats_.windows;
        const std::vector<Request> before = requests_;
        const index_t steps = rng_.uniform(1, 3);
        for (index_t i = 0; i < steps; ++i) {
            const auto chosen = pick_distinct(requests_.size(), rng_.uniform(1, 4));
            if (rng_.chance(0.6))
                decode(chosen);
            else
                extend(chosen);
            compare();
        }
        if (rng_.chance(0.5)) {
            begin_op("restore_state()");
            replay_void([&] { model_->restore(); },
                        [&] { tri_->restore_state(Space(), snapshot); });
            requests_ = before;
        } else {
            begin_op("commit_state()");
            model_->commit();
            tri_->commit_state(snapshot);
        }
    }

    std::unique_ptr<TriPool> tri_;
    std::unique_ptr<ReferenceTriPool> model_;
    std::vector<Request> requests_;
    std::vector<index_t> last_allocated_;
    bool eager_; // a side compacts on every free
    TriCopies copies_;
    detail::PageRunList probe_swa_pages_; // probe_joint's sliding-window pages
};

} // namespace kvpool::test::tri_run
