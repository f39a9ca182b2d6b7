// Transfer descriptors (transfer_descriptors.hpp) and the two ends of a PD
// transfer: the layouts against the page-major pools' views, descriptors and
// run pairing on known tokens, bad input, then a sender and a receiver pool in
// one process with a host-side transfer engine, compaction on both ends while
// the copy is in flight, completion and cancellation. Randomised:
// pd_transfer_random_test.cpp.
#include "pd_transfer_support.hpp"
#include <kvpool/completion_token.hpp>
#include <kvpool/storage/page_major_pools.hpp>

#include <memory>

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::pd;

namespace {

index_t offset_in(const Pool& pool, const void* p) {
    return static_cast<index_t>(static_cast<const std::uint8_t*>(p) - pool.bytes().data());
}

SubPoolTransferLayout toy_layout(index_t page_size) {
    SubPoolTransferLayout l;
    l.name = "toy";
    l.page_size = page_size;
    l.page_bytes = 8 * page_size;
    l.layers = 2;
    l.layer_stride = 4 * page_size;
    l.first_page = 1;
    l.num_pages = 10;
    l.blocks = {{0, BlockKind::latent, 0, 4}, {1, BlockKind::latent, 4 * page_size, 4}};
    return l;
}

} // namespace

TEST_CASE("transfer layout: blocks sit where the page-major pools' views put them",
          "[pd-transfer]") {
    const index_t ps = 4;
    MLAGeometry mla;
    mla.layers = 3;
    mla.kv_lora_rank = 16;
    mla.qk_rope_head_dim = 4;
    Pool pool(PoolLayout(1 << 16, {sub_pool_spec("full", mha(), ps, GrowDirection::up),
                                   sub_pool_spec("mla", mla, ps, GrowDirection::floating),
                                   sub_pool_spec("mamba", mamba(), 1, GrowDirection::down)}));
    const PageMajorMHAPool<Pool::memory_space, std::uint16_t> kv(pool, "full", mha());
    const PageMajorMLAPool<Pool::memory_space, std::uint16_t> latent(pool, "mla", mla);
    const PageMajorMambaPool<Pool::memory_space, std::uint16_t, float> state(pool, "mamba",
                                                                             mamba());
    const auto full = transfer_layout(pool.layout().sub_pool("full"), mha());
    const auto m = transfer_layout(pool.layout().sub_pool("mla"), mla);
    const auto s = transfer_layout(pool.layout().sub_pool("mamba"), mamba());
    CHECK(full.blocks_per_layer() == 2);
    CHECK(m.blocks_per_layer() == 1);
    CHECK(s.blocks_per_layer() == 2);
    for (index_t l = 0; l < 3; ++l) {
        const auto k = kv.k_buffer(l), v = kv.v_buffer(l);
        CHECK(full.block(l, 0).offset_in_page == offset_in(pool, k.data()));
        CHECK(full.block(l, 1).offset_in_page == offset_in(pool, v.data()));
        CHECK(full.block(l, 0).row_bytes == static_cast<index_t>(2 * k.extent(2) * k.extent(3)));
        CHECK(full.block(l, 1).row_bytes == static_cast<index_t>(2 * v.extent(2) * v.extent(3)));
        CHECK(full.page_bytes == static_cast<index_t>(2 * k.stride(0)));
        CHECK(full.block(l, 0).row_bytes == static_cast<index_t>(2 * k.stride(1)));
        const auto row = latent.kv_buffer(l);
        CHECK(m.block(l, 0).offset_in_page == offset_in(pool, row.data()));
        CHECK(m.block(l, 0).row_bytes == static_cast<index_t>(2 * row.extent(3)));
        CHECK(m.page_bytes == static_cast<index_t>(2 * row.stride(0)));
    }
    for (index_t l = 0; l < 2; ++l) {
        const auto conv = state.conv_state(l);
        const auto temporal = state.temporal_state(l);
        CHECK(s.block(l, 0).offset_in_page == offset_in(pool, conv.data()));
        CHECK(s.block(l, 0).row_bytes == 6);
        CHECK(s.block(l, 1).offset_in_page == offset_in(pool, temporal.data()));
        CHECK(s.block(l, 1).row_bytes == 16);
        CHECK(s.page_bytes == static_cast<index_t>(4 * temporal.stride(0)));
    }
    // The same MHA page from offsets and row lengths (the C API's way in).
    const auto generic = transfer_layout(pool.layout().sub_pool("full"), 3, {0, ps * 16}, {16, 8});
    REQUIRE(generic.blocks.size() == full.blocks.size());
    for (std::size_t b = 0; b < full.blocks.size(); ++b)
        CHECK((generic.blocks[b].offset_in_page == full.blocks[b].offset_in_page &&
               generic.blocks[b].row_bytes == full.blocks[b].row_bytes));
    CHECK(generic.layer_stride == full.layer_stride);
    expect_error(ErrorCode::invalid_argument, "block 1 (offset 60, rows of 8 bytes) does not fit",
                 [&] {
                     transfer_layout(pool.layout().sub_pool("full"), 3, {0, 60}, {16, 8});
                 });
    expect_error(ErrorCode::invalid_argument, "block 1 (offset 8, rows of 8 bytes)", [&] {
        transfer_layout(pool.layout().sub_pool("full"), 3, {0, 8}, {16, 8});
    });
    // Views of pages of 2 over the side's pages of 4: each side page is two view pages.
    const auto halves = transfer_layout(pool.layout().sub_pool("full"), 3, {0, 2 * 16}, {16, 8}, 2);
    CHECK((halves.page_size == 2 && halves.page_bytes == full.page_bytes / 2 &&
           halves.first_page == 2 * full.first_page && halves.num_pages == 2 * full.num_pages));
    CHECK(describe_transfer(halves, {40, 41, 42, 43}).page_runs ==
          std::vector<ByteRun>{{10 * full.page_bytes, full.page_bytes}});
    expect_error(ErrorCode::invalid_argument, "a view page of 3 slots does not divide", [&] {
        transfer_layout(pool.layout().sub_pool("full"), 3, {0, 48}, {16, 8}, 3);
    });
    expect_error(ErrorCode::invalid_argument, "5 layers do not split a page in equal parts",
                 [&] { transfer_layout(pool.layout().sub_pool("full"), 5, {0}, {16}); });
    const auto registration = transfer_registration(pool, {full, m, s});
    CHECK(registration.base == reinterpret_cast<std::uintptr_t>(pool.bytes().data()));
    CHECK(registration.buffer_bytes == pool.total_bytes());
    CHECK(registration.sub_pools.size() == 3);
    expect_error(ErrorCode::invalid_argument, "sub-pool 'full' given twice", [&] {
        transfer_registration(pool, {full, full});
    });
    expect_error(ErrorCode::invalid_argument, "past the 1024-byte buffer",
                 [&] { transfer_registration(pool.bytes().data(), 1024, {full}); });
    CHECK(full.first_page == pool.layout().sub_pool("full").min_page_index);
    CHECK(s.num_pages == pool.layout().sub_pool("mamba").num_physical_pages);
    expect_error(ErrorCode::out_of_range, "block 0 of layer 3 outside 3 layers",
                 [&] { full.block(3, 0); });
    expect_error(ErrorCode::out_of_range, "block 2 of layer 0", [&] { full.block(0, 2); });
    // A geometry that is not the side's, and state slots on pages of 4.
    expect_error(ErrorCode::invalid_argument, "side 'full' has entry_bytes",
                 [&] { transfer_layout(pool.layout().sub_pool("full"), mla); });
    SubPoolSpec paged = sub_pool_spec("mamba", mamba(), 4, GrowDirection::down);
    const PoolLayout four(1 << 16, {sub_pool_spec("full", mha(), ps, GrowDirection::up), paged});
    expect_error(ErrorCode::invalid_argument, "state slots need page size 1",
                 [&] { transfer_layout(four.sub_pool("mamba"), mamba()); });
}

