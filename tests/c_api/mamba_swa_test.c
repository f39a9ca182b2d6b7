/* The tri-pool through the C API from plain C, on the host (every build serves
 * it, a GPU build beside the GPU): layouts the
 * pool refuses (each a clear error that makes nothing), then, eager and lazy,
 * a three-band pool (state slots up, sliding-window KV floating, full KV down)
 * with KV and state slots allocated, translated, released from the window,
 * rolled back by a backup window, freed in a group, and the sizes following
 * each step; and decoupled page sizes (sliding-window pages a quarter of the
 * full side's; one that does not divide it refused). Exits 0 on success, 1
 * with a message otherwise. */
#include "c_test_check.h"

#include <stdio.h>
#include <string.h>

enum { STATE_BYTES = 256, SWA_BYTES = 96, FULL_BYTES = 64, PAGE = 4 };

/* state, swa, full: the tri-pool's order from the low end up. */
static void tri_specs(kvpool_sub_pool_spec specs[3]) {
    const kvpool_sub_pool_spec state = {"mamba", STATE_BYTES, 1, KVPOOL_GROW_UP, 0, 0.0};
    const kvpool_sub_pool_spec swa = {"swa", SWA_BYTES, PAGE, KVPOOL_GROW_FLOATING, 0, 0.5};
    const kvpool_sub_pool_spec full = {"full", FULL_BYTES, PAGE, KVPOOL_GROW_DOWN, 0, 0.0};
    specs[0] = state;
    specs[1] = swa;
    specs[2] = full;
}

/* kvpool_unified_kv_pool_create_on refuses specs with status and a message containing
 * needle, and makes nothing. */
static int refused(const kvpool_sub_pool_spec* specs, int n, const char* needle) {
    kvpool_unified_kv_pool* pool = NULL;
    if (kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, specs, n, NULL, NULL,
                                         &pool) != KVPOOL_ERROR_INVALID_ARGUMENT)
        return fail("a bad layout was not refused with KVPOOL_ERROR_INVALID_ARGUMENT");
    if (strstr(kvpool_last_error(), needle) == NULL) {
        fprintf(stderr, "mamba_swa_test: expected '%s' in the message\n", needle);
        return fail("the message of a refused layout");
    }
    EXPECT(pool == NULL && kvpool_live_handles() == 0);
    return 0;
}

static int bad_layouts(void) {
    kvpool_sub_pool_spec specs[3];
    tri_specs(specs);
    kvpool_sub_pool_spec reversed[3] = {specs[2], specs[1], specs[0]};
    if (refused(reversed, 3, "listed from the low end up"))
        return 1;
    tri_specs(specs);
    specs[1].grow = 3;
    if (refused(specs, 3, "grow is 3"))
        return 1;
    tri_specs(specs);
    specs[1].float_at = 1.5;
    if (refused(specs, 3, "float_at"))
        return 1;
    tri_specs(specs);
    specs[1].float_at = 0.0; /* a zeroed field: floating needs a position */
    if (refused(specs, 3, "float_at"))
        return 1;
    tri_specs(specs);
    specs[0].grow = KVPOOL_GROW_FLOATING; /* two sub-pools: one up, one down */
    if (refused(specs, 2, "toward each other"))
        return 1;
    return 0;
}

typedef struct {
    kvpool_unified_kv_pool* pool;
    kvpool_unified_mamba_swa_allocator* tri;
    kvpool_multi_ended_allocator* side[3]; /* 0 full, 1 swa, 2 state */
} world;

static int64_t allocated_count(kvpool_multi_ended_allocator* side) {
    kvpool_allocator_state state;
    if (kvpool_multi_ended_allocator_state(side, &state) != KVPOOL_OK)
        return -1;
    return state.allocated_count;
}

static int sizes_equal(const kvpool_mamba_swa_sizes* a, const kvpool_mamba_swa_sizes* b) {
    return a->available_size == b->available_size &&
           a->state_slots_available == b->state_slots_available &&
           a->state_slot_full_token_cost == b->state_slot_full_token_cost;
}

/* Every id translates into its side's band, beyond the sink: KV on both KV
 * sides (the sliding-window side into int32), or state slots on side 2. */
static int translates(world* w, const int64_t* ids, int n, int kv) {
    int64_t physical[16];
    int32_t physical32[16];
    CHECK(kvpool_multi_ended_allocator_translate(w->side[kv ? 0 : 2], NULL, ids, n, physical, 0));
    for (int i = 0; i < n; ++i)
        EXPECT(physical[i] > 0 && (!kv || physical[i] % PAGE == ids[i] % PAGE));
    if (kv) {
        CHECK(kvpool_multi_ended_allocator_translate(w->side[1], NULL, ids, n, physical32, 1));
        for (int i = 0; i < n; ++i)
            EXPECT(physical32[i] > 0 && physical32[i] % PAGE == ids[i] % PAGE);
    }
    return 0;
}

