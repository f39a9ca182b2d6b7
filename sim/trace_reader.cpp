#include "trace_reader.hpp"

#include "input_error.hpp"
#include "json_line.hpp"
#include "text_lines.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

namespace kvpool::sim {

namespace {

// Longer prompts or outputs than this are typos, not requests.
constexpr double max_tokens = 1 << 24;

enum Column { arrival = 0, prompt = 1, output = 2, phase = 3 };
constexpr int required_columns = 3;
constexpr int all_columns = 4;

struct ColumnName {
    const char* name;
    std::array<const char*, 4> aliases;
};

const ColumnName column_names[all_columns] = {
    {"arrival_s", {"arrival", "arrival_time", "timestamp", "time_s"}}, // JSONL timestamp: ms
    {"prompt_tokens", {"prompt_len", "input_tokens", "input_len", "input_length"}},
    {"output_tokens", {"output_len", "output_length", "completion_tokens", "generated_tokens"}},
    {"phase", {"phase_name", "phase_label", "workload_phase", "traffic_phase"}},
};

// A request as read, with its phase label when the trace has them.
struct TraceLine {
    RequestSpec request;
    std::optional<std::string> phase;
};

// The Mooncake traces' prefix blocks: one hash per 512 tokens of the prompt.
constexpr index_t mooncake_block_tokens = 512;

// "[0, 1, 2]": the hashes, or nothing when an element is not a whole number >= 0.
std::optional<std::vector<std::uint64_t>> parse_hash_ids(const std::string& text) {
    if (text.size() < 2 || text.front() != '[' || text.back() != ']')
        return std::nullopt;
    std::vector<std::uint64_t> ids;
    const std::string inner = trim(text.substr(1, text.size() - 2));
    if (inner.empty())
        return ids;
    for (const std::string& item : split_commas(inner)) {
        if (item.empty() || item.size() > 18 ||
            item.find_first_not_of("0123456789") != std::string::npos)
            return std::nullopt;
        ids.push_back(std::stoull(item));
    }
    return ids;
}

std::optional<int> column_of(const std::string& name) {
    for (int c = 0; c < all_columns; ++c) {
        if (name == column_names[c].name)
            return c;
        for (const char* alias : column_names[c].aliases)
            if (name == alias)
                return c;
    }
    return std::nullopt;
}

std::optional<double> parse_number(const std::string& text) {
    if (text.empty())
        return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || !std::isfinite(v))
        return std::nullopt;
    return v;
}

class LineContext {
public:
    LineContext(const std::string& source, std::size_t line) : source_(source), line_(line) {}
    [[noreturn]] void fail(const std::string& what) const {
        throw InputError(fmt::format("{}:{}: {}", source_, line_, what));
    }

    // values: arrival, prompt and output as text; the phase label if any.
    TraceLine request(const std::array<std::string, 3>& values,
                      const std::optional<std::string>& phase_label) const {
        if (phase_label && phase_label->empty())
            fail("the phase label is empty");
        RequestSpec r;
        const auto at = parse_number(values[arrival]);
        if (!at || *at < 0)
            fail(fmt::format("arrival_s must be a number of seconds >= 0, got '{}'",
                             values[arrival]));
        r.arrival_s = *at;
        r.prompt_tokens = tokens(column_names[prompt].name, values[prompt]);
        r.output_tokens = tokens(column_names[output].name, values[output]);
        return {r, phase_label};
    }

private:
    index_t tokens(const char* column, const std::string& text) const {
        const auto v = parse_number(text);
        if (!v || *v < 1 || *v > max_tokens || std::floor(*v) != *v)
            fail(fmt::format("{} must be a whole number from 1 to {:.0f}, got '{}'", column,
                             max_tokens, text));
        return static_cast<index_t>(*v);
    }

