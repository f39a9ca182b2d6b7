// The one exception type of kvpool. Misuse raises it before any state changes;
// running out of memory is not an error (calls return "no allocation").
#pragma once

#include <stdexcept>
#include <string>

namespace kvpool {

enum class ErrorCode {
    invalid_argument, // malformed sizes, lengths or configuration
    misaligned,       // a size that must be a multiple of the page size is not
    out_of_range,     // an id outside the id space of this sub-pool
    not_allocated,    // double free, or an id that was never allocated here
    wrong_role,       // e.g. alloc() on a side that does not own its ids
    invalid_state,    // call not allowed in the current state (e.g. free inside a backup window)
    internal,         // an invariant check failed: a bug in kvpool
    device,           // a GPU runtime call failed; the message is the runtime's
};

const char* to_string(ErrorCode code);

class Error : public std::logic_error {
public:
    Error(ErrorCode code, const std::string& what) : std::logic_error(what), code_(code) {}
    ErrorCode code() const noexcept { return code_; }

private:
    ErrorCode code_;
};

} // namespace kvpool
