#include <kvpool/error.hpp>
#include <kvpool/storage/transfer_descriptors.hpp>
#include <kvpool/storage/view_descriptors.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace kvpool {

namespace {

SubPoolTransferLayout layout_of(const SubPoolGeometry& side, const char* what, index_t entry_bytes,
                                index_t layers) {
    if (side.spec.entry_bytes != entry_bytes)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("transfer_layout: side '{}' has entry_bytes {}, the {} geometry "
                                "{}",
                                side.spec.name, side.spec.entry_bytes, what, entry_bytes));
    SubPoolTransferLayout layout;
    layout.name = side.spec.name;
    layout.page_size = side.page_size();
    layout.page_bytes = side.page_bytes;
    layout.layers = layers;
    layout.layer_stride = side.page_bytes / layers;
    layout.first_page = side.min_page_index;
    layout.num_pages = side.num_physical_pages;
    return layout;
}

// A layer's block of a page: where its view of page 0 starts, a row per token
// (the view's dim 1).
PageBlock block_of(index_t layer, BlockKind kind, const ViewDescriptor& view) {
    return {layer, kind, view.offset, view.strides[1] * dtype_size(view.dtype)};
}

[[noreturn]] void bad_token(const SubPoolTransferLayout& layout, index_t position, index_t token,
                            const std::string& why) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("describe_transfer: sub-pool '{}': physical token {} (position {}) {}",
                            layout.name, token, position, why));
}

// The described tokens page by page, in token order.
struct PageSegment {
    index_t page = -1;
    index_t slot = 0;
    index_t slots = 0;
};
class PageSegments {
public:
    PageSegments(const std::vector<TokenRun>& runs, index_t page_size)
        : runs_(runs), ps_(page_size) {}
    explicit PageSegments(const TransferDescriptor& d) : PageSegments(d.token_runs, d.page_size) {}
    bool next(PageSegment& out) {
        if (run_ == runs_.size())
            return false;
        const TokenRun& r = runs_[run_];
        const index_t t = r.first + done_;
        out.page = t / ps_;
        out.slot = t - out.page * ps_;
        out.slots = std::min(ps_ - out.slot, r.tokens - done_);
        done_ += out.slots;
        if (done_ == r.tokens) {
            ++run_;
            done_ = 0;
        }
        return true;
    }

private:
    const std::vector<TokenRun>& runs_;
    index_t ps_;
    std::size_t run_ = 0;
    index_t done_ = 0;
};

// Appends [offset, offset + length), merged into the last run where it continues it.
void append_run(std::vector<ByteRun>& runs, index_t offset, index_t length) {
    if (!runs.empty() && runs.back().offset + runs.back().length == offset)
        runs.back().length += length;
    else
        runs.push_back({offset, length});
}

} // namespace

const PageBlock& SubPoolTransferLayout::block(index_t layer, index_t block_in_layer) const {
    const index_t per_layer = blocks_per_layer();
    if (layer < 0 || layer >= layers || block_in_layer < 0 || block_in_layer >= per_layer)
        throw Error(ErrorCode::out_of_range,
                    fmt::format("sub-pool '{}': block {} of layer {} outside {} layers of {} "
                                "blocks",
                                name, block_in_layer, layer, layers, per_layer));
    return blocks[static_cast<std::size_t>(layer * per_layer + block_in_layer)];
}

SubPoolTransferLayout transfer_layout(const SubPoolGeometry& side, const MHAGeometry& geometry) {
    geometry.validate();
    SubPoolTransferLayout layout = layout_of(side, "MHA", geometry.entry_bytes(), geometry.layers);
    const auto views = mha_layer_views(geometry, {layout.page_size, 1, 0});
    for (index_t l = 0; l < geometry.layers; ++l) {
        layout.blocks.push_back(block_of(l, BlockKind::k, views[static_cast<std::size_t>(2 * l)]));
        layout.blocks.push_back(
            block_of(l, BlockKind::v, views[static_cast<std::size_t>(2 * l + 1)]));
    }
    return layout;
}

SubPoolTransferLayout transfer_layout(const SubPoolGeometry& side, const MLAGeometry& geometry) {
    geometry.validate();
    SubPoolTransferLayout layout = layout_of(side, "MLA", geometry.entry_bytes(), geometry.layers);
    const auto views = mla_layer_views(geometry, {layout.page_size, 1, 0});
    for (index_t l = 0; l < geometry.layers; ++l)
        layout.blocks.push_back(block_of(l, BlockKind::latent, views[static_cast<std::size_t>(l)]));
    return layout;
}

SubPoolTransferLayout transfer_layout(const SubPoolGeometry& side,
                                      const MambaStateGeometry& geometry) {
    geometry.validate();
    if (side.page_size() != 1)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("transfer_layout: side '{}' has page_size {}; state slots need "
                                "page size 1",
                                side.spec.name, side.page_size()));
    SubPoolTransferLayout layout =
        layout_of(side, "Mamba state", geometry.entry_bytes(), geometry.layers);
    for (index_t l = 0; l < geometry.layers; ++l) {
        const index_t at = l * layout.layer_stride;
        layout.blocks.push_back({l, BlockKind::conv, at, geometry.conv_row_bytes()});
        layout.blocks.push_back({l, BlockKind::temporal, at + geometry.conv_block_bytes(),
                                 geometry.temporal_row_bytes()});
    }
    return layout;
}

