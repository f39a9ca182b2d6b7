// Device memory allocated and released in stream order through a vendor's
// runtime traits (cudaMallocAsync / hipMallocAsync), and the asynchronous
// host-to-device copy into it: neither blocks the host, where a Kokkos View's
// allocation does (Kokkos 3.4 writes its header with a blocking copy). No
// Kokkos, so that the HIP check build compiles it.
#pragma once

#include <cstddef>

namespace kvpool::kernels {

template <class Runtime, class T> class StreamOrderedArray {
public:
    using stream_type = typename Runtime::stream_type;
    StreamOrderedArray() = default;
    StreamOrderedArray(const StreamOrderedArray&) = delete;
    StreamOrderedArray& operator=(const StreamOrderedArray&) = delete;
    ~StreamOrderedArray() {
        if (data_ != nullptr)
            Runtime::free(data_);
    }

    // At least n elements, usable by work enqueued on stream from now on. The
    // contents are not kept; the old memory is freed after the work that reads
    // it. A failed allocation changes nothing.
    void reserve(stream_type stream, std::size_t n) {
        if (n <= size_)
            return;
        T* const old = data_;
        data_ = static_cast<T*>(Runtime::malloc_async(n * sizeof(T), stream));
        size_ = n;
        if (old != nullptr)
            Runtime::free_async(old, stream);
    }
    T* data() const { return data_; }
    std::size_t size() const { return size_; }

private:
    T* data_ = nullptr;
    std::size_t size_ = 0;
};

// host_src must be page-locked for the copy to be asynchronous.
template <class Runtime, class T>
void upload_async(typename Runtime::stream_type stream, T* device_dst, const T* host_src,
                  std::size_t n) {
    Runtime::copy_to_device_async(device_dst, host_src, n * sizeof(T), stream);
}

} // namespace kvpool::kernels
