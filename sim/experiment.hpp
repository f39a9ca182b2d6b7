// One comparison: the workload replayed under every policy on the same model
// and memory. The fixed splits are swept over the full side's share of the
// bytes (the tri-pool: a grid over the state slots' share and the full side's
// share of the rest, the two engine knobs); the engine's default is one of the
// points, and the oracle is the best point (what a user could at best have
// tuned by hand). For a workload with phases, the same sweep also names the
// best point of each phase alone: no single split need be right for every
// phase.
#pragma once

#include "pool_plan.hpp"
#include "run_result.hpp"
#include "scheduler.hpp"
#include "workload.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvpool::sim {

struct ExperimentConfig {
    ModelConfig model;
    PoolGeometry geometry;
    SchedulerConfig scheduler; // sliding window and state slots follow the model
    // Evenly spaced shares of the bytes per knob, besides the engine default;
    // none: the kind's default (default_sweep_points).
    std::optional<std::size_t> sweep_points;
    // Share cached prefixes when the workload's requests carry prefix hashes.
    bool prefix_cache = true;
    // The user's own fixed split, compared in place of the engine default.
    std::optional<Policy> configured_split;
};

// 19 shares on a pair; 5 per knob on the tri-pool (a 5 x 5 grid), which keeps
// its runs as few as a pair's.
std::size_t default_sweep_points(const ModelConfig& model);

struct PolicyRun {
    std::string name;
    Policy policy;
    RunResult result;
};

struct ExperimentResult {
    PolicyRun unified_eager;
    PolicyRun unified_lazy;
    std::vector<PolicyRun> sweep;           // fixed splits, by state share, then full share
    std::size_t engine_default = 0;         // index into sweep
    std::size_t oracle = 0;                 // index into sweep
    std::vector<std::size_t> phase_oracles; // per phase of the workload, index into sweep
    index_t byte_scale = 1;
    bool configured_split = false; // sweep[engine_default] is the user's split

    // The four rows of the comparison: unified eager, unified lazy, fixed at the
    // engine default, fixed at the oracle's share.
    std::vector<const PolicyRun*> compared() const;
};

using PoolFactory = std::function<std::unique_ptr<SimPool>(const PoolPlan&)>;

// Told about each run as it goes (the progress bar).
class RunObserver {
public:
    virtual ~RunObserver() = default;
    virtual void run_started(const std::string& name, std::size_t index, std::size_t count) = 0;
    virtual void run_progress(double fraction_done) = 0;
    virtual void all_done() = 0;
};

// The sliding window and state slots of the model, on top of the given config.
SchedulerConfig scheduler_config_for(const ModelConfig& model, SchedulerConfig base);

// The oracle's order: more requests completed, then more per simulated
// second, then more running on average.
bool better_run(const RunResult& a, const RunResult& b);

// The order for one phase, whose share of the time differs between runs:
// fewer of its requests aborted, then more completed per second of its share,
// then more running on average.
bool better_phase(const PhaseResult& a, const PhaseResult& b);

// The fixed splits the sweep runs, ascending by state share, then full share:
// on a pair, `points` evenly spaced full shares; on the tri-pool, `points`
// evenly spaced state shares times `points` evenly spaced full shares of the
// rest (each knob on its own axis); and the engine default (or the split given).
std::vector<Policy> sweep_splits(const ModelConfig& model, std::size_t points);
std::vector<Policy> sweep_splits(const ModelConfig& model, std::size_t points,
                                 const Policy& engine_default);

std::string policy_name(const ModelConfig& model, const Policy& policy);

RunResult run_policy(const ExperimentConfig& config, const Workload& workload, const Policy& policy,
                     const PoolFactory& make_pool, RunObserver& observer);

ExperimentResult run_experiment(const ExperimentConfig& config, const Workload& workload,
                                const PoolFactory& make_pool, RunObserver& observer);

} // namespace kvpool::sim
