// The error of bad user input: an unknown model, a malformed trace line, an
// impossible size. main() reports it and exits with status 2.
#pragma once

#include <stdexcept>
#include <string>

namespace kvpool::sim {

class InputError : public std::runtime_error {
public:
    explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

} // namespace kvpool::sim
