// C API: PD transfer descriptors (kvpool/storage/transfer_descriptors.hpp) over a
// side: describe and gate, the run lists, and the pairing of two ends.
#include "handles.hpp"

#include <kvpool/storage/transfer_descriptors.hpp>

#include <algorithm>

using namespace kvpool::capi;
using kvpool::index_t;

// Host data only: no Kokkos object, so no live handle either.
struct kvpool_transfer_descriptor {
    kvpool::SubPoolTransferLayout layout;
    kvpool::TransferDescriptor descriptor;
};

namespace {

kvpool::SubPoolTransferLayout layout_of(const kvpool::SubPoolGeometry& side,
                                        const kvpool_sub_pool_transfer_layout* layout) {
    require(layout != nullptr, "kvpool_transfer_describe: layout is NULL");
    require(layout->blocks_per_layer > 0,
            "kvpool_transfer_describe: blocks_per_layer must be > 0, got " +
                std::to_string(layout->blocks_per_layer));
    const std::vector<index_t> offsets =
        host_ids(layout->block_offsets_host, layout->blocks_per_layer);
    const std::vector<index_t> rows = host_ids(layout->row_bytes_host, layout->blocks_per_layer);
    return kvpool::transfer_layout(side, layout->layers, offsets, rows, layout->view_page_size);
}

// Copies min(capacity, size) items of list into out, sets *count to the size.
template <class Out, class In>
void copy_out(const std::vector<In>& list, Out* out, std::int64_t capacity, std::int64_t* count,
              const char* call) {
    require(count != nullptr, std::string(call) + ": count is NULL");
    require(capacity >= 0 && (capacity == 0 || out != nullptr), std::string(call) + ": capacity " +
                                                                    std::to_string(capacity) +
                                                                    " needs an output array");
    const std::size_t n = std::min(list.size(), static_cast<std::size_t>(capacity));
    for (std::size_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<In, kvpool::ByteRun>)
            out[i] = {list[i].offset, list[i].length};
        else
            out[i] = {list[i].src_offset, list[i].dst_offset, list[i].length};
    }
    *count = static_cast<std::int64_t>(list.size());
}

// A caller's run list, refused naming the first run that is not a run.
std::vector<kvpool::ByteRun> run_list(const kvpool_byte_run* runs, std::int64_t count,
                                      const char* which) {
    const std::string call = std::string("kvpool_transfer_pair_runs: ") + which;
    require_host_runs(runs, count, call);
    std::vector<kvpool::ByteRun> list(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
        require(runs[i].offset >= 0 && runs[i].length > 0,
                call + " run " + std::to_string(i) + " (offset " + std::to_string(runs[i].offset) +
                    ", length " + std::to_string(runs[i].length) +
                    ") needs offset >= 0 and length > 0");
        list[static_cast<std::size_t>(i)] = {runs[i].offset, runs[i].length};
    }
    return list;
}

} // namespace

extern "C" {

kvpool_status kvpool_transfer_describe(kvpool_multi_ended_allocator* a,
                                       const kvpool_sub_pool_transfer_layout* layout,
                                       const kvpool_completion_token* token,
                                       const int64_t* virtual_tokens_host, int64_t count,
                                       kvpool_transfer_descriptor** out) {
    return on(a, "allocator", [&](auto& ref) {
        require(out != nullptr, "kvpool_transfer_describe: out is NULL");
        auto& side = *ref.side;
        auto t = std::make_unique<kvpool_transfer_descriptor>();
        t->layout = layout_of(side.geometry(), layout);
        const std::vector<index_t> tokens = host_ids(virtual_tokens_host, count);
        if (token != nullptr)
            t->descriptor = kvpool::gate_and_describe(side, t->layout, token->token, tokens);
        else
            t->descriptor =
                kvpool::describe_transfer(t->layout, kvpool::host_physical_tokens(side, tokens));
        *out = t.release();
    });
}

void kvpool_transfer_destroy(kvpool_transfer_descriptor* t) {
    delete t;
}

kvpool_status kvpool_transfer_get_info(const kvpool_transfer_descriptor* t,
                                       kvpool_transfer_info* out) {
    return guarded([&] {
        const kvpool_transfer_descriptor& transfer = deref(t, "transfer");
        require(out != nullptr, "kvpool_transfer_get_info: out is NULL");
        const auto& d = transfer.descriptor;
        const auto& l = transfer.layout;
        *out = {d.tokens,
                d.pages,
                static_cast<int64_t>(d.page_runs.size()),
                static_cast<int64_t>(d.token_runs.size()),
                l.page_size,
                l.page_bytes,
                l.layers,
                l.layer_stride,
                l.blocks_per_layer()};
    });
}

kvpool_status kvpool_transfer_page_runs(const kvpool_transfer_descriptor* t,
                                        kvpool_byte_run* out_host, int64_t capacity,
                                        int64_t* count) {
    return guarded([&] {
        copy_out(deref(t, "transfer").descriptor.page_runs, out_host, capacity, count,
                 "kvpool_transfer_page_runs");
    });
}

kvpool_status kvpool_transfer_layer_runs(const kvpool_transfer_descriptor* t, int64_t layer,
                                         int64_t block, kvpool_byte_run* out_host, int64_t capacity,
                                         int64_t* count) {
    return guarded([&] {
        const kvpool_transfer_descriptor& transfer = deref(t, "transfer");
        copy_out(kvpool::layer_runs(transfer.layout, transfer.descriptor, layer, block), out_host,
                 capacity, count, "kvpool_transfer_layer_runs");
    });
}

kvpool_status kvpool_transfer_pair_pages(const kvpool_transfer_descriptor* src,
                                         const kvpool_transfer_descriptor* dst,
                                         kvpool_copy_run* out_host, int64_t capacity,
                                         int64_t* count) {
    return guarded([&] {
        copy_out(kvpool::pair_pages(deref(src, "src").descriptor, deref(dst, "dst").descriptor),
                 out_host, capacity, count, "kvpool_transfer_pair_pages");
    });
}

kvpool_status kvpool_transfer_pair_layer(const kvpool_transfer_descriptor* src,
                                         const kvpool_transfer_descriptor* dst, int64_t layer,
                                         int64_t block, kvpool_copy_run* out_host, int64_t capacity,
                                         int64_t* count) {
    return guarded([&] {
        const kvpool_transfer_descriptor &s = deref(src, "src"), &d = deref(dst, "dst");
        copy_out(kvpool::pair_runs(kvpool::layer_runs(s.layout, s.descriptor, layer, block),
                                   kvpool::layer_runs(d.layout, d.descriptor, layer, block)),
                 out_host, capacity, count, "kvpool_transfer_pair_layer");
    });
}

kvpool_status kvpool_transfer_pair_runs(const kvpool_byte_run* src_host, int64_t src_count,
                                        const kvpool_byte_run* dst_host, int64_t dst_count,
                                        kvpool_copy_run* out_host, int64_t capacity,
                                        int64_t* count) {
    return guarded([&] {
        copy_out(kvpool::pair_runs(run_list(src_host, src_count, "src"),
                                   run_list(dst_host, dst_count, "dst")),
                 out_host, capacity, count, "kvpool_transfer_pair_runs");
    });
}

} // extern "C"
