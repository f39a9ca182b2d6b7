// The native GPU kernels as the dispatch layer calls them: plain launch
// functions on a vendor stream, taking each op's raw pointers (op_args.hpp
// yields them). One declaration for both vendors: Runtime is cuda::Runtime or
// hip::Runtime, and backends/native/ defines the members once for both. No Kokkos
// here, so that the native sources compile without it.
#pragma once

#include <kvpool/kernels/page_runs.hpp>
#include <kvpool/kernels/tuning.hpp>
#include <kvpool/types.hpp>

#include <cstdint>

namespace kvpool::kernels {

namespace native {

// Page src[i] onto page dst[i], page_bytes each, inside bytes; with
// runs.count > 0, runs.at(i) instead, and the lists are not read.
struct PageMoves {
    std::uint8_t* bytes;
    index_t page_bytes;
    const index_t* src;
    const index_t* dst;
    index_t pages;
    MoveRuns runs;
};

// v2p[v2p_index[i]] = v2p_value[i] and p2v[p2v_index[i]] = p2v_value[i].
struct TableWrites {
    index_t* v2p;
    const index_t* v2p_index;
    const index_t* v2p_value;
    index_t v2p_writes;
    index_t* p2v;
    const index_t* p2v_index;
    const index_t* p2v_value;
    index_t p2v_writes;
};

// out[i] = the physical token of virtual token in[i] (the sink slot 0 for ids
// outside the table and unbound pages): page * page_stride + offset, where
// page_stride is page_size, or page_size times the pages' layers for dense ids.
template <class Out> struct Translation {
    const index_t* v2p;
    index_t virtual_pages;
    index_t page_size;
    const index_t* in;
    index_t tokens;
    Out* out;
    index_t page_stride;
};

// The id-following side of a pair: all null when there is none.
struct Follower {
    index_t* v2p;
    index_t* p2v;
    const index_t* physical_pages;
};

// Handout zeroing: every byte of each new page, and of the follower's new
// pages, set to zero in the alloc-bind launch. Physical page p of a side is
// bytes [p * page_bytes, (p + 1) * page_bytes); page_bytes 0: that side's
// pages are not zeroed.
struct PageZeroing {
    std::uint8_t* bytes;
    index_t page_bytes;
    index_t follower_page_bytes;
};

// The zeroing is cut into chunks of at most zero_chunk_bytes of one page: one
// block's work natively, one work item's portably. Chunk i of an allocation
// of `pages` new pages: the owner's pages' chunks first, then the follower's.
constexpr index_t zero_chunk_bytes = LaunchShape::zero_chunk_bytes; // tuning.hpp

KVPOOL_HOST_DEVICE inline index_t zero_chunks_per_page(index_t page_bytes) {
    return (page_bytes + zero_chunk_bytes - 1) / zero_chunk_bytes;
}

KVPOOL_HOST_DEVICE inline index_t zero_chunks(index_t pages, index_t page_bytes,
                                              index_t follower_page_bytes) {
    return pages * (zero_chunks_per_page(page_bytes) + zero_chunks_per_page(follower_page_bytes));
}

// Bytes [begin, end) of new page `page` (of the follower's pages when follower).
struct ZeroChunk {
    index_t page;
    bool follower;
    index_t begin;
    index_t end;
};

KVPOOL_HOST_DEVICE inline ZeroChunk zero_chunk_at(index_t pages, index_t page_bytes,
                                                  index_t follower_page_bytes, index_t i) {
    const index_t own_chunks = pages * zero_chunks_per_page(page_bytes);
    const bool follower = i >= own_chunks;
    const index_t bytes = follower ? follower_page_bytes : page_bytes;
    const index_t per_page = zero_chunks_per_page(bytes);
    const index_t j = follower ? i - own_chunks : i;
    const index_t begin = (j % per_page) * zero_chunk_bytes;
    const index_t end = begin + zero_chunk_bytes < bytes ? begin + zero_chunk_bytes : bytes;
    return {j / per_page, follower, begin, end};
}

// virtual_pages[k] <-> physical_pages[k] on both tables (and the follower's);
// with runs.count > 0, runs.at(k) instead, and the lists are not read.
struct NewPages {
    index_t* v2p;
    index_t* p2v;
    const index_t* virtual_pages;
    const index_t* physical_pages;
    index_t pages;
    index_t page_size;
    Follower follower;
    PageRuns runs;
    PageZeroing zeroing;
};

// out null: the pages are bound (and zeroed), no token ids emitted.
struct AllocTokens {
    NewPages pages;
    index_t* out;
};

struct AllocExtend {
    NewPages pages;
    const index_t* prefix_lens;
    const index_t* seq_lens;
    const index_t* out_start;
    const index_t* page_start;
    const index_t* last_loc;
    index_t batch;
    index_t* out;
};

struct AllocDecode {
    NewPages pages;
    const index_t* seq_lens;
    const index_t* page_start;
    const index_t* last_loc;
    index_t batch;
    index_t* out;
};

} // namespace native

// Launches on one vendor's stream; every launch is checked and a failure
// throws kvpool::Error(ErrorCode::device) with the runtime's message.
template <class Runtime> struct NativeKernels {
    using stream_type = typename Runtime::stream_type;

    static void move_pages(stream_type stream, const native::PageMoves& op);
    static void apply_table_writes(stream_type stream, const native::TableWrites& op);
    // Moves and table writes touch disjoint memory: one grid does both.
    static void apply_plan(stream_type stream, const native::PageMoves& moves,
                           const native::TableWrites& writes);
    static void translate_tokens(stream_type stream, const native::Translation<index_t>& op);
    static void translate_tokens(stream_type stream, const native::Translation<std::int32_t>& op);
    static void bind_pages_emit_tokens(stream_type stream, const native::AllocTokens& op);
    static void alloc_extend_bind(stream_type stream, const native::AllocExtend& op);
    static void alloc_decode_bind(stream_type stream, const native::AllocDecode& op);
};

} // namespace kvpool::kernels
