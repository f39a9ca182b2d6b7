// Host-to-device hand-over of the small id arrays one allocator call produces,
// without a copy: they are written into page-locked host memory that the
// kernels read directly (ordinary memory on the host backends). A ring of such
// slabs lets the host fill the next call's arrays while the GPU still reads the
// last ones; a slab is reused only after the work that read it has completed,
// which a stream event tells without a device-wide fence. When the GPU is so
// far behind that the next slab is still in use, the ring grows instead of
// waiting (up to max_slabs), so a call never blocks on queued device work.
#pragma once

#include <kvpool/detail/stream_event.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvpool::detail {

template <class ExecutionSpace>
class Staging {
public:
    using memory_space = typename kk::pinned_host_space<ExecutionSpace>::type;
    using slab_view = kk::View<index_t*, memory_space>;

    // Appends an array; returns its offset in the next upload.
    std::size_t add(const index_t* data, std::size_t n) {
        const std::size_t offset = host_.size();
        host_.insert(host_.end(), data, data + n);
        return offset;
    }
    std::size_t add(const std::vector<index_t>& v) { return add(v.data(), v.size()); }

    // Makes everything added since the last upload readable by kernels enqueued
    // next on space.
    void upload(const ExecutionSpace& space) {
        if (in_use_) ring_[current_]->done.record(last_space_);
        const std::size_t next = (current_ + 1) % ring_.size();
        if (!ring_[next]->done.is_complete() && ring_.size() < max_slabs) {
            // The oldest slab stays next in line; the new one goes before it.
            ring_.insert(ring_.begin() + static_cast<std::ptrdiff_t>(current_ + 1), std::make_unique<Slab>());
            current_ = current_ + 1;
        } else {
            current_ = next;
        }
        Slab& slab = *ring_[current_];
        slab.done.wait();
        if (slab.view.extent(0) < host_.size())
            slab.view = kk::uninitialized<slab_view>("kvpool::staging", grow(host_.size()));
        if (!host_.empty()) std::memcpy(slab.view.data(), host_.data(), host_.size() * sizeof(index_t));
        host_.clear();
        in_use_ = true;
        last_space_ = space;
    }

    // The n entries at offset of the last upload.
    auto slice(std::size_t offset, std::size_t n) const {
        return Kokkos::subview(ring_[current_]->view, std::make_pair(offset, offset + n));
    }

    // The same entries copied into device memory on space (asynchronously), for
    // kernels whose many blocks would each stall on a read of host memory (the
    // page moves). On host backends the slab itself.
    auto device_slice(const ExecutionSpace& space, std::size_t offset, std::size_t n) {
        if constexpr (std::is_same_v<memory_space, typename ExecutionSpace::memory_space>) {
            return slice(offset, n);
        } else {
            Slab& slab = *ring_[current_];
            if (slab.device.extent(0) < slab.view.extent(0))
                slab.device = kk::uninitialized<device_view>("kvpool::staging_device", slab.view.extent(0));
            const auto range = std::make_pair(offset, offset + n);
            Kokkos::deep_copy(space, Kokkos::subview(slab.device, range), slice(offset, n));
            return Kokkos::subview(slab.device, range);
        }
    }

    std::size_t slab_count() const { return ring_.size(); }
    static constexpr std::size_t max_slabs = 256;

private:
    using device_view = kk::View<index_t*, typename ExecutionSpace::memory_space>;
    struct Slab {
        slab_view view;
        device_view device;
        StreamEvent<ExecutionSpace> done;
    };
    static std::size_t grow(std::size_t need) {
        std::size_t size = 1024;
        while (size < need) size *= 2;
        return size;
    }

    static std::vector<std::unique_ptr<Slab>> initial_ring() {
        std::vector<std::unique_ptr<Slab>> ring;
        for (int i = 0; i < 4; ++i) ring.push_back(std::make_unique<Slab>());
        return ring;
    }

    std::vector<index_t> host_;
    std::vector<std::unique_ptr<Slab>> ring_ = initial_ring();
    std::size_t current_ = 0;
    bool in_use_ = false;
    ExecutionSpace last_space_;
};

}  // namespace kvpool::detail
