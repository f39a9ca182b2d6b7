// The randomised tests' generator: splitmix64, portable, so a seed means the
// same run on every machine and backend. Built over a fuzzer's input instead,
// each draw reads one byte (its value and position mixed, so every byte is one
// decision the fuzzer can flip) until the input is exhausted.
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
    // A byte-driven generator ran out of input; a seeded one never does.
    bool exhausted() const { return bytes_ != nullptr && left_ == 0; }
    std::uint64_t next() {
        if (bytes_ != nullptr && left_ > 0) {
            --left_;
            state_ = (state_ & ~std::uint64_t(0xff)) + 0x100 + *bytes_++;
            return mix(state_);
        }
        return mix(state_ += 0x9e3779b97f4a7c15ull);
    }
    // Uniform in [lo, hi] (hi >= lo).
    index_t uniform(index_t lo, index_t hi) {
        return lo + static_cast<index_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
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
