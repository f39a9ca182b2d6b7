/* The C API from plain C (no Kokkos headers, no C++): the devices a build
 * serves, then a SWA pair on the host (every build serves it, a GPU build
 * beside the GPU), its sides with their own options (the pair sets the id
 * roles), allocated, translated, freed twice (the second is refused and
 * changes nothing), rolled back by a pair-level backup window, checked. Exits
 * 0 on success, 1 with a message otherwise. */
#include "c_test_check.h"

#include <stdio.h>
#include <string.h>

/* Which devices the build serves; a device it does not serve, or no device,
 * is a clear error that makes nothing. The calls without _on make GPU pools in
 * a GPU build and host pools in a host build; a host request table's rows are
 * host memory in every build, and sides of two pools are no peers. */
static int devices(void) {
    const int gpu = strcmp(kvpool_backend(), "host") != 0;
    if (kvpool_serves(KVPOOL_DEVICE_HOST) != 1 || kvpool_serves(KVPOOL_DEVICE_GPU) != gpu ||
        kvpool_serves(7) != 0)
        return fail("kvpool_serves");
    kvpool_sub_pool_spec specs[2] = {{"full", 64, 4, KVPOOL_GROW_UP, 0, 0.0},
                                     {"swa", 64, 4, KVPOOL_GROW_DOWN, 0, 0.0}};
    kvpool_unified_kv_pool* pool = NULL;
    kvpool_req_to_token_pool* table = NULL;
    if (kvpool_unified_kv_pool_create_on(7, 1 << 16, specs, 2, NULL, NULL, &pool) !=
            KVPOOL_ERROR_INVALID_ARGUMENT ||
        pool != NULL ||
        strstr(kvpool_last_error(), "neither KVPOOL_DEVICE_HOST (0) nor KVPOOL_DEVICE_GPU (1)") ==
            NULL)
        return fail("an unknown device was not refused");
    if (!gpu) {
        if (kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_GPU, 1 << 16, specs, 2, NULL, NULL,
                                             &pool) != KVPOOL_ERROR_INVALID_ARGUMENT ||
            pool != NULL || strstr(kvpool_last_error(), "built for the host only") == NULL)
            return fail("a GPU pool from a host build was not refused");
        if (kvpool_req_to_token_pool_create_on(KVPOOL_DEVICE_GPU, 4, 8, NULL, &table) !=
                KVPOOL_ERROR_INVALID_ARGUMENT ||
            table != NULL)
            return fail("a GPU request table from a host build was not refused");
        if (kvpool_live_handles() != 0)
            return fail("a refused device made a handle");
    }

    int device = -1;
    kvpool_unified_kv_pool* host = NULL;
    CHECK(kvpool_unified_kv_pool_create(1 << 16, specs, 2, NULL, NULL, &pool));
    CHECK(kvpool_unified_kv_pool_device(pool, &device));
    if (device != (gpu ? KVPOOL_DEVICE_GPU : KVPOOL_DEVICE_HOST))
        return fail("the default device");
    CHECK(
        kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, specs, 2, NULL, NULL, &host));
    CHECK(kvpool_unified_kv_pool_device(host, &device));
    if (device != KVPOOL_DEVICE_HOST)
        return fail("a host pool's device");
    kvpool_multi_ended_allocator* up = NULL;
    kvpool_multi_ended_allocator* down = NULL;
    CHECK(kvpool_multi_ended_allocator_create(host, "full", NULL, NULL, &up));
    CHECK(kvpool_multi_ended_allocator_create(pool, "swa", NULL, NULL, &down));
    if (kvpool_multi_ended_allocator_bind_peer(up, down) != KVPOOL_ERROR_INVALID_ARGUMENT ||
        strstr(kvpool_last_error(), "the other side of the same unified buffer") == NULL ||
        (gpu && strstr(kvpool_last_error(), "on another device") == NULL))
        return fail("sides of two pools were bound");
    /* Host memory a GPU side's kernels would write is refused before any work
     * (a kernel writing there would poison the whole context). */
    if (gpu) {
        kvpool_allocator_state before, after;
        int64_t host_out[4];
        int allocated = -1;
        CHECK(kvpool_multi_ended_allocator_state(down, &before));
        if (kvpool_multi_ended_allocator_alloc(down, NULL, 4, host_out, &allocated) !=
                KVPOOL_ERROR_INVALID_ARGUMENT ||
            allocated != -1 ||
            strstr(kvpool_last_error(), "host memory the GPU cannot reach") == NULL)
            return fail("host memory given to a GPU side was not refused");
        /* So is it through a KV handle whose caller has stopped checking memory itself. */
        kvpool_kv_allocator* kv = NULL;
        CHECK(kvpool_multi_ended_allocator_kv(down, &kv));
        CHECK(kvpool_kv_set_caller_checks_memory(kv, 1));
        CHECK(kvpool_kv_set_caller_checks_memory(kv, 0));
        if (kvpool_kv_alloc(kv, NULL, 4, host_out, &allocated) != KVPOOL_ERROR_INVALID_ARGUMENT ||
            allocated != -1 ||
            strstr(kvpool_last_error(), "host memory the GPU cannot reach") == NULL)
            return fail("host memory given to a GPU side's KV handle was not refused");
        kvpool_kv_destroy(kv);
        CHECK(kvpool_multi_ended_allocator_state(down, &after));
        CHECK(kvpool_multi_ended_allocator_check_invariants(down, NULL));
        if (after.allocated_count != before.allocated_count ||
            after.available_size != before.available_size)
            return fail("a refused host array changed the GPU side");
    }

    CHECK(kvpool_req_to_token_pool_create_on(KVPOOL_DEVICE_HOST, 4, 8, NULL, &table));
    int64_t slot = -1;
    int allocated = 0;
    CHECK(kvpool_req_to_token_pool_alloc(table, 1, &slot, &allocated));
    const int64_t ids[3] = {5, 6, 7};
    CHECK(kvpool_req_to_token_pool_write(table, NULL, slot, 2, ids, 3));
    int64_t* rows = NULL;
    int64_t num_rows = 0, columns = 0;
    CHECK(kvpool_req_to_token_pool_table(table, &rows, &num_rows, &columns));
    if (!allocated || num_rows != 5 || columns != 8 || rows[slot * 8 + 1] != 0 ||
        rows[slot * 8 + 2] != 5 || rows[slot * 8 + 4] != 7 || rows[slot * 8 + 5] != 0)
        return fail("a host request table's rows, read from the host");

    kvpool_req_to_token_pool_destroy(table);
    kvpool_multi_ended_allocator_destroy(down);
    kvpool_multi_ended_allocator_destroy(up);
    kvpool_unified_kv_pool_destroy(host);
    kvpool_unified_kv_pool_destroy(pool);
    if (kvpool_live_handles() != 0)
        return fail("handles left after the devices");
    return 0;
}

