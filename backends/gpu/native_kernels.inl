// The native kernels of both GPU vendors: CUDA and HIP compile the same source.
// The including file defines, inside its namespace, gpu_stream_t, gpu_error_t,
// gpu_success, gpu_get_last_error, gpu_error_string, stream_load and
// stream_store (streaming 16-byte accesses that bypass the caches where the
// vendor has them), then includes this file.

namespace {

constexpr int threads_per_block = 256;
constexpr int vectors_per_thread = 4;

// Block `block` copies one chunk of one page: page = block / blocks_per_page.
// The unrolled loads are all issued before the stores so that every thread
// keeps several 16-byte requests in flight.
__device__ __forceinline__ void move_page_chunk(uint4* __restrict__ base, index_t vectors_per_page,
                                                index_t blocks_per_page, const index_t* __restrict__ src,
                                                const index_t* __restrict__ dst, index_t block) {
    const index_t page = block / blocks_per_page;
    const index_t chunk = block % blocks_per_page;
    const uint4* from = base + src[page] * vectors_per_page;
    uint4* to = base + dst[page] * vectors_per_page;
    const index_t first = chunk * threads_per_block * vectors_per_thread + threadIdx.x;
    uint4 v[vectors_per_thread];
#pragma unroll
    for (int k = 0; k < vectors_per_thread; ++k) {
        const index_t i = first + k * threads_per_block;
        if (i < vectors_per_page) v[k] = stream_load(from + i);
    }
#pragma unroll
    for (int k = 0; k < vectors_per_thread; ++k) {
        const index_t i = first + k * threads_per_block;
        if (i < vectors_per_page) stream_store(to + i, v[k]);
    }
}

__global__ void move_pages_vec16(uint4* __restrict__ base, index_t vectors_per_page, index_t blocks_per_page,
                                 const index_t* __restrict__ src, const index_t* __restrict__ dst) {
    move_page_chunk(base, vectors_per_page, blocks_per_page, src, dst, blockIdx.x);
}

// Thread i of the table part: the i-th write of each table.
__device__ __forceinline__ void table_write(index_t i, index_t* v2p, const index_t* v2p_index,
                                            const index_t* v2p_value, index_t v2p_writes, index_t* p2v,
                                            const index_t* p2v_index, const index_t* p2v_value,
                                            index_t p2v_writes) {
    if (i < v2p_writes) v2p[v2p_index[i]] = v2p_value[i];
    if (i < p2v_writes) p2v[p2v_index[i]] = p2v_value[i];
}

__global__ void apply_table_writes_kernel(index_t* v2p, const index_t* v2p_index, const index_t* v2p_value,
                                          index_t v2p_writes, index_t* p2v, const index_t* p2v_index,
                                          const index_t* p2v_value, index_t p2v_writes) {
    table_write(blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x, v2p, v2p_index, v2p_value,
                v2p_writes, p2v, p2v_index, p2v_value, p2v_writes);
}

// The first move_blocks blocks move pages, the rest write the tables.
__global__ void apply_plan_kernel(uint4* __restrict__ base, index_t vectors_per_page, index_t blocks_per_page,
                                  const index_t* __restrict__ src, const index_t* __restrict__ dst,
                                  index_t move_blocks, index_t* v2p, const index_t* v2p_index,
                                  const index_t* v2p_value, index_t v2p_writes, index_t* p2v,
                                  const index_t* p2v_index, const index_t* p2v_value, index_t p2v_writes) {
    const index_t block = blockIdx.x;
    if (block < move_blocks)
        move_page_chunk(base, vectors_per_page, blocks_per_page, src, dst, block);
    else
        table_write((block - move_blocks) * blockDim.x + threadIdx.x, v2p, v2p_index, v2p_value, v2p_writes,
                    p2v, p2v_index, p2v_value, p2v_writes);
}

template <class Out>
__global__ void translate_kernel(const index_t* __restrict__ v2p, index_t virtual_pages, index_t page_size,
                                 const index_t* in, index_t n, Out* out) {
    const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const index_t token = in[i];
    const index_t page = token / page_size;
    index_t physical = 0;
    if (token >= 0 && page < virtual_pages) {
        physical = v2p[page] * page_size + token % page_size;
        if (physical < 0) physical = 0;
    }
    out[i] = static_cast<Out>(physical);
}

__global__ void move_pages_bytes(std::uint8_t* base, index_t page_bytes, index_t pages, const index_t* src,
                                 const index_t* dst) {
    const index_t total = pages * page_bytes;
    for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<index_t>(gridDim.x) * blockDim.x) {
        const index_t page = i / page_bytes, offset = i % page_bytes;
        base[dst[page] * page_bytes + offset] = base[src[page] * page_bytes + offset];
    }
}

