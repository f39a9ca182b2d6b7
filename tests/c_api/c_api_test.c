/* The C API from plain C (no Kokkos headers, no C++): a SWA pair on a host
 * build, allocated, translated, freed twice (the second is refused and changes
 * nothing), checked. Exits 0 on success, 1 with a message otherwise. */
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
    kvpool_sub_pool_spec specs[2] = {{"full", 64, 4, 0, 0}, {"swa", 96, 4, 1, 0}};
    kvpool_pool* pool = NULL;
    kvpool_swa_pair* pair = NULL;
    kvpool_allocator* full = NULL;
    CHECK(kvpool_pool_create(1 << 16, specs, 2, NULL, NULL, &pool));
    CHECK(kvpool_swa_pair_create(pool, "full", "swa", NULL, NULL, &pair));
    CHECK(kvpool_swa_pair_side(pair, 0, &full));

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
    CHECK(kvpool_allocator_check_invariants(full, NULL));

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