/* The sub-pools of the SWA pair tests: full 64 bytes a token, SWA 96, page size 4. */
static const kvpool_sub_pool_spec swa_specs[2] = {{"full", 64, 4, KVPOOL_GROW_UP, 0, 0.0},
                                                  {"swa", 96, 4, KVPOOL_GROW_DOWN, 0, 0.0}};

/* The SWA pair of the tests below over a 64 KiB host pool of swa_specs, and
 * its two sides; NULL options: the defaults. */
static int open_swa_pair(const kvpool_allocator_options* full_options,
                         const kvpool_allocator_options* swa_options, kvpool_unified_kv_pool** pool,
                         kvpool_unified_swa_allocator** pair, kvpool_multi_ended_allocator** full,
                         kvpool_multi_ended_allocator** swa) {
    CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, swa_specs, 2, NULL, NULL,
                                           pool));
    CHECK(
        kvpool_unified_swa_allocator_create(*pool, "full", "swa", full_options, swa_options, pair));
    CHECK(kvpool_unified_swa_allocator_side(*pair, 0, full));
    CHECK(kvpool_unified_swa_allocator_side(*pair, 1, swa));
    return 0;
}

static int swa_pair(void) {
    kvpool_unified_kv_pool* pool = NULL;
    kvpool_unified_swa_allocator* pair = NULL;
    kvpool_multi_ended_allocator* full = NULL;
    kvpool_multi_ended_allocator* swa = NULL;
    /* is_id_owner 0 on the full side: the pair makes it the owner all the same. */
    const kvpool_allocator_options full_options = {1, 0, 7};
    if (open_swa_pair(&full_options, NULL, &pool, &pair, &full, &swa))
        return 1;
    kvpool_allocator_info full_info, swa_info;
    CHECK(kvpool_multi_ended_allocator_info(full, &full_info));
    CHECK(kvpool_multi_ended_allocator_info(swa, &swa_info));
    if (!full_info.lazy || full_info.max_moves_per_flush != 7 || !full_info.is_id_owner)
        return fail("the full side's options");
    if (swa_info.lazy || swa_info.max_moves_per_flush != 4096 || swa_info.is_id_owner)
        return fail("the SWA side's default options");

    kvpool_swa_sizes before;
    CHECK(kvpool_unified_swa_allocator_sizes(pair, &before));
    int64_t ids[8], physical[8];
    int allocated = 0;
    CHECK(kvpool_unified_swa_allocator_alloc(pair, NULL, 8, ids, &allocated));
    if (!allocated)
        return fail("alloc of 8 tokens found no room");
    CHECK(kvpool_multi_ended_allocator_translate(full, NULL, ids, 8, physical, 0));
    for (int i = 0; i < 8; ++i)
        if (physical[i] <= 0 || physical[i] % 4 != ids[i] % 4)
            return fail("translate");

    CHECK(kvpool_unified_swa_allocator_free(pair, NULL, ids, 8));
    if (kvpool_unified_swa_allocator_free(pair, NULL, ids, 8) != KVPOOL_ERROR_NOT_ALLOCATED)
        return fail("a double free was not refused");
    if (strstr(kvpool_last_error(), "not allocated") == NULL)
        return fail("the message");
    kvpool_swa_sizes after;
    CHECK(kvpool_unified_swa_allocator_sizes(pair, &after));
    if (after.available_size != before.available_size)
        return fail("sizes after freeing all");
    if (kvpool_unified_swa_allocator_alloc(pair, NULL, 3, ids, &allocated) !=
        KVPOOL_ERROR_MISALIGNED)
        return fail("an unaligned alloc was not refused");

    /* A backup window over both sides: the allocation inside it is undone on
     * both, a free inside it is refused, and the spent snapshot afterwards. */
    kvpool_pair_snapshot* snapshot = NULL;
    CHECK(kvpool_unified_swa_allocator_backup_state(pair, &snapshot));
    CHECK(kvpool_unified_swa_allocator_alloc(pair, NULL, 8, ids, &allocated));
    if (!allocated)
        return fail("alloc inside a backup window found no room");
    if (kvpool_unified_swa_allocator_free(pair, NULL, ids, 8) != KVPOOL_ERROR_INVALID_STATE)
        return fail("a free inside a backup window was not refused");
    CHECK(kvpool_unified_swa_allocator_restore_state(pair, NULL, snapshot));
    CHECK(kvpool_unified_swa_allocator_sizes(pair, &after));
    if (after.available_size != before.available_size)
        return fail("sizes after restore_state");
    if (kvpool_unified_swa_allocator_restore_state(pair, NULL, snapshot) !=
        KVPOOL_ERROR_INVALID_STATE)
        return fail("a spent snapshot was not refused");
    kvpool_pair_snapshot_destroy(snapshot);
    CHECK(kvpool_multi_ended_allocator_check_invariants(full, NULL));
    CHECK(kvpool_multi_ended_allocator_check_invariants(swa, NULL));

    /* SGLang pairs two allocators with a.bind_peer(b); b.bind_peer(a): the
     * pair's sides are bound already, so both calls change nothing. */
    CHECK(kvpool_multi_ended_allocator_bind_peer(full, swa));
    CHECK(kvpool_multi_ended_allocator_bind_peer(swa, full));
    CHECK(kvpool_unified_swa_allocator_sizes(pair, &after));
    if (after.available_size != before.available_size)
        return fail("sizes after binding the bound sides again");
    /* Standalone sides: bound once, the symmetric call accepted, another peer
     * refused with the sides still bound to each other. */
    kvpool_multi_ended_allocator* up = NULL;
    kvpool_multi_ended_allocator* down = NULL;
    kvpool_multi_ended_allocator* other = NULL;
    kvpool_unified_kv_pool* pool2 = NULL;
    CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, swa_specs, 2, NULL, NULL,
                                           &pool2));
    CHECK(kvpool_multi_ended_allocator_create(pool2, "full", NULL, NULL, &up));
    CHECK(kvpool_multi_ended_allocator_create(pool2, "swa", NULL, NULL, &down));
    CHECK(kvpool_multi_ended_allocator_create(pool2, "swa", NULL, NULL, &other));
    CHECK(kvpool_multi_ended_allocator_bind_peer(up, down));
    CHECK(kvpool_multi_ended_allocator_bind_peer(down, up));
    CHECK(kvpool_multi_ended_allocator_bind_peer(up, down));
    if (kvpool_multi_ended_allocator_bind_peer(up, other) != KVPOOL_ERROR_INVALID_ARGUMENT ||
        strstr(kvpool_last_error(), "one peer only") == NULL)
        return fail("binding a bound side to another peer was not refused");
    if (kvpool_multi_ended_allocator_bind_peer(other, down) != KVPOOL_ERROR_INVALID_ARGUMENT)
        return fail("binding another side to a bound peer was not refused");
    CHECK(kvpool_multi_ended_allocator_bind_peer(down, up));
    int64_t up_ids[4];
    CHECK(kvpool_multi_ended_allocator_alloc(up, NULL, 4, up_ids, &allocated));
    if (!allocated)
        return fail("alloc on the bound side found no room");
    CHECK(kvpool_multi_ended_allocator_check_invariants(up, NULL));
    CHECK(kvpool_multi_ended_allocator_check_invariants(down, NULL));
    kvpool_multi_ended_allocator_destroy(other);
    kvpool_multi_ended_allocator_destroy(down);
    kvpool_multi_ended_allocator_destroy(up);
    kvpool_unified_kv_pool_destroy(pool2);

    kvpool_multi_ended_allocator_destroy(swa);
    kvpool_multi_ended_allocator_destroy(full);
    kvpool_unified_swa_allocator_destroy(pair);
    kvpool_unified_kv_pool_destroy(pool);
    if (kvpool_live_handles() != 0)
        return fail("handles left");
    return 0;
}

