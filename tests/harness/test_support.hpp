// Shared helpers: the backend under test, host<->device copies, and the KV data
// check (bytes stamped with their virtual id must be found through translate).
#pragma once

#include <kvpool/multi_ended_allocator.hpp>

#include "catch_macros.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvpool::test {

// A failed comparison with a reference model; carries the full context.
struct Mismatch : std::runtime_error {
    using std::runtime_error::runtime_error;
};

using Space = KVPOOL_TEST_EXECUTION_SPACE;
using Allocator = MultiEndedAllocator<Space>;
using Pool = UnifiedKVPool<Space::memory_space>;
using IndexView = Allocator::index_view;

inline IndexView to_device(const std::vector<index_t>& host) {
    // Uninitialised: every element is written below, and a zero-fill launch per
    // call is most of a randomised test's time on an oversubscribed OpenMP host.
    IndexView view = kk::uninitialized<IndexView>("test::ids", host.size());
    auto mirror = Kokkos::create_mirror_view(view);
    for (std::size_t i = 0; i < host.size(); ++i)
        mirror(i) = host[i];
    Kokkos::deep_copy(view, mirror);
    return view;
}

template <class View> std::vector<index_t> to_host(const View& view) {
    auto mirror = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
    return std::vector<index_t>(mirror.data(), mirror.data() + mirror.extent(0));
}

// The byte a token's KV holds at offset k: a function of side and virtual id.
inline std::uint8_t stamp_byte(int side_tag, index_t virtual_token, index_t k) {
    const auto x = static_cast<std::uint64_t>(virtual_token) * 0x9e3779b97f4a7c15ull +
                   static_cast<std::uint64_t>(k) * 0x632be59bd9b4e019ull +
                   static_cast<std::uint64_t>(side_tag) * 0x85ebca6bull;
    return static_cast<std::uint8_t>((x >> 29) ^ (x >> 7));
}

// Reused buffers of the data check's round trips (virtual ids in, physical ids
// out, a host image of the pool's bytes): a fuzzer's run checks after every
// step, where fresh Views and mirrors each time cost more than the check.
class DataCheckScratch {
public:
    // The physical token ids translate() gives for the virtual ones, on the host.
    const std::vector<index_t>& translate(const Allocator& allocator,
                                          const std::vector<index_t>& virtual_tokens) {
        const std::size_t n = virtual_tokens.size();
        if (ids_.extent(0) < 2 * n) {
            ids_ = kk::uninitialized<IndexView>("test::data_check_ids", 2 * n + 64);
            host_ids_ = Kokkos::create_mirror_view(ids_);
        }
        const IndexView in(ids_.data(), n), out(ids_.data() + n, n);
        const IndexView::HostMirror host_in(host_ids_.data(), n), host_out(host_ids_.data() + n, n);
        std::copy(virtual_tokens.begin(), virtual_tokens.end(), host_in.data());
        Kokkos::deep_copy(in, host_in);
        allocator.translate(Space(), in, out);
        Kokkos::deep_copy(host_out, out);
        physical_.assign(host_out.data(), host_out.data() + n);
        return physical_;
    }
    // The pool's bytes on the host, current.
    const Pool::bytes_view::HostMirror& download(const Pool& pool) {
        if (source_ != pool.bytes().data()) {
            bytes_ = Kokkos::create_mirror_view(pool.bytes());
            source_ = pool.bytes().data();
        }
        Kokkos::deep_copy(bytes_, pool.bytes());
        return bytes_;
    }
    void upload(Pool& pool) const { Kokkos::deep_copy(pool.bytes(), bytes_); }

private:
    IndexView ids_;
    IndexView::HostMirror host_ids_;
    std::vector<index_t> physical_;
    Pool::bytes_view::HostMirror bytes_;
    const std::uint8_t* source_ = nullptr; // the pool bytes_ mirrors
};

// Writes each token's stamp at the physical slot translate() gives for it.
inline void stamp_tokens(Pool& pool, const Allocator& allocator, int side_tag,
                         const std::vector<index_t>& virtual_tokens, DataCheckScratch& scratch) {
    if (virtual_tokens.empty())
        return;
    const std::vector<index_t>& physical = scratch.translate(allocator, virtual_tokens);
    const auto& bytes = scratch.download(pool);
    const index_t entry = allocator.geometry().spec.entry_bytes;
    for (std::size_t i = 0; i < virtual_tokens.size(); ++i) {
        std::uint8_t* kv = bytes.data() + physical[i] * entry;
        for (index_t k = 0; k < entry; ++k)
            kv[k] = stamp_byte(side_tag, virtual_tokens[i], k);
    }
    scratch.upload(pool);
}
inline void stamp_tokens(Pool& pool, const Allocator& allocator, int side_tag,
                         const std::vector<index_t>& virtual_tokens) {
    DataCheckScratch scratch;
    stamp_tokens(pool, allocator, side_tag, virtual_tokens, scratch);
}

// Every live token's bytes must be found, intact, through translate().
// Returns the number of bad tokens (0 on success) and reports the first.
inline std::size_t check_stamps(const Pool& pool, const Allocator& allocator, int side_tag,
                                const std::vector<index_t>& live_tokens,
                                DataCheckScratch& scratch) {
    if (live_tokens.empty())
        return 0;
    const std::vector<index_t>& physical = scratch.translate(allocator, live_tokens);
    const auto& bytes = scratch.download(pool);
    const index_t entry = allocator.geometry().spec.entry_bytes;
    std::size_t bad = 0;
    for (std::size_t i = 0; i < live_tokens.size(); ++i) {
        bool ok =
            physical[i] > 0 && (physical[i] + 1) * entry <= static_cast<index_t>(bytes.extent(0));
        const std::uint8_t* kv = bytes.data() + (ok ? physical[i] * entry : 0);
        for (index_t k = 0; ok && k < entry; ++k)
            ok = kv[k] == stamp_byte(side_tag, live_tokens[i], k);
        if (!ok && bad++ == 0)
            UNSCOPED_INFO("side " << side_tag << ": token " << live_tokens[i] << " -> physical "
                                  << physical[i] << " lost its data");
    }
    return bad;
}
inline std::size_t check_stamps(const Pool& pool, const Allocator& allocator, int side_tag,
                                const std::vector<index_t>& live_tokens) {
    DataCheckScratch scratch;
    return check_stamps(pool, allocator, side_tag, live_tokens, scratch);
}

// Invariants plus the data check, the closing step of every allocator test.
inline void check_all(const Pool& pool, const Allocator& allocator, int side_tag,
                      const std::vector<index_t>& live_tokens) {
    REQUIRE_NOTHROW(allocator.check_invariants());
    REQUIRE(check_stamps(pool, allocator, side_tag, live_tokens) == 0);
}

inline SubPoolSpec spec(const std::string& name, index_t entry_bytes, index_t page_size,
                        GrowDirection grow) {
    SubPoolSpec s;
    s.name = name;
    s.entry_bytes = entry_bytes;
    s.page_size = page_size;
    s.grow = grow;
    return s;
}

// A floating sub-pool whose empty band starts at float_at of the buffer.
inline SubPoolSpec floating_spec(const std::string& name, index_t entry_bytes, index_t page_size,
                                 double float_at) {
    SubPoolSpec s = spec(name, entry_bytes, page_size, GrowDirection::floating);
    s.float_at = float_at;
    return s;
}

inline AllocatorOptions options(CompactionMode mode, bool owner = true) {
    AllocatorOptions o;
    o.mode = mode;
    o.is_id_owner = owner;
    return o;
}

} // namespace kvpool::test
