// Host offload of KV (and Mamba state): the rows of selected tokens, every
// layer, copied to host memory and back, chunk by chunk through a device
// staging buffer, on the caller's execution-space instance. Works for every
// pool of per_layer_pools.hpp and page_major_pools.hpp alike.
//
// Host copies live in page-locked memory on the GPU backends (ordinary memory
// on the host ones), so the copies are asynchronous on the instance's stream:
// a copy to the host is complete once the instance's work up to it has
// completed (e.g. space.fence()); nothing here fences.
#pragma once

#include <kvpool/detail/location_checks.hpp>
#include <kvpool/error.hpp>
#include <kvpool/kernels/portable/row_moves.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace kvpool {

template <class ExecutionSpace> class HostOffload {
public:
    using execution_space = ExecutionSpace;
    using memory_space = typename ExecutionSpace::memory_space;
    using host_space = typename kk::pinned_host_space<ExecutionSpace>::type;
    // Token after token, pool.token_bytes() each: for every layer in order its
    // first row kind then its second (K then V; conv then temporal state).
    using host_buffer = kk::View<std::uint8_t*, host_space>;

    // Up to chunk_tokens tokens of at most max_token_bytes bytes go through the
    // staging buffer at a time; it is allocated once, here.
    HostOffload(index_t chunk_tokens, index_t max_token_bytes)
        : chunk_tokens_(chunk_tokens), max_token_bytes_(max_token_bytes) {
        if (chunk_tokens <= 0 || max_token_bytes <= 0)
            throw Error(ErrorCode::invalid_argument,
                        "HostOffload: chunk_tokens and max_token_bytes must be > 0, got " +
                            std::to_string(chunk_tokens) + " and " +
                            std::to_string(max_token_bytes));
        staging_ = kk::uninitialized<kk::View<std::uint8_t*, memory_space>>(
            "kvpool::offload_staging", static_cast<std::size_t>(chunk_tokens * max_token_bytes));
    }

    index_t chunk_tokens() const { return chunk_tokens_; }
    index_t max_token_bytes() const { return max_token_bytes_; }

    // A host buffer for `tokens` tokens of pool.
    template <class Pool> static host_buffer allocate_host(const Pool& pool, index_t tokens) {
        return kk::uninitialized<host_buffer>(
            "kvpool::offload_host", static_cast<std::size_t>(tokens * pool.token_bytes()));
    }

    // Every layer's rows of tokens(i) (physical ids, in device-readable memory)
    // into out, which holds tokens.extent(0) * pool.token_bytes() bytes. The
    // pool is only read: after a device failure out is partly written.
    template <class Pool, class IdView>
    void copy_to_host(const ExecutionSpace& space, const Pool& pool, const IdView& tokens,
                      const host_buffer& out) {
        const index_t token_bytes = validate(space, pool, tokens, out, "copy_to_host");
        const index_t n = static_cast<index_t>(tokens.extent(0));
        for (index_t c0 = 0; c0 < n; c0 += chunk_tokens_) {
            const index_t c1 = c0 + chunk_tokens_ < n ? c0 + chunk_tokens_ : n;
            kernels::portable::gather_rows(space, pool.first_rows(), pool.second_rows(),
                                           Kokkos::subview(tokens, std::make_pair(c0, c1)),
                                           staging_.data());
            kvpool::detail::device_fault_point(DeviceOp::copy, "kvpool: copy_to_host");
            Kokkos::deep_copy(
                space, Kokkos::subview(out, std::make_pair(c0 * token_bytes, c1 * token_bytes)),
                Kokkos::subview(staging_, std::make_pair(index_t(0), (c1 - c0) * token_bytes)));
        }
    }
    template <class Pool, class IdView>
    host_buffer copy_to_host(const ExecutionSpace& space, const Pool& pool, const IdView& tokens) {
        host_buffer out = allocate_host(pool, static_cast<index_t>(tokens.extent(0)));
        copy_to_host(space, pool, tokens, out);
        return out;
    }
    template <class Pool, class IdView>
    host_buffer copy_to_host(const Pool& pool, const IdView& tokens) {
        return copy_to_host(ExecutionSpace(), pool, tokens);
    }

    // The inverse: the rows in `in` (as copy_to_host wrote them) back to the
    // tokens' rows. A token given twice receives one of its rows, unspecified which.
    // A device failure (Error(device)) ends it at a chunk: the chunks before
    // it have landed, no other byte of the pool has changed, and the same call
    // again loads every row. Making it all-or-nothing would take a device copy
    // of every destination row first, doubling the traffic of every load.
    template <class Pool, class IdView>
    void load_from_host(const ExecutionSpace& space, const Pool& pool, const host_buffer& in,
                        const IdView& tokens) {
        const index_t token_bytes = validate(space, pool, tokens, in, "load_from_host");
        const index_t n = static_cast<index_t>(tokens.extent(0));
        for (index_t c0 = 0; c0 < n; c0 += chunk_tokens_) {
            const index_t c1 = c0 + chunk_tokens_ < n ? c0 + chunk_tokens_ : n;
            kvpool::detail::device_fault_point(DeviceOp::copy, "kvpool: load_from_host");
            Kokkos::deep_copy(
                space,
                Kokkos::subview(staging_, std::make_pair(index_t(0), (c1 - c0) * token_bytes)),
                Kokkos::subview(in, std::make_pair(c0 * token_bytes, c1 * token_bytes)));
            kernels::portable::scatter_rows(space, pool.first_rows(), pool.second_rows(),
                                            Kokkos::subview(tokens, std::make_pair(c0, c1)),
                                            staging_.data());
        }
    }
    template <class Pool, class IdView>
    void load_from_host(const Pool& pool, const host_buffer& in, const IdView& tokens) {
        load_from_host(ExecutionSpace(), pool, in, tokens);
    }

private:
    // Returns the pool's bytes per token after checking sizes and, where it is
    // free, the locations.
    template <class Pool, class IdView>
    index_t validate(const ExecutionSpace& space, const Pool& pool, const IdView& tokens,
                     const host_buffer& host, const char* what) const {
        static_assert(
            Kokkos::SpaceAccessibility<ExecutionSpace, typename Pool::memory_space>::accessible,
            "HostOffload: the pool's memory must be accessible to the execution space");
        kv_detail::check_id_view<ExecutionSpace, IdView>();
        const index_t token_bytes = pool.token_bytes();
        if (token_bytes > max_token_bytes_)
            throw Error(ErrorCode::invalid_argument,
                        std::string(what) + ": the pool's tokens take " +
                            std::to_string(token_bytes) +
                            " bytes, the staging buffer holds at most " +
                            std::to_string(max_token_bytes_) + " per token");
        const index_t expected = static_cast<index_t>(tokens.extent(0)) * token_bytes;
        if (static_cast<index_t>(host.extent(0)) != expected)
            throw Error(
                ErrorCode::invalid_argument,
                std::string(what) + ": the host buffer has " + std::to_string(host.extent(0)) +
                    " bytes, " + std::to_string(tokens.extent(0)) + " tokens of " +
                    std::to_string(token_bytes) + " bytes need " + std::to_string(expected));
        if constexpr (kv_detail::free_to_read<ExecutionSpace, IdView>())
            kv_detail::require_in_range(kv_detail::read_ids(space, tokens), pool.num_slots(), 1,
                                        what);
        return token_bytes;
    }

    index_t chunk_tokens_;
    index_t max_token_bytes_;
    kk::View<std::uint8_t*, memory_space> staging_;
};

} // namespace kvpool
