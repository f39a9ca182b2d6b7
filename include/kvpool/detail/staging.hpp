// Host-to-device hand-over of the small id arrays one allocator call produces,
// without a copy: they are written straight into page-locked host memory that
// the kernels read directly (ordinary memory on the host backends). Calls on
// one stream append their arrays to the same slab, so that the stream event
// that tells when the GPU has read a slab is recorded once per slab rather
// than once per call (an event record and query cost a decode step as much as
// its launch). A ring of slabs lets the host fill the next ones while the GPU
// still reads the last; a slab is reused only after the work that read it has
// completed, which the event tells without a device-wide fence. When the GPU
// is so far behind that the next slab is still in use, the ring grows instead
// of waiting (up to max_slabs), so a call never blocks on queued device work.
#pragma once

#include <kvpool/detail/library_spaces.hpp>
#include <kvpool/kernels/device_ids.hpp>
#include <kvpool/kernels/native_backend.hpp>
#include <kvpool/kernels/stream_event.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvpool::detail {

template <class ExecutionSpace> class Staging {
public:
    using memory_space = typename kk::pinned_host_space<ExecutionSpace>::type;
    using slab_view = kk::View<index_t*, memory_space>;

    // Appends an array to the next upload; returns its offset there.
    std::size_t add(const index_t* data, std::size_t n) {
        if (!filling_)
            start_filling();
        Slab& slab = *ring_[current_];
        if (slab.view.extent(0) < used_ + n) {
            // The call's arrays move to the start of a larger slab; the old one
            // is kept, as work in flight may read the earlier calls' arrays.
            // At least twice the size: a call that fills more than half a slab
            // then fits from the next time on, instead of outgrowing a slab
            // of the same size again at every repeat.
            const std::size_t call = used_ - call_start_;
            slab_view larger = kk::uninitialized<slab_view>(
                "kvpool::staging", grow(std::max(call + n, 2 * slab.view.extent(0))));
            if (call > 0)
                std::memcpy(larger.data(), slab.view.data() + call_start_, call * sizeof(index_t));
            retire(std::move(slab.view));
            slab.view = larger;
            call_start_ = 0;
            used_ = call;
        }
        if (n > 0)
            std::memcpy(slab.view.data() + used_, data, n * sizeof(index_t));
        const std::size_t offset = used_ - call_start_;
        used_ += n;
        return offset;
    }
    std::size_t add(const std::vector<index_t>& v) { return add(v.data(), v.size()); }

    // Makes everything added since the last upload readable by kernels enqueued
    // next on space.
    void upload(const ExecutionSpace& space) {
        kvpool::detail::device_fault_point(DeviceOp::upload, "kvpool: staging upload");
        if (!filling_)
            start_filling();
        // Earlier calls' arrays here are read on another stream, which the
        // slab's one event cannot also cover: this call's go to the next slab.
        if (in_use_ && !kernels::same_stream(space, last_space_))
            move_call_to_next_slab();
        filling_ = false;
        in_use_ = true;
        last_space_ = space;
    }

    // The n entries at offset of the last upload.
    auto slice(std::size_t offset, std::size_t n) const {
        const std::size_t first = call_start_ + offset;
        return Kokkos::subview(ring_[current_]->view, std::make_pair(first, first + n));
    }

    // The same entries copied into device memory on space (asynchronously), for
    // kernels whose many blocks would each stall on a read of host memory (the
    // page moves). On host backends the slab itself.
    auto device_slice(const ExecutionSpace& space, std::size_t offset, std::size_t n) {
        if constexpr (std::is_same_v<memory_space, typename ExecutionSpace::memory_space>) {
            return slice(offset, n);
        } else {
            const std::size_t first = call_start_ + offset;
            Slab& slab = *ring_[current_];
            slab.device.reserve(space, slab.view.extent(0));
            const auto device = slab.device.view();
            kernels::async_upload(space, device.data() + first, slab.view.data() + first, n);
            return Kokkos::subview(device, std::make_pair(first, first + n));
        }
    }

    // Entries held in page-locked memory: the ring's slabs and those outgrown.
    std::size_t held_entries() const {
        std::size_t n = 0;
        for (const auto& slab : ring_)
            n += slab->view.extent(0);
        for (const auto& view : retired_slabs_)
            n += view.extent(0);
        return n;
    }

private:
    static constexpr std::size_t max_slabs = 256;
    // Entries of a new slab (tuning.hpp).
    static constexpr std::size_t min_slab_entries =
        kernels::NativeBackend<ExecutionSpace>::tuning::min_slab_entries;

    struct Slab {
        slab_view view;
        kernels::DeviceIds<ExecutionSpace> device;
        kernels::StreamEvent<ExecutionSpace> done;
    };
    static std::size_t grow(std::size_t need) {
        std::size_t size = min_slab_entries;
        while (size < need)
            size *= 2;
        return size;
    }
    static std::vector<std::unique_ptr<Slab>> initial_ring() {
        std::vector<std::unique_ptr<Slab>> ring;
        for (int i = 0; i < 4; ++i)
            ring.push_back(std::make_unique<Slab>());
        return ring;
    }

    // Slabs outgrown are kept until the end: freeing page-locked memory would
    // wait for the whole device.
    void retire(slab_view view) {
        if (view.data() != nullptr)
            retired_slabs_.push_back(std::move(view));
    }

    // A call's arrays follow the last call's in the slab, unless it is half
    // full: then they start the next one.
    void start_filling() {
        if (in_use_ && 2 * used_ >= ring_[current_]->view.extent(0))
            next_slab();
        filling_ = true;
        call_start_ = used_;
    }

    // Moves to the next slab the GPU no longer reads: the kernels that read the
    // current one have all been enqueued by now, so its event marks their end.
    void next_slab() {
        if (in_use_)
            ring_[current_]->done.record(last_space_);
        in_use_ = false;
        const std::size_t next = (current_ + 1) % ring_.size();
        if (ring_[next]->done.is_complete()) {
            current_ = next;
        } else if (ring_.size() < max_slabs) {
            // The oldest slab stays next in line; the new one goes before it.
            ring_.insert(ring_.begin() + static_cast<std::ptrdiff_t>(current_ + 1),
                         std::make_unique<Slab>());
            current_ = current_ + 1;
        } else {
            current_ = next;
            ring_[current_]->done.wait();
        }
        used_ = 0;
        call_start_ = 0;
    }

    void move_call_to_next_slab() {
        const Slab& from = *ring_[current_];
        const std::size_t first = call_start_, n = used_ - call_start_;
        next_slab();
        Slab& to = *ring_[current_];
        if (to.view.extent(0) < n) {
            retire(std::move(to.view));
            to.view = kk::uninitialized<slab_view>("kvpool::staging", grow(n));
        }
        if (n > 0)
            std::memcpy(to.view.data(), from.view.data() + first, n * sizeof(index_t));
        used_ = n;
    }

    std::vector<std::unique_ptr<Slab>> ring_ = initial_ring();
    std::vector<slab_view> retired_slabs_;
    std::size_t current_ = 0;
    std::size_t call_start_ = 0; // where this call's arrays start in the slab
    std::size_t used_ = 0;
    bool filling_ = false;
    bool in_use_ = false; // kernels enqueued may read the current slab
    ExecutionSpace last_space_;
};

KVPOOL_EXTERN_LIBRARY_INSTANCES(Staging)

} // namespace kvpool::detail
