#include "staged_outputs.hpp"

#include "input_error.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

namespace kvpool::sim {

namespace {

std::string temporary_beside(const std::string& path) {
    return fmt::format("{}.kvpool-sim-{}.tmp", path, static_cast<long>(getpid()));
}

} // namespace

void check_writable(const std::string& path) {
    const std::string probe = temporary_beside(path);
    std::FILE* f = std::fopen(probe.c_str(), "wb");
    if (!f)
        throw InputError(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
    std::fclose(f);
    std::remove(probe.c_str());
}

StagedOutputs::~StagedOutputs() {
    for (const auto& s : staged_)
        std::remove(s.temporary.c_str());
}

std::string StagedOutputs::stage(const std::string& path) {
    staged_.push_back({temporary_beside(path), path});
    return staged_.back().temporary;
}

void StagedOutputs::write(const std::string& path, const std::string& text) {
    const std::string temporary = stage(path);
    std::ofstream out(temporary, std::ios::binary);
    out << text;
    out.close();
    if (!out)
        throw std::runtime_error(
            fmt::format("writing '{}' failed: {}", path, std::strerror(errno)));
}

void StagedOutputs::commit() {
    for (const auto& s : staged_)
        if (std::rename(s.temporary.c_str(), s.destination.c_str()) != 0)
            throw std::runtime_error(fmt::format("cannot move the finished '{}' into place: {}",
                                                 s.destination, std::strerror(errno)));
    staged_.clear();
}

} // namespace kvpool::sim