/* The SWA side's page a quarter of the full side's: a full page's four SWA
 * pages bind with it, free_swa releases them one by one, free the rest; an
 * SWA page that does not divide the full page is refused. */
static int swa_pair_decoupled_pages(void) {
    kvpool_sub_pool_spec specs[2] = {{"full", 64, 16, KVPOOL_GROW_UP, 0, 0.0},
                                     {"swa", 96, 4, KVPOOL_GROW_DOWN, 0, 0.0}};
    kvpool_unified_kv_pool* pool = NULL;
    kvpool_unified_swa_allocator* pair = NULL;
    kvpool_multi_ended_allocator* swa = NULL;
    CHECK(
        kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, specs, 2, NULL, NULL, &pool));
    CHECK(kvpool_unified_swa_allocator_create(pool, "full", "swa", NULL, NULL, &pair));
    CHECK(kvpool_unified_swa_allocator_side(pair, 1, &swa));
    kvpool_swa_sizes before, after;
    CHECK(kvpool_unified_swa_allocator_sizes(pair, &before));
    int64_t ids[32], physical[2];
    int allocated = 0;
    CHECK(kvpool_unified_swa_allocator_alloc(pair, NULL, 32, ids, &allocated));
    if (!allocated)
        return fail("decoupled: alloc of 32 tokens found no room");
    CHECK(kvpool_unified_swa_allocator_free_swa(pair, NULL, ids, 12));
    CHECK(kvpool_unified_swa_allocator_sizes(pair, &after));
    if (before.conserve_swa_available_size - after.conserve_swa_available_size != 20)
        return fail("decoupled: free_swa of 3 of 8 SWA pages");
    const int64_t probe[2] = {ids[11], ids[12]};
    CHECK(kvpool_multi_ended_allocator_translate(swa, NULL, probe, 2, physical, 0));
    if (physical[0] != 0 || physical[1] <= 0)
        return fail("decoupled: translate on the SWA side");
    CHECK(kvpool_multi_ended_allocator_check_invariants(swa, NULL));
    CHECK(kvpool_unified_swa_allocator_free(pair, NULL, ids, 32));
    CHECK(kvpool_unified_swa_allocator_sizes(pair, &after));
    if (after.available_size != before.available_size ||
        after.conserve_swa_available_size != before.conserve_swa_available_size)
        return fail("decoupled: sizes after freeing all");
    CHECK(kvpool_multi_ended_allocator_check_invariants(swa, NULL));
    kvpool_multi_ended_allocator_destroy(swa);
    kvpool_unified_swa_allocator_destroy(pair);
    kvpool_unified_kv_pool_destroy(pool);

    specs[1].page_size = 6;
    CHECK(
        kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, specs, 2, NULL, NULL, &pool));
    if (kvpool_unified_swa_allocator_create(pool, "full", "swa", NULL, NULL, &pair) !=
            KVPOOL_ERROR_INVALID_ARGUMENT ||
        strstr(kvpool_last_error(), "does not divide") == NULL)
        return fail("decoupled: an SWA page of 6 under a full page of 16 was not refused");
    kvpool_unified_kv_pool_destroy(pool);
    if (kvpool_live_handles() != 0)
        return fail("decoupled: handles left");
    return 0;
}

