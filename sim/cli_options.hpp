// The command line of kvpool-sim.
#pragma once

#include "scheduler.hpp"
#include "sim_backend.hpp"
#include "workload.hpp"

#include <optional>
#include <string>
#include <vector>

namespace kvpool::sim {

struct CliOptions {
    std::string model = "gemma3-27b";
    std::optional<std::string> memory; // as given; the model's kv_memory otherwise
    index_t page_size = 16;
    std::optional<index_t> swa_page_size; // the sliding-window side's; page_size otherwise
    std::string workload = "default"; // default, long-context, shift, multi-turn, or a trace file
    std::optional<std::vector<PhaseSpec>> phases; // of the shift workload
    std::optional<std::size_t> requests;
    std::optional<double> rate;
    std::optional<std::uint64_t> seed;
    SchedulerConfig scheduler; // its step time is the model's unless --step-time
    std::optional<StepTimeModel> step_time;
    std::optional<std::size_t> sweep_points; // none: the model kind's default
    // The user's own fixed split, by the engine's flags (compared in place of
    // the engine default); a flag left out keeps its default.
    std::optional<double> swa_full_tokens_ratio;
    std::optional<double> mamba_full_memory_ratio;
    std::optional<index_t> context_length; // the longest request the pool must hold
    Backend backend = Backend::host;
    bool full_size_buffer = false;
    bool no_prefix_cache = false;
    std::optional<std::string> json_path; // "-": stdout
    std::optional<std::string> csv_path;
    std::optional<std::string> plot_path;
    bool progress = true;
    bool help = false;
    std::vector<std::string> kokkos_args; // other --kokkos-* options, passed on to Kokkos
    std::optional<int> kokkos_threads;    // --kokkos-threads or --kokkos-num-threads
};

// Throws InputError naming the option and the value.
CliOptions parse_cli(const std::vector<std::string>& args);

std::string help_text();

} // namespace kvpool::sim
