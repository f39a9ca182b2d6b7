/* The eviction callback through the C API from plain C, on the host: an SWA
 * pair whose finished requests stay in a cache that the callback evicts least
 * recently used (the shortfall it is told checked against the pair's sizes,
 * read from inside the callback); a callback with nothing to free, one that
 * fails, and one that tries to allocate; a Mamba pair whose state slot is
 * short and whose callback frees full KV through a side handle. Exits 0 on
 * success, 1 with a message otherwise. */
#include "c_test_check.h"

#include <stdio.h>
#include <string.h>

enum { FULL_BYTES = 24, SWA_BYTES = 40, STATE_BYTES = 300, PAGE = 4, REQ = 8, MAX_CACHED = 64 };

/* The engine's prefix cache: finished requests of REQ tokens, oldest first. */
typedef struct {
    kvpool_unified_swa_allocator* pair;
    int64_t ids[MAX_CACHED][REQ];
    int head, count;
    int64_t need_pages; /* the allocation the callback is called for */
    int mode;           /* 0: evict, 1: fail, 2: allocate from inside */
    int calls, evicted;
    int bad;             /* a shortfall that does not match the pair's sizes */
    kvpool_status inner; /* the status of the allocation tried from inside */
} cache;

static int64_t evict(void* user, const kvpool_eviction_shortfall* s) {
    cache* c = (cache*)user;
    ++c->calls;
    kvpool_swa_sizes sizes;
    if (kvpool_unified_swa_allocator_sizes(c->pair, &sizes) != KVPOOL_OK)
        return -1;
    const int64_t available = sizes.available_size / PAGE;
    const int64_t missing = c->need_pages - available > 1 ? c->need_pages - available : 1;
    if (available >= c->need_pages || s->requested_pages != c->need_pages || s->pages != missing ||
        (strcmp(s->side, "full") != 0 && strcmp(s->side, "swa") != 0) ||
        (strcmp(s->side, "full") == 0 && s->bytes != missing * PAGE * (FULL_BYTES + SWA_BYTES)))
        c->bad = 1;
    if (c->mode == 1)
        return -1;
    if (c->mode == 2) {
        int64_t out[PAGE];
        int ok = 0;
        c->inner = kvpool_unified_swa_allocator_alloc(c->pair, NULL, PAGE, out, &ok);
        return 0;
    }
    if (c->count == 0)
        return 0;
    /* One token per page frees the page. */
    const int64_t pages[2] = {c->ids[c->head][0], c->ids[c->head][PAGE]};
    if (kvpool_unified_swa_allocator_free(c->pair, NULL, pages, 2) != KVPOOL_OK)
        return -1;
    c->head = (c->head + 1) % MAX_CACHED;
    --c->count;
    ++c->evicted;
    return 2 * PAGE * (FULL_BYTES + SWA_BYTES);
}

static int alloc_into_cache(cache* c, int* ok) {
    const int slot = (c->head + c->count) % MAX_CACHED;
    c->need_pages = REQ / PAGE;
    CHECK(kvpool_unified_swa_allocator_alloc(c->pair, NULL, REQ, c->ids[slot], ok));
    if (*ok)
        ++c->count;
    return 0;
}

static int swa_pair(int lazy) {
    const kvpool_sub_pool_spec specs[2] = {{"full", FULL_BYTES, PAGE, KVPOOL_GROW_UP, 0, 0.0},
                                           {"swa", SWA_BYTES, PAGE, KVPOOL_GROW_DOWN, 0, 0.0}};
    kvpool_unified_kv_pool* pool = NULL;
    CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST,
                                           40 * PAGE * (FULL_BYTES + SWA_BYTES) + 100, specs, 2,
                                           NULL, NULL, &pool));
    kvpool_allocator_options options = {lazy, 0, 0, 0};
    static cache c;
    memset(&c, 0, sizeof c);
    CHECK(kvpool_unified_swa_allocator_create(pool, "full", "swa", &options, &options, &c.pair));
    int ok = 1;
    /* Fill the buffer with finished requests, no callback yet. */
    while (ok) {
        if (alloc_into_cache(&c, &ok))
            return 1;
        EXPECT(c.count < MAX_CACHED);
    }
    EXPECT(c.count >= 8);
    kvpool_swa_sizes before, after;
    CHECK(kvpool_unified_swa_allocator_sizes(c.pair, &before));

    /* Failing callbacks: nothing changes. */
    CHECK(kvpool_unified_swa_allocator_set_eviction_callback(c.pair, evict, &c));
    c.mode = 1;
    c.need_pages = REQ / PAGE;
    {
        int64_t out[REQ];
        EXPECT(kvpool_unified_swa_allocator_alloc(c.pair, NULL, REQ, out, &ok) ==
               KVPOOL_ERROR_CALLBACK);
        EXPECT(ok == 0);
        EXPECT(strstr(kvpool_last_error(), "eviction callback") != NULL);
        c.mode = 2;
        c.inner = KVPOOL_OK;
        CHECK(kvpool_unified_swa_allocator_alloc(c.pair, NULL, REQ, out, &ok));
        EXPECT(ok == 0 && c.inner == KVPOOL_ERROR_INVALID_STATE);
    }
    CHECK(kvpool_unified_swa_allocator_sizes(c.pair, &after));
    EXPECT(memcmp(&before, &after, sizeof before) == 0);
    EXPECT(c.evicted == 0);

    /* Evicting: each new request of REQ tokens takes the oldest one's room. */
    c.mode = 0;
    c.calls = 0;
    const int cached = c.count;
    for (int i = 0; i < 3 * cached; ++i) {
        if (alloc_into_cache(&c, &ok))
            return 1;
        EXPECT(ok == 1);
    }
    EXPECT(c.bad == 0);
    EXPECT(c.evicted >= 3 * cached - 1 && c.evicted <= 3 * cached);
    EXPECT(c.calls == c.evicted);
    EXPECT(c.count == cached + 3 * cached - c.evicted);

    /* A request larger than the whole buffer: every cached one goes, then it fails. */
    c.need_pages = 100;
    {
        static int64_t big[100 * PAGE];
        CHECK(kvpool_unified_swa_allocator_alloc(c.pair, NULL, 100 * PAGE, big, &ok));
        EXPECT(ok == 0 && c.count == 0 && c.bad == 0);
    }
    CHECK(kvpool_unified_swa_allocator_set_eviction_callback(c.pair, NULL, NULL));
    CHECK(kvpool_unified_swa_allocator_sizes(c.pair, &before));
    EXPECT(before.available_size >= 32 * PAGE);
    kvpool_multi_ended_allocator* full = NULL;
    CHECK(kvpool_unified_swa_allocator_side(c.pair, 0, &full));
    CHECK(kvpool_multi_ended_allocator_check_invariants(full, NULL));
    kvpool_multi_ended_allocator_destroy(full);
    kvpool_unified_swa_allocator_destroy(c.pair);
    kvpool_unified_kv_pool_destroy(pool);
    EXPECT(kvpool_live_handles() == 0);
    return 0;
}

