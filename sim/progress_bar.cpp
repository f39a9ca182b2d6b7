#include "progress_bar.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <unistd.h>

namespace kvpool::sim {

namespace {
constexpr int bar_width = 30;
constexpr auto redraw_interval = std::chrono::milliseconds(100);
} // namespace

ProgressBar::ProgressBar(bool enabled) : enabled_(enabled && isatty(fileno(stderr))) {}

void ProgressBar::run_started(const std::string& name, std::size_t index, std::size_t count) {
    name_ = name;
    index_ = index;
    count_ = count;
    draw(0.0);
}

void ProgressBar::run_progress(double fraction_done) {
    if (std::chrono::steady_clock::now() - last_draw_ >= redraw_interval)
        draw(fraction_done);
}

void ProgressBar::all_done() {
    if (enabled_)
        fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
}

void ProgressBar::draw(double fraction_done) {
    if (!enabled_ || count_ == 0)
        return;
    last_draw_ = std::chrono::steady_clock::now();
    const double overall =
        (static_cast<double>(index_) + fraction_done) / static_cast<double>(count_);
    const int filled = static_cast<int>(overall * bar_width);
    fmt::print(stderr, "\r\033[K[{:#<{}}{:-<{}}] {:3.0f}%  run {}/{}: {}", "", filled, "",
               bar_width - filled, overall * 100.0, index_ + 1, count_, name_);
    std::fflush(stderr);
}

} // namespace kvpool::sim
