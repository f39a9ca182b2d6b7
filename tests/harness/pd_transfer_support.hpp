// The two ends of a PD transfer in one process: each an engine's unified pool
// of full-attention KV (MHA, paged, growing up) and Mamba state slots (growing
// down), both lazy. Token bytes are stamped and checked through the existing
// page-major pools' views (page_major_pools.hpp), not through the transfer
// layout under test; the "transfer engine" copies (offset, length) runs
// between the ends' host images of their buffers.
#pragma once

#include "kv_pool_test_support.hpp"
#include <kvpool/storage/page_major_pools.hpp>
#include <kvpool/storage/transfer_descriptors.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvpool::test::pd {

inline MHAGeometry mha() {
    MHAGeometry g;
    g.layers = 3;
    g.heads = 2;
    g.head_dim = 4;
    g.v_head_dim = 2;
    g.dtype = KVDtype::bf16;
    return g;
}

// The conv rows (6 bytes) are padded to the temporal state's 4-byte elements:
// the padding is no row's and travels with whole pages only.
inline MambaStateGeometry mamba() {
    MambaStateGeometry g;
    g.layers = 2;
    g.conv_dim = 3;
    g.conv_width = 1;
    g.conv_dtype = KVDtype::bf16;
    g.heads = 1;
    g.head_dim = 2;
    g.state_dim = 2;
    g.temporal_dtype = KVDtype::fp32;
    return g;
}

// What the bytes of one token (or state slot) of a request are stamped with:
// the end and virtual id it was written under, so that a received token is
// checked against the sender's id.
struct StampKey {
    int tag = 0;
    index_t id = 0;
};

struct End {
    using Mha = PageMajorMHAPool<Pool::memory_space, std::uint16_t>;
    using Mamba = PageMajorMambaPool<Pool::memory_space, std::uint16_t, float>;

    Pool pool;
    Allocator full;
    Allocator state;
    Mha kv;
    Mamba slots;
    SubPoolTransferLayout full_layout;
    SubPoolTransferLayout state_layout;
    // Live tokens and slots of each side, with the stamp each must hold.
    std::map<index_t, StampKey> live_tokens;
    std::map<index_t, StampKey> live_slots;

    End(index_t page_size, index_t bytes)
        : pool(PoolLayout(bytes, {sub_pool_spec("full", mha(), page_size, GrowDirection::up),
                                  sub_pool_spec("mamba", mamba(), 1, GrowDirection::down)})),
          full(pool, "full", options(CompactionMode::lazy)),
          state(pool, "mamba", options(CompactionMode::lazy)), kv(pool, "full", mha()),
          slots(pool, "mamba", mamba()),
          full_layout(transfer_layout(pool.layout().sub_pool("full"), mha())),
          state_layout(transfer_layout(pool.layout().sub_pool("mamba"), mamba())) {
        full.bind_peer(state);
    }

    // Every row of a physical token of the full side, as the pool's views place it.
    std::vector<ByteRun> token_rows(index_t physical) const {
        const index_t ps = full.page_size(), page = physical / ps, slot = physical % ps;
        std::vector<ByteRun> rows;
        for (index_t l = 0; l < mha().layers; ++l)
            for (const auto& view : {kv.k_buffer(l), kv.v_buffer(l)})
                rows.push_back(
                    {offset_of(view.data()) + 2 * (page * static_cast<index_t>(view.stride(0)) +
                                                   slot * static_cast<index_t>(view.stride(1))),
                     static_cast<index_t>(2 * view.extent(2) * view.extent(3))});
        return rows;
    }
    // Every row of a physical state slot.
    std::vector<ByteRun> slot_rows(index_t physical) const {
        std::vector<ByteRun> rows;
        for (index_t l = 0; l < mamba().layers; ++l) {
            const auto conv = slots.conv_state(l);
            const auto temporal = slots.temporal_state(l);
            rows.push_back(
                {offset_of(conv.data()) + physical * static_cast<index_t>(conv.stride(0)) * 2,
                 static_cast<index_t>(2 * conv.extent(1) * conv.extent(2))});
            rows.push_back({offset_of(temporal.data()) +
                                physical * static_cast<index_t>(temporal.stride(0)) * 4,
                            static_cast<index_t>(4 * temporal.extent(1) * temporal.extent(2) *
                                                 temporal.extent(3))});
        }
        return rows;
    }

