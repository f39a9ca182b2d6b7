/* The C API from plain C (no Kokkos headers, no C++): a SWA pair on a host
 * build, its sides with their own options (the pair sets the id roles),
 * allocated, translated, freed twice (the second is refused and changes
 * nothing), rolled back by a pair-level backup window, checked. Exits 0 on success, 1 with a
 * message otherwise. */
#include <kvpool/c_api.h>

#include <stdio.h>
#include <string.h>

static int fail(const char* what) {
    fprintf(stderr, "c_api_test: %s: %s\n", what, kvpool_last_error());
    return 1;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != KVPOOL_OK)                                                                   \
            return fail(#call);                                                                    \
    } while (0)

int main(void) {
    if (strcmp(kvpool_backend(), "host") != 0)
        return 0; /* device arrays would be GPU memory */
    kvpool_sub_pool_spec specs[2] = {{"full", 64, 4, KVPOOL_GROW_UP, 0, 0.0},
                                     {"swa", 96, 4, KVPOOL_GROW_DOWN, 0, 0.0}};
    kvpool_pool* pool = NULL;
    kvpool_swa_pair* pair = NULL;
    kvpool_allocator* full = NULL;
    kvpool_allocator* swa = NULL;
    /* is_id_owner 0 on the full side: the pair makes it the owner all the same. */
    const kvpool_side_options full_options = {1, 0, 7};
    CHECK(kvpool_pool_create(1 << 16, specs, 2, NULL, NULL, &pool));
    CHECK(kvpool_swa_pair_create(pool, "full", "swa", &full_options, NULL, &pair));
    CHECK(kvpool_swa_pair_side(pair, 0, &full));
    CHECK(kvpool_swa_pair_side(pair, 1, &swa));
    kvpool_side_info full_info, swa_info;
    CHECK(kvpool_allocator_info(full, &full_info));
    CHECK(kvpool_allocator_info(swa, &swa_info));
    if (!full_info.lazy || full_info.max_moves_per_flush != 7 || !full_info.is_id_owner)
        return fail("the full side's options");
    if (swa_info.lazy || swa_info.max_moves_per_flush != 4096 || swa_info.is_id_owner)
        return fail("the SWA side's default options");

    kvpool_swa_sizes before;
    CHECK(kvpool_swa_pair_sizes(pair, &before));
    int64_t ids[8], physical[8];
    int allocated = 0;
    CHECK(kvpool_swa_pair_alloc(pair, NULL, 8, ids, &allocated));
    if (!allocated)
        return fail("alloc of 8 tokens found no room");
    CHECK(kvpool_allocator_translate(full, NULL, ids, 8, physical, 0));
    for (int i = 0; i < 8; ++i)
        if (physical[i] <= 0 || physical[i] % 4 != ids[i] % 4)
            return fail("translate");

    CHECK(kvpool_swa_pair_free(pair, NULL, ids, 8));
    if (kvpool_swa_pair_free(pair, NULL, ids, 8) != KVPOOL_ERROR_NOT_ALLOCATED)
        return fail("a double free was not refused");
    if (strstr(kvpool_last_error(), "not allocated") == NULL)
        return fail("the message");
    kvpool_swa_sizes after;
    CHECK(kvpool_swa_pair_sizes(pair, &after));
    if (after.available_size != before.available_size)
        return fail("sizes after freeing all");
    if (kvpool_swa_pair_alloc(pair, NULL, 3, ids, &allocated) != KVPOOL_ERROR_MISALIGNED)
        return fail("an unaligned alloc was not refused");

    /* A backup window over both sides: the allocation inside it is undone on
     * both, a free inside it is refused, and the spent snapshot afterwards. */
    kvpool_pair_snapshot* snapshot = NULL;
    CHECK(kvpool_swa_pair_backup_state(pair, &snapshot));
    CHECK(kvpool_swa_pair_alloc(pair, NULL, 8, ids, &allocated));
    if (!allocated)
        return fail("alloc inside a backup window found no room");
    if (kvpool_swa_pair_free(pair, NULL, ids, 8) != KVPOOL_ERROR_INVALID_STATE)
        return fail("a free inside a backup window was not refused");
    CHECK(kvpool_swa_pair_restore_state(pair, NULL, snapshot));
    CHECK(kvpool_swa_pair_sizes(pair, &after));
    if (after.available_size != before.available_size)
        return fail("sizes after restore_state");
    if (kvpool_swa_pair_restore_state(pair, NULL, snapshot) != KVPOOL_ERROR_INVALID_STATE)
        return fail("a spent snapshot was not refused");
    kvpool_pair_snapshot_destroy(snapshot);
    CHECK(kvpool_allocator_check_invariants(full, NULL));
    CHECK(kvpool_allocator_check_invariants(swa, NULL));

    /* SGLang pairs two allocators with a.bind_peer(b); b.bind_peer(a): the
     * pair's sides are bound already, so both calls change nothing. */
    CHECK(kvpool_allocator_bind_peer(full, swa));
    CHECK(kvpool_allocator_bind_peer(swa, full));
    CHECK(kvpool_swa_pair_sizes(pair, &after));
    if (after.available_size != before.available_size)
        return fail("sizes after binding the bound sides again");
    /* Standalone sides: bound once, the symmetric call accepted, another peer
     * refused with the sides still bound to each other. */
    kvpool_allocator* up = NULL;
    kvpool_allocator* down = NULL;
    kvpool_allocator* other = NULL;
    kvpool_pool* pool2 = NULL;
    CHECK(kvpool_pool_create(1 << 16, specs, 2, NULL, NULL, &pool2));
    CHECK(kvpool_allocator_create(pool2, "full", NULL, NULL, &up));
    CHECK(kvpool_allocator_create(pool2, "swa", NULL, NULL, &down));
    CHECK(kvpool_allocator_create(pool2, "swa", NULL, NULL, &other));
    CHECK(kvpool_allocator_bind_peer(up, down));
    CHECK(kvpool_allocator_bind_peer(down, up));
    CHECK(kvpool_allocator_bind_peer(up, down));
    if (kvpool_allocator_bind_peer(up, other) != KVPOOL_ERROR_INVALID_ARGUMENT ||
        strstr(kvpool_last_error(), "one peer only") == NULL)
        return fail("binding a bound side to another peer was not refused");
    if (kvpool_allocator_bind_peer(other, down) != KVPOOL_ERROR_INVALID_ARGUMENT)
        return fail("binding another side to a bound peer was not refused");
    CHECK(kvpool_allocator_bind_peer(down, up));
    int64_t up_ids[4];
    CHECK(kvpool_allocator_alloc(up, NULL, 4, up_ids, &allocated));
    if (!allocated)
        return fail("alloc on the bound side found no room");
    CHECK(kvpool_allocator_check_invariants(up, NULL));
    CHECK(kvpool_allocator_check_invariants(down, NULL));
    kvpool_allocator_destroy(other);
    kvpool_allocator_destroy(down);
    kvpool_allocator_destroy(up);
    kvpool_pool_destroy(pool2);

    kvpool_allocator_destroy(swa);
    kvpool_allocator_destroy(full);
    kvpool_swa_pair_destroy(pair);
    kvpool_pool_destroy(pool);
    if (kvpool_live_handles() != 0)
        return fail("handles left");
    CHECK(kvpool_finalize_when_unused());
    if (kvpool_is_initialized())
        return fail("Kokkos still initialised");
    return 0;
}
