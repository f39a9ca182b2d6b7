// The native kernels of both GPU vendors, written once: the vendor's source
// (backends/cuda/src/cuda_kernels.cu, backends/hip/src/hip_kernels.hip)
// specialises StreamingAccess for its Runtime, then instantiates
// NativeKernels<Runtime> from these definitions.
#pragma once

#include <kvpool/kernels/native_kernels.hpp>

#include <algorithm>
#include <cstdint>

namespace kvpool::kernels {

namespace native_detail {

// Streaming 16-byte loads and stores that bypass the caches where the vendor
// has them: static uint4 load(const uint4*) and void store(uint4*, uint4).
template <class Runtime> struct StreamingAccess;

// The runtime's measured block shape (tuning.hpp).
template <class Runtime> constexpr int threads_per_block = Tuning<Runtime>::threads_per_block;
template <class Runtime> constexpr int vectors_per_thread = Tuning<Runtime>::vectors_per_thread;

// Block `block` copies one chunk of one page: page = block / blocks_per_page.
// The unrolled loads are all issued before the stores so that every thread
// keeps several 16-byte requests in flight. The move kernels take their
// pointers as __restrict__ parameters (read-only loads of the page lists).
__device__ __forceinline__ MoveRuns::Move move_at(const index_t* __restrict__ src,
                                                  const index_t* __restrict__ dst,
                                                  const MoveRuns& runs, index_t k) {
    return runs.count > 0 ? runs.at(k) : MoveRuns::Move{src[k], dst[k]};
}

template <class Runtime>
__device__ __forceinline__ void
move_page_chunk(uint4* __restrict__ base, index_t vectors_per_page, index_t blocks_per_page,
                const index_t* __restrict__ src, const index_t* __restrict__ dst,
                const MoveRuns& runs, index_t block) {
    const index_t page = block / blocks_per_page;
    const index_t chunk = block % blocks_per_page;
    const MoveRuns::Move move = move_at(src, dst, runs, page);
    const uint4* from = base + move.src * vectors_per_page;
    uint4* to = base + move.dst * vectors_per_page;
    using Access = StreamingAccess<Runtime>;
    constexpr int threads = threads_per_block<Runtime>;
    constexpr int vectors = vectors_per_thread<Runtime>;
    const index_t first = chunk * threads * vectors + threadIdx.x;
    uint4 v[vectors];
#pragma unroll
    for (int k = 0; k < vectors; ++k) {
        const index_t i = first + k * threads;
        if (i < vectors_per_page)
            v[k] = Access::load(from + i);
    }
#pragma unroll
    for (int k = 0; k < vectors; ++k) {
        const index_t i = first + k * threads;
        if (i < vectors_per_page)
            Access::store(to + i, v[k]);
    }
}

template <class Runtime>
__global__ void move_pages_vec16(uint4* __restrict__ base, index_t vectors_per_page,
                                 index_t blocks_per_page, const index_t* __restrict__ src,
                                 const index_t* __restrict__ dst, const MoveRuns runs) {
    move_page_chunk<Runtime>(base, vectors_per_page, blocks_per_page, src, dst, runs, blockIdx.x);
}

__global__ void move_pages_bytes(native::PageMoves op) {
    const index_t total = op.pages * op.page_bytes;
    for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<index_t>(gridDim.x) * blockDim.x) {
        const index_t page = i / op.page_bytes, offset = i % op.page_bytes;
        const MoveRuns::Move move = move_at(op.src, op.dst, op.runs, page);
        op.bytes[move.dst * op.page_bytes + offset] = op.bytes[move.src * op.page_bytes + offset];
    }
}

// Thread i of the table part: the i-th write of each table.
__device__ __forceinline__ void table_write(const native::TableWrites& op, index_t i) {
    if (i < op.v2p_writes)
        op.v2p[op.v2p_index[i]] = op.v2p_value[i];
    if (i < op.p2v_writes)
        op.p2v[op.p2v_index[i]] = op.p2v_value[i];
}

__global__ void apply_table_writes_kernel(native::TableWrites op) {
    table_write(op, blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x);
}

// The first move_blocks blocks move pages, the rest write the tables.
template <class Runtime>
__global__ void apply_plan_kernel(uint4* __restrict__ base, index_t vectors_per_page,
                                  index_t blocks_per_page, const index_t* __restrict__ src,
                                  const index_t* __restrict__ dst, const MoveRuns runs,
                                  index_t move_blocks, native::TableWrites writes) {
    const index_t block = blockIdx.x;
    if (block < move_blocks)
        move_page_chunk<Runtime>(base, vectors_per_page, blocks_per_page, src, dst, runs, block);
    else
        table_write(writes, (block - move_blocks) * blockDim.x + threadIdx.x);
}

// page_shift >= 0: page_size is 1 << page_shift, and the page and offset of a
// token are a shift and a mask instead of a 64-bit division (SGLang's default
// page sizes, 1 and 16 among them, are all powers of two).
template <class Out>
__global__ void translate_kernel(const index_t* __restrict__ v2p, index_t virtual_pages,
                                 index_t page_size, int page_shift, index_t page_stride,
                                 const index_t* __restrict__ in, index_t n, Out* __restrict__ out) {
    const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
    if (i >= n)
        return;
    const index_t token = in[i];
    index_t physical = 0;
    if (token >= 0) {
        const index_t page = page_shift >= 0 ? token >> page_shift : token / page_size;
        const index_t offset = page_shift >= 0 ? token & (page_size - 1) : token % page_size;
        if (page < virtual_pages) {
            physical = v2p[page] * page_stride + offset;
            if (physical < 0)
                physical = 0;
        }
    }
    out[i] = static_cast<Out>(physical);
}

// The virtual page of new page k.
__device__ __forceinline__ index_t virtual_page_of(const native::NewPages& pages, index_t k) {
    return pages.runs.count > 0 ? pages.runs.at(k).virtual_page : pages.virtual_pages[k];
}

// Binds new page k: virtual_pages[k] <-> physical_pages[k], and the follower's.
__device__ __forceinline__ index_t bind_page(const native::NewPages& pages, index_t k) {
    PageRuns::Page page{};
    if (pages.runs.count > 0) {
        page = pages.runs.at(k);
    } else {
        page.virtual_page = pages.virtual_pages[k];
        page.physical_page = pages.physical_pages[k];
        if (pages.follower.v2p != nullptr)
            page.follower_page = pages.follower.physical_pages[k];
    }
    pages.v2p[page.virtual_page] = page.physical_page;
    pages.p2v[page.physical_page] = page.virtual_page;
    const native::Follower& follower = pages.follower;
    if (follower.v2p != nullptr) {
        follower.v2p[page.virtual_page] = page.follower_page;
        follower.p2v[page.follower_page] = page.virtual_page;
    }
    return page.virtual_page;
}

// Handout zeroing: the blocks after an alloc-bind kernel's first work_blocks
// each zero one chunk of a new page (native::zero_chunk_at), with 16-byte
// stores where the chunk is 16-byte aligned.
inline index_t zero_chunks_of(const native::NewPages& pages) {
    return native::zero_chunks(pages.pages, pages.zeroing.page_bytes,
                               pages.zeroing.follower_page_bytes);
}

__device__ __forceinline__ void zero_page_chunk(const native::NewPages& pages, index_t i) {
    const native::PageZeroing& zeroing = pages.zeroing;
    const native::ZeroChunk chunk =
        native::zero_chunk_at(pages.pages, zeroing.page_bytes, zeroing.follower_page_bytes, i);
    index_t physical = 0;
    if (pages.runs.count > 0) {
        const PageRuns::Page page = pages.runs.at(chunk.page);
        physical = chunk.follower ? page.follower_page : page.physical_page;
    } else {
        physical = chunk.follower ? pages.follower.physical_pages[chunk.page]
                                  : pages.physical_pages[chunk.page];
    }
    const index_t page_bytes = chunk.follower ? zeroing.follower_page_bytes : zeroing.page_bytes;
    std::uint8_t* const first = zeroing.bytes + physical * page_bytes + chunk.begin;
    const index_t n = chunk.end - chunk.begin;
    if (reinterpret_cast<std::uintptr_t>(first) % 16 == 0 && n % 16 == 0) {
        uint4* const vectors = reinterpret_cast<uint4*>(first);
        for (index_t k = threadIdx.x; k < n / 16; k += blockDim.x)
            vectors[k] = make_uint4(0, 0, 0, 0);
    } else {
        for (index_t k = threadIdx.x; k < n; k += blockDim.x)
            first[k] = 0;
    }
}

__global__ void bind_pages_emit_tokens_kernel(native::AllocTokens op, index_t work_blocks) {
    if (blockIdx.x >= work_blocks) {
        zero_page_chunk(op.pages, blockIdx.x - work_blocks);
        return;
    }
    const index_t page_size = op.pages.page_size;
    const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
    if (t >= op.pages.pages * page_size)
        return;
    const index_t page = t / page_size;
    if (op.out != nullptr)
        op.out[t] = virtual_page_of(op.pages, page) * page_size + t % page_size;
    if (t % page_size == 0)
        bind_page(op.pages, page);
}

// One block per request: its threads share the request's tokens and new pages.
__global__ void alloc_extend_bind_kernel(native::AllocExtend op) {
    if (blockIdx.x >= op.batch) {
        zero_page_chunk(op.pages, blockIdx.x - op.batch);
        return;
    }
    const index_t page_size = op.pages.page_size;
    const index_t r = blockIdx.x;
    const index_t prefix = op.prefix_lens[r];
    const index_t seq = op.seq_lens[r];
    const index_t first_new_page = op.page_start[r];
    const index_t prefix_pages_end = (prefix + page_size - 1) / page_size * page_size;
    const index_t new_pages = (seq + page_size - 1) / page_size - prefix_pages_end / page_size;
    for (index_t k = threadIdx.x; k < new_pages; k += blockDim.x)
        bind_page(op.pages, first_new_page + k);
    const index_t tail = (seq < prefix_pages_end ? seq : prefix_pages_end) - prefix;
    index_t* request_out = op.out + op.out_start[r];
    for (index_t j = threadIdx.x; j < seq - prefix; j += blockDim.x) {
        if (j < tail) {
            request_out[j] = op.last_loc[r] + 1 + j;
        } else {
            const index_t n = j - tail;
            request_out[j] = virtual_page_of(op.pages, first_new_page + n / page_size) * page_size +
                             n % page_size;
        }
    }
}

__global__ void alloc_decode_bind_kernel(native::AllocDecode op, index_t work_blocks) {
    if (blockIdx.x >= work_blocks) {
        zero_page_chunk(op.pages, blockIdx.x - work_blocks);
        return;
    }
    const index_t r = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
    if (r >= op.batch)
        return;
    const index_t page_size = op.pages.page_size;
    if ((op.seq_lens[r] - 1) % page_size == 0)
        op.out[r] = bind_page(op.pages, op.page_start[r]) * page_size;
    else
        op.out[r] = op.last_loc[r] + 1;
}

inline bool vector_copies(const native::PageMoves& op) {
    return op.page_bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(op.bytes) % 16 == 0;
}

template <class Runtime> index_t blocks_per_page_of(index_t page_bytes) {
    const index_t per_block = threads_per_block<Runtime> * vectors_per_thread<Runtime>;
    return (page_bytes / 16 + per_block - 1) / per_block;
}

template <class Runtime> unsigned blocks_for(index_t n) {
    return static_cast<unsigned>((n + threads_per_block<Runtime> - 1) / threads_per_block<Runtime>);
}

template <class Runtime, class Out>
void translate(typename Runtime::stream_type stream, const native::Translation<Out>& op) {
    if (op.tokens == 0)
        return;
    translate_kernel<<<blocks_for<Runtime>(op.tokens), threads_per_block<Runtime>, 0, stream>>>(
        op.v2p, op.virtual_pages, op.page_size, power_of_two_shift(op.page_size), op.page_stride,
        op.in, op.tokens, op.out);
    Runtime::check_launch("kvpool::translate_tokens");
}

} // namespace native_detail