TEST_CASE("transfer descriptors: pages coalesce, slots run, layers expand, ends pair up",
          "[pd-transfer]") {
    const auto layout = toy_layout(4); // pages of 32 bytes: per layer 4 rows of 4 bytes
    // Pages 2 and 3 whole, then page 5's first two slots; page 7 slots 1..2.
    const std::vector<index_t> tokens{8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 29, 30};
    const auto d = describe_transfer(layout, tokens);
    CHECK(d.tokens == 12);
    CHECK(d.pages == 4);
    CHECK(d.page_runs == std::vector<ByteRun>{{64, 64}, {160, 32}, {224, 32}});
    REQUIRE(d.token_runs.size() == 3);
    CHECK((d.token_runs[0].first == 8 && d.token_runs[0].tokens == 8));
    CHECK((d.token_runs[1].first == 20 && d.token_runs[1].tokens == 2));
    CHECK((d.token_runs[2].first == 29 && d.token_runs[2].tokens == 2));
    // Layer 1's block: 16 bytes into each page, rows of 4; pages 2 and 3 are not adjacent there.
    CHECK(layer_runs(layout, d, 1, 0) ==
          std::vector<ByteRun>{{80, 16}, {112, 16}, {176, 8}, {244, 8}});
    // One layer of one block: consecutive pages are consecutive bytes.
    SubPoolTransferLayout single = layout;
    single.layers = 1;
    single.page_bytes = 16;
    single.blocks.resize(1);
    CHECK(layer_runs(single, describe_transfer(single, {8, 9, 10, 11, 12, 13}), 0, 0) ==
          std::vector<ByteRun>{{32, 24}});

    // A receiver with the same slots on other pages pairs page for page.
    const std::vector<index_t> there{36, 37, 38, 39, 4, 5, 6, 7, 24, 25, 33, 34};
    const auto r = describe_transfer(layout, there);
    const auto copies = pair_pages(d, r);
    REQUIRE(copies.size() == 4);
    CHECK((copies[0].src_offset == 64 && copies[0].dst_offset == 288 && copies[0].length == 32));
    CHECK((copies[1].src_offset == 96 && copies[1].dst_offset == 32 && copies[1].length == 32));
    CHECK((copies[2].src_offset == 160 && copies[2].dst_offset == 192 && copies[2].length == 32));
    CHECK((copies[3].src_offset == 224 && copies[3].dst_offset == 256 && copies[3].length == 32));
    // Tokens at other slots pair only layer by layer, split where either end's runs end.
    const auto shifted = describe_transfer(layout, {9, 10, 11, 12});
    const auto aligned = describe_transfer(layout, {16, 17, 18, 19});
    expect_error(ErrorCode::invalid_argument, "the tokens do not sit alike in their pages",
                 [&] { pair_pages(aligned, shifted); });
    const auto per_layer =
        pair_runs(layer_runs(layout, aligned, 0, 0), layer_runs(layout, shifted, 0, 0));
    REQUIRE(per_layer.size() == 2);
    CHECK((per_layer[0].src_offset == 128 && per_layer[0].dst_offset == 68 &&
           per_layer[0].length == 12));
    CHECK((per_layer[1].src_offset == 140 && per_layer[1].dst_offset == 96 &&
           per_layer[1].length == 4));
    expect_error(ErrorCode::invalid_argument, "the sender's runs hold 8 bytes, the receiver's 4",
                 [&] {
                     pair_runs({{0, 8}}, {{0, 4}});
                 });
    // The same slots, but one page against two, or a page shared at another place.
    expect_error(ErrorCode::invalid_argument, "the tokens do not sit alike in their pages", [&] {
        pair_pages(describe_transfer(layout, {8, 9, 11}), describe_transfer(layout, {8, 9, 15}));
    });
    expect_error(
        ErrorCode::invalid_argument,
        "their stretch 1 of a page holds slots [2, 3) on one end, [2, 3) on the other, on a "
        "page of its own on one end only",
        [&] {
            pair_pages(describe_transfer(layout, {8, 10, 20, 26}),
                       describe_transfer(layout, {8, 14, 20, 22}));
        });
    CHECK(describe_transfer(layout, std::vector<index_t>{}).page_runs.empty());
}

