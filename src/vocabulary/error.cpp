#include <kvpool/error.hpp>

namespace kvpool {

const char* to_string(ErrorCode code) {
    switch (code) {
    case ErrorCode::invalid_argument:
        return "invalid_argument";
    case ErrorCode::misaligned:
        return "misaligned";
    case ErrorCode::out_of_range:
        return "out_of_range";
    case ErrorCode::not_allocated:
        return "not_allocated";
    case ErrorCode::wrong_role:
        return "wrong_role";
    case ErrorCode::invalid_state:
        return "invalid_state";
    case ErrorCode::internal:
        return "internal";
    case ErrorCode::device:
        return "device";
    }
    return "unknown";
}

} // namespace kvpool