static int run(int lazy) {
    const kvpool_allocator_options options = {lazy, 0, 0};
    kvpool_sub_pool_spec specs[3];
    world w;
    tri_specs(specs);
    CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, specs, 3, NULL, NULL,
                                           &w.pool));
    /* The sides' roles are the tri-pool's: a full side given as the floating one is refused. */
    kvpool_unified_mamba_swa_allocator* bad = NULL;
    EXPECT(kvpool_unified_mamba_swa_allocator_create(w.pool, "swa", "full", "mamba", NULL, NULL,
                                                     NULL, &bad) == KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(bad == NULL && strstr(kvpool_last_error(), "must float") != NULL);
    CHECK(kvpool_unified_mamba_swa_allocator_create(w.pool, "full", "swa", "mamba", &options,
                                                    &options, &options, &w.tri));
    for (int i = 0; i < 3; ++i)
        CHECK(kvpool_unified_mamba_swa_allocator_side(w.tri, i, &w.side[i]));
    kvpool_multi_ended_allocator* none = NULL;
    EXPECT(kvpool_unified_mamba_swa_allocator_side(w.tri, 3, &none) ==
               KVPOOL_ERROR_INVALID_ARGUMENT &&
           !none);

    /* Each side reports its band's direction; the floating one has a gap on both sides. */
    kvpool_allocator_info info[3];
    for (int i = 0; i < 3; ++i)
        CHECK(kvpool_multi_ended_allocator_info(w.side[i], &info[i]));
    EXPECT(info[0].grow == KVPOOL_GROW_DOWN && info[0].is_id_owner);
    EXPECT(info[1].grow == KVPOOL_GROW_FLOATING && !info[1].is_id_owner);
    EXPECT(info[2].grow == KVPOOL_GROW_UP && info[2].page_size == 1 && info[2].is_id_owner);
    EXPECT(info[0].lazy == lazy && info[1].lazy == lazy && info[2].lazy == lazy);
    kvpool_allocator_state swa_state;
    CHECK(kvpool_multi_ended_allocator_state(w.side[1], &swa_state));
    EXPECT(swa_state.gap_below_bytes > 0 && swa_state.gap_above_bytes > 0);
    EXPECT(swa_state.gap_below_bytes + swa_state.gap_above_bytes == swa_state.gap_bytes);

    kvpool_mamba_swa_sizes initial, now, window;
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &initial));
    EXPECT(initial.available_size > 64 && initial.available_size % PAGE == 0);
    EXPECT(initial.state_slots_available > 4);
    EXPECT(initial.state_slot_full_token_cost == STATE_BYTES / FULL_BYTES);

    /* KV: plain alloc, a prefill of two requests (5 and 3 tokens) and a decode step. */
    int64_t ids[8], prefill[8], decoded[1], slots[2];
    int ok = 0;
    CHECK(kvpool_unified_mamba_swa_allocator_alloc(w.tri, NULL, 8, ids, &ok));
    EXPECT(ok && translates(&w, ids, 8, 1) == 0);
    const int64_t prefix[2] = {0, 0}, seq[2] = {5, 3}, no_prefix[2] = {-1, -1};
    CHECK(kvpool_unified_mamba_swa_allocator_alloc_extend(w.tri, NULL, prefix, seq, 2, no_prefix,
                                                          prefill, 8, &ok));
    EXPECT(ok && translates(&w, prefill, 8, 1) == 0);
    const int64_t decode_seq[1] = {6};
    const int64_t last[1] = {prefill[4]};
    CHECK(kvpool_unified_mamba_swa_allocator_alloc_decode(w.tri, NULL, decode_seq, 1, last, decoded,
                                                          &ok));
    EXPECT(ok && decoded[0] == prefill[4] + 1 && translates(&w, decoded, 1, 1) == 0);
    /* 8 + 12 tokens' slots on both KV sides: two pages for request 0 (its decoded
     * token fits in the second), one for request 1. */
    EXPECT(allocated_count(w.side[0]) == 20 && allocated_count(w.side[1]) == 20);
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &now));
    EXPECT(now.available_size <= initial.available_size - 20);

    /* State slots: two, found through side 2; their bytes come out of the shared room. */
    CHECK(kvpool_unified_mamba_swa_allocator_alloc_state_slots(w.tri, NULL, 2, slots, &ok));
    EXPECT(ok && slots[0] != slots[1] && translates(&w, slots, 2, 0) == 0);
    EXPECT(allocated_count(w.side[2]) == 2);
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &now));
    EXPECT(now.state_slots_available <= initial.state_slots_available - 2);

    /* Tokens that left the window: their sliding-window pages only. */
    CHECK(kvpool_unified_mamba_swa_allocator_free_swa(w.tri, NULL, ids, 4));
    EXPECT(allocated_count(w.side[1]) == 16 && allocated_count(w.side[0]) == 20);
    int32_t gone[4];
    int64_t kept[4];
    CHECK(kvpool_multi_ended_allocator_translate(w.side[1], NULL, ids, 4, gone, 1));
    CHECK(kvpool_multi_ended_allocator_translate(w.side[0], NULL, ids, 4, kept, 0));
    for (int i = 0; i < 4; ++i)
        EXPECT(gone[i] == 0 && kept[i] > 0);

    /* A backup window: KV and a state slot allocated inside it are undone on
     * every side, a free inside it is refused, the spent snapshot afterwards. */
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &window));
    kvpool_mamba_swa_snapshot* snapshot = NULL;
    int64_t more[4], slot[1];
    CHECK(kvpool_unified_mamba_swa_allocator_backup_state(w.tri, &snapshot));
    CHECK(kvpool_unified_mamba_swa_allocator_alloc(w.tri, NULL, 4, more, &ok));
    EXPECT(ok);
    CHECK(kvpool_unified_mamba_swa_allocator_alloc_state_slots(w.tri, NULL, 1, slot, &ok));
    EXPECT(ok);
    EXPECT(kvpool_unified_mamba_swa_allocator_free(w.tri, NULL, more, 4) ==
           KVPOOL_ERROR_INVALID_STATE);
    CHECK(kvpool_unified_mamba_swa_allocator_restore_state(w.tri, NULL, snapshot));
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &now));
    EXPECT(sizes_equal(&now, &window) && allocated_count(w.side[2]) == 2);
    EXPECT(kvpool_unified_mamba_swa_allocator_restore_state(w.tri, NULL, snapshot) ==
           KVPOOL_ERROR_INVALID_STATE);
    kvpool_mamba_swa_snapshot_destroy(snapshot);

    /* Bad input changes nothing: a misaligned size, a double free (the pages of
     * the prefill, the decoded token's included). */
    EXPECT(kvpool_unified_mamba_swa_allocator_alloc(w.tri, NULL, 3, more, &ok) ==
           KVPOOL_ERROR_MISALIGNED);
    CHECK(kvpool_unified_mamba_swa_allocator_free(w.tri, NULL, prefill, 8));
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &window));
    EXPECT(kvpool_unified_mamba_swa_allocator_free(w.tri, NULL, decoded, 1) ==
           KVPOOL_ERROR_NOT_ALLOCATED);
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &now));
    EXPECT(sizes_equal(&now, &window) && allocated_count(w.side[0]) == 8);

    /* The rest in one free group: KV of both sides (the pages free_swa released
     * skipped) and the state slots (side 2). */
    CHECK(kvpool_unified_mamba_swa_allocator_free_group_begin(w.tri));
    CHECK(kvpool_unified_mamba_swa_allocator_free(w.tri, NULL, ids, 8));
    CHECK(kvpool_multi_ended_allocator_free(w.side[2], NULL, slots, 2, 0));
    CHECK(kvpool_unified_mamba_swa_allocator_free_group_end(w.tri, NULL));
    for (int i = 0; i < 3; ++i)
        EXPECT(allocated_count(w.side[i]) == 0);

    /* The forward's hooks and a flush; then every side is empty again. */
    CHECK(kvpool_unified_mamba_swa_allocator_set_latest_forward_done(w.tri, NULL));
    CHECK(kvpool_unified_mamba_swa_allocator_set_inflight_forward(w.tri, NULL, NULL, 0));
    int64_t moved = -1;
    CHECK(kvpool_unified_mamba_swa_allocator_flush_opportunistic(w.tri, NULL, &moved));
    EXPECT(moved >= 0 && (lazy || moved == 0));
    CHECK(kvpool_unified_mamba_swa_allocator_drain_pending_reuse(w.tri));
    CHECK(kvpool_unified_mamba_swa_allocator_check_invariants(w.tri, NULL));
    CHECK(kvpool_unified_mamba_swa_allocator_clear(w.tri, NULL));
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &now));
    EXPECT(sizes_equal(&now, &initial));
    CHECK(kvpool_unified_mamba_swa_allocator_check_invariants(w.tri, NULL));

    /* Side handles keep the tri-pool alive after its own handle goes. */
    kvpool_unified_mamba_swa_allocator_destroy(w.tri);
    CHECK(kvpool_multi_ended_allocator_check_invariants(w.side[1], NULL));
    for (int i = 0; i < 3; ++i)
        kvpool_multi_ended_allocator_destroy(w.side[i]);
    kvpool_unified_kv_pool_destroy(w.pool);
    EXPECT(kvpool_live_handles() == 0);
    return 0;
}

