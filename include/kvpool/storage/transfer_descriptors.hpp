// Transfer descriptors for disaggregated prefill (PD): which bytes of the
// registered unified buffer hold a set of tokens, per sub-pool and per layer,
// coalesced into (offset, length) runs, and the facts a transfer engine
// registers the buffer with. Host only: it reads physical token ids (a
// translate's results, or the host mirror through host_physical_tokens) and
// the page-major layout of page_major_pools.hpp. Moving nothing itself, it
// relies on the move gate to keep the pages where a descriptor says until the
// transfer's completion token fires (see gate_and_describe).
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/error.hpp>
#include <kvpool/storage/model_geometry.hpp>
#include <kvpool/storage/pool_layout.hpp>
#include <kvpool/types.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kvpool {

// Bytes [offset, offset + length) of the registered buffer.
struct ByteRun {
    index_t offset = 0;
    index_t length = 0;
    bool operator==(const ByteRun& o) const { return offset == o.offset && length == o.length; }
};

// One copy of a transfer: length bytes from the sender's buffer at src_offset
// to the receiver's at dst_offset.
struct CopyRun {
    index_t src_offset = 0;
    index_t dst_offset = 0;
    index_t length = 0;
};

// What one block of a page holds: per layer, MHA has K then V, MLA one latent
// block, Mamba state a conv then a temporal block; other layouts' blocks are
// described by their offsets and row lengths alone.
enum class BlockKind { k, v, latent, conv, temporal, other };

// A block of a page: page_size rows of row_bytes, one per slot, starting at
// offset_in_page (a Mamba page is one slot: one row).
struct PageBlock {
    index_t layer = 0;
    BlockKind kind = BlockKind::k;
    index_t offset_in_page = 0;
    index_t row_bytes = 0;
};

// A sub-pool's page as a transfer engine sees it. Physical page p lies at
// [p * page_bytes, (p + 1) * page_bytes) of the buffer; within it, layer l's
// blocks start at l * layer_stride. Layer l's block b of every page is then one
// strided region of the buffer: base + offset_in_page, page_size * row_bytes
// per page, page_bytes apart (the per-layer "pointer, item length, stride" of
// a per-layer registration).
struct SubPoolTransferLayout {
    std::string name;
    index_t page_size = 1;
    index_t page_bytes = 0;
    index_t layers = 0;
    index_t layer_stride = 0;
    // Pages a token may be on: [first_page, num_pages); those below overlap
    // the padding sink, where unbound ids translate.
    index_t first_page = 0;
    index_t num_pages = 0;
    std::vector<PageBlock> blocks; // layer 0's blocks in page order, then layer 1's, ...

    index_t blocks_per_layer() const { return static_cast<index_t>(blocks.size()) / layers; }
    // Throws out_of_range naming the sub-pool for a layer or block it lacks.
    const PageBlock& block(index_t layer, index_t block_in_layer) const;
};

// The page-major layouts of page_major_pools.hpp, checked against the side
// (its entry_bytes must be the geometry's; a Mamba side's page size 1).
SubPoolTransferLayout transfer_layout(const SubPoolGeometry& side, const MHAGeometry& geometry);
SubPoolTransferLayout transfer_layout(const SubPoolGeometry& side, const MLAGeometry& geometry);
SubPoolTransferLayout transfer_layout(const SubPoolGeometry& side,
                                      const MambaStateGeometry& geometry);
// Any page-major layout of layers equal parts of a page (layer_stride =
// page_bytes / layers), each part holding the same blocks: block b at
// block_offsets[b] bytes into the part, page_size rows of row_bytes[b]
// (BlockKind::other). Blocks must lie inside the part, in order, apart;
// otherwise invalid_argument naming the block (the C API's way in).
// view_page_size, when not 0, is the page of the views (a divisor of the
// side's page size): an allocator page of m view pages is then m pages here,
// each laid out as one (as the SGLang-compatible pools' views lay out a side
// whose allocators take larger pages).
SubPoolTransferLayout transfer_layout(const SubPoolGeometry& side, index_t layers,
                                      const std::vector<index_t>& block_offsets,
                                      const std::vector<index_t>& row_bytes,
                                      index_t view_page_size = 0);

// What a transfer engine registers: one memory region (NIXL, Mooncake: base,
// buffer_bytes) and, per sub-pool, the item length (a page) and the per-layer
// blocks and strides. Both ends must build their pools with the same specs.
struct TransferRegistration {
    std::uintptr_t base = 0;
    index_t buffer_bytes = 0;
    std::vector<SubPoolTransferLayout> sub_pools;
};

// The registration of a buffer of buffer_bytes at base holding these
// sub-pools. Throws invalid_argument for a sub-pool named twice or whose
// pages run past the buffer (a layout of another buffer).
TransferRegistration transfer_registration(const void* base, index_t buffer_bytes,
                                           std::vector<SubPoolTransferLayout> sub_pools);
// The same for a UnifiedKVPool (any memory space).
template <class Pool>
TransferRegistration transfer_registration(const Pool& pool,
                                           std::vector<SubPoolTransferLayout> sub_pools) {
    return transfer_registration(pool.bytes().data(), pool.total_bytes(), std::move(sub_pools));
}

