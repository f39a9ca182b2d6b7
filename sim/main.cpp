// kvpool-sim: replays a workload through a scheduler model on the real kvpool
// allocators and compares the unified pool with fixed splits. See --help.
#include "byte_size.hpp"
#include "cli_options.hpp"
#include "input_error.hpp"
#include "model_config.hpp"
#include "progress_bar.hpp"
#include "report.hpp"
#include "report_cells.hpp"
#include "report_plot.hpp"
#include "sim_backend.hpp"
#include "staged_outputs.hpp"
#include "trace_reader.hpp"

#include <kvpool/error.hpp>

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace kvpool::sim;

Workload make_workload(const CliOptions& options) {
    const bool built_in = options.workload == "default" || options.workload == "long-context";
    if (built_in) {
        SyntheticOptions synthetic = default_synthetic_options(
            options.workload == "default" ? SyntheticKind::chat : SyntheticKind::long_context);
        if (options.requests)
            synthetic.requests = *options.requests;
        if (options.rate)
            synthetic.arrival_rate = *options.rate;
        if (options.seed)
            synthetic.seed = *options.seed;
        return synthetic_workload(synthetic);
    }
    if (options.workload == "multi-turn") {
        MultiTurnOptions multi;
        if (options.requests)
            multi.sessions = *options.requests;
        if (options.rate)
            multi.session_rate = *options.rate;
        if (options.seed)
            multi.seed = *options.seed;
        return multi_turn_workload(multi);
    }
    if (options.workload == "shift")
        return shift_workload(options.phases.value_or(default_shift_phases()),
                              options.seed.value_or(1));
    if (options.requests || options.rate || options.seed)
        throw InputError(fmt::format(
            "--requests, --rate and --seed shape the built-in workloads; '{}' is a trace "
            "file and gives its own requests",
            options.workload));
    return read_trace(options.workload);
}

// The user's own fixed split: the model's engine flags given, the others at
// their defaults; nothing when none is given.
std::optional<Policy> configured_split(const CliOptions& options, const ModelConfig& model) {
    const std::pair<const char*, std::optional<double>> given[] = {
        {"--swa-full-tokens-ratio", options.swa_full_tokens_ratio},
        {"--mamba-full-memory-ratio", options.mamba_full_memory_ratio}};
    const auto knobs = engine_ratios(model);
    std::vector<double> ratios;
    for (const EngineRatio& knob : knobs)
        ratios.push_back(knob.default_value);
    bool any = false;
    for (const auto& [flag, value] : given) {
        if (!value)
            continue;
        const auto knob = std::find_if(knobs.begin(), knobs.end(), [&](const EngineRatio& k) {
            return std::string(k.flag) == flag;
        });
        if (knob == knobs.end())
            throw InputError(fmt::format("{}: {} has no such knob (its fixed split is set by {})",
                                         flag, model.name, ratio_flags(model)));
        ratios[static_cast<std::size_t>(knob - knobs.begin())] = *value;
        any = true;
    }
    if (!any)
        return std::nullopt;
    return fixed_split_at(model, ratios);
}

bool to_file(const std::optional<std::string>& path) {
    return path && *path != "-";
}

// The backend the allocators ran on; on the host, with its thread count.
std::string backend_label(Backend backend) {
    if (backend != Backend::host)
        return backend_name(backend);
    const int threads = Kokkos::DefaultHostExecutionSpace().concurrency();
    return fmt::format("{} ({} thread{})", backend_name(backend), threads, threads == 1 ? "" : "s");
}

