// One device byte buffer shared by sub-pools: bands that grow toward each other from its two
// ends, two or more. Holds the bytes and the layout; allocators hold the policy.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/kernels/portable/fill_bytes.hpp>
#include <kvpool/kokkos_compat.hpp>
#include <kvpool/storage/pool_layout.hpp>

#include <cstdint>
#include <string>

namespace kvpool {

template <class MemorySpace> class UnifiedKVPool {
public:
    using memory_space = MemorySpace;
    using bytes_view = kk::View<std::uint8_t*, MemorySpace>;

    // Allocates layout.total_bytes() bytes and zeroes them on the instance.
    template <class ExecutionSpace>
    UnifiedKVPool(const ExecutionSpace& space, PoolLayout layout)
        : layout_(std::move(layout)),
          bytes_(kk::uninitialized<bytes_view>("kvpool::unified_buffer",
                                               static_cast<std::size_t>(layout_.total_bytes()))) {
        kernels::portable::fill_bytes(space, bytes_, 0);
    }
    explicit UnifiedKVPool(PoolLayout layout)
        : UnifiedKVPool(typename MemorySpace::execution_space(), std::move(layout)) {}
    // Adopts caller-owned bytes (an engine's tensor, as an unmanaged View) as
    // they are: the caller keeps them alive while the pool and its allocators live.
    UnifiedKVPool(PoolLayout layout, bytes_view adopted)
        : layout_(std::move(layout)), bytes_(std::move(adopted)) {
        if (static_cast<index_t>(bytes_.extent(0)) < layout_.total_bytes())
            throw Error(ErrorCode::invalid_argument, "UnifiedKVPool: the adopted buffer has " +
                                                         std::to_string(bytes_.extent(0)) +
                                                         " bytes, the layout needs " +
                                                         std::to_string(layout_.total_bytes()));
    }

    const PoolLayout& layout() const { return layout_; }
    const bytes_view& bytes() const { return bytes_; }
    index_t total_bytes() const { return layout_.total_bytes(); }

private:
    PoolLayout layout_;
    bytes_view bytes_;
};

} // namespace kvpool