    const std::string& source_;
    std::size_t line_;
};

bool skipped(const std::string& line) {
    return line.empty() || line[0] == '#';
}

std::vector<TraceLine> parse_csv(const std::vector<std::string>& lines, const std::string& source) {
    std::vector<TraceLine> requests;
    std::array<std::size_t, 3> index{0, 1, 2}; // field of each required column
    std::optional<std::size_t> phase_index;
    std::size_t fields_needed = 3;
    bool first = true;
    for (std::size_t n = 0; n < lines.size(); ++n) {
        const std::string line = trim(lines[n]);
        if (skipped(line))
            continue;
        const LineContext at(source, n + 1);
        const auto fields = split_commas(line);
        if (first) {
            first = false;
            if (!parse_number(fields[0])) { // a header
                std::array<std::optional<std::size_t>, all_columns> found;
                for (std::size_t f = 0; f < fields.size(); ++f)
                    if (const auto c = column_of(fields[f])) {
                        if (found[*c])
                            at.fail(fmt::format("column '{}' named twice", column_names[*c].name));
                        found[*c] = f;
                    }
                phase_index = found[phase];
                for (int c = 0; c < required_columns; ++c) {
                    if (!found[c])
                        at.fail(
                            fmt::format("the header '{}' has no column '{}' (expected arrival_s, "
                                        "prompt_tokens, output_tokens)",
                                        line, column_names[c].name));
                    index[c] = *found[c];
                }
                fields_needed = fields.size();
                continue;
            }
        }
        if (fields.size() != fields_needed)
            at.fail(fmt::format("expected {} comma-separated fields, found {} in '{}'",
                                fields_needed, fields.size(), line));
        requests.push_back(at.request({fields[index[0]], fields[index[1]], fields[index[2]]},
                                      phase_index ? std::optional<std::string>(fields[*phase_index])
                                                  : std::nullopt));
    }
    return requests;
}

std::vector<TraceLine> parse_jsonl(const std::vector<std::string>& lines,
                                   const std::string& source) {
    std::vector<TraceLine> requests;
    std::size_t first_line = 0; // of the first request
    for (std::size_t n = 0; n < lines.size(); ++n) {
        const std::string line = trim(lines[n]);
        if (skipped(line))
            continue;
        const LineContext at(source, n + 1);
        std::map<std::string, JsonMember> members;
        try {
            members = parse_json_object(line);
        } catch (const JsonSyntaxError& e) {
            at.fail(fmt::format("not a JSON object: {}", e.what()));
        }
        std::array<std::optional<std::string>, all_columns> values;
        bool milliseconds = false; // the Mooncake format's timestamp
        std::optional<std::vector<std::uint64_t>> hashes;
        for (const auto& [key, member] : members) {
            if (key == "hash_ids") {
                hashes = parse_hash_ids(member.text);
                if (!hashes)
                    at.fail(fmt::format("'hash_ids' must be a list of whole numbers >= 0, got {}",
                                        member.text));
                continue;
            }
            const auto c = column_of(key);
            if (!c)
                continue;
            milliseconds = milliseconds || key == "timestamp";
            if (values[*c])
                at.fail(fmt::format("'{}' given twice (as '{}')", column_names[*c].name, key));
            if (*c == phase) {
                if (!member.is_number && !member.is_string)
                    at.fail(
                        fmt::format("'{}' must be a string or a number, got {}", key, member.text));
                values[*c] = member.is_string ? member.string_value : member.text;
                continue;
            }
            if (!member.is_number)
                at.fail(fmt::format("'{}' must be a number, got {}", key, member.text));
            values[*c] = member.text;
        }
        for (int c = 0; c < required_columns; ++c)
            if (!values[c])
                at.fail(fmt::format("missing '{}'", column_names[c].name));
        if (!requests.empty() && requests.front().phase.has_value() != values[phase].has_value())
            at.fail(fmt::format("'phase' is given on some lines and not on others (line {} {})",
                                first_line, requests.front().phase ? "gives one" : "does not"));
        if (!requests.empty() && requests.front().request.prefix_blocks_given != hashes.has_value())
            at.fail(fmt::format(
                "'hash_ids' is given on some lines and not on others (line {} {})", first_line,
                requests.front().request.prefix_blocks_given ? "gives them" : "does not"));
        if (requests.empty())
            first_line = n + 1;
        TraceLine read = at.request({*values[0], *values[1], *values[2]}, values[phase]);
        if (milliseconds)
            read.request.arrival_s /= 1000.0;
        if (hashes) {
            const index_t blocks =
                (read.request.prompt_tokens + mooncake_block_tokens - 1) / mooncake_block_tokens;
            if (static_cast<index_t>(hashes->size()) > blocks)
                at.fail(fmt::format("'hash_ids' lists {} blocks of {} tokens, more than the {} "
                                    "prompt tokens fill ({})",
                                    hashes->size(), mooncake_block_tokens,
                                    read.request.prompt_tokens, blocks));
            read.request.prefix_blocks = std::move(*hashes);
            read.request.prefix_blocks_given = true;
        }
        requests.push_back(std::move(read));
    }
    return requests;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

TraceFormat detect_trace_format(const std::string& path, const std::string& text) {
    if (ends_with(path, ".csv"))
        return TraceFormat::csv;
    if (ends_with(path, ".jsonl") || ends_with(path, ".ndjson"))
        return TraceFormat::jsonl;
    const auto first = text.find_first_not_of(" \t\r\n");
    return first != std::string::npos && text[first] == '{' ? TraceFormat::jsonl : TraceFormat::csv;
}

Workload parse_trace(const std::string& text, const std::string& source, TraceFormat format) {
    const auto lines = split_lines(text);
    std::vector<TraceLine> read =
        format == TraceFormat::csv ? parse_csv(lines, source) : parse_jsonl(lines, source);
    if (read.empty())
        throw InputError(fmt::format("{}: the trace holds no requests", source));
    std::stable_sort(read.begin(), read.end(), [](const TraceLine& a, const TraceLine& b) {
        return a.request.arrival_s < b.request.arrival_s;
    });
    Workload w;
    w.name = source;
    if (read.front().request.prefix_blocks_given)
        w.block_tokens = mooncake_block_tokens;
    // A phase is a run of consecutive requests (in arrival order) with one label.
    for (std::size_t i = 0; i < read.size(); ++i) {
        const bool new_phase = i == 0 || read[i].phase != read[i - 1].phase;
        if (new_phase) {
            if (w.phases.size() == max_phases)
                throw InputError(fmt::format(
                    "{}: the phase labels change more than {} times in arrival order (a phase is "
                    "a run of consecutive requests with one label)",
                    source, max_phases - 1));
            w.phases.push_back({read[i].phase.value_or(source), "", i, 0});
        }
        ++w.phases.back().requests;
        read[i].request.phase = w.phases.size() - 1;
        w.requests.push_back(read[i].request);
    }
    std::string phases;
    for (WorkloadPhase& phase : w.phases) {
        const double first = w.requests[phase.first_request].arrival_s;
        const double last = w.requests[phase.first_request + phase.requests - 1].arrival_s;
        phase.description = fmt::format("{} requests, arrivals from {:.1f} s to {:.1f} s",
                                        phase.requests, first, last);
        phases += fmt::format("{}{} {}", phases.empty() ? "" : ", ", phase.name, phase.requests);
    }
    w.description = fmt::format(
        "{} requests from {} ({}), arrivals over {:.1f} s{}{}", w.requests.size(), source,
        format == TraceFormat::csv ? "CSV" : "JSONL", w.requests.back().arrival_s,
        w.block_tokens > 0 ? fmt::format(", prefix hashes of {}-token blocks", w.block_tokens)
                           : std::string(),
        w.phases.size() > 1 ? fmt::format("; {} phases: {}", w.phases.size(), phases)
                            : std::string());
    return w;
}

Workload read_trace(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file)
        throw InputError(fmt::format("cannot open the trace file '{}'", path));
    std::ostringstream text;
    text << file.rdbuf();
    return parse_trace(text.str(), path, detect_trace_format(path, text.str()));
}

} // namespace kvpool::sim