TEST_CASE("transfer descriptors: bad tokens are refused, naming the token", "[pd-transfer]") {
    const auto layout = toy_layout(4);
    const auto refused = [&](const std::vector<index_t>& tokens, const std::string& says) {
        expect_error(ErrorCode::invalid_argument, says, [&] { describe_transfer(layout, tokens); });
    };
    refused({8, 3}, "token 3 (position 1) lies in the padding sink");
    refused({40}, "outside the sub-pool's pages [4, 40)");
    refused({38, 39, 40, 41}, "token 40 (position 2) lies outside");
    refused({-1}, "outside");
    refused({8, 9, 9}, "token 9 (position 2) does not follow its predecessor");
    refused({9, 8}, "token 8 (position 1) does not follow");
    refused({8, 12, 9}, "physical page 2 holds tokens in two stretches apart");
    expect_error(ErrorCode::invalid_argument, "2 tokens at",
                 [&] { describe_transfer(layout, nullptr, 2); });
    const auto d = describe_transfer(layout, {8});
    SubPoolTransferLayout other = layout;
    other.name = "other";
    expect_error(ErrorCode::invalid_argument,
                 "a descriptor of sub-pool 'toy' with the layout of 'other'",
                 [&] { layer_runs(other, d, 0, 0); });
}