template <class Runtime>
void NativeKernels<Runtime>::move_pages(stream_type stream, const native::PageMoves& op) {
    using namespace native_detail;
    if (op.pages == 0 || op.page_bytes == 0)
        return;
    if (vector_copies(op)) {
        const index_t blocks_per_page = blocks_per_page_of<Runtime>(op.page_bytes);
        move_pages_vec16<Runtime>
            <<<static_cast<unsigned>(op.pages * blocks_per_page), threads_per_block<Runtime>, 0,
               stream>>>(reinterpret_cast<uint4*>(op.bytes), op.page_bytes / 16, blocks_per_page,
                         op.src, op.dst, op.runs);
    } else {
        const index_t total = op.pages * op.page_bytes;
        const index_t blocks =
            std::min<index_t>((total + threads_per_block<Runtime> - 1) / threads_per_block<Runtime>,
                              Tuning<Runtime>::max_byte_move_blocks);
        move_pages_bytes<<<static_cast<unsigned>(blocks), threads_per_block<Runtime>, 0, stream>>>(
            op);
    }
    Runtime::check_launch("kvpool::move_pages");
}

template <class Runtime>
void NativeKernels<Runtime>::apply_table_writes(stream_type stream, const native::TableWrites& op) {
    using namespace native_detail;
    const index_t n = std::max(op.v2p_writes, op.p2v_writes);
    if (n == 0)
        return;
    apply_table_writes_kernel<<<blocks_for<Runtime>(n), threads_per_block<Runtime>, 0, stream>>>(
        op);
    Runtime::check_launch("kvpool::apply_table_writes");
}