/* Mamba pair: full KV fills the buffer; the callback frees full pages through
 * the full side's handle until a state slot fits. */
typedef struct {
    kvpool_multi_ended_allocator* full;
    int64_t first_tokens[256];
    int count;
    int calls;
    int bad;
} full_kv;

static int64_t free_full(void* user, const kvpool_eviction_shortfall* s) {
    full_kv* k = (full_kv*)user;
    ++k->calls;
    if (strcmp(s->side, "mamba") != 0 || s->pages != 1 || s->requested_pages != 1 ||
        s->bytes != STATE_BYTES)
        k->bad = 1;
    if (k->count == 0)
        return 0;
    --k->count;
    if (kvpool_multi_ended_allocator_free(k->full, NULL, &k->first_tokens[k->count], 1, 0) !=
        KVPOOL_OK)
        return -1;
    return PAGE * FULL_BYTES;
}

static int mamba_pair(void) {
    const kvpool_sub_pool_spec specs[2] = {{"full", FULL_BYTES, PAGE, KVPOOL_GROW_UP, 0, 0.0},
                                           {"mamba", STATE_BYTES, 1, KVPOOL_GROW_DOWN, 0, 0.0}};
    kvpool_unified_kv_pool* pool = NULL;
    CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 40 * PAGE * FULL_BYTES, specs, 2,
                                           NULL, NULL, &pool));
    kvpool_unified_mamba_allocator* pair = NULL;
    CHECK(kvpool_unified_mamba_allocator_create(pool, "full", "mamba", NULL, NULL, &pair));
    static full_kv k;
    memset(&k, 0, sizeof k);
    CHECK(kvpool_unified_mamba_allocator_side(pair, 0, &k.full));
    int ok = 1;
    int64_t page[PAGE];
    for (;;) {
        CHECK(kvpool_unified_mamba_allocator_alloc(pair, NULL, PAGE, page, &ok));
        if (!ok)
            break;
        EXPECT(k.count < 256);
        k.first_tokens[k.count++] = page[0];
    }
    int64_t slot = -1;
    CHECK(kvpool_unified_mamba_allocator_alloc_state_slots(pair, NULL, 1, &slot, &ok));
    EXPECT(ok == 0);
    const int filled = k.count;
    CHECK(kvpool_unified_mamba_allocator_set_eviction_callback(pair, free_full, &k));
    CHECK(kvpool_unified_mamba_allocator_alloc_state_slots(pair, NULL, 1, &slot, &ok));
    EXPECT(ok == 1 && slot >= 0 && k.bad == 0);
    /* A slot is STATE_BYTES: at most that many bytes of full pages, and one more page of slack. */
    EXPECT(k.calls >= 1 && filled - k.count <= STATE_BYTES / (PAGE * FULL_BYTES) + 1);
    EXPECT(k.calls == filled - k.count);
    kvpool_mamba_sizes sizes;
    CHECK(kvpool_unified_mamba_allocator_sizes(pair, &sizes));
    CHECK(kvpool_multi_ended_allocator_check_invariants(k.full, NULL));
    kvpool_multi_ended_allocator_destroy(k.full);
    kvpool_unified_mamba_allocator_destroy(pair);
    kvpool_unified_kv_pool_destroy(pool);
    EXPECT(kvpool_live_handles() == 0);
    return 0;
}

int main(void) {
    if (swa_pair(0) || swa_pair(1) || mamba_pair())
        return 1;
    CHECK(kvpool_finalize_when_unused());
    return 0;
}
