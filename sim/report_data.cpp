// The machine-readable reports: JSON (everything) and CSV (one row per run).
#include "report.hpp"

#include <fmt/format.h>

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

// The metrics of one run, as (name, JSON value) pairs; CSV uses the same names.
std::vector<std::pair<const char*, std::string>> metrics(const RunResult& r) {
    const auto num = [](double v) { return fmt::format("{}", v); };
    const auto whole = [](auto v) { return fmt::format("{}", v); };
    return {
        {"requests", whole(r.requests)},
        {"completed", whole(r.completed)},
        {"aborted", whole(r.aborted)},
        {"completed_per_second", num(r.completed_per_second())},
        {"mean_running", num(r.mean_running())},
        {"peak_running", whole(r.peak_running)},
        {"retractions", whole(r.retractions)},
        {"steps", whole(r.steps)},
        {"sim_seconds", num(r.sim_seconds)},
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
        {"wall_seconds", num(r.wall_seconds)},
    };
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

std::string json_run(const ModelConfig& model, const PolicyRun& run, const std::string& indent,
                     const char* role = nullptr) {
    std::string out = indent + "{";
    if (role)
        out += fmt::format("\"role\": {}, ", json_string(role));
    out += fmt::format("\"name\": {}, \"policy\": {}, ", json_string(run.name),
                       json_string(policy_kind(run.policy.kind)));
    if (run.policy.kind == PolicyKind::fixed_split)
        out += fmt::format("\"full_fraction\": {}, \"engine_ratio\": {}", run.policy.full_fraction,
                           engine_ratio_from_full_fraction(model, run.policy.full_fraction));
    else
        out += "\"full_fraction\": null, \"engine_ratio\": null";
    for (const auto& [name, value] : metrics(run.result))
        out += fmt::format(", \"{}\": {}", name, value);
    return out + "}";
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
        "\"second_entry_bytes\": {}, \"sliding_window\": {}}},\n",
        json_string(m.name), json_string(m.description),
        json_string(m.kind == HybridKind::sliding_window ? "sliding_window" : "mamba"),
        m.full_token_bytes(), m.second_entry_bytes(),
        m.kind == HybridKind::sliding_window ? m.sliding_window : 0);
    out += fmt::format("  \"memory_bytes\": {},\n  \"page_size\": {},\n  \"byte_scale\": {},\n  "
                       "\"backend\": {},\n",
                       context.geometry.memory_bytes, context.geometry.page_size, result.byte_scale,
                       json_string(context.backend));
    out +=
        fmt::format("  \"workload\": {{\"name\": {}, \"description\": {}, \"requests\": {}, "
                    "\"total_tokens\": {}}},\n",
                    json_string(context.workload.name), json_string(context.workload.description),
                    context.workload.requests.size(), total_tokens(context.workload.requests));
    out += fmt::format("  \"scheduler\": {{\"decode_reserve\": {}, \"max_prefill_tokens\": {}, "
                       "\"step_overhead_s\": {}, "
                       "\"step_per_prefill_token_s\": {}, \"step_per_decode_token_s\": {}}},\n",
                       context.scheduler.decode_reserve, context.scheduler.max_prefill_tokens,
                       st.overhead_s, st.per_prefill_token_s, st.per_decode_token_s);
    out += fmt::format("  \"engine_ratio_flag\": {},\n", json_string(engine_ratio(m).flag));
    out += "  \"compared\": [\n";
    const auto rows = result.compared();
    for (std::size_t i = 0; i < rows.size(); ++i)
        out +=
            json_run(m, *rows[i], "    ", compared_role(i)) + (i + 1 < rows.size() ? ",\n" : "\n");
    out += "  ],\n  \"sweep\": [\n";
    for (std::size_t i = 0; i < result.sweep.size(); ++i)
        out += json_run(m, result.sweep[i], "    ") + (i + 1 < result.sweep.size() ? ",\n" : "\n");
    out += fmt::format("  ],\n  \"engine_default_index\": {},\n  \"oracle_index\": {},\n  "
                       "\"wall_seconds\": {}\n}}\n",
                       result.engine_default, result.oracle, context.wall_seconds);
    return out;
}

std::string csv_report(const ReportContext& context, const ExperimentResult& result) {
    std::string out = "role,policy,full_fraction,engine_ratio";
    for (const auto& [name, value] : metrics(RunResult{}))
        out += fmt::format(",{}", name);
    out += "\n";
    const auto row = [&](const char* role, const PolicyRun& run) {
        const bool fixed = run.policy.kind == PolicyKind::fixed_split;
        out += fmt::format("{},{},{},{}", role, policy_kind(run.policy.kind),
                           fixed ? fmt::format("{}", run.policy.full_fraction) : std::string(),
                           fixed ? fmt::format("{}", engine_ratio_from_full_fraction(
                                                         context.model, run.policy.full_fraction))
                                 : std::string());
        for (const auto& [name, value] : metrics(run.result))
            out += "," + value;
        out += "\n";
    };
    const auto rows = result.compared();
    for (std::size_t i = 0; i < rows.size(); ++i)
        row(compared_role(i), *rows[i]);
    for (const auto& run : result.sweep)
        row("sweep", run);
    return out;
}

} // namespace kvpool::sim