template <class Runtime>
void NativeKernels<Runtime>::apply_plan(stream_type stream, const native::PageMoves& moves,
                                        const native::TableWrites& writes) {
    using namespace native_detail;
    if (moves.pages == 0 || moves.page_bytes == 0 || !vector_copies(moves)) {
        move_pages(stream, moves);
        apply_table_writes(stream, writes);
        return;
    }
    const index_t blocks_per_page = blocks_per_page_of<Runtime>(moves.page_bytes);
    const index_t move_blocks = moves.pages * blocks_per_page;
    const index_t writes_count = std::max(writes.v2p_writes, writes.p2v_writes);
    apply_plan_kernel<Runtime>
        <<<static_cast<unsigned>(move_blocks + blocks_for<Runtime>(writes_count)),
           threads_per_block<Runtime>, 0, stream>>>(
            reinterpret_cast<uint4*>(moves.bytes), moves.page_bytes / 16, blocks_per_page,
            moves.src, moves.dst, moves.runs, move_blocks, writes);
    Runtime::check_launch("kvpool::apply_plan");
}

template <class Runtime>
void NativeKernels<Runtime>::translate_tokens(stream_type stream,
                                              const native::Translation<index_t>& op) {
    native_detail::translate<Runtime>(stream, op);
}

template <class Runtime>
void NativeKernels<Runtime>::translate_tokens(stream_type stream,
                                              const native::Translation<std::int32_t>& op) {
    native_detail::translate<Runtime>(stream, op);
}