/* Sliding-window pages of 4 tokens under full pages of 16: a full page binds
 * four, free_swa releases them one by one, free all that are left (the tail of
 * a request's last full page, never written, included); a sliding-window page
 * of 6 is refused with both sizes named, and makes nothing. */
static int decoupled_pages(int lazy) {
    const kvpool_allocator_options options = {lazy, 0, 0};
    kvpool_sub_pool_spec specs[3];
    world w;
    tri_specs(specs);
    specs[2].page_size = 16;
    CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, specs, 3, NULL, NULL,
                                           &w.pool));
    CHECK(kvpool_unified_mamba_swa_allocator_create(w.pool, "full", "swa", "mamba", &options,
                                                    &options, &options, &w.tri));
    for (int i = 0; i < 3; ++i)
        CHECK(kvpool_unified_mamba_swa_allocator_side(w.tri, i, &w.side[i]));
    kvpool_mamba_swa_sizes initial, now;
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &initial));
    EXPECT(initial.available_size > 64 && initial.available_size % 16 == 0);

    int64_t ids[32], prompt[5];
    int ok = 0;
    CHECK(kvpool_unified_mamba_swa_allocator_alloc(w.tri, NULL, 32, ids, &ok));
    EXPECT(ok && allocated_count(w.side[0]) == 32 && allocated_count(w.side[1]) == 32);
    /* 12 tokens leave the window: 3 of the 8 sliding-window pages. */
    CHECK(kvpool_unified_mamba_swa_allocator_free_swa(w.tri, NULL, ids, 12));
    EXPECT(allocated_count(w.side[1]) == 20 && allocated_count(w.side[0]) == 32);
    int32_t swa_physical[2];
    CHECK(kvpool_multi_ended_allocator_translate(w.side[1], NULL, ids + 11, 2, swa_physical, 1));
    EXPECT(swa_physical[0] == 0 && swa_physical[1] > 0);
    /* A prompt of 5 tokens: one full page, its four sliding-window pages. */
    const int64_t prefix[1] = {0}, seq[1] = {5}, no_prefix[1] = {-1};
    CHECK(kvpool_unified_mamba_swa_allocator_alloc_extend(w.tri, NULL, prefix, seq, 1, no_prefix,
                                                          prompt, 5, &ok));
    EXPECT(ok && allocated_count(w.side[0]) == 48 && allocated_count(w.side[1]) == 36);
    CHECK(kvpool_unified_mamba_swa_allocator_check_invariants(w.tri, NULL));
    CHECK(kvpool_unified_mamba_swa_allocator_free(w.tri, NULL, prompt, 5));
    EXPECT(allocated_count(w.side[0]) == 32 && allocated_count(w.side[1]) == 20);
    CHECK(kvpool_unified_mamba_swa_allocator_free(w.tri, NULL, ids, 32));
    EXPECT(allocated_count(w.side[0]) == 0 && allocated_count(w.side[1]) == 0);
    CHECK(kvpool_unified_mamba_swa_allocator_drain_pending_reuse(w.tri));
    int64_t moved = 0;
    CHECK(kvpool_unified_mamba_swa_allocator_flush_opportunistic(w.tri, NULL, &moved));
    CHECK(kvpool_unified_mamba_swa_allocator_sizes(w.tri, &now));
    EXPECT(sizes_equal(&now, &initial));
    CHECK(kvpool_unified_mamba_swa_allocator_check_invariants(w.tri, NULL));
    kvpool_unified_mamba_swa_allocator_destroy(w.tri);
    for (int i = 0; i < 3; ++i)
        kvpool_multi_ended_allocator_destroy(w.side[i]);
    kvpool_unified_kv_pool_destroy(w.pool);

    specs[1].page_size = 6;
    CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 16, specs, 3, NULL, NULL,
                                           &w.pool));
    kvpool_unified_mamba_swa_allocator* bad = NULL;
    EXPECT(kvpool_unified_mamba_swa_allocator_create(w.pool, "full", "swa", "mamba", &options,
                                                     &options, &options,
                                                     &bad) == KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(bad == NULL &&
           strstr(kvpool_last_error(), "page size 6 does not divide the full side's 16") != NULL);
    kvpool_unified_kv_pool_destroy(w.pool);
    EXPECT(kvpool_live_handles() == 0);
    return 0;
}

int main(void) {
    if (bad_layouts() || run(0) || run(1) || decoupled_pages(0) || decoupled_pages(1))
        return 1;
    CHECK(kvpool_finalize_when_unused());
    EXPECT(!kvpool_is_initialized());
    return 0;
}
