// What the Kokkos-backed pools share: the execution-space instance, reusable
// id buffers for the allocator calls' inputs and outputs, and the stopwatch of
// the time spent inside allocator calls (fenced, so device work counts).
#pragma once

#include <kvpool/kokkos_compat.hpp>

#include <chrono>
#include <utility>
#include <vector>

namespace kvpool::sim {

template <class ExecutionSpace> class DeviceCalls {
public:
    using memory_space = typename ExecutionSpace::memory_space;
    using index_view = kk::View<index_t*, memory_space>;

    const ExecutionSpace& space() const { return space_; }

    // Runs an allocator call and waits for its device work; counts the time.
    // A call made inside another (a release from the eviction callback, inside
    // an allocation) counts in the outer one's time only.
    template <class Call> auto timed(Call&& call) {
        if (depth_ > 0)
            return call();
        const auto start = std::chrono::steady_clock::now();
        ++depth_;
        struct Leave {
            int& depth;
            ~Leave() { --depth; }
        } leave{depth_};
        auto result = call();
        space_.fence();
        seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return result;
    }
    double seconds() const { return seconds_; }

    // The ids as a device view of their length (valid until the next upload).
    index_view upload(const std::vector<index_t>& host) {
        input_host_ = host;
        grow(input_, host.size(), "kvpool_sim::input_ids");
        index_view slice = Kokkos::subview(input_, std::make_pair(std::size_t(0), host.size()));
        Kokkos::deep_copy(space_, slice,
                          kk::UnmanagedHostView<const index_t*>(input_host_.data(), host.size()));
        return slice;
    }
    // A device view of n ids for a call to write (valid until the next output).
    index_view output(std::size_t n) {
        grow(output_, n, "kvpool_sim::output_ids");
        return Kokkos::subview(output_, std::make_pair(std::size_t(0), n));
    }
    // The host copy of a view the last call wrote.
    const std::vector<index_t>& download(const index_view& ids) {
        output_host_.resize(ids.extent(0));
        Kokkos::deep_copy(
            space_, kk::UnmanagedHostView<index_t*>(output_host_.data(), output_host_.size()), ids);
        space_.fence();
        return output_host_;
    }

private:
    static void grow(index_view& view, std::size_t n, const char* label) {
        if (view.extent(0) >= n)
            return;
        view = kk::uninitialized<index_view>(label, std::max<std::size_t>(n, 2 * view.extent(0)));
    }

    ExecutionSpace space_;
    index_view input_;
    index_view output_;
    std::vector<index_t> input_host_;
    std::vector<index_t> output_host_;
    double seconds_ = 0.0;
    int depth_ = 0;
};

} // namespace kvpool::sim
