// Host-to-device hand-over of the small id arrays one allocator call produces,
// without a copy: they are written into page-locked host memory that the
// kernels read directly (ordinary memory on the host backends). A ring of such
// slabs lets the host fill the next call's arrays while the GPU still reads the
// last ones; a slab is reused only after the work that read it has completed,
// which a stream event tells without a device-wide fence.
#pragma once

#include <kvpool/detail/stream_event.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <array>
#include <cstring>
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
        if (in_use_) ring_[current_].done.record(last_space_);
        current_ = (current_ + 1) % ring_.size();
        Slab& slab = ring_[current_];
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
        return Kokkos::subview(ring_[current_].view, std::make_pair(offset, offset + n));
    }

private:
    struct Slab {
        slab_view view;
        StreamEvent<ExecutionSpace> done;
    };
    static std::size_t grow(std::size_t need) {
        std::size_t size = 1024;
        while (size < need) size *= 2;
        return size;
    }

    std::vector<index_t> host_;
    std::array<Slab, 8> ring_;
    std::size_t current_ = 0;
    bool in_use_ = false;
    ExecutionSpace last_space_;
};

}  // namespace kvpool::detail
