// The machine-readable reports: JSON (everything) and CSV (one row per run).
#include "report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace kvpool::sim {

namespace {

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (static_cast<unsigned char>(c) < 0x20)
                out += fmt::format("\\u{:04x}", static_cast<int>(c));
            else
                out += c;
        }
    }
    return out + "\"";
}

using Metrics = std::vector<std::pair<const char*, std::string>>;

std::string num(double v) {
    return fmt::format("{}", v);
}

template <class Whole> std::string whole(Whole v) {
    return fmt::format("{}", v);
}

// What a run and each of its phases report.
Metrics span_metrics(const SpanTotals& r) {
    return {
        {"completed", whole(r.completed)},
        {"aborted", whole(r.aborted)},
        {"completed_per_second", num(r.completed_per_second())},
        {"mean_running", num(r.mean_running())},
        {"peak_running", whole(r.peak_running)},
        {"retractions", whole(r.retractions)},
        {"sim_seconds", num(r.sim_seconds)},
        {"ttft_p50_s", num(r.latency.ttft.p50)},
        {"ttft_p90_s", num(r.latency.ttft.p90)},
        {"ttft_p99_s", num(r.latency.ttft.p99)},
        {"itl_p50_s", num(r.latency.itl.p50)},
        {"itl_p90_s", num(r.latency.itl.p90)},
        {"itl_p99_s", num(r.latency.itl.p99)},
        {"queueing_p50_s", num(r.latency.queueing.p50)},
        {"queueing_p90_s", num(r.latency.queueing.p90)},
        {"queueing_p99_s", num(r.latency.queueing.p99)},
        {"admitted_tokens", whole(r.admitted_tokens)},
        {"prefix_hit_tokens", whole(r.prefix_hit_tokens)},
        {"prefix_hit_rate", num(r.prefix_hit_rate())},
    };
}

Metrics phase_metrics(const PhaseResult& r) {
    Metrics out = span_metrics(r);
    out.emplace_back("first_admitted_s", num(r.first_admitted_s));
    out.emplace_back("last_finished_s", num(r.last_finished_s));
    return out;
}

// The metrics of one run, as (name, JSON value) pairs; CSV uses the same names.
Metrics metrics(const RunResult& r) {
    Metrics out{{"requests", whole(r.requests)}};
    const Metrics span = span_metrics(r);
    out.insert(out.end(), span.begin(), span.end());
    const Metrics rest{
        {"steps", whole(r.steps)},
        {"pages_moved", whole(r.pool.pages_moved)},
        {"bytes_moved", num(r.pool.bytes_moved)},
        {"pages_moved_per_step", num(r.per_step(static_cast<double>(r.pool.pages_moved)))},
        {"bytes_moved_per_step", num(r.per_step(r.pool.bytes_moved))},
        {"allocator_seconds", num(r.pool.allocator_seconds)},
        {"allocator_us_per_step", num(r.per_step(r.pool.allocator_seconds) * 1e6)},
        {"prefill_tokens", whole(r.prefill_tokens)},
        {"recomputed_tokens", whole(r.recomputed_tokens)},
        {"decode_tokens", whole(r.decode_tokens)},
        {"tokens_allocated", whole(r.tokens_allocated())},
        {"tokens_released", whole(r.tokens_released())},
        {"completed_tokens", whole(r.completed_tokens)},
        {"retracted_tokens", whole(r.retracted_tokens)},
        {"aborted_tokens", whole(r.aborted_tokens)},
        {"cache_released_tokens", whole(r.cache_released_tokens)},
        {"evicted_blocks", whole(r.prefix_cache.evicted_blocks)},
        {"evicted_window_blocks", whole(r.prefix_cache.evicted_windows)},
        {"evicted_states", whole(r.prefix_cache.evicted_states)},
        {"wall_seconds", num(r.wall_seconds)},
    };
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
}

std::string policy_kind(PolicyKind kind) {
    switch (kind) {
    case PolicyKind::unified_eager:
        return "unified_eager";
    case PolicyKind::unified_lazy:
        return "unified_lazy";
    case PolicyKind::fixed_split:
        break;
    }
    return "fixed_split";
}

// A CSV field, quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\r\n") == std::string::npos)
        return s;
    std::string out = "\"";
    for (char c : s)
        out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

