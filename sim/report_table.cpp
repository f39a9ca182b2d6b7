#include "byte_size.hpp"
#include "report.hpp"
#include "report_cells.hpp"
#include "report_phases.hpp"
#include "text_table.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvpool::sim {

namespace {

constexpr double mib = 1024.0 * 1024.0;

std::string model_line(const ModelConfig& model, const PoolGeometry& geometry) {
    const auto bytes = [](index_t b) { return format_bytes(static_cast<double>(b)); };
    std::string second;
    if (model.has_sliding_window())
        second +=
            fmt::format(", {} on the sliding-window layers", bytes(model.window_token_bytes()));
    if (model.has_state_slots())
        second += fmt::format("; Mamba state: {} per request", bytes(model.state_slot_bytes()));
    std::string window_pages;
    if (geometry.window_page_size() != geometry.page_size)
        window_pages = fmt::format(" ({} on the sliding-window side)", geometry.window_page_size());
    return fmt::format("  KV per token: {} on the full-attention layers{}; pages of {} tokens{}\n",
                       bytes(model.full_token_bytes()), second, geometry.page_size, window_pages);
}

// What the split column says; on the tri-pool, how SGLang's two knobs give
// the three shares.
std::string split_note(const ModelConfig& model) {
    const auto knobs = engine_ratios(model);
    if (knobs.size() == 1)
        return fmt::format("split: SGLang's {} ({}) and the full side's share of the bytes.\n",
                           knobs[0].flag, knobs[0].meaning);
    const Policy d = engine_default_split(model);
    return fmt::format(
        "split: SGLang's {} M / {} W, and the state slots' and the full side's shares of the "
        "bytes.\n  The state slots get M / (1 + M) of the bytes (M: {}); the two KV sides share "
        "the rest,\n  W {}. The engine default, {}: {:.0f}% state, {:.0f}% sliding-window KV, "
        "{:.0f}% full KV.\n",
        knobs[0].flag, knobs[1].flag, knobs[0].meaning, knobs[1].meaning, ratios_cell(model, d),
        d.state_fraction * 100.0, (1.0 - d.state_fraction - d.full_fraction) * 100.0,
        d.full_fraction * 100.0);
}

// The compared runs' latency, beside the main table to keep both readable.
std::string latency_table(const ExperimentResult& result) {
    using A = TextTable::Align;
    std::vector<A> align{A::left};
    align.resize(10, A::right);
    TextTable table(align);
    for (int h = 0; h < 2; ++h) {
        std::vector<std::string> row{h == 0 ? "" : "policy"};
        for (const std::string& cell : latency_header(h))
            row.push_back(cell);
        table.add_row(row);
    }
    const auto rows = result.compared();
    for (std::size_t i = 0; i < rows.size(); ++i) {
        std::vector<std::string> row{compared_label(i, result)};
        for (const std::string& cell : latency_cells(rows[i]->result.latency))
            row.push_back(cell);
        table.add_row(row);
    }
    return "\nlatency: TTFT, arrival to first token (the end of the request's prefill step); ITL, "
           "between a request's\ntokens (a retraction's gap included); queued, arrival to "
           "admission.\n\n" +
           table.render();
}

} // namespace

