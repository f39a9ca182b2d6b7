// Native CUDA versions of the two hot paths: the all-layer KV page move and the
// fused alloc-bind. Plain launch functions on a caller's stream, no Kokkos.
#pragma once

#include <kvpool/types.hpp>

#include <cuda_runtime.h>

#include <cstdint>

namespace kvpool::cuda {

// Copies page src[i] onto page dst[i] (page_bytes each) inside base, for all i
// in one launch; 16-byte accesses when page_bytes and base allow.
void move_pages(cudaStream_t stream, std::uint8_t* base, index_t page_bytes, const index_t* src,
                const index_t* dst, index_t pages);

// out[t] = virtual_pages[t / ps] * ps + t % ps; binds virtual_pages[k] <-> physical_pages[k].
void bind_pages_emit_tokens(cudaStream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                            const index_t* physical_pages, index_t pages, index_t page_size, index_t* out);

// SGLang's alloc_extend in virtual space plus the bind of each request's new pages.
void alloc_extend_bind(cudaStream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                       const index_t* physical_pages, const index_t* prefix_lens, const index_t* seq_lens,
                       const index_t* out_start, const index_t* page_start, const index_t* last_loc,
                       index_t batch, index_t page_size, index_t* out);

// One token per request; a new page only when the token starts one.
void alloc_decode_bind(cudaStream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                       const index_t* physical_pages, const index_t* seq_lens, const index_t* page_start,
                       const index_t* last_loc, index_t batch, index_t page_size, index_t* out);

}  // namespace kvpool::cuda
