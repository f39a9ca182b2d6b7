// Reads one line of a JSONL trace: a JSON object whose members the trace
// reader looks up by name. Nested values are checked and skipped.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

namespace kvpool::sim {

struct JsonMember {
    bool is_number = false;
    bool is_string = false;
    std::string text;         // the number as written, or the raw value otherwise
    std::string string_value; // a string's characters (a backslash keeps the one after it)
};

// Thrown with a message naming the column of the problem.
class JsonSyntaxError : public std::runtime_error {
public:
    explicit JsonSyntaxError(const std::string& what) : std::runtime_error(what) {}
};

// The top-level members of the object on this line.
std::map<std::string, JsonMember> parse_json_object(const std::string& line);

} // namespace kvpool::sim
