// Host-to-device upload of the small id arrays one allocator call produces:
// gathered into one host buffer, sent with one asynchronous copy on the caller's
// instance into a device buffer that grows but is never freed while in use.
// Reusing it for the next call is safe because both calls are stream-ordered on
// the allocator's instance (allocator calls are serialised by contract).
#pragma once

#include <kvpool/kokkos_compat.hpp>

#include <utility>
#include <vector>

namespace kvpool::detail {

template <class ExecutionSpace>
class Staging {
public:
    using memory_space = typename ExecutionSpace::memory_space;
    using device_view = kk::View<index_t*, memory_space>;

    // Appends an array; returns its offset in the upload.
    std::size_t add(const index_t* data, std::size_t n) {
        const std::size_t offset = host_.size();
        host_.insert(host_.end(), data, data + n);
        return offset;
    }
    std::size_t add(const std::vector<index_t>& v) { return add(v.data(), v.size()); }

    // Sends everything added since the last upload; returns the device copy.
    device_view upload(const ExecutionSpace& space) {
        if (device_.extent(0) < host_.size()) {
            space.fence();  // the old buffer may still be read by queued kernels
            device_ = kk::uninitialized<device_view>("kvpool::staging", grow(host_.size()));
        }
        if (!host_.empty()) {
            // The host copy must outlive the asynchronous transfer: keep it until
            // the next upload, which follows this one in stream order.
            sent_.swap(host_);
            kk::UnmanagedHostView<const index_t*> source(sent_.data(), sent_.size());
            Kokkos::deep_copy(space, Kokkos::subview(device_, std::make_pair<std::size_t, std::size_t>(0, sent_.size())),
                              source);
        }
        host_.clear();
        return device_;
    }

    // The n entries at offset of the last upload.
    device_view slice(std::size_t offset, std::size_t n) const {
        return Kokkos::subview(device_, std::make_pair(offset, offset + n));
    }

private:
    static std::size_t grow(std::size_t need) {
        std::size_t size = 1024;
        while (size < need) size *= 2;
        return size;
    }

    std::vector<index_t> host_;
    std::vector<index_t> sent_;
    device_view device_;
};

}  // namespace kvpool::detail
