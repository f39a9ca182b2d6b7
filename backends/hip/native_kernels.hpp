// Native HIP versions of the two hot paths (see backends/cuda/native_kernels.hpp).
#pragma once

#include <kvpool/types.hpp>

#include <hip/hip_runtime.h>

#include <cstdint>

namespace kvpool::hip {

void move_pages(hipStream_t stream, std::uint8_t* base, index_t page_bytes, const index_t* src,
                const index_t* dst, index_t pages);
void bind_pages_emit_tokens(hipStream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                            const index_t* physical_pages, index_t pages, index_t page_size, index_t* out);
void alloc_extend_bind(hipStream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                       const index_t* physical_pages, const index_t* prefix_lens, const index_t* seq_lens,
                       const index_t* out_start, const index_t* page_start, const index_t* last_loc,
                       index_t batch, index_t page_size, index_t* out);
void alloc_decode_bind(hipStream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                       const index_t* physical_pages, const index_t* seq_lens, const index_t* page_start,
                       const index_t* last_loc, index_t batch, index_t page_size, index_t* out);

}  // namespace kvpool::hip
