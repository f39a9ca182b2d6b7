// The randomised tests' generator: splitmix64, portable, so a seed means the
// same run on every machine and backend. Built over a fuzzer's input instead,
// each draw reads one byte, mapped so that a byte value means the same choice
// wherever it stands (0x00 the smallest, 0xff the largest, a byte below 0x80
// what chance(0.5) says yes to): the fuzzer's byte-level mutations and
// dictionary then steer the run.
#pragma once

#include <kvpool/types.hpp>

#include <cstdint>
#include <iterator>
#include <set>
#include <vector>

namespace kvpool::test {

class Rng {
public:
    explicit Rng(std::uint64_t seed) : state_(seed) {}
    Rng(const std::uint8_t* bytes, std::size_t size) : state_(0), bytes_(bytes), left_(size) {}
    // Draws from a fuzzer's input rather than a seed.
    bool from_input() const { return bytes_ != nullptr; }
    // A byte-driven generator ran out of input; a seeded one never does.
    bool exhausted() const { return bytes_ != nullptr && left_ == 0; }
    std::uint64_t next() {
        if (bytes_ != nullptr)
            return byte() * 0x0101010101010101ull; // the byte scaled to the whole range
        return mix(state_ += 0x9e3779b97f4a7c15ull);
    }
    // Uniform in [lo, hi] (hi >= lo); from an input, the byte scaled onto the range.
    index_t uniform(index_t lo, index_t hi) {
        const auto range = static_cast<std::uint64_t>(hi - lo + 1);
        if (bytes_ != nullptr)
            return lo + static_cast<index_t>(byte() * range >> 8);
        return lo + static_cast<index_t>(next() % range);
    }
    bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
    template <class T> const T& pick(const std::vector<T>& v) {
        return v[static_cast<std::size_t>(uniform(0, static_cast<index_t>(v.size()) - 1))];
    }
    template <class T> T pick(const std::set<T>& s) {
        auto it = s.begin();
        std::advance(it, uniform(0, static_cast<index_t>(s.size()) - 1));
        return *it;
    }

private:
    // The input's next byte; past its end (a step draws on to finish), seeded ones.
    std::uint64_t byte() {
        if (left_ == 0)
            return mix(state_ += 0x9e3779b97f4a7c15ull) & 0xff;
        --left_;
        return *bytes_++;
    }
    static std::uint64_t mix(std::uint64_t z) {
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    std::uint64_t state_;
    const std::uint8_t* bytes_ = nullptr;
    std::size_t left_ = 0;
};

} // namespace kvpool::test