template <class Runtime>
void NativeKernels<Runtime>::bind_pages_emit_tokens(stream_type stream,
                                                    const native::AllocTokens& op) {
    using namespace native_detail;
    const index_t tokens = op.pages.pages * op.pages.page_size;
    if (tokens == 0)
        return;
    const unsigned work_blocks = blocks_for<Runtime>(tokens);
    bind_pages_emit_tokens_kernel<<<static_cast<unsigned>(work_blocks + zero_chunks_of(op.pages)),
                                    threads_per_block<Runtime>, 0, stream>>>(op, work_blocks);
    Runtime::check_launch("kvpool::bind_pages_emit_tokens");
}

template <class Runtime>
void NativeKernels<Runtime>::alloc_extend_bind(stream_type stream, const native::AllocExtend& op) {
    using namespace native_detail;
    if (op.batch == 0)
        return;
    alloc_extend_bind_kernel<<<static_cast<unsigned>(op.batch + zero_chunks_of(op.pages)),
                               threads_per_block<Runtime>, 0, stream>>>(op);
    Runtime::check_launch("kvpool::alloc_extend_bind");
}

template <class Runtime>
void NativeKernels<Runtime>::alloc_decode_bind(stream_type stream, const native::AllocDecode& op) {
    using namespace native_detail;
    if (op.batch == 0)
        return;
    const unsigned work_blocks = blocks_for<Runtime>(op.batch);
    alloc_decode_bind_kernel<<<static_cast<unsigned>(work_blocks + zero_chunks_of(op.pages)),
                               threads_per_block<Runtime>, 0, stream>>>(op, work_blocks);
    Runtime::check_launch("kvpool::alloc_decode_bind");
}

} // namespace kvpool::kernels