std::string json_phases(const Workload& workload, const RunResult& r) {
    std::string out = ", \"phases\": [";
    for (std::size_t p = 0; p < r.phases.size(); ++p) {
        out += fmt::format("{}{{\"phase\": {}, \"name\": {}", p ? ", " : "", p + 1,
                           json_string(workload.phases[p].name));
        for (const auto& [name, value] : phase_metrics(r.phases[p]))
            out += fmt::format(", \"{}\": {}", name, value);
        out += "}";
    }
    return out + "]";
}

// A run's split: the shares of the bytes and the engine ratios ("" for the
// unified pool). A pair's one ratio is "engine_ratio"; the tri-pool's two are
// named by their flags, beside the state slots' share.
Metrics split_fields(const ModelConfig& model, const Policy& policy) {
    const bool fixed = policy.kind == PolicyKind::fixed_split;
    const auto value = [&](double v) { return fixed ? num(v) : std::string(); };
    Metrics out{{"full_fraction", value(policy.full_fraction)}};
    const auto knobs = engine_ratios(model);
    const auto ratios = fixed ? engine_ratios_of(model, policy) : std::vector<double>(knobs.size());
    if (model.kind != HybridKind::mamba_sliding_window) {
        out.emplace_back("engine_ratio", value(ratios[0]));
        return out;
    }
    out.emplace_back("state_fraction", value(policy.state_fraction));
    for (std::size_t i = 0; i < knobs.size(); ++i)
        out.emplace_back(knobs[i].key, value(ratios[i]));
    return out;
}

std::string json_run(const ReportContext& context, const PolicyRun& run, const std::string& indent,
                     const char* role = nullptr) {
    std::string out = indent + "{";
    if (role)
        out += fmt::format("\"role\": {}, ", json_string(role));
    out += fmt::format("\"name\": {}, \"policy\": {}", json_string(run.name),
                       json_string(policy_kind(run.policy.kind)));
    for (const auto& [name, value] : split_fields(context.model, run.policy))
        out += fmt::format(", \"{}\": {}", name, value.empty() ? "null" : value);
    for (const auto& [name, value] : metrics(run.result))
        out += fmt::format(", \"{}\": {}", name, value);
    return out + json_phases(context.workload, run.result) + "}";
}

std::string json_workload(const Workload& w) {
    std::string phases;
    for (std::size_t p = 0; p < w.phases.size(); ++p)
        phases += fmt::format("{}{{\"phase\": {}, \"name\": {}, \"description\": {}, "
                              "\"first_request\": {}, \"requests\": {}}}",
                              p ? ", " : "", p + 1, json_string(w.phases[p].name),
                              json_string(w.phases[p].description), w.phases[p].first_request,
                              w.phases[p].requests);
    return fmt::format("{{\"name\": {}, \"description\": {}, \"requests\": {}, "
                       "\"total_tokens\": {}, \"prefix_block_tokens\": {}, \"phases\": [{}]}}",
                       json_string(w.name), json_string(w.description), w.requests.size(),
                       total_tokens(w.requests), w.block_tokens, phases);
}

} // namespace

const char* compared_role(std::size_t row) {
    static const char* const roles[] = {"unified_eager", "unified_lazy", "fixed_default",
                                        "fixed_oracle"};
    return roles[row];
}