SubPoolTransferLayout transfer_layout(const SubPoolGeometry& side, index_t layers,
                                      const std::vector<index_t>& block_offsets,
                                      const std::vector<index_t>& row_bytes,
                                      index_t view_page_size) {
    const auto refuse = [&](const std::string& why) {
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("transfer_layout: side '{}' (pages of {} bytes, {} slots): {}",
                                side.spec.name, side.page_bytes, side.page_size(), why));
    };
    const index_t ps = view_page_size == 0 ? side.page_size() : view_page_size;
    if (ps <= 0 || side.page_size() % ps != 0)
        refuse(
            fmt::format("a view page of {} slots does not divide the side's page", view_page_size));
    const index_t views_per_page = side.page_size() / ps;
    const index_t page_bytes = side.page_bytes / views_per_page;
    if (layers <= 0 || page_bytes % layers != 0)
        refuse(fmt::format("{} layers do not split a page in equal parts", layers));
    if (block_offsets.empty() || block_offsets.size() != row_bytes.size())
        refuse(fmt::format("{} block offsets and {} row lengths", block_offsets.size(),
                           row_bytes.size()));
    SubPoolTransferLayout layout;
    layout.name = side.spec.name;
    layout.page_size = ps;
    layout.page_bytes = page_bytes;
    layout.layers = layers;
    layout.layer_stride = page_bytes / layers;
    layout.first_page = side.min_page_index * views_per_page;
    layout.num_pages = side.num_physical_pages * views_per_page;
    index_t free_from = 0;
    for (std::size_t b = 0; b < block_offsets.size(); ++b) {
        const index_t end = block_offsets[b] + layout.page_size * row_bytes[b];
        if (row_bytes[b] <= 0 || block_offsets[b] < free_from || end > layout.layer_stride)
            refuse(fmt::format("block {} (offset {}, rows of {} bytes) does not fit after the "
                               "blocks before it in a layer's {} bytes",
                               b, block_offsets[b], row_bytes[b], layout.layer_stride));
        free_from = end;
    }
    for (index_t l = 0; l < layers; ++l)
        for (std::size_t b = 0; b < block_offsets.size(); ++b)
            layout.blocks.push_back(
                {l, BlockKind::other, l * layout.layer_stride + block_offsets[b], row_bytes[b]});
    return layout;
}

TransferRegistration transfer_registration(const void* base, index_t buffer_bytes,
                                           std::vector<SubPoolTransferLayout> sub_pools) {
    for (std::size_t i = 0; i < sub_pools.size(); ++i) {
        const SubPoolTransferLayout& l = sub_pools[i];
        if (l.num_pages * l.page_bytes > buffer_bytes)
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("transfer_registration: sub-pool '{}' has {} pages of {} "
                                    "bytes, past the {}-byte buffer",
                                    l.name, l.num_pages, l.page_bytes, buffer_bytes));
        for (std::size_t j = 0; j < i; ++j)
            if (sub_pools[j].name == l.name)
                throw Error(
                    ErrorCode::invalid_argument,
                    fmt::format("transfer_registration: sub-pool '{}' given twice", l.name));
    }
    TransferRegistration r;
    r.base = reinterpret_cast<std::uintptr_t>(base);
    r.buffer_bytes = buffer_bytes;
    r.sub_pools = std::move(sub_pools);
    return r;
}