    // Allocates a request of n tokens and one state slot, stamped with this
    // end's tag; empty when there is no room.
    std::pair<std::vector<index_t>, index_t> prefill(int tag, index_t n) {
        const auto tokens = full.alloc(Space(), n);
        if (!tokens)
            return {};
        const auto slot = state.alloc(Space(), 1);
        if (!slot) {
            full.free(Space(), to_host(*tokens));
            return {};
        }
        std::pair<std::vector<index_t>, index_t> r{to_host(*tokens), to_host(*slot)[0]};
        std::vector<std::pair<std::vector<ByteRun>, StampKey>> writes;
        for (index_t t : r.first) {
            live_tokens[t] = {tag, t};
            writes.push_back({token_rows(full.core().translate_token(t)), {tag, t}});
        }
        live_slots[r.second] = {tag, r.second};
        writes.push_back({slot_rows(state.core().translate_token(r.second)), {tag, r.second}});
        auto& bytes = scratch.download(pool);
        for (const auto& [rows, key] : writes)
            for (std::size_t j = 0; j < rows.size(); ++j)
                for (index_t k = 0; k < rows[j].length; ++k)
                    bytes.data()[rows[j].offset + k] =
                        stamp_byte(key.tag, key.id, static_cast<index_t>(j) * 4096 + k);
        scratch.upload(pool);
        return r;
    }

    void release(const std::vector<index_t>& tokens, index_t slot) {
        full.free(Space(), tokens);
        state.free(Space(), {slot});
        for (index_t t : tokens)
            live_tokens.erase(t);
        live_slots.erase(slot);
    }

    // Invariants of both sides, then every live token and slot found intact
    // through translate; returns the bad ones (0 on success), the first reported.
    std::size_t check() {
        full.check_invariants();
        state.check_invariants();
        std::size_t bad = 0;
        const auto& bytes = scratch.download(pool);
        const auto check_rows = [&](const std::map<index_t, StampKey>& live, const Allocator& a,
                                    bool is_slot) {
            std::vector<index_t> ids;
            for (const auto& entry : live)
                ids.push_back(entry.first);
            if (ids.empty())
                return;
            const auto physical = to_host(a.translate(Space(), to_device(ids)));
            for (std::size_t i = 0; i < ids.size(); ++i) {
                const StampKey key = live.at(ids[i]);
                const auto rows = is_slot ? slot_rows(physical[i]) : token_rows(physical[i]);
                bool ok = physical[i] > 0;
                for (std::size_t j = 0; ok && j < rows.size(); ++j)
                    for (index_t k = 0; ok && k < rows[j].length; ++k)
                        ok = bytes.data()[rows[j].offset + k] ==
                             stamp_byte(key.tag, key.id, static_cast<index_t>(j) * 4096 + k);
                if (!ok && bad++ == 0)
                    UNSCOPED_INFO((is_slot ? "slot " : "token ")
                                  << ids[i] << " -> physical " << physical[i]
                                  << " does not hold the bytes of end " << key.tag << "'s id "
                                  << key.id);
            }
        };
        check_rows(live_tokens, full, false);
        check_rows(live_slots, state, true);
        return bad;
    }

    DataCheckScratch scratch;

private:
    index_t offset_of(const void* p) const {
        return static_cast<index_t>(static_cast<const std::uint8_t*>(p) - pool.bytes().data());
    }
};

// The transfer engine: copies runs from the sender's buffer to the receiver's,
// as an RDMA write would, through the ends' host images.
inline void copy_runs(End& src, End& dst, const std::vector<CopyRun>& runs) {
    if (runs.empty())
        return;
    const auto& from = src.scratch.download(src.pool);
    auto& to = dst.scratch.download(dst.pool);
    for (const CopyRun& r : runs)
        std::copy(from.data() + r.src_offset, from.data() + r.src_offset + r.length,
                  to.data() + r.dst_offset);
    dst.scratch.upload(dst.pool);
}

// The per-layer copies of two descriptors: every block of every layer.
inline std::vector<CopyRun> layer_copies(const SubPoolTransferLayout& layout,
                                         const TransferDescriptor& src,
                                         const TransferDescriptor& dst) {
    std::vector<CopyRun> all;
    for (index_t l = 0; l < layout.layers; ++l)
        for (index_t b = 0; b < layout.blocks_per_layer(); ++b) {
            const auto runs =
                pair_runs(layer_runs(layout, src, l, b), layer_runs(layout, dst, l, b));
            all.insert(all.end(), runs.begin(), runs.end());
        }
    return all;
}

} // namespace kvpool::test::pd
