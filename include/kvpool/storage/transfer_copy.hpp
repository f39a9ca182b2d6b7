// A transfer engine's copy for ends that share one device (CUDA IPC between two
// processes, or two pools in one process): the paired runs (pair_pages,
// pair_runs) copied from one buffer to another in one launch on the caller's
// execution-space instance, however scattered the pages are, instead of a copy
// call per run.
#pragma once

#include <kvpool/kernels/device_ids.hpp>
#include <kvpool/kernels/native_backend.hpp>
#include <kvpool/kernels/portable/copy_chunks.hpp>
#include <kvpool/kernels/tools_region.hpp>
#include <kvpool/kokkos_compat.hpp>
#include <kvpool/storage/transfer_descriptors.hpp>

#include <cstdint>
#include <vector>

namespace kvpool {

// Runs longer than this are copied in pieces of it, so that one long run (a
// dense band) spreads over the device.
inline constexpr index_t copy_chunk_bytes = index_t(1) << 20;

// The runs as (src_offset, dst_offset, length) chunks of at most chunk_bytes,
// flattened, after checking every run against the two buffers' sizes: a run
// with a negative offset, no bytes, or bytes outside either buffer is refused
// (invalid_argument naming it) before anything is copied.
std::vector<index_t> copy_chunks(const std::vector<CopyRun>& runs, index_t src_bytes,
                                 index_t dst_bytes, index_t chunk_bytes = copy_chunk_bytes);

// Copies runs from src (src_bytes long) to dst (dst_bytes long), both memory
// that space reads and writes, ordered on space: a GPU instance returns before
// the copy has run (record an event after it for the transfer's completion
// token). No run may write bytes another run reads or writes (a transfer's
// paired runs never do): the runs are copied in parallel.
template <class ExecutionSpace>
void copy_runs(const ExecutionSpace& space, const std::uint8_t* src, index_t src_bytes,
               std::uint8_t* dst, index_t dst_bytes, const std::vector<CopyRun>& runs) {
    const std::vector<index_t> chunks = copy_chunks(runs, src_bytes, dst_bytes);
    const index_t count = static_cast<index_t>(chunks.size() / 3);
    if (count == 0)
        return;
    const kernels::ToolsRegion region("kvpool::copy_runs");
    using backend = kernels::NativeBackend<ExecutionSpace>;
    if constexpr (kk::host_execution<ExecutionSpace>) {
        kernels::portable::copy_chunks(space, src, dst, chunks.data(), count);
    } else if constexpr (backend::available) {
        // Stream-ordered staging: nothing here waits for the device. A copy from pageable
        // memory returns once the runtime has read the host array.
        using runtime = typename backend::runtime;
        const auto stream = backend::stream(space);
        auto* const staged =
            static_cast<index_t*>(runtime::malloc_async(chunks.size() * sizeof(index_t), stream));
        try {
            kernels::async_upload(space, staged, chunks.data(), chunks.size());
            kernels::portable::copy_chunks(space, src, dst, staged, count);
        } catch (...) {
            runtime::free_async(staged, stream);
            throw;
        }
        runtime::free_async(staged, stream);
    } else {
        kernels::DeviceIds<ExecutionSpace> staged;
        staged.reserve(space, chunks.size());
        kernels::async_upload(space, staged.view().data(), chunks.data(), chunks.size());
        kernels::portable::copy_chunks(space, src, dst, staged.view().data(), count);
    }
}

} // namespace kvpool