std::string summary_table(const ReportContext& context, const ExperimentResult& result) {
    const ModelConfig& model = context.model;
    std::string out = fmt::format("kvpool-sim: {}, {} of KV memory\n", model.description,
                                  format_bytes(static_cast<double>(context.geometry.memory_bytes)));
    out += model_line(model, context.geometry);
    out +=
        fmt::format("  workload {}: {}\n\n", context.workload.name, context.workload.description);

    using A = TextTable::Align;
    // The prefix cache's hit rate, for a workload with prefix hashes.
    const bool prefix = context.workload.block_tokens > 0;
    TextTable table({A::left, A::left, A::right, A::right, A::right, A::right, A::right, A::right,
                     A::right, A::right, A::right, A::right});
    table.add_row({"", "", "running", "", "completed", "", "vs", "retrac-", "moved per step", "",
                   "alloc us", prefix ? "prefix" : ""});
    table.add_row({"policy", "split", "avg", "peak", "requests", "per s", "default", "tions",
                   "pages", "MiB", "per step", prefix ? "hits" : ""});
    const auto rows = result.compared();
    const double default_rate = rows[2]->result.completed_per_second();
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const RunResult& r = rows[i]->result;
        table.add_row({compared_label(i, result), split_cell(model, rows[i]->policy),
                       fmt::format("{:.1f}", r.mean_running()), fmt::format("{}", r.peak_running),
                       r.aborted == 0 ? fmt::format("{}", r.completed)
                                      : fmt::format("{}/{}", r.completed, r.requests),
                       fmt::format("{:.2f}", r.completed_per_second()),
                       relative(r.completed_per_second(), default_rate),
                       fmt::format("{}", r.retractions),
                       fmt::format("{:.2f}", r.per_step(static_cast<double>(r.pool.pages_moved))),
                       fmt::format("{:.2f}", r.per_step(r.pool.bytes_moved) / mib),
                       fmt::format("{:.1f}", r.per_step(r.pool.allocator_seconds) * 1e6),
                       prefix ? percent(r.prefix_hit_rate()) : std::string()});
    }
    out += table.render();
    out += latency_table(result);
    out += phase_table(context, result);

    out += "\n" + split_note(model);
    const RunResult& lazy = rows[1]->result;
    const RunResult& oracle = rows[3]->result;
    out += fmt::format(
        "unified (lazy) vs the engine default: {} completed requests per second, {} running "
        "requests on average.\n",
        relative(lazy.completed_per_second(), default_rate),
        relative(lazy.mean_running(), rows[2]->result.mean_running()));
    out += fmt::format(
        "unified (lazy) vs the best fixed split a sweep of {} found: {} completed requests per "
        "second, {} running requests on average.\n",
        result.sweep.size(), relative(lazy.completed_per_second(), oracle.completed_per_second()),
        relative(lazy.mean_running(), oracle.mean_running()));
    out += fmt::format(
        "unified (lazy) vs that split, p99: {} time to first token, {} inter-token latency, {} "
        "queueing.\n",
        relative(lazy.latency.ttft.p99, oracle.latency.ttft.p99),
        relative(lazy.latency.itl.p99, oracle.latency.itl.p99),
        relative(lazy.latency.queueing.p99, oracle.latency.queueing.p99));
    if (prefix)
        out += fmt::format("prefix hits (tokens taken from the prefix cache at admission): unified "
                           "(lazy) {}, the best fixed split {}.\n",
                           percent(lazy.prefix_hit_rate()), percent(oracle.prefix_hit_rate()));
    out += phase_notes(context, result);
    const auto incomplete =
        std::count_if(result.sweep.begin(), result.sweep.end(),
                      [](const PolicyRun& run) { return run.result.aborted > 0; });
    if (incomplete > 0)
        out += fmt::format(
            "{} of the swept fixed splits could not run every request (a side too small for the "
            "longest).\n",
            incomplete);
    if (rows[2]->result.aborted > 0)
        if (const auto problem = split_floor_problem(model, context.geometry, rows[2]->policy,
                                                     context.workload.requests))
            out += fmt::format("the engine default ({}) cannot run every request: {}.\n",
                               engine_arguments(model, rows[2]->policy), *problem);
    const StepTimeModel& st = context.scheduler.step_time;
    out += fmt::format(
        "step time: {:g} ms + {:g} us per prefilled token + {:g} us per decoded token.\n",
        st.overhead_s * 1e3, st.per_prefill_token_s * 1e6, st.per_decode_token_s * 1e6);
    out += fmt::format("allocators on {}, {}; {} runs in {:.1f} s.\n", context.backend,
                       result.byte_scale == 1
                           ? std::string("full-size buffer")
                           : fmt::format("buffer scaled 1:{} (exact: same pages, same decisions)",
                                         result.byte_scale),
                       2 + result.sweep.size(), context.wall_seconds);
    return out;
}

} // namespace kvpool::sim
