// Reproducible random draws: std::mt19937_64's sequence is fixed by the
// standard, but the standard distributions are not, so the draws are made here
// and a seed gives the same workload with every standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace kvpool::sim {

class RandomStream {
public:
    explicit RandomStream(std::uint64_t seed) : engine_(seed) {}

    // Uniform in (0, 1).
    double uniform() { return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53; }
    // Standard normal (Box-Muller).
    double normal() {
        const double radius = std::sqrt(-2.0 * std::log(uniform()));
        return radius * std::cos(2.0 * 3.14159265358979323846 * uniform());
    }
    // Log-normal with the given median and shape (sigma of the logarithm).
    double log_normal(double median, double sigma) { return median * std::exp(sigma * normal()); }
    // Exponential with the given rate (the gap between Poisson arrivals).
    double exponential(double rate) { return -std::log(uniform()) / rate; }

private:
    std::mt19937_64 engine_;
};

} // namespace kvpool::sim
