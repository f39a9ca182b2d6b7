#include "report.hpp"

#include <fmt/format.h>

namespace kvpool::soak {

namespace {

double mib(index_t bytes) {
    return static_cast<double>(bytes) / (1 << 20);
}

double ops_per_second(const SoakResult& r) {
    return r.seconds > 0 ? static_cast<double>(r.ops) / r.seconds : 0.0;
}

std::string device_mib(const std::optional<index_t>& bytes) {
    return bytes ? fmt::format("{:.1f} MiB", mib(*bytes)) : std::string("n/a (host backend)");
}

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\')
            out += '\\';
        if (static_cast<unsigned char>(c) < 0x20)
            out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
            out += c;
    }
    return out + "\"";
}

std::string json_bytes(const std::optional<index_t>& bytes) {
    return bytes ? std::to_string(*bytes) : "null";
}

std::string json_memory(const MemorySample& m) {
    return fmt::format("{{\"host_rss_bytes\": {}, \"device_bytes_in_use\": {}}}", m.host_rss_bytes,
                       json_bytes(m.device_bytes));
}

} // namespace

std::string summary(const SoakResult& r) {
    const SoakOptions& o = r.options;
    std::string s = fmt::format(
        "kvpool-soak: {} pair on {}, {} compaction, page size {}, seed {}\n"
        "  {} tokens per side ({:.1f} GiB buffer)\n"
        "  {} operations in {:.2f} s ({:.0f} ops/s), {} scheduler steps\n"
        "  requests: {} admitted, {} finished, {} retracted; {} admissions waited for room\n"
        "  compaction: {} pages moved ({:.1f} GiB)\n"
        "  checks: {} (invariants and stamped data; {} tokens and slots found through "
        "translate)\n"
        "  host RSS: {:.1f} MiB after warm-up, {:.1f} MiB at the end\n"
        "  device memory in use: {} after warm-up, {} at the end\n",
        r.pair, r.backend, mode_name(o.mode), o.page_size, o.seed, o.tokens_per_side,
        mib(r.buffer_bytes) / 1024, r.ops, r.seconds, ops_per_second(r), r.steps,
        r.requests_admitted, r.requests_finished, r.retractions, r.admission_waits, r.pages_moved,
        mib(r.bytes_moved) / 1024, r.checks, r.entries_checked, mib(r.warm.host_rss_bytes),
        mib(r.end.host_rss_bytes), device_mib(r.warm.device_bytes), device_mib(r.end.device_bytes));
    for (const auto& f : r.failures)
        s += "  FAILED: " + f + "\n";
    s += r.passed() ? "kvpool-soak: passed\n" : "kvpool-soak: FAILED\n";
    return s;
}

std::string json_line(const SoakResult& r) {
    const SoakOptions& o = r.options;
    std::string failures;
    for (const auto& f : r.failures)
        failures += (failures.empty() ? "" : ", ") + json_string(f);
    return fmt::format(
        "{{\"kvpool_soak\": {}, \"backend\": {}, \"passed\": {}, \"ops\": {}, \"seconds\": "
        "{:.3f}, \"ops_per_s\": {:.1f}, \"seed\": {}, \"mode\": \"{}\", \"page_size\": {}, "
        "\"tokens_per_side\": {}, \"buffer_bytes\": {}, \"steps\": {}, \"checks\": {}, "
        "\"retractions\": {}, \"pages_moved\": {}, \"memory_after_warm_up\": {}, "
        "\"memory_at_end\": {}, \"failures\": [{}]}}",
        json_string(r.pair), json_string(r.backend), r.passed() ? "true" : "false", r.ops,
        r.seconds, ops_per_second(r), o.seed, mode_name(o.mode), o.page_size, o.tokens_per_side,
        r.buffer_bytes, r.steps, r.checks, r.retractions, r.pages_moved, json_memory(r.warm),
        json_memory(r.end), failures);
}

} // namespace kvpool::soak
