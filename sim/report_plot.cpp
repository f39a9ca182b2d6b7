#include "report_plot.hpp"

#include "byte_size.hpp"
#include "input_error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace kvpool::sim {

namespace {

constexpr std::size_t plot_bins = 600;

bool on_path(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "";
    std::size_t begin = 0;
    while (begin <= dirs.size()) {
        const std::size_t end = std::min(dirs.find(':', begin), dirs.size());
        const std::string dir = end > begin ? dirs.substr(begin, end - begin) : ".";
        if (access((dir + "/" + program).c_str(), X_OK) == 0)
            return true;
        begin = end + 1;
    }
    return false;
}

// gnuplot's single-quoted strings escape a quote by doubling it.
std::string quoted(const std::string& s) {
    std::string out = "'";
    for (char c : s)
        out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
}

// Running requests averaged over equal slices of [0, end): a readable line
// even when a run has tens of thousands of steps.
std::vector<double> binned(const RunResult& run, double end) {
    std::vector<double> area(plot_bins, 0.0);
    const double width = end / static_cast<double>(plot_bins);
    const auto bin_of = [&](double t) {
        return std::min(plot_bins - 1, static_cast<std::size_t>(t / width));
    };
    const auto& points = run.timeline;
    for (std::size_t i = 0; i < points.size(); ++i) {
        const double from = points[i].time_s;
        const double to = i + 1 < points.size() ? points[i + 1].time_s : run.sim_seconds;
        for (std::size_t b = bin_of(from); b <= bin_of(to) && to > from; ++b) {
            const double lo = std::max(from, static_cast<double>(b) * width);
            const double hi =
                b + 1 == plot_bins ? to : std::min(to, static_cast<double>(b + 1) * width);
            if (hi > lo)
                area[b] += static_cast<double>(points[i].running) * (hi - lo);
        }
    }
    for (double& a : area)
        a /= width;
    return area;
}

// Mean time to first token of the requests whose first token came in each
// slice of [0, end); NaN where none did (gnuplot leaves a gap).
std::vector<double> binned_ttft(const RunResult& run, double end) {
    std::vector<double> sum(plot_bins, 0.0);
    std::vector<std::size_t> count(plot_bins, 0);
    const double width = end / static_cast<double>(plot_bins);
    for (const FirstToken& t : run.first_tokens) {
        const auto b = std::min(plot_bins - 1, static_cast<std::size_t>(t.time_s / width));
        sum[b] += t.ttft_s;
        ++count[b];
    }
    for (std::size_t b = 0; b < plot_bins; ++b)
        sum[b] = count[b] ? sum[b] / static_cast<double>(count[b]) : std::nan("");
    return sum;
}

} // namespace

void require_gnuplot() {
    if (!on_path("gnuplot"))
        throw InputError("--plot needs gnuplot, which is not on PATH: install it (Debian/Ubuntu: "
                         "apt-get install gnuplot-nox) or leave out --plot");
}

void render_plot(const ReportContext& context, const ExperimentResult& result,
                 const std::string& png_path) {
    const auto rows = result.compared();
    double end = 0.0;
    for (const PolicyRun* row : rows)
        end = std::max(end, row->result.sim_seconds);
    if (end <= 0.0)
        end = 1.0;

    std::string script = fmt::format(
        "set terminal pngcairo size 1200,1100 noenhanced font ',11'\n"
        "set output {}\n"
        "set multiplot layout 2,1 title {}\n"
        "set xlabel 'simulated time (s)'\nset ylabel 'running requests'\n"
        "set grid\nset key top right\nset yrange [0:*]\nset xrange [0:{}]\n",
        quoted(png_path),
        quoted(fmt::format("{}, {} of KV memory, workload {}", context.model.name,
                           format_bytes(static_cast<double>(context.geometry.memory_bytes)),
                           context.workload.name)),
        end);
    const double width = end / static_cast<double>(plot_bins);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        script += fmt::format("$run{} << EOD\n", i);
        const auto values = binned(rows[i]->result, end);
        for (std::size_t b = 0; b < values.size(); ++b)
            if ((static_cast<double>(b) + 0.5) * width <= rows[i]->result.sim_seconds)
                script += fmt::format("{} {}\n", (static_cast<double>(b) + 0.5) * width, values[b]);
        script += "EOD\n";
        script += fmt::format("$ttft{} << EOD\n", i);
        const auto ttft = binned_ttft(rows[i]->result, end);
        for (std::size_t b = 0; b < ttft.size(); ++b)
            if (!std::isnan(ttft[b]))
                script += fmt::format("{} {}\n", (static_cast<double>(b) + 0.5) * width, ttft[b]);
        script += "EOD\n";
    }
    const auto fixed_label = [&](const char* which, const PolicyRun& run) {
        return fmt::format("fixed split, {} ({})", which,
                           engine_arguments(context.model, run.policy));
    };
    const std::string labels[] = {
        rows[0]->name, rows[1]->name,
        fixed_label(result.configured_split ? "as configured" : "engine default", *rows[2]),
        fixed_label("oracle", *rows[3])};
    // Eager and lazy make the same decisions: the wide eager line shows under the lazy one.
    const char* const styles[] = {"lw 6 lc rgb '#b0b0e8'", "lw 2 lc rgb '#1f3fbf'",
                                  "lw 2 lc rgb '#d62728'", "lw 2 lc rgb '#e6a000'"};
    for (const char* panel : {"run", "ttft"}) {
        const bool ttft = std::string(panel) == "ttft";
        if (ttft)
            script += "set ylabel 'mean time to first token (s)'\n";
        script += "plot ";
        for (std::size_t i = 0; i < rows.size(); ++i)
            script += fmt::format("{}${}{} with lines {} title {}", i ? ", " : "", panel, i,
                                  styles[i], quoted(labels[i]));
        script += "\n";
    }
    script += "unset multiplot\n";

    std::FILE* gnuplot = popen("gnuplot", "w");
    if (!gnuplot)
        throw std::runtime_error("cannot start gnuplot");
    std::fwrite(script.data(), 1, script.size(), gnuplot);
    const int status = pclose(gnuplot);
    if (status != 0)
        throw std::runtime_error(fmt::format("gnuplot failed drawing '{}' (exit status {})",
                                             png_path,
                                             WIFEXITED(status) ? WEXITSTATUS(status) : status));
}

} // namespace kvpool::sim
