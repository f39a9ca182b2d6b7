#include "experiment.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <tuple>

namespace kvpool::sim {

std::vector<const PolicyRun*> ExperimentResult::compared() const {
    return {&unified_eager, &unified_lazy, &sweep[engine_default], &sweep[oracle]};
}

SchedulerConfig scheduler_config_for(const ModelConfig& model, SchedulerConfig base) {
    base.sliding_window = model.has_sliding_window() ? model.sliding_window : 0;
    base.state_slot_per_request = model.has_state_slots();
    return base;
}

bool better_run(const RunResult& a, const RunResult& b) {
    return std::make_tuple(a.completed, a.completed_per_second(), a.mean_running()) >
           std::make_tuple(b.completed, b.completed_per_second(), b.mean_running());
}

bool better_phase(const PhaseResult& a, const PhaseResult& b) {
    return std::make_tuple(b.aborted, a.completed_per_second(), a.mean_running()) >
           std::make_tuple(a.aborted, b.completed_per_second(), b.mean_running());
}

std::size_t default_sweep_points(const ModelConfig& model) {
    return model.kind == HybridKind::mamba_sliding_window ? 5 : 19;
}

std::vector<Policy> sweep_splits(const ModelConfig& model, std::size_t points) {
    return sweep_splits(model, points, engine_default_split(model));
}

std::vector<Policy> sweep_splits(const ModelConfig& model, std::size_t points,
                                 const Policy& engine_default) {
    const auto grid = [&](std::size_t k) {
        return static_cast<double>(k) / static_cast<double>(points + 1);
    };
    // The state slots' shares: the tri-pool's grid, a pair's none.
    std::vector<double> state_shares{0.0};
    if (model.kind == HybridKind::mamba_sliding_window) {
        state_shares.clear();
        for (std::size_t i = 1; i <= points; ++i)
            state_shares.push_back(grid(i));
    }
    std::vector<Policy> splits{engine_default};
    for (double state : state_shares)
        for (std::size_t k = 1; k <= points; ++k) {
            const Policy p{PolicyKind::fixed_split, (1.0 - state) * grid(k), state};
            // A grid point indistinguishable from the default would run the same split twice.
            if (std::abs(p.full_fraction - engine_default.full_fraction) > 1e-3 ||
                std::abs(p.state_fraction - engine_default.state_fraction) > 1e-3)
                splits.push_back(p);
        }
    std::sort(splits.begin(), splits.end(), [](const Policy& a, const Policy& b) {
        return std::tie(a.state_fraction, a.full_fraction) <
               std::tie(b.state_fraction, b.full_fraction);
    });
    return splits;
}

std::string policy_name(const ModelConfig& model, const Policy& policy) {
    switch (policy.kind) {
    case PolicyKind::unified_eager:
        return "unified pool, eager compaction";
    case PolicyKind::unified_lazy:
        return "unified pool, lazy compaction";
    case PolicyKind::fixed_split:
        break;
    }
    return "fixed split, " + engine_arguments(model, policy);
}

RunResult run_policy(const ExperimentConfig& config, const Workload& workload, const Policy& policy,
                     const PoolFactory& make_pool, RunObserver& observer) {
    const auto start = std::chrono::steady_clock::now();
    const auto pool = make_pool(plan_pool(config.model, config.geometry, policy));
    SchedulerConfig scheduler_config = scheduler_config_for(config.model, config.scheduler);
    scheduler_config.prefix_block_tokens = config.prefix_cache ? workload.block_tokens : 0;
    scheduler_config.evict_across_sides = policy.kind != PolicyKind::fixed_split;
    Scheduler scheduler(*pool, workload.requests, scheduler_config);
    RunResult result =
        run_to_completion(scheduler, [&](double done) { observer.run_progress(done); });
    result.wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

ExperimentResult run_experiment(const ExperimentConfig& config, const Workload& workload,
                                const PoolFactory& make_pool, RunObserver& observer) {
    const Policy engine_default =
        config.configured_split.value_or(engine_default_split(config.model));
    const auto splits =
        sweep_splits(config.model, config.sweep_points.value_or(default_sweep_points(config.model)),
                     engine_default);
    const std::size_t runs = 2 + splits.size();
    std::size_t index = 0;
    const auto run = [&](const Policy& policy) {
        PolicyRun r{policy_name(config.model, policy), policy, {}};
        observer.run_started(r.name, index++, runs);
        r.result = run_policy(config, workload, policy, make_pool, observer);
        return r;
    };

    ExperimentResult out;
    out.byte_scale = byte_scale(config.model, config.geometry);
    out.configured_split = config.configured_split.has_value();
    out.unified_eager = run({PolicyKind::unified_eager});
    out.unified_lazy = run({PolicyKind::unified_lazy});
    // Only the compared rows are plotted: other sweep points drop their timelines
    // as soon as they cannot be the oracle, which keeps long traces small.
    const auto drop_timeline = [&](std::size_t i) {
        if (i != out.engine_default) {
            std::vector<TimelinePoint>().swap(out.sweep[i].result.timeline);
            std::vector<FirstToken>().swap(out.sweep[i].result.first_tokens);
        }
    };
    for (const Policy& split : splits) {
        const std::size_t i = out.sweep.size();
        if (split == engine_default)
            out.engine_default = i;
        out.sweep.push_back(run(split));
        if (i == 0)
            continue;
        if (better_run(out.sweep[i].result, out.sweep[out.oracle].result)) {
            drop_timeline(out.oracle);
            out.oracle = i;
        } else {
            drop_timeline(i);
        }
    }
    out.phase_oracles.assign(out.sweep.front().result.phases.size(), 0);
    for (std::size_t p = 0; p < out.phase_oracles.size(); ++p)
        for (std::size_t i = 1; i < out.sweep.size(); ++i)
            if (better_phase(out.sweep[i].result.phases[p],
                             out.sweep[out.phase_oracles[p]].result.phases[p]))
                out.phase_oracles[p] = i;
    observer.all_done();
    return out;
}

} // namespace kvpool::sim