// Consecutive physical tokens, in token order (across consecutive pages
// when a page fills up).
struct TokenRun {
    index_t first = 0;
    index_t tokens = 0;
};

// Where a set of tokens of one sub-pool lies. page_runs covers their pages
// whole (every layer), consecutive pages coalesced: what a page-major transfer
// sends, since a page holds all layers of its tokens and belongs to one
// request. token_runs holds the tokens themselves, from which layer_runs gives
// the byte runs of one layer's block. Both lists follow the tokens' order, so
// the sender's and the receiver's pair up by position (pair_pages, pair_runs).
struct TransferDescriptor {
    std::string sub_pool;
    index_t page_size = 1;
    index_t page_bytes = 0;
    index_t tokens = 0;
    index_t pages = 0;
    std::vector<ByteRun> page_runs;
    std::vector<TokenRun> token_runs;
};

// Describes physical tokens (translate's results) of a sub-pool. Throws
// invalid_argument, naming the token, for a token in the padding sink (an
// unbound id translates there) or past the last page, for a token whose page
// already appeared earlier in a different stretch of tokens, and for one not
// after its predecessor within a page: a request's tokens fill each page in
// order (a repeated id shows up so).
TransferDescriptor describe_transfer(const SubPoolTransferLayout& layout,
                                     const index_t* physical_tokens, index_t count);
inline TransferDescriptor describe_transfer(const SubPoolTransferLayout& layout,
                                            const std::vector<index_t>& physical_tokens) {
    return describe_transfer(layout, physical_tokens.data(),
                             static_cast<index_t>(physical_tokens.size()));
}

// Layer layer's block block_in_layer of the described tokens: one run per
// page of each token run (consecutive slots of a page are consecutive rows),
// runs that touch merged, in token order.
std::vector<ByteRun> layer_runs(const SubPoolTransferLayout& layout,
                                const TransferDescriptor& descriptor, index_t layer,
                                index_t block_in_layer);

// Pairs two run lists of the same total length position by position, split
// where either side's runs end. Throws invalid_argument when the totals differ.
std::vector<CopyRun> pair_runs(const std::vector<ByteRun>& src, const std::vector<ByteRun>& dst);
// The whole-page copies from the sender's descriptor to the receiver's. Both
// must describe the same number of tokens of one page layout, each token at
// the same slot of the same page position on both ends (token_runs agree), so
// that a page copied whole lands every layer of every token where the
// receiver's translate finds it; otherwise invalid_argument (then copy
// layer_runs through pair_runs instead).
std::vector<CopyRun> pair_pages(const TransferDescriptor& src, const TransferDescriptor& dst);

// The physical tokens of bound virtual ids, from a side's host mirror (no
// device read): Side is a MultiEndedAllocator. Throws invalid_argument for an
// id not bound on the side.
template <class Side>
std::vector<index_t> host_physical_tokens(const Side& side,
                                          const std::vector<index_t>& virtual_tokens) {
    std::vector<index_t> physical(virtual_tokens.size());
    const auto& core = side.core();
    const index_t ps = core.page_size();
    // Slots of the current virtual page after the previous token: the next
    // token of the same page needs no look-up (one per page, not per token).
    index_t left_in_page = 0;
    for (std::size_t i = 0; i < virtual_tokens.size(); ++i) {
        const index_t t = virtual_tokens[i];
        if (left_in_page > 0 && t == virtual_tokens[i - 1] + 1) {
            physical[i] = physical[i - 1] + 1;
            --left_in_page;
            continue;
        }
        if (!core.is_slot_allocated(t))
            throw Error(ErrorCode::invalid_argument,
                        "host_physical_tokens: token " + std::to_string(t) + " (position " +
                            std::to_string(i) + ") is not bound on side '" +
                            core.geometry().spec.name + "'");
        physical[i] = core.translate_token(t);
        left_in_page = ps - 1 - t % ps;
    }
    return physical;
}

// One end of a transfer over one side: describes the tokens' pages, then
// gates them until done completes, so the descriptor stays true while the
// engine copies (no compaction moves, overwrites or hands out those pages).
// The sender calls it on the tokens it sends; the receiver on the tokens it
// has just allocated for them. Describing first means a bad id changes
// nothing; the gate's own refusals change nothing either. A composite's ends
// gate through the composite (its gate_transfer checks every side first) and
// describe each sub-pool with describe_transfer(host_physical_tokens(...)).
// A layout of another sub-pool is refused (invalid_argument).
template <class Side>
TransferDescriptor gate_and_describe(Side& side, const SubPoolTransferLayout& layout,
                                     CompletionTokenPtr done,
                                     const std::vector<index_t>& virtual_tokens) {
    const SubPoolGeometry& g = side.geometry();
    if (layout.name != g.spec.name || g.page_size() % layout.page_size != 0 ||
        layout.page_bytes * (g.page_size() / layout.page_size) != g.page_bytes)
        throw Error(ErrorCode::invalid_argument, "gate_and_describe: layout of sub-pool '" +
                                                     layout.name + "' given for side '" +
                                                     g.spec.name + "'");
    TransferDescriptor descriptor =
        describe_transfer(layout, host_physical_tokens(side, virtual_tokens));
    side.gate_transfer(std::move(done), virtual_tokens);
    return descriptor;
}

} // namespace kvpool
