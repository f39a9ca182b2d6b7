// The host half of copy_runs: checking the runs and cutting them into chunks.
#include <kvpool/error.hpp>
#include <kvpool/storage/transfer_copy.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace kvpool {

std::vector<index_t> copy_chunks(const std::vector<CopyRun>& runs, index_t src_bytes,
                                 index_t dst_bytes, index_t chunk_bytes) {
    if (chunk_bytes <= 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("copy_runs: chunk_bytes must be > 0, got {}", chunk_bytes));
    std::size_t count = 0;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const CopyRun& r = runs[i];
        if (r.src_offset < 0 || r.dst_offset < 0 || r.length <= 0 ||
            r.length > src_bytes - r.src_offset || r.length > dst_bytes - r.dst_offset)
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("copy_runs: run {} (src_offset {}, dst_offset {}, length {}) "
                                    "is not inside the {}-byte source and the {}-byte destination",
                                    i, r.src_offset, r.dst_offset, r.length, src_bytes, dst_bytes));
        count += static_cast<std::size_t>((r.length + chunk_bytes - 1) / chunk_bytes);
    }
    std::vector<index_t> chunks;
    chunks.reserve(3 * count);
    for (const CopyRun& r : runs)
        for (index_t done = 0; done < r.length; done += chunk_bytes) {
            chunks.push_back(r.src_offset + done);
            chunks.push_back(r.dst_offset + done);
            chunks.push_back(std::min(chunk_bytes, r.length - done));
        }
    return chunks;
}

} // namespace kvpool
