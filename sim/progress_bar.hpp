// The progress bar on stderr: drawn only when stderr is a terminal, so logs
// and pipes get no control characters.
#pragma once

#include "experiment.hpp"

#include <chrono>
#include <string>

namespace kvpool::sim {

class ProgressBar final : public RunObserver {
public:
    // Draws only when enabled and stderr is a terminal.
    explicit ProgressBar(bool enabled);

    void run_started(const std::string& name, std::size_t index, std::size_t count) override;
    void run_progress(double fraction_done) override;
    void all_done() override;

private:
    void draw(double fraction_done);

    bool enabled_;
    std::string name_;
    std::size_t index_ = 0;
    std::size_t count_ = 0;
    std::chrono::steady_clock::time_point last_draw_;
};

} // namespace kvpool::sim
