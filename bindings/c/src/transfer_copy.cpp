// C API: a transfer's paired runs copied between two buffers of one device in
// one launch (kvpool/storage/transfer_copy.hpp).
#include "handles.hpp"

#include <kvpool/storage/transfer_copy.hpp>

using namespace kvpool::capi;
using kvpool::index_t;

extern "C" {

kvpool_status kvpool_transfer_copy_runs(int device, void* stream, const void* src,
                                        int64_t src_bytes, void* dst, int64_t dst_bytes,
                                        const kvpool_copy_run* runs_host, int64_t count) {
    return guarded([&] {
        const char* call = "kvpool_transfer_copy_runs";
        require_host_runs(runs_host, count, std::string(call) + ": runs_host");
        require(src_bytes >= 0 && dst_bytes >= 0,
                std::string(call) + ": src_bytes and dst_bytes must be >= 0");
        require((src != nullptr || src_bytes == 0) && (dst != nullptr || dst_bytes == 0),
                std::string(call) + ": src or dst is NULL");
        std::vector<kvpool::CopyRun> runs(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i)
            runs[static_cast<std::size_t>(i)] = {runs_host[i].src_offset, runs_host[i].dst_offset,
                                                 runs_host[i].length};
        on_device(device, call, [&](auto on) {
            using S = typename decltype(on)::execution_space;
            require_reachable<S>(src, src_bytes);
            require_reachable<S>(dst, dst_bytes);
            ensure_initialized();
            kvpool::copy_runs(on.space(stream), static_cast<const std::uint8_t*>(src), src_bytes,
                              static_cast<std::uint8_t*>(dst), dst_bytes, runs);
        });
    });
}

} // extern "C"