/* Both lazy sides compacted by one call: the pages freed below live ones are
 * holes until kvpool_kv_flush on the pair's KV handle moves the live pages down
 * on both sides (nothing in flight: no forward-done token) and a later pass
 * retires them, moving nothing; a NULL handle is refused. */
static int swa_pair_one_call_flush(void) {
    kvpool_unified_kv_pool* pool = NULL;
    kvpool_unified_swa_allocator* pair = NULL;
    kvpool_multi_ended_allocator* full = NULL;
    kvpool_multi_ended_allocator* swa = NULL;
    const kvpool_allocator_options lazy = {1, 1, 0, 0};
    if (open_swa_pair(&lazy, &lazy, &pool, &pair, &full, &swa))
        return 1;
    kvpool_kv_allocator* kv = NULL;
    CHECK(kvpool_unified_swa_allocator_kv(pair, &kv));
    CHECK(kvpool_kv_set_latest_forward_done(kv, NULL));
    int64_t first[8], second[8];
    int allocated = 0;
    CHECK(kvpool_unified_swa_allocator_alloc(pair, NULL, 8, first, &allocated));
    EXPECT(allocated);
    CHECK(kvpool_unified_swa_allocator_alloc(pair, NULL, 8, second, &allocated));
    EXPECT(allocated);
    CHECK(kvpool_unified_swa_allocator_free(pair, NULL, first, 8));
    kvpool_allocator_state full_state, swa_state;
    CHECK(kvpool_multi_ended_allocator_state(full, &full_state));
    CHECK(kvpool_multi_ended_allocator_state(swa, &swa_state));
    EXPECT(full_state.hole_pages == 2 && swa_state.hole_pages == 2);
    int64_t moved = -1;
    CHECK(kvpool_kv_flush(kv, NULL, &moved));
    EXPECT(moved == 4); /* two live pages on each side */
    /* The pages moved from are retired by the next pass, which moves nothing. */
    CHECK(kvpool_kv_flush(kv, NULL, NULL));
    CHECK(kvpool_multi_ended_allocator_state(full, &full_state));
    CHECK(kvpool_multi_ended_allocator_state(swa, &swa_state));
    EXPECT(full_state.hole_pages == 0 && swa_state.hole_pages == 0);
    CHECK(kvpool_kv_flush(kv, NULL, &moved));
    EXPECT(moved == 0);
    CHECK(kvpool_multi_ended_allocator_check_invariants(full, NULL));
    CHECK(kvpool_multi_ended_allocator_check_invariants(swa, NULL));
    EXPECT(kvpool_kv_flush(NULL, NULL, &moved) == KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(kvpool_kv_set_latest_forward_done(NULL, NULL) == KVPOOL_ERROR_INVALID_ARGUMENT);
    kvpool_kv_destroy(kv);
    kvpool_multi_ended_allocator_destroy(swa);
    kvpool_multi_ended_allocator_destroy(full);
    kvpool_unified_swa_allocator_destroy(pair);
    kvpool_unified_kv_pool_destroy(pool);
    if (kvpool_live_handles() != 0)
        return fail("one-call flush: handles left");
    return 0;
}

int main(void) {
    if (devices() || swa_pair() || swa_pair_decoupled_pages() || swa_pair_one_call_flush())
        return 1;
    CHECK(kvpool_finalize_when_unused());
    if (kvpool_is_initialized())
        return fail("Kokkos still initialised");
    return 0;
}