std::string json_report(const ReportContext& context, const ExperimentResult& result) {
    const ModelConfig& m = context.model;
    const StepTimeModel& st = context.scheduler.step_time;
    std::string out = "{\n";
    out += fmt::format(
        "  \"model\": {{\"name\": {}, \"description\": {}, \"kind\": {}, \"full_token_bytes\": {}, "
        "\"second_entry_bytes\": {}, {}\"sliding_window\": {}}},\n",
        json_string(m.name), json_string(m.description), json_string(to_string(m.kind)),
        m.full_token_bytes(), m.second_entry_bytes(),
        m.kind == HybridKind::mamba_sliding_window
            ? fmt::format("\"state_slot_bytes\": {}, ", m.state_slot_bytes())
            : std::string(),
        m.has_sliding_window() ? m.sliding_window : 0);
    out += fmt::format("  \"memory_bytes\": {},\n  \"page_size\": {},\n  \"swa_page_size\": {},\n  "
                       "\"byte_scale\": {},\n  \"backend\": {},\n",
                       context.geometry.memory_bytes, context.geometry.page_size,
                       context.geometry.window_page_size(), result.byte_scale,
                       json_string(context.backend));
    out += fmt::format("  \"workload\": {},\n", json_workload(context.workload));
    out += fmt::format("  \"scheduler\": {{\"decode_reserve\": {}, \"max_prefill_tokens\": {}, "
                       "\"step_overhead_s\": {}, "
                       "\"step_per_prefill_token_s\": {}, \"step_per_decode_token_s\": {}}},\n",
                       context.scheduler.decode_reserve, context.scheduler.max_prefill_tokens,
                       st.overhead_s, st.per_prefill_token_s, st.per_decode_token_s);
    const auto knobs = engine_ratios(m);
    if (knobs.size() == 1) {
        out += fmt::format("  \"engine_ratio_flag\": {},\n", json_string(knobs[0].flag));
    } else {
        std::vector<std::string> flags;
        for (const EngineRatio& r : knobs)
            flags.push_back(json_string(r.flag));
        out += fmt::format("  \"engine_ratio_flags\": [{}],\n", fmt::join(flags, ", "));
    }
    out += "  \"compared\": [\n";
    const auto rows = result.compared();
    for (std::size_t i = 0; i < rows.size(); ++i)
        out += json_run(context, *rows[i], "    ", compared_role(i)) +
               (i + 1 < rows.size() ? ",\n" : "\n");
    out += "  ],\n  \"sweep\": [\n";
    for (std::size_t i = 0; i < result.sweep.size(); ++i)
        out += json_run(context, result.sweep[i], "    ") +
               (i + 1 < result.sweep.size() ? ",\n" : "\n");
    out += fmt::format("  ],\n  \"engine_default_index\": {},\n  \"oracle_index\": {},\n  "
                       "\"phase_oracle_indices\": [{}],\n  \"wall_seconds\": {}\n}}\n",
                       result.engine_default, result.oracle, fmt::join(result.phase_oracles, ", "),
                       context.wall_seconds);
    return out;
}

// One row per run (phase "all"), then, for a workload with phases, one row per
// run and phase; a cell a row's kind has no metric for is left empty.
std::string csv_report(const ReportContext& context, const ExperimentResult& result) {
    std::string out = "role,policy";
    for (const auto& field : split_fields(context.model, Policy{}))
        out += fmt::format(",{}", field.first);
    out += ",phase,phase_name";
    Metrics columns = metrics(RunResult{});
    for (const auto& phase_only : phase_metrics(PhaseResult{}))
        if (std::none_of(columns.begin(), columns.end(),
                         [&](const auto& c) { return c.first == phase_only.first; }))
            columns.push_back(phase_only);
    for (const auto& [name, value] : columns)
        out += fmt::format(",{}", name);
    out += "\n";
    const auto metric_cells = [&](const Metrics& values) {
        for (const auto& column : columns) {
            const auto v = std::find_if(values.begin(), values.end(), [&](const auto& m) {
                return std::string(m.first) == column.first;
            });
            out += "," + (v == values.end() ? std::string() : v->second);
        }
        out += "\n";
    };
    const auto policy_cells = [&](const char* role, const PolicyRun& run) {
        out += fmt::format("{},{}", role, policy_kind(run.policy.kind));
        for (const auto& field : split_fields(context.model, run.policy))
            out += "," + field.second;
    };
    const auto run_row = [&](const char* role, const PolicyRun& run) {
        policy_cells(role, run);
        out += ",all,";
        metric_cells(metrics(run.result));
    };
    const auto phase_row = [&](const char* role, const PolicyRun& run, std::size_t p) {
        policy_cells(role, run);
        out += fmt::format(",{},{}", p + 1, csv_field(context.workload.phases[p].name));
        metric_cells(phase_metrics(run.result.phases[p]));
    };
    const auto rows = result.compared();
    for (std::size_t i = 0; i < rows.size(); ++i)
        run_row(compared_role(i), *rows[i]);
    for (const auto& run : result.sweep)
        run_row("sweep", run);
    if (context.workload.phases.size() <= 1)
        return out;
    for (std::size_t p = 0; p < context.workload.phases.size(); ++p) {
        for (std::size_t i = 0; i < rows.size(); ++i)
            phase_row(compared_role(i), *rows[i], p);
        phase_row("fixed_phase_oracle", result.sweep[result.phase_oracles[p]], p);
        for (const auto& run : result.sweep)
            phase_row("sweep", run, p);
    }
    return out;
}

} // namespace kvpool::sim