void check_launch(const char* what) {
    const gpu_error_t err = gpu_get_last_error();
    if (err != gpu_success)
        throw Error(ErrorCode::internal, std::string(what) + ": launch failed: " + gpu_error_string(err));
}

}  // namespace

namespace {

bool vector_copies(const std::uint8_t* base, index_t page_bytes) {
    return page_bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(base) % 16 == 0;
}

index_t blocks_per_page_of(index_t page_bytes) {
    const index_t per_block = threads_per_block * vectors_per_thread;
    return (page_bytes / 16 + per_block - 1) / per_block;
}

unsigned blocks_for(index_t n) { return static_cast<unsigned>((n + threads_per_block - 1) / threads_per_block); }

}  // namespace

void move_pages(gpu_stream_t stream, std::uint8_t* base, index_t page_bytes, const index_t* src,
                const index_t* dst, index_t pages) {
    if (pages == 0 || page_bytes == 0) return;
    if (vector_copies(base, page_bytes)) {
        const index_t vectors_per_page = page_bytes / 16;
        const index_t blocks_per_page = blocks_per_page_of(page_bytes);
        move_pages_vec16<<<static_cast<unsigned>(pages * blocks_per_page), threads_per_block, 0, stream>>>(
            reinterpret_cast<uint4*>(base), vectors_per_page, blocks_per_page, src, dst);
    } else {
        const index_t total = pages * page_bytes;
        const index_t blocks = std::min<index_t>((total + threads_per_block - 1) / threads_per_block, 65535);
        move_pages_bytes<<<static_cast<unsigned>(blocks), threads_per_block, 0, stream>>>(base, page_bytes, pages,
                                                                                          src, dst);
    }
    check_launch("kvpool::move_pages");
}

void apply_table_writes(gpu_stream_t stream, index_t* v2p, const index_t* v2p_index, const index_t* v2p_value,
                        index_t v2p_writes, index_t* p2v, const index_t* p2v_index, const index_t* p2v_value,
                        index_t p2v_writes) {
    const index_t n = v2p_writes > p2v_writes ? v2p_writes : p2v_writes;
    if (n == 0) return;
    apply_table_writes_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(
        v2p, v2p_index, v2p_value, v2p_writes, p2v, p2v_index, p2v_value, p2v_writes);
    check_launch("kvpool::apply_table_writes");
}

void apply_plan(gpu_stream_t stream, std::uint8_t* base, index_t page_bytes, const index_t* src,
                const index_t* dst, index_t pages, index_t* v2p, const index_t* v2p_index,
                const index_t* v2p_value, index_t v2p_writes, index_t* p2v, const index_t* p2v_index,
                const index_t* p2v_value, index_t p2v_writes) {
    if (pages == 0 || page_bytes == 0 || !vector_copies(base, page_bytes)) {
        move_pages(stream, base, page_bytes, src, dst, pages);
        apply_table_writes(stream, v2p, v2p_index, v2p_value, v2p_writes, p2v, p2v_index, p2v_value, p2v_writes);
        return;
    }
    const index_t blocks_per_page = blocks_per_page_of(page_bytes);
    const index_t move_blocks = pages * blocks_per_page;
    const index_t writes = v2p_writes > p2v_writes ? v2p_writes : p2v_writes;
    apply_plan_kernel<<<static_cast<unsigned>(move_blocks + blocks_for(writes)), threads_per_block, 0, stream>>>(
        reinterpret_cast<uint4*>(base), page_bytes / 16, blocks_per_page, src, dst, move_blocks, v2p, v2p_index,
        v2p_value, v2p_writes, p2v, p2v_index, p2v_value, p2v_writes);
    check_launch("kvpool::apply_plan");
}

void translate_tokens(gpu_stream_t stream, const index_t* v2p, index_t virtual_pages, index_t page_size,
                      const index_t* in, index_t n, index_t* out) {
    if (n == 0) return;
    translate_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(v2p, virtual_pages, page_size, in, n, out);
    check_launch("kvpool::translate_tokens");
}

void translate_tokens(gpu_stream_t stream, const index_t* v2p, index_t virtual_pages, index_t page_size,
                      const index_t* in, index_t n, std::int32_t* out) {
    if (n == 0) return;
    translate_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(v2p, virtual_pages, page_size, in, n, out);
    check_launch("kvpool::translate_tokens");
}



