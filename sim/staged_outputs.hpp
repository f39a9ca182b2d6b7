// Output files appear whole or not at all: each is written to a temporary file
// beside its destination and renamed into place only when every output is
// ready. Files not committed are removed.
#pragma once

#include <string>
#include <vector>

namespace kvpool::sim {

// Throws InputError when no file can be created beside `path`.
void check_writable(const std::string& path);

class StagedOutputs {
public:
    StagedOutputs() = default;
    StagedOutputs(const StagedOutputs&) = delete;
    StagedOutputs& operator=(const StagedOutputs&) = delete;
    ~StagedOutputs();

    // The temporary path to write `path`'s content to (for other programs).
    std::string stage(const std::string& path);
    // Writes text to a new staged file for `path`.
    void write(const std::string& path, const std::string& text);
    // Renames every staged file into place.
    void commit();

private:
    struct Staged {
        std::string temporary;
        std::string destination;
    };
    std::vector<Staged> staged_;
};

} // namespace kvpool::sim