namespace {

struct Request {
    std::vector<index_t> tokens;
    index_t slot = 0;
};

Request prefill(End& end, int tag, index_t n) {
    auto [tokens, slot] = end.prefill(tag, n);
    REQUIRE(!tokens.empty());
    return {tokens, slot};
}

// The copies of one transfer, sender to receiver: whole pages, or layer by layer.
std::vector<CopyRun> copies_of(const End& a, bool whole_pages, const TransferDescriptor& src_full,
                               const TransferDescriptor& dst_full,
                               const TransferDescriptor& src_state,
                               const TransferDescriptor& dst_state) {
    auto full = whole_pages ? pair_pages(src_full, dst_full)
                            : layer_copies(a.full_layout, src_full, dst_full);
    const auto state = whole_pages ? pair_pages(src_state, dst_state)
                                   : layer_copies(a.state_layout, src_state, dst_state);
    full.insert(full.end(), state.begin(), state.end());
    return full;
}

} // namespace

TEST_CASE("pd transfer: a request crosses to another pool while both compact", "[pd-transfer]") {
    for (const index_t ps : {index_t(1), index_t(4)})
        for (const bool whole_pages : {true, false}) {
            INFO("page size " << ps << (whole_pages ? ", whole pages" : ", layer by layer"));
            End a(ps, 1 << 16), b(ps, 1 << 16);
            std::vector<Request> on_a;
            for (index_t k = 0; k < 5; ++k)
                on_a.push_back(prefill(a, 1, (k + 2) * 4));
            const Request theirs = prefill(b, 2, 8), kept = prefill(b, 2, 12);
            const Request& sent = on_a[2];
            // The transfer sends all but the last 3 tokens: the last page only in part.
            const std::vector<index_t> src(sent.tokens.begin(), sent.tokens.end() - 3);

            // Sender: gate and describe. Receiver: allocate, gate and describe.
            auto done = std::make_shared<ManualToken>();
            const auto src_full = gate_and_describe(a.full, a.full_layout, done, src);
            const auto src_state = gate_and_describe(a.state, a.state_layout, done, {sent.slot});
            const auto dst_alloc = b.full.alloc(Space(), static_cast<index_t>(sent.tokens.size()));
            const auto dst_slot_alloc = b.state.alloc(Space(), 1);
            REQUIRE((dst_alloc && dst_slot_alloc));
            const auto dst_all = to_host(*dst_alloc);
            const index_t dst_slot = to_host(*dst_slot_alloc)[0];
            const std::vector<index_t> dst(dst_all.begin(), dst_all.end() - 3);
            const auto dst_full = gate_and_describe(b.full, b.full_layout, done, dst);
            const auto dst_state = gate_and_describe(b.state, b.state_layout, done, {dst_slot});
            const auto copies = copies_of(a, whole_pages, src_full, dst_full, src_state, dst_state);
            const auto half = static_cast<std::ptrdiff_t>(copies.size() / 2);
            copy_runs(a, b, {copies.begin(), copies.begin() + half});

            // In flight: both ends free around the transfer and compact urgently.
            const auto src_where = host_physical_tokens(a.full, src);
            const auto dst_where = host_physical_tokens(b.full, dst);
            a.release(on_a[1].tokens, on_a[1].slot);
            a.release(on_a[3].tokens, on_a[3].slot);
            CHECK(a.full.flush(Space(), true) > 0); // the request above moved down
            CHECK(a.state.flush(Space(), true) > 0);
            b.release(theirs.tokens, theirs.slot);
            b.full.flush(Space(), true);
            const Request later = prefill(b, 2, 4);
            CHECK(host_physical_tokens(a.full, src) == src_where);
            CHECK(host_physical_tokens(b.full, dst) == dst_where);
            CHECK(a.check() == 0);
            CHECK(b.check() == 0);
            copy_runs(a, b, {copies.begin() + half, copies.end()});

            // Completion: the receiver publishes the request; the sender lets it go.
            done->complete();
            for (std::size_t i = 0; i < dst.size(); ++i)
                b.live_tokens[dst[i]] = {1, src[i]};
            b.live_slots[dst_slot] = {1, sent.slot};
            a.release(sent.tokens, sent.slot);
            b.release(kept.tokens, kept.slot);
            a.full.flush(Space(), true);
            CHECK(b.full.flush(Space(), true) > 0); // no longer gated: it moves down
            b.state.flush(Space(), true);
            CHECK(host_physical_tokens(b.full, dst) != dst_where);
            CHECK(b.live_tokens.size() == src.size() + later.tokens.size());
            CHECK(a.check() == 0);
            CHECK(b.check() == 0);
        }
}

