// Compiled only by the HIP check build (backends/CMakeLists.txt: Debian's hipcc, no
// Kokkos with HIP): the Kokkos-free pieces the HIP backend runs on, each
// instantiated in full so that hipcc checks every member. The Kokkos-facing
// wrappers over them (stream_wait.hpp, device_ids.hpp) are thin and shared
// with CUDA.
#include <kvpool/kernels/hip/event_token.hpp>
#include <kvpool/kernels/hip/runtime.hpp>
#include <kvpool/kernels/stream_ordered_array.hpp>
#include <kvpool/types.hpp>

#include <cstddef>

namespace kvpool::kernels {

template class EventToken<hip::Runtime>;
template void enqueue_wait_on_stream<hip::Runtime>(hipStream_t, const CompletionToken&);
template class StreamOrderedArray<hip::Runtime, index_t>;
template void upload_async<hip::Runtime, index_t>(hipStream_t, index_t*, const index_t*,
                                                  std::size_t);

} // namespace kvpool::kernels
