// KV pools: bad input is refused with an error that names the value.
#include "kv_pool_test_support.hpp"

#include <kvpool/storage/page_major_pools.hpp>
#include <kvpool/storage/per_layer_pools.hpp>

using namespace kvpool;
using namespace kvpool::test;

TEST_CASE("kv layout: bad input names the value", "[kv-layout]") {
    expect_error(ErrorCode::invalid_argument, "heads must be > 0, got 0", [] {
        MHAKVPool<Mem, u16>(MHAGeometry{2, 0, 8, 0, KVDtype::bf16}, 8);
    });
    expect_error(ErrorCode::invalid_argument,
                 "dtype bf16 is 2 bytes, but the storage element is 4 bytes", [] {
                     MHAKVPool<Mem, u32>(MHAGeometry{2, 1, 8, 0, KVDtype::bf16}, 8);
                 });
    expect_error(ErrorCode::invalid_argument, "temporal state dtype fp32 is 4 bytes",
                 [] { MambaStatePool<Mem, u16, u16>(mamba_geometry, 8); });
    expect_error(ErrorCode::invalid_argument, "num_slots must be > 0, got 0", [] {
        MLAKVPool<Mem, u16>(MLAGeometry{1, 8, 0, KVDtype::fp16}, 0);
    });

    // A side whose entry_bytes do not match the model geometry.
    const MHAGeometry g{2, 2, 8, 0, KVDtype::bf16}; // 128 bytes per token
    SubPoolSpec wrong = sub_pool_spec("full", g, 4, GrowDirection::up);
    wrong.entry_bytes = 120;
    Pool wrong_pool(PoolLayout(120 * 4 * 8, {wrong}));
    expect_error(ErrorCode::invalid_argument,
                 "side 'full' has entry_bytes 120, but the geometry needs 128",
                 [&] { PageMajorMHAPool<Mem, u16>(wrong_pool, "full", g); });
    Pool state_pool(PoolLayout(mamba_geometry.entry_bytes() * 4 * 8,
                               {sub_pool_spec("mamba", mamba_geometry, 4, GrowDirection::down)}));
    expect_error(ErrorCode::invalid_argument, "has page_size 4; state slots need page size 1",
                 [&] { PageMajorMambaPool<Mem, u16, u32>(state_pool, "mamba", mamba_geometry); });

    MHAKVPool<Mem, u16> pool(g, 16);
    const auto k = make_source<u16>(2, 2, 8, [](index_t, index_t, index_t) { return u16(1); });
    const auto loc = to_device({3, 4});
    expect_error(ErrorCode::out_of_range, "layer 2 is outside [0, 2)",
                 [&] { pool.set_kv_buffer(Space(), 2, loc, k, k); });
    expect_error(ErrorCode::invalid_argument, "k has 2 entries but loc has 3", [&] {
        pool.set_kv_buffer(Space(), 0, to_device({1, 2, 3}), k, k);
    });
    const auto k_wide =
        make_source<u16>(2, 2, 16, [](index_t, index_t, index_t) { return u16(1); });
    expect_error(ErrorCode::invalid_argument, "k extent 2 (head_dim) is 16, expected 8",
                 [&] { pool.set_kv_buffer(Space(), 0, loc, k_wide, k); });
    expect_error(ErrorCode::invalid_argument, "dst has 1 entries but src has 2", [&] {
        pool.move_kv_cache(Space(), to_device({1}), to_device({2, 3}));
    });

    // Out-of-range locations: the explicit check on every backend, every call on host backends.
    const auto outside = to_device({3, 16});
    expect_error(ErrorCode::out_of_range, "location 16 (entry 1) is outside the pool's 16 slots",
                 [&] { pool.check_locations(Space(), outside); });
    expect_error(ErrorCode::out_of_range, "location -1 (entry 0)",
                 [&] { pool.check_move(Space(), to_device({-1}), to_device({2})); });
    if (kk::host_execution<Space>) {
        expect_error(ErrorCode::out_of_range, "set_kv_buffer: location 16",
                     [&] { pool.set_kv_buffer(Space(), 0, outside, k, k); });
        expect_error(ErrorCode::out_of_range, "move_kv_cache: location 16", [&] {
            pool.move_kv_cache(Space(), outside, to_device({1, 2}));
        });
        MambaStatePool<Mem, u16, u32> state(mamba_geometry, 8);
        expect_error(ErrorCode::out_of_range, "clear_slots: location 8",
                     [&] { state.clear_slots(Space(), to_device({8})); });
        expect_error(ErrorCode::out_of_range,
                     "move_page_rows: page 4 (entry 0) is outside the pool's 4 pages of 4 tokens",
                     [&] { pool.move_page_rows(Space(), to_device({4}), to_device({1}), 4); });
    }
}