TEST_CASE("pd transfer: a cancelled transfer leaves both pools as they were", "[pd-transfer]") {
    for (const index_t ps : {index_t(1), index_t(4)}) {
        INFO("page size " << ps);
        End a(ps, 1 << 16), b(ps, 1 << 16);
        const Request below = prefill(a, 1, 8), sent = prefill(a, 1, 12), above = prefill(a, 1, 4);
        const Request theirs = prefill(b, 2, 8);
        const index_t b_tokens = b.full.allocated_count(), b_slots = b.state.allocated_count();
        const index_t b_room = b.full.available_size();

        auto done = std::make_shared<ManualToken>();
        const auto src_full = gate_and_describe(a.full, a.full_layout, done, sent.tokens);
        const auto dst_alloc = b.full.alloc(Space(), 12);
        const auto dst_slot_alloc = b.state.alloc(Space(), 1);
        REQUIRE((dst_alloc && dst_slot_alloc));
        const auto dst = to_host(*dst_alloc);
        const index_t dst_slot = to_host(*dst_slot_alloc)[0];
        const auto dst_full = gate_and_describe(b.full, b.full_layout, done, dst);
        const auto copies = pair_pages(src_full, dst_full);
        copy_runs(a, b, {copies.begin(), copies.begin() + 1});
        a.release(below.tokens, below.slot);
        a.full.flush(Space(), true);

        // The engine gives up: it stops writing, the token fires, the receiver
        // frees what it allocated. Nothing of it is published.
        done->complete();
        b.full.free(Space(), dst);
        b.state.free(Space(), {dst_slot});
        b.full.flush(Space(), true);
        b.state.flush(Space(), true);
        CHECK(b.full.allocated_count() == b_tokens);
        CHECK(b.state.allocated_count() == b_slots);
        CHECK(b.full.available_size() == b_room);
        CHECK(b.full.core().gated_pages().empty());
        // The sender keeps its request, intact, and may send it again or move it.
        CHECK(a.full.core().gated_pages().empty());
        CHECK(a.live_tokens.count(sent.tokens.front()) == 1);
        a.full.flush(Space(), true);
        CHECK(a.check() == 0);
        CHECK(b.check() == 0);
        a.release(sent.tokens, sent.slot);
        a.release(above.tokens, above.slot);
        b.release(theirs.tokens, theirs.slot);
        CHECK(a.full.allocated_count() == 0);
        CHECK(a.check() == 0);
        CHECK(b.check() == 0);
    }
}

TEST_CASE("pd transfer: an end refuses ids it does not hold, gating nothing", "[pd-transfer]") {
    End a(4, 1 << 16);
    const Request r = prefill(a, 1, 8);
    auto done = std::make_shared<ManualToken>();
    expect_error(ErrorCode::invalid_argument, "token 400 (position 1) is not bound", [&] {
        gate_and_describe(a.full, a.full_layout, done, {r.tokens[0], 400});
    });
    expect_error(ErrorCode::invalid_argument, "layout of sub-pool 'mamba' given for side 'full'",
                 [&] { gate_and_describe(a.full, a.state_layout, done, r.tokens); });
    CHECK(a.full.core().gated_pages().empty());
    CHECK(a.check() == 0);
}