namespace {

__device__ __forceinline__ void bind_follower(const FollowerTables& follower, index_t k, index_t v) {
    if (follower.v2p == nullptr) return;
    follower.v2p[v] = follower.physical_pages[k];
    follower.p2v[follower.physical_pages[k]] = v;
}

__global__ void bind_pages_emit_tokens_kernel(index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                                              const index_t* physical_pages, index_t tokens, index_t page_size,
                                              FollowerTables follower, index_t* out) {
    const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
    if (t >= tokens) return;
    const index_t page = t / page_size;
    const index_t v = virtual_pages[page];
    out[t] = v * page_size + t % page_size;
    if (t % page_size == 0) {
        v2p[v] = physical_pages[page];
        p2v[physical_pages[page]] = v;
        bind_follower(follower, page, v);
    }
}

// One block per request: its threads share the request's tokens and new pages.
__global__ void alloc_extend_bind_kernel(index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                                         const index_t* physical_pages, const index_t* prefix_lens,
                                         const index_t* seq_lens, const index_t* out_start,
                                         const index_t* page_start, const index_t* last_loc, index_t page_size,
                                         FollowerTables follower, index_t* out) {
    const index_t r = blockIdx.x;
    const index_t prefix = prefix_lens[r];
    const index_t seq = seq_lens[r];
    const index_t first_new_page = page_start[r];
    const index_t prefix_pages_end = (prefix + page_size - 1) / page_size * page_size;
    const index_t new_pages = (seq + page_size - 1) / page_size - prefix_pages_end / page_size;
    for (index_t k = threadIdx.x; k < new_pages; k += blockDim.x) {
        const index_t v = virtual_pages[first_new_page + k];
        v2p[v] = physical_pages[first_new_page + k];
        p2v[physical_pages[first_new_page + k]] = v;
        bind_follower(follower, first_new_page + k, v);
    }
    const index_t tail = (seq < prefix_pages_end ? seq : prefix_pages_end) - prefix;
    index_t* request_out = out + out_start[r];
    for (index_t j = threadIdx.x; j < seq - prefix; j += blockDim.x) {
        if (j < tail) {
            request_out[j] = last_loc[r] + 1 + j;
        } else {
            const index_t n = j - tail;
            request_out[j] = virtual_pages[first_new_page + n / page_size] * page_size + n % page_size;
        }
    }
}

__global__ void alloc_decode_bind_kernel(index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                                         const index_t* physical_pages, const index_t* seq_lens,
                                         const index_t* page_start, const index_t* last_loc, index_t batch,
                                         index_t page_size, FollowerTables follower, index_t* out) {
    const index_t r = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
    if (r >= batch) return;
    const index_t seq = seq_lens[r];
    if ((seq - 1) % page_size == 0) {
        const index_t k = page_start[r];
        const index_t v = virtual_pages[k];
        v2p[v] = physical_pages[k];
        p2v[physical_pages[k]] = v;
        bind_follower(follower, k, v);
        out[r] = v * page_size;
    } else {
        out[r] = last_loc[r] + 1;
    }
}

}  // namespace

void bind_pages_emit_tokens(gpu_stream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                            const index_t* physical_pages, index_t pages, index_t page_size,
                            FollowerTables follower, index_t* out) {
    const index_t tokens = pages * page_size;
    if (tokens == 0) return;
    bind_pages_emit_tokens_kernel<<<blocks_for(tokens), threads_per_block, 0, stream>>>(
        v2p, p2v, virtual_pages, physical_pages, tokens, page_size, follower, out);
    check_launch("kvpool::bind_pages_emit_tokens");
}

void alloc_extend_bind(gpu_stream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                       const index_t* physical_pages, const index_t* prefix_lens, const index_t* seq_lens,
                       const index_t* out_start, const index_t* page_start, const index_t* last_loc,
                       index_t batch, index_t page_size, FollowerTables follower, index_t* out) {
    if (batch == 0) return;
    alloc_extend_bind_kernel<<<static_cast<unsigned>(batch), threads_per_block, 0, stream>>>(
        v2p, p2v, virtual_pages, physical_pages, prefix_lens, seq_lens, out_start, page_start, last_loc,
        page_size, follower, out);
    check_launch("kvpool::alloc_extend_bind");
}

void alloc_decode_bind(gpu_stream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                       const index_t* physical_pages, const index_t* seq_lens, const index_t* page_start,
                       const index_t* last_loc, index_t batch, index_t page_size, FollowerTables follower,
                       index_t* out) {
    if (batch == 0) return;
    alloc_decode_bind_kernel<<<blocks_for(batch), threads_per_block, 0, stream>>>(
        v2p, p2v, virtual_pages, physical_pages, seq_lens, page_start, last_loc, batch, page_size, follower, out);
    check_launch("kvpool::alloc_decode_bind");
}

