/* The state digests of tensor-parallel ranks through the C API from plain C, on
 * the host: two "ranks" of each composite (SWA pair, Mamba pair, tri-pool) and
 * their sides, built alike, agree after the same calls and disagree after one
 * call more on one of them; a NULL out is refused. Exits 0 on success, 1 with
 * a message otherwise. */
#include "c_test_check.h"

#include <kvpool/c_api_digest.h>

#include <stdint.h>

enum { PAGE = 2 };

static const kvpool_allocator_options lazy = {1, 0, 0, 0};

static int swa_pair(void) {
    const kvpool_sub_pool_spec specs[2] = {{"full", 24, PAGE, KVPOOL_GROW_UP, 0, 0.0},
                                           {"swa", 40, PAGE, KVPOOL_GROW_DOWN, 0, 0.0}};
    kvpool_unified_kv_pool* pool[2];
    kvpool_unified_swa_allocator* pair[2];
    kvpool_multi_ended_allocator* swa[2];
    uint64_t digest[2], side[2];
    int64_t ids[2][8];
    int ok = 0;
    for (int r = 0; r < 2; ++r) {
        CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 14, specs, 2, NULL, NULL,
                                               &pool[r]));
        CHECK(kvpool_unified_swa_allocator_create(pool[r], "full", "swa", &lazy, &lazy, &pair[r]));
        CHECK(kvpool_unified_swa_allocator_side(pair[r], 1, &swa[r]));
        CHECK(kvpool_unified_swa_allocator_alloc(pair[r], NULL, 8, ids[r], &ok));
        EXPECT(ok);
        CHECK(kvpool_unified_swa_allocator_free_swa(pair[r], NULL, ids[r], PAGE));
        CHECK(kvpool_unified_swa_allocator_state_digest(pair[r], &digest[r]));
        CHECK(kvpool_multi_ended_allocator_state_digest(swa[r], &side[r]));
    }
    EXPECT(digest[0] == digest[1] && side[0] == side[1]);
    /* One call more on rank 1: both its SWA side and the pair differ. */
    CHECK(kvpool_unified_swa_allocator_free_swa(pair[1], NULL, ids[1] + PAGE, PAGE));
    CHECK(kvpool_unified_swa_allocator_state_digest(pair[1], &digest[1]));
    CHECK(kvpool_multi_ended_allocator_state_digest(swa[1], &side[1]));
    EXPECT(digest[0] != digest[1] && side[0] != side[1]);
    EXPECT(kvpool_unified_swa_allocator_state_digest(pair[0], NULL) ==
           KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(kvpool_multi_ended_allocator_state_digest(NULL, &side[0]) ==
           KVPOOL_ERROR_INVALID_ARGUMENT);
    for (int r = 0; r < 2; ++r) {
        kvpool_multi_ended_allocator_destroy(swa[r]);
        kvpool_unified_swa_allocator_destroy(pair[r]);
        kvpool_unified_kv_pool_destroy(pool[r]);
    }
    return 0;
}

static int mamba_pair(void) {
    const kvpool_sub_pool_spec specs[2] = {{"full", 24, PAGE, KVPOOL_GROW_DOWN, 0, 0.0},
                                           {"mamba", 256, 1, KVPOOL_GROW_UP, 0, 0.0}};
    kvpool_unified_kv_pool* pool[2];
    kvpool_unified_mamba_allocator* pair[2];
    uint64_t digest[2];
    int64_t slots[2][2];
    int ok = 0;
    for (int r = 0; r < 2; ++r) {
        CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 14, specs, 2, NULL, NULL,
                                               &pool[r]));
        CHECK(kvpool_unified_mamba_allocator_create(pool[r], "full", "mamba", &lazy, &lazy,
                                                    &pair[r]));
        CHECK(kvpool_unified_mamba_allocator_alloc_state_slots(pair[r], NULL, 1, slots[r], &ok));
        EXPECT(ok);
        CHECK(kvpool_unified_mamba_allocator_state_digest(pair[r], &digest[r]));
    }
    EXPECT(digest[0] == digest[1]);
    CHECK(kvpool_unified_mamba_allocator_alloc_state_slots(pair[1], NULL, 1, slots[1] + 1, &ok));
    EXPECT(ok);
    CHECK(kvpool_unified_mamba_allocator_state_digest(pair[1], &digest[1]));
    EXPECT(digest[0] != digest[1]);
    for (int r = 0; r < 2; ++r) {
        kvpool_unified_mamba_allocator_destroy(pair[r]);
        kvpool_unified_kv_pool_destroy(pool[r]);
    }
    return 0;
}

static int tri_pool(void) {
    const kvpool_sub_pool_spec specs[3] = {{"mamba", 256, 1, KVPOOL_GROW_UP, 0, 0.0},
                                           {"swa", 16, PAGE, KVPOOL_GROW_FLOATING, 0, 0.5},
                                           {"full", 32, PAGE, KVPOOL_GROW_DOWN, 0, 0.0}};
    kvpool_unified_kv_pool* pool[2];
    kvpool_unified_mamba_swa_allocator* tri[2];
    uint64_t digest[2];
    int64_t ids[2][4];
    int ok = 0;
    for (int r = 0; r < 2; ++r) {
        CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, specs, 3, NULL, NULL,
                                               &pool[r]));
        CHECK(kvpool_unified_mamba_swa_allocator_create(pool[r], "full", "swa", "mamba", &lazy,
                                                        &lazy, &lazy, &tri[r]));
        CHECK(kvpool_unified_mamba_swa_allocator_alloc(tri[r], NULL, 4, ids[r], &ok));
        EXPECT(ok);
        CHECK(kvpool_unified_mamba_swa_allocator_state_digest(tri[r], &digest[r]));
    }
    EXPECT(digest[0] == digest[1]);
    CHECK(kvpool_unified_mamba_swa_allocator_free(tri[1], NULL, ids[1], 4));
    CHECK(kvpool_unified_mamba_swa_allocator_state_digest(tri[1], &digest[1]));
    EXPECT(digest[0] != digest[1]);
    for (int r = 0; r < 2; ++r) {
        kvpool_unified_mamba_swa_allocator_destroy(tri[r]);
        kvpool_unified_kv_pool_destroy(pool[r]);
    }
    return 0;
}

int main(void) {
    if (swa_pair() || mamba_pair() || tri_pool())
        return 1;
    EXPECT(kvpool_live_handles() == 0);
    return 0;
}