TransferDescriptor describe_transfer(const SubPoolTransferLayout& layout,
                                     const index_t* physical_tokens, index_t count) {
    if (count < 0 || (count > 0 && physical_tokens == nullptr))
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("describe_transfer: {} tokens at {}", count,
                                static_cast<const void*>(physical_tokens)));
    TransferDescriptor d;
    d.sub_pool = layout.name;
    d.page_size = layout.page_size;
    d.page_bytes = layout.page_bytes;
    d.tokens = count;
    const index_t ps = layout.page_size, pb = layout.page_bytes;
    const index_t lowest = layout.first_page * ps, end = layout.num_pages * ps;
    index_t i = 0, last_page = -1, last_token = -1;
    while (i < count) {
        // The run of consecutive tokens from here: a request's tokens mostly
        // are, so this compare is the whole per-token cost.
        const index_t t = physical_tokens[i];
        index_t n = 1;
        while (i + n < count && physical_tokens[i + n] == t + n)
            ++n;
        if (t < lowest || t + n - 1 >= end) {
            // The first token of the run out of bounds: its first, or the first past the end.
            const index_t at = t < lowest ? 0 : std::max<index_t>(0, end - t);
            const index_t token = t + at;
            bad_token(layout, i + at, token,
                      token >= 0 && token < lowest
                          ? "lies in the padding sink (an unbound id translates there)"
                          : fmt::format("lies outside the sub-pool's pages [{}, {})", lowest, end));
        }
        const index_t first_page = t / ps, run_last_page = (t + n - 1) / ps;
        // Within a page a request's tokens go forward; a run after a gap in
        // the same page must start past the previous one.
        if (first_page == last_page && t <= last_token)
            bad_token(layout, i, t, "does not follow its predecessor in its page");
        const index_t new_from = first_page == last_page ? first_page + 1 : first_page;
        if (new_from <= run_last_page) {
            d.pages += run_last_page - new_from + 1;
            append_run(d.page_runs, new_from * pb, (run_last_page - new_from + 1) * pb);
        }
        d.token_runs.push_back({t, n});
        last_page = run_last_page;
        last_token = t + n - 1;
        i += n;
    }
    // A page met again after other pages would be copied twice and could
    // land two tokens of a receiver in one place.
    std::vector<ByteRun> sorted = d.page_runs;
    std::sort(sorted.begin(), sorted.end(),
              [](const ByteRun& a, const ByteRun& b) { return a.offset < b.offset; });
    for (std::size_t k = 1; k < sorted.size(); ++k)
        if (sorted[k].offset < sorted[k - 1].offset + sorted[k - 1].length)
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("describe_transfer: sub-pool '{}': physical page {} holds "
                                    "tokens in two stretches apart (a repeated id, or tokens "
                                    "out of order)",
                                    layout.name, sorted[k].offset / pb));
    return d;
}

std::vector<ByteRun> layer_runs(const SubPoolTransferLayout& layout,
                                const TransferDescriptor& descriptor, index_t layer,
                                index_t block_in_layer) {
    if (descriptor.sub_pool != layout.name || descriptor.page_bytes != layout.page_bytes)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("layer_runs: a descriptor of sub-pool '{}' with the layout of '{}'",
                                descriptor.sub_pool, layout.name));
    const PageBlock& block = layout.block(layer, block_in_layer);
    std::vector<ByteRun> runs;
    runs.reserve(descriptor.token_runs.size());
    const index_t pb = layout.page_bytes, row = block.row_bytes;
    PageSegments segments(descriptor.token_runs, layout.page_size);
    for (PageSegment s; segments.next(s);)
        append_run(runs, s.page * pb + block.offset_in_page + s.slot * row, s.slots * row);
    return runs;
}

std::vector<CopyRun> pair_runs(const std::vector<ByteRun>& src, const std::vector<ByteRun>& dst) {
    index_t src_total = 0, dst_total = 0;
    for (const ByteRun& r : src)
        src_total += r.length;
    for (const ByteRun& r : dst)
        dst_total += r.length;
    if (src_total != dst_total)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("pair_runs: the sender's runs hold {} bytes, the receiver's {}",
                                src_total, dst_total));
    std::vector<CopyRun> copies;
    copies.reserve(std::max(src.size(), dst.size()));
    std::size_t a = 0, b = 0;
    index_t a_done = 0, b_done = 0; // bytes of src[a], dst[b] already paired
    while (a < src.size() && b < dst.size()) {
        const index_t n = std::min(src[a].length - a_done, dst[b].length - b_done);
        if (n > 0)
            copies.push_back({src[a].offset + a_done, dst[b].offset + b_done, n});
        a_done += n;
        b_done += n;
        if (a_done == src[a].length) {
            ++a;
            a_done = 0;
        }
        if (b_done == dst[b].length) {
            ++b;
            b_done = 0;
        }
    }
    return copies;
}

std::vector<CopyRun> pair_pages(const TransferDescriptor& src, const TransferDescriptor& dst) {
    const auto refuse = [&](const std::string& why) {
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("pair_pages: sender '{}' ({} tokens, {} pages of {} bytes) and "
                                "receiver '{}' ({} tokens, {} pages of {} bytes): {}",
                                src.sub_pool, src.tokens, src.pages, src.page_bytes, dst.sub_pool,
                                dst.tokens, dst.pages, dst.page_bytes, why));
    };
    if (src.page_bytes != dst.page_bytes || src.page_size != dst.page_size)
        refuse("the page layouts differ");
    if (src.tokens != dst.tokens || src.pages != dst.pages)
        refuse("the tokens do not sit alike in their pages");
    PageSegments a(src), b(dst);
    PageSegment sa, sb, prev_a, prev_b;
    for (index_t k = 0; a.next(sa); ++k) {
        b.next(sb);
        const bool a_same = k > 0 && sa.page == prev_a.page,
                   b_same = k > 0 && sb.page == prev_b.page;
        if (sa.slot != sb.slot || sa.slots != sb.slots || a_same != b_same)
            refuse(fmt::format("their stretch {} of a page holds slots [{}, {}) on one end, [{}, "
                               "{}) on the other{}",
                               k, sa.slot, sa.slot + sa.slots, sb.slot, sb.slot + sb.slots,
                               a_same != b_same ? ", on a page of its own on one end only" : ""));
        prev_a = sa;
        prev_b = sb;
    }
    return pair_runs(src.page_runs, dst.page_runs);
}

} // namespace kvpool