int run(int argc, char* argv[]) {
    const CliOptions options = parse_cli(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
        fmt::print("{}", help_text());
        return 0;
    }

    // Every input is checked before the first run, so bad input writes nothing.
    const ModelConfig model = load_model(options.model);
    const PoolGeometry geometry{
        options.memory ? parse_byte_size(*options.memory, "--memory") : model.kv_memory_bytes,
        options.page_size, options.full_size_buffer, options.swa_page_size.value_or(0)};
    check_window_page_size(model, geometry);
    const Workload workload = make_workload(options);
    if (workload.block_tokens % geometry.page_size != 0)
        throw InputError(fmt::format("--page-size {}: the prefix cache shares blocks of {} tokens, "
                                     "which pages of {} tokens do not divide",
                                     geometry.page_size, workload.block_tokens,
                                     geometry.page_size));
    check_memory_holds(model, geometry, workload.requests);
    std::vector<RequestSpec> longest; // of --context-length
    if (options.context_length) {
        longest.push_back({0.0, *options.context_length, 0});
        try {
            check_memory_holds(model, geometry, longest);
        } catch (const InputError& e) {
            throw InputError(
                fmt::format("--context-length {}: {}", *options.context_length, e.what()));
        }
    }
    const std::optional<Policy> configured = configured_split(options, model);
    if (configured)
        for (const std::vector<RequestSpec>* requests :
             {&workload.requests, &std::as_const(longest)})
            if (const auto problem = split_floor_problem(model, geometry, *configured, *requests))
                throw InputError(
                    fmt::format("the fixed split {} cannot run: {}{}",
                                engine_arguments(model, *configured), *problem,
                                requests == &longest
                                    ? fmt::format(" (--context-length {})", *options.context_length)
                                    : std::string()));
    if (options.plot_path)
        require_gnuplot();
    for (const auto& path : {options.json_path, options.csv_path, options.plot_path})
        if (to_file(path))
            check_writable(*path);
    if (options.backend == Backend::device && !has_distinct_device())
        throw InputError("--device: this build's Kokkos has no device backend (its default "
                         "execution space is the host's); leave out --device");

    // The allocators' kernels touch a few hundred ids per call: more host
    // threads only add fork-join cost, and on a shared machine a descheduled
    // thread stalls every launch. One thread unless the user says otherwise
    // (--kokkos-threads, or KOKKOS_NUM_THREADS, which every Kokkos version
    // reads). Kokkos' OpenMP backend warns at start-up unless thread binding
    // is set.
    if (options.kokkos_threads)
        setenv("KOKKOS_NUM_THREADS", std::to_string(*options.kokkos_threads).c_str(), 1);
    else
        setenv("KOKKOS_NUM_THREADS", "1", 0);
    setenv("OMP_PROC_BIND", "false", 0);
    std::vector<char*> kokkos_argv{argv[0]};
    for (const auto& arg : options.kokkos_args)
        kokkos_argv.push_back(const_cast<char*>(arg.c_str()));
    int kokkos_argc = static_cast<int>(kokkos_argv.size());
    Kokkos::ScopeGuard kokkos(kokkos_argc, kokkos_argv.data());

    SchedulerConfig scheduler = options.scheduler;
    scheduler.step_time = options.step_time.value_or(model.step_time.value_or(StepTimeModel{}));
    const ExperimentConfig config{
        model, geometry, scheduler, options.sweep_points, !options.no_prefix_cache, configured};
    ProgressBar progress(options.progress);
    const auto start = std::chrono::steady_clock::now();
    const ExperimentResult result =
        run_experiment(config, workload, pool_factory(options.backend), progress);
    const ReportContext context{
        model,
        geometry,
        workload,
        config.scheduler,
        backend_label(options.backend),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};

    StagedOutputs outputs;
    if (to_file(options.json_path))
        outputs.write(*options.json_path, json_report(context, result));
    if (to_file(options.csv_path))
        outputs.write(*options.csv_path, csv_report(context, result));
    if (options.plot_path)
        render_plot(context, result, outputs.stage(*options.plot_path));
    outputs.commit();

    if (options.json_path == "-")
        fmt::print("{}", json_report(context, result));
    else if (options.csv_path == "-")
        fmt::print("{}", csv_report(context, result));
    else
        fmt::print("{}", summary_table(context, result));
    return 0;
}

} // namespace

int main(int argc, char* argv[]) {
    try {
        return run(argc, argv);
    } catch (const kvpool::sim::InputError& e) {
        fmt::print(stderr, "kvpool-sim: {}\n", e.what());
        return 2;
    } catch (const kvpool::Error& e) {
        fmt::print(stderr, "kvpool-sim: allocator error ({}): {}\n", kvpool::to_string(e.code()),
                   e.what());
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "kvpool-sim: {}\n", e.what());
        return 1;
    }
}
