// Trace files: one request per line with its arrival time (seconds), prompt
// length and output length (tokens).
//   CSV:   a header naming the columns (arrival_s,prompt_tokens,output_tokens,
//          in any order, other columns ignored; common aliases such as input_len
//          and output_len are accepted) or three bare columns in that order.
//   JSONL: one object per line, {"arrival_s": 0.5, "prompt_tokens": 812, "output_tokens": 64};
//          or the Mooncake traces' format, read as it is: {"timestamp": 500 (milliseconds:
//          a JSONL "timestamp" always is), "input_length": 812, "output_length": 64,
//          "hash_ids": [0, 1]} (one hash per 512-token block of the prompt, at most as
//          many as the prompt fills; equal hashes are equal prefixes, for the prefix
//          cache). hash_ids is given on every line or on none.
// An optional column (or member) "phase" labels the phase of the workload each
// request belongs to (chat, documents, ...): consecutive requests in arrival
// order with one label form a phase, and the reports show each phase apart.
// Blank lines and lines starting with '#' are skipped. Any other problem is an
// InputError naming the file, the line and the value.
#pragma once

#include "workload.hpp"

#include <string>

namespace kvpool::sim {

enum class TraceFormat { csv, jsonl };

// .csv / .jsonl / .ndjson by extension; otherwise JSONL when the first
// non-blank character is '{'.
TraceFormat detect_trace_format(const std::string& path, const std::string& text);

Workload parse_trace(const std::string& text, const std::string& source, TraceFormat format);
Workload read_trace(const std::string& path);

} // namespace kvpool::sim
