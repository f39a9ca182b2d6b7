// A 64-bit digest of host state, for tensor-parallel ranks that must make the
// same decisions (issue #29): equal states give equal digests in every process
// and on every machine. Values go in as 64-bit integers, never as bytes of an
// object (no padding, pointers or std::hash), each chained through a bijective
// mix, so that a sequence differing in one value always digests differently;
// sequences go in with their length, so that no two layouts of the same values
// collide by construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace kvpool::detail {

class StateDigest {
public:
    void add(std::uint64_t value) { h_ = step(h_, value); }
    void add_signed(std::int64_t value) { add(static_cast<std::uint64_t>(value)); }
    void add_bool(bool value) { add(value ? 1 : 0); }
    void add_string(const std::string& s) {
        add(s.size());
        std::uint64_t word = 0;
        for (std::size_t i = 0; i < s.size(); ++i) {
            word |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * (i % 8));
            if (i % 8 == 7 || i + 1 == s.size()) {
                add(word);
                word = 0;
            }
        }
    }
    // A container's length, then each element (integers or enums), in order.
    template <class Range> void add_range(const Range& items) {
        const auto n = static_cast<std::size_t>(items.size());
        add(n);
        Lanes lanes(h_);
        auto it = items.begin();
        for (std::size_t i = 0; i + 4 <= n; i += 4)
            for (std::uint64_t& lane : lanes.h) {
                lane = step(lane, static_cast<std::uint64_t>(*it));
                ++it;
            }
        for (std::size_t i = n - n % 4; i < n; ++i, ++it)
            lanes.h[0] = step(lanes.h[0], static_cast<std::uint64_t>(*it));
        fold(lanes);
    }
    // A table read by index (size() and operator[]): its length, then each row.
    template <class Table> void add_table(const Table& table) {
        const std::size_t n = table.size();
        add(n);
        Lanes lanes(h_);
        for (std::size_t i = 0; i + 4 <= n; i += 4)
            for (std::size_t k = 0; k < 4; ++k)
                lanes.h[k] = step(lanes.h[k], static_cast<std::uint64_t>(table[i + k]));
        for (std::size_t i = n - n % 4; i < n; ++i)
            lanes.h[0] = step(lanes.h[0], static_cast<std::uint64_t>(table[i]));
        fold(lanes);
    }
    std::uint64_t value() const { return h_; }

    // splitmix64's finaliser (a bijection of 64-bit words).
    static std::uint64_t mix(std::uint64_t z) {
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

private:
    // A bijection of the chain xor the value, offset so that zeros count.
    static std::uint64_t step(std::uint64_t chain, std::uint64_t value) {
        return mix(chain ^ value) + 0x9e3779b97f4a7c15ull;
    }
    // A sequence goes through four chains, element i into chain i % 4, each
    // folded in at its end: one chain is bound by the mix's latency, four run
    // about three times as fast, and each is still a bijection of its values.
    struct Lanes {
        explicit Lanes(std::uint64_t seed) : h{seed, seed ^ 1, seed ^ 2, seed ^ 3} {}
        std::uint64_t h[4];
    };
    void fold(const Lanes& lanes) {
        for (std::uint64_t lane : lanes.h)
            add(lane);
    }

    std::uint64_t h_ = 0xcbf29ce484222325ull; // FNV-1a's offset basis: any nonzero start
};

// A composite's digest: its kind, then each part's digest in a fixed order.
inline std::uint64_t combine_digests(const char* kind, std::initializer_list<std::uint64_t> parts) {
    StateDigest d;
    d.add_string(kind);
    d.add_range(parts);
    return d.value();
}

} // namespace kvpool::detail
