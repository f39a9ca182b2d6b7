/* The KV-allocator handle (c_api_kv.h) from plain C, on the host: every kind
 * of allocator (a side, the SWA pair, the Mamba pair, the tri-pool) is made
 * twice, one driven through its own entry points and the other through
 * kvpool_kv_*, with the same random calls (requests prefilled, extended,
 * decoded and freed, the window released, state slots, gates, backup
 * windows, translate, the forward's hooks, flushes, free groups, clear); each
 * call's status, ids, available size and state digest must agree. Then the
 * ops a kind has no part for, refused, and the handle's lifetime. Prints the
 * seeds; exits 0 on success, 1 with a message otherwise. */
#include "c_test_check.h"

#include <stdlib.h>
#include <string.h>

enum { PAGE = 4, FULL_BYTES = 64, SWA_BYTES = 32, STATE_BYTES = 128 };
enum { MAX_REQS = 6, MAX_LEN = 48, MAX_SLOTS = 16, STEPS = 300, SEEDS = 24 };

static uint64_t rng_state;
static int64_t rnd(int64_t n) { /* uniform in [0, n) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int64_t)((rng_state >> 33) % (uint64_t)n);
}

typedef struct {
    int kind; /* KVPOOL_KV_* */
    int via_kv;
    kvpool_unified_kv_pool* pool;
    kvpool_multi_ended_allocator* a;
    kvpool_unified_swa_allocator* swa;
    kvpool_unified_mamba_allocator* mamba;
    kvpool_unified_mamba_swa_allocator* tri;
    kvpool_multi_ended_allocator* side[3];
    int sides;
    kvpool_kv_allocator* kv;
    void* snapshot; /* the open backup window's, of the handle's own type */
} world;

/* The kind's pool and allocator, its side handles and (via_kv) its KV handle. */
static int make_world(world* w, int kind, int via_kv, int lazy) {
    const kvpool_allocator_options o = {lazy, 1, 0, 0};
    memset(w, 0, sizeof *w);
    w->kind = kind;
    w->via_kv = via_kv;
    const int64_t bytes = 24 * PAGE * FULL_BYTES;
    if (kind == KVPOOL_KV_MULTI_ENDED_ALLOCATOR) {
        const kvpool_sub_pool_spec s[1] = {{"full", FULL_BYTES, PAGE, KVPOOL_GROW_UP, 0, 0.0}};
        CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, bytes, s, 1, NULL, NULL,
                                               &w->pool));
        CHECK(kvpool_multi_ended_allocator_create(w->pool, "full", &o, NULL, &w->a));
        w->side[0] = w->a;
        w->sides = 1;
    } else if (kind == KVPOOL_KV_UNIFIED_SWA_ALLOCATOR) {
        const kvpool_sub_pool_spec s[2] = {{"full", FULL_BYTES, PAGE, KVPOOL_GROW_UP, 0, 0.0},
                                           {"swa", SWA_BYTES, PAGE, KVPOOL_GROW_DOWN, 0, 0.0}};
        CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, bytes, s, 2, NULL, NULL,
                                               &w->pool));
        CHECK(kvpool_unified_swa_allocator_create(w->pool, "full", "swa", &o, &o, &w->swa));
        w->sides = 2;
    } else if (kind == KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR) {
        const kvpool_sub_pool_spec s[2] = {{"full", FULL_BYTES, PAGE, KVPOOL_GROW_UP, 0, 0.0},
                                           {"mamba", STATE_BYTES, 1, KVPOOL_GROW_DOWN, 0, 0.0}};
        CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, bytes, s, 2, NULL, NULL,
                                               &w->pool));
        CHECK(kvpool_unified_mamba_allocator_create(w->pool, "full", "mamba", &o, &o, &w->mamba));
        w->sides = 2;
    } else {
        const kvpool_sub_pool_spec s[3] = {{"mamba", STATE_BYTES, 1, KVPOOL_GROW_UP, 0, 0.0},
                                           {"swa", SWA_BYTES, PAGE, KVPOOL_GROW_FLOATING, 0, 0.5},
                                           {"full", FULL_BYTES, PAGE, KVPOOL_GROW_DOWN, 0, 0.0}};
        CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, bytes, s, 3, NULL, NULL,
                                               &w->pool));
        CHECK(kvpool_unified_mamba_swa_allocator_create(w->pool, "full", "swa", "mamba", &o, &o, &o,
                                                        &w->tri));
        w->sides = 3;
    }
    if (via_kv) {
        if (kind == KVPOOL_KV_MULTI_ENDED_ALLOCATOR)
            CHECK(kvpool_multi_ended_allocator_kv(w->a, &w->kv));
        else if (kind == KVPOOL_KV_UNIFIED_SWA_ALLOCATOR)
            CHECK(kvpool_unified_swa_allocator_kv(w->swa, &w->kv));
        else if (kind == KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR)
            CHECK(kvpool_unified_mamba_allocator_kv(w->mamba, &w->kv));
        else
            CHECK(kvpool_unified_mamba_swa_allocator_kv(w->tri, &w->kv));
        /* As kvpool's Python package uses it: the decisions are the same. */
        CHECK(kvpool_kv_set_caller_checks_memory(w->kv, 1));
        int kv_kind = -1, sides = -1;
        CHECK(kvpool_kv_kind(w->kv, &kv_kind, &sides));
        EXPECT(kv_kind == kind && sides == w->sides);
    }
    /* The side handles: the composite's own calls, or kvpool_kv_side. */
    for (int i = 0; i < w->sides && kind != KVPOOL_KV_MULTI_ENDED_ALLOCATOR; ++i) {
        if (via_kv)
            CHECK(kvpool_kv_side(w->kv, i, &w->side[i]));
        else if (kind == KVPOOL_KV_UNIFIED_SWA_ALLOCATOR)
            CHECK(kvpool_unified_swa_allocator_side(w->swa, i, &w->side[i]));
        else if (kind == KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR)
            CHECK(kvpool_unified_mamba_allocator_side(w->mamba, i, &w->side[i]));
        else
            CHECK(kvpool_unified_mamba_swa_allocator_side(w->tri, i, &w->side[i]));
    }
    return 0;
}

static void destroy_world(world* w) {
    kvpool_kv_destroy(w->kv);
    for (int i = 0; i < w->sides && w->kind != KVPOOL_KV_MULTI_ENDED_ALLOCATOR; ++i)
        kvpool_multi_ended_allocator_destroy(w->side[i]);
    kvpool_multi_ended_allocator_destroy(w->a);
    kvpool_unified_swa_allocator_destroy(w->swa);
    kvpool_unified_mamba_allocator_destroy(w->mamba);
    kvpool_unified_mamba_swa_allocator_destroy(w->tri);
    kvpool_unified_kv_pool_destroy(w->pool);
}

static int has_swa(const world* w) {
    return w->kind == KVPOOL_KV_UNIFIED_SWA_ALLOCATOR ||
           w->kind == KVPOOL_KV_UNIFIED_MAMBA_SWA_ALLOCATOR;
}
static int has_slots(const world* w) {
    return w->kind == KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR ||
           w->kind == KVPOOL_KV_UNIFIED_MAMBA_SWA_ALLOCATOR;
}
/* The composite has its own entry points for the forward's hooks, flushes, free
 * groups and clear (the side and the tri-pool; the pairs only through kv). */
static int has_own_hooks(const world* w) {
    return w->kind == KVPOOL_KV_MULTI_ENDED_ALLOCATOR ||
           w->kind == KVPOOL_KV_UNIFIED_MAMBA_SWA_ALLOCATOR;
}
/* The state side's index. */
static int state_side(const world* w) {
    return w->kind == KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR ? 1 : 2;
}

/* ---- each op: through kvpool_kv_*, or the kind's own entry point */
static kvpool_status w_alloc(world* w, int64_t n, int64_t* out, int* ok) {
    if (w->via_kv)
        return kvpool_kv_alloc(w->kv, NULL, n, out, ok);
    switch (w->kind) {
    case KVPOOL_KV_MULTI_ENDED_ALLOCATOR:
        return kvpool_multi_ended_allocator_alloc(w->a, NULL, n, out, ok);
    case KVPOOL_KV_UNIFIED_SWA_ALLOCATOR:
        return kvpool_unified_swa_allocator_alloc(w->swa, NULL, n, out, ok);
    case KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR:
        return kvpool_unified_mamba_allocator_alloc(w->mamba, NULL, n, out, ok);
    default:
        return kvpool_unified_mamba_swa_allocator_alloc(w->tri, NULL, n, out, ok);
    }
}

static kvpool_status w_extend(world* w, const int64_t* prefix, const int64_t* seq, int64_t batch,
                              const int64_t* last, int64_t* out, int64_t n, int* ok) {
    if (w->via_kv)
        return kvpool_kv_alloc_extend(w->kv, NULL, prefix, seq, batch, last, out, n, ok);
    switch (w->kind) {
    case KVPOOL_KV_MULTI_ENDED_ALLOCATOR:
        return kvpool_multi_ended_allocator_alloc_extend(w->a, NULL, prefix, seq, batch, last, out,
                                                         n, ok);
    case KVPOOL_KV_UNIFIED_SWA_ALLOCATOR:
        return kvpool_unified_swa_allocator_alloc_extend(w->swa, NULL, prefix, seq, batch, last,
                                                         out, n, ok);
    case KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR:
        return kvpool_unified_mamba_allocator_alloc_extend(w->mamba, NULL, prefix, seq, batch, last,
                                                           out, n, ok);
    default:
        return kvpool_unified_mamba_swa_allocator_alloc_extend(w->tri, NULL, prefix, seq, batch,
                                                               last, out, n, ok);
    }
}

static kvpool_status w_decode(world* w, const int64_t* seq, int64_t batch, const int64_t* last,
                              int64_t* out, int* ok) {
    if (w->via_kv)
        return kvpool_kv_alloc_decode(w->kv, NULL, seq, batch, last, out, ok);
    switch (w->kind) {
    case KVPOOL_KV_MULTI_ENDED_ALLOCATOR:
        return kvpool_multi_ended_allocator_alloc_decode(w->a, NULL, seq, batch, last, out, ok);
    case KVPOOL_KV_UNIFIED_SWA_ALLOCATOR:
        return kvpool_unified_swa_allocator_alloc_decode(w->swa, NULL, seq, batch, last, out, ok);
    case KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR:
        return kvpool_unified_mamba_allocator_alloc_decode(w->mamba, NULL, seq, batch, last, out,
                                                           ok);
    default:
        return kvpool_unified_mamba_swa_allocator_alloc_decode(w->tri, NULL, seq, batch, last, out,
                                                               ok);
    }
}

static kvpool_status w_state_slots(world* w, int64_t n, int64_t* out, int* ok) {
    if (w->via_kv)
        return kvpool_kv_alloc_state_slots(w->kv, NULL, n, out, ok);
    if (w->kind == KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR)
        return kvpool_unified_mamba_allocator_alloc_state_slots(w->mamba, NULL, n, out, ok);
    return kvpool_unified_mamba_swa_allocator_alloc_state_slots(w->tri, NULL, n, out, ok);
}

static kvpool_status w_free(world* w, const int64_t* ids, int64_t n) {
    if (w->via_kv)
        return kvpool_kv_free(w->kv, NULL, ids, n);
    switch (w->kind) {
    case KVPOOL_KV_UNIFIED_SWA_ALLOCATOR:
        return kvpool_unified_swa_allocator_free(w->swa, NULL, ids, n);
    case KVPOOL_KV_UNIFIED_MAMBA_SWA_ALLOCATOR:
        return kvpool_unified_mamba_swa_allocator_free(w->tri, NULL, ids, n);
    default:
        return kvpool_multi_ended_allocator_free(w->side[0], NULL, ids, n, 0); /* the full side */
    }
}

static kvpool_status w_free_swa(world* w, const int64_t* ids, int64_t n) {
    if (w->via_kv)
        return kvpool_kv_free_swa(w->kv, NULL, ids, n);
    if (w->kind == KVPOOL_KV_UNIFIED_SWA_ALLOCATOR)
        return kvpool_unified_swa_allocator_free_swa(w->swa, NULL, ids, n);
    return kvpool_unified_mamba_swa_allocator_free_swa(w->tri, NULL, ids, n);
}

static kvpool_status w_gate(world* w, const kvpool_completion_token* t, const int64_t* ids,
                            int64_t n, const int64_t* slots, int64_t ns) {
    if (w->via_kv)
        return kvpool_kv_gate_transfer(w->kv, t, ids, n, slots, ns);
    switch (w->kind) {
    case KVPOOL_KV_MULTI_ENDED_ALLOCATOR:
        return kvpool_multi_ended_allocator_gate_transfer(w->a, t, ids, n);
    case KVPOOL_KV_UNIFIED_SWA_ALLOCATOR:
        return kvpool_unified_swa_allocator_gate_transfer(w->swa, t, ids, n);
    case KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR:
        return kvpool_unified_mamba_allocator_gate_transfer(w->mamba, t, ids, n, slots, ns);
    default:
        return kvpool_unified_mamba_swa_allocator_gate_transfer(w->tri, t, ids, n, slots, ns);
    }
}

static kvpool_status w_translate(world* w, const int64_t* ids, int64_t n, int64_t* out) {
    if (w->via_kv)
        return kvpool_kv_translate(w->kv, NULL, ids, n, out, 0);
    return kvpool_multi_ended_allocator_translate(w->side[0], NULL, ids, n, out, 0);
}

static kvpool_status w_available(world* w, int64_t* out) {
    if (w->via_kv)
        return kvpool_kv_available_size(w->kv, out);
    kvpool_status s;
    if (w->kind == KVPOOL_KV_MULTI_ENDED_ALLOCATOR) {
        kvpool_allocator_state st;
        s = kvpool_multi_ended_allocator_state(w->a, &st);
        *out = st.available_size;
    } else if (w->kind == KVPOOL_KV_UNIFIED_SWA_ALLOCATOR) {
        kvpool_swa_sizes st;
        s = kvpool_unified_swa_allocator_sizes(w->swa, &st);
        *out = st.available_size;
    } else if (w->kind == KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR) {
        kvpool_mamba_sizes st;
        s = kvpool_unified_mamba_allocator_sizes(w->mamba, &st);
        *out = st.available_size;
    } else {
        kvpool_mamba_swa_sizes st;
        s = kvpool_unified_mamba_swa_allocator_sizes(w->tri, &st);
        *out = st.available_size;
    }
    return s;
}

static kvpool_status w_digest(world* w, uint64_t* out) {
    if (w->via_kv)
        return kvpool_kv_state_digest(w->kv, out);
    switch (w->kind) {
    case KVPOOL_KV_MULTI_ENDED_ALLOCATOR:
        return kvpool_multi_ended_allocator_state_digest(w->a, out);
    case KVPOOL_KV_UNIFIED_SWA_ALLOCATOR:
        return kvpool_unified_swa_allocator_state_digest(w->swa, out);
    case KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR:
        return kvpool_unified_mamba_allocator_state_digest(w->mamba, out);
    default:
        return kvpool_unified_mamba_swa_allocator_state_digest(w->tri, out);
    }
}

static kvpool_status w_backup(world* w) {
    if (w->via_kv)
        return kvpool_kv_backup_state(w->kv, (kvpool_kv_snapshot**)&w->snapshot);
    switch (w->kind) {
    case KVPOOL_KV_MULTI_ENDED_ALLOCATOR:
        return kvpool_multi_ended_allocator_backup_state(w->a,
                                                         (kvpool_allocator_snapshot**)&w->snapshot);
    case KVPOOL_KV_UNIFIED_SWA_ALLOCATOR:
        return kvpool_unified_swa_allocator_backup_state(w->swa,
                                                         (kvpool_pair_snapshot**)&w->snapshot);
    case KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR:
        return kvpool_unified_mamba_allocator_backup_state(w->mamba,
                                                           (kvpool_pair_snapshot**)&w->snapshot);
    default:
        return kvpool_unified_mamba_swa_allocator_backup_state(
            w->tri, (kvpool_mamba_swa_snapshot**)&w->snapshot);
    }
}

/* Restores (restore != 0) or commits the open window, and destroys its snapshot. */
static kvpool_status w_close_window(world* w, int restore) {
    kvpool_status s;
    void* p = w->snapshot;
    if (w->via_kv) {
        s = restore ? kvpool_kv_restore_state(w->kv, NULL, p) : kvpool_kv_commit_state(w->kv, p);
        kvpool_kv_snapshot_destroy(p);
    } else if (w->kind == KVPOOL_KV_MULTI_ENDED_ALLOCATOR) {
        s = restore ? kvpool_multi_ended_allocator_restore_state(w->a, NULL, p)
                    : kvpool_multi_ended_allocator_commit_state(w->a, p);
        kvpool_allocator_snapshot_destroy(p);
    } else if (w->kind == KVPOOL_KV_UNIFIED_SWA_ALLOCATOR) {
        s = restore ? kvpool_unified_swa_allocator_restore_state(w->swa, NULL, p)
                    : kvpool_unified_swa_allocator_commit_state(w->swa, p);
        kvpool_pair_snapshot_destroy(p);
    } else if (w->kind == KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR) {
        s = restore ? kvpool_unified_mamba_allocator_restore_state(w->mamba, NULL, p)
                    : kvpool_unified_mamba_allocator_commit_state(w->mamba, p);
        kvpool_pair_snapshot_destroy(p);
    } else {
        s = restore ? kvpool_unified_mamba_swa_allocator_restore_state(w->tri, NULL, p)
                    : kvpool_unified_mamba_swa_allocator_commit_state(w->tri, p);
        kvpool_mamba_swa_snapshot_destroy(p);
    }
    w->snapshot = NULL;
    return s;
}

/* The hooks of the side and the tri-pool: 0 set_latest_forward_done(t),
 * 1 set_inflight_forward(t, ids), 2 flush, 3 drain_pending_reuse,
 * 4 free_group_begin, 5 free_group_end, 6 clear, 7 check_invariants. */
static kvpool_status w_hook(world* w, int hook, const kvpool_completion_token* t,
                            const int64_t* ids, int64_t n, int64_t* moved) {
    const int side = w->kind == KVPOOL_KV_MULTI_ENDED_ALLOCATOR;
    kvpool_kv_allocator* kv = w->kv;
    switch (hook) {
    case 0:
        return kv     ? kvpool_kv_set_latest_forward_done(kv, t)
               : side ? kvpool_multi_ended_allocator_set_latest_forward_done(w->a, t)
                      : kvpool_unified_mamba_swa_allocator_set_latest_forward_done(w->tri, t);
    case 1:
        return kv     ? kvpool_kv_set_inflight_forward(kv, t, ids, n)
               : side ? kvpool_multi_ended_allocator_set_inflight_forward(w->a, t, ids, n)
                      : kvpool_unified_mamba_swa_allocator_set_inflight_forward(w->tri, t, ids, n);
    case 2:
        return kv     ? kvpool_kv_flush(kv, NULL, moved)
               : side ? kvpool_multi_ended_allocator_flush(w->a, NULL, 0, moved)
                      : kvpool_unified_mamba_swa_allocator_flush_opportunistic(w->tri, NULL, moved);
    case 3:
        return kv     ? kvpool_kv_drain_pending_reuse(kv)
               : side ? kvpool_multi_ended_allocator_drain_pending_reuse(w->a)
                      : kvpool_unified_mamba_swa_allocator_drain_pending_reuse(w->tri);
    case 4:
        return kv     ? kvpool_kv_free_group_begin(kv)
               : side ? kvpool_multi_ended_allocator_free_group_begin(w->a)
                      : kvpool_unified_mamba_swa_allocator_free_group_begin(w->tri);
    case 5:
        return kv     ? kvpool_kv_free_group_end(kv, NULL)
               : side ? kvpool_multi_ended_allocator_free_group_end(w->a, NULL)
                      : kvpool_unified_mamba_swa_allocator_free_group_end(w->tri, NULL);
    case 6:
        return kv     ? kvpool_kv_clear(kv, NULL)
               : side ? kvpool_multi_ended_allocator_clear(w->a, NULL)
                      : kvpool_unified_mamba_swa_allocator_clear(w->tri, NULL);
    default:
        return kv     ? kvpool_kv_check_invariants(kv, NULL)
               : side ? kvpool_multi_ended_allocator_check_invariants(w->a, NULL)
                      : kvpool_unified_mamba_swa_allocator_check_invariants(w->tri, NULL);
    }
}

/* What the driver knows of the allocations: live requests' tokens (the first
 * swa_freed of them released from the window) and live state slots. */
typedef struct {
    int64_t tokens[MAX_REQS][MAX_LEN];
    int64_t len[MAX_REQS]; /* 0: no request */
    int64_t swa_freed[MAX_REQS];
    int64_t slots[MAX_SLOTS];
    int slot_count;
} book;

static int done_query(void* user) {
    (void)user;
    return 1;
}

/* The forwards' markers, numbered as made: those before forwards_done are done
 * (both worlds share them). */
static intptr_t forwards_made, forwards_done;
static int forward_query(void* user) {
    return (intptr_t)user < forwards_done;
}

static int same_status(kvpool_status a, kvpool_status b, const char* op, int step) {
    if (a == b)
        return 0;
    fprintf(stderr, "kv_test: step %d, %s: status %d by its own call, %d through kvpool_kv\n", step,
            op, a, b);
    return 1;
}
#define SAME(a, b, op)                                                                             \
    do {                                                                                           \
        if (same_status((a), (b), (op), step))                                                     \
            return fail(op);                                                                       \
    } while (0)

/* One random step on both worlds; the book follows their (equal) results. */
static int step_both(world* x, world* y, book* b, book* saved, int step) {
    int64_t out_x[64], out_y[64];
    int ok_x = 0, ok_y = 0, r = (int)rnd(MAX_REQS);
    const int op = (int)rnd(12);
    if (rnd(6) == 0)
        forwards_done = forwards_made;            /* the forwards in flight complete */
    if (op == 0 || (op == 1 && b->len[r] == 0)) { /* a new request: prefill or plain alloc */
        if (b->len[r] != 0)
            return 0;
        const int64_t prefix = 0, seq = 1 + rnd(12), none = -1;
        const int plain = rnd(3) == 0;
        const int64_t n = plain ? PAGE * (1 + rnd(3)) : seq;
        SAME(plain ? w_alloc(x, n, out_x, &ok_x)
                   : w_extend(x, &prefix, &seq, 1, &none, out_x, n, &ok_x),
             plain ? w_alloc(y, n, out_y, &ok_y)
                   : w_extend(y, &prefix, &seq, 1, &none, out_y, n, &ok_y),
             "alloc / alloc_extend");
        EXPECT(ok_x == ok_y && (!ok_x || memcmp(out_x, out_y, (size_t)n * sizeof *out_x) == 0));
        if (ok_x) {
            memcpy(b->tokens[r], out_x, (size_t)n * sizeof *out_x);
            b->len[r] = n;
            b->swa_freed[r] = 0;
        }
    } else if (op == 1) { /* extend a request */
        const int64_t prefix = b->len[r], add = 1 + rnd(6), seq = prefix + add;
        const int64_t last = b->tokens[r][prefix - 1];
        if (seq > MAX_LEN)
            return 0;
        SAME(w_extend(x, &prefix, &seq, 1, &last, out_x, add, &ok_x),
             w_extend(y, &prefix, &seq, 1, &last, out_y, add, &ok_y), "alloc_extend");
        EXPECT(ok_x == ok_y && (!ok_x || memcmp(out_x, out_y, (size_t)add * sizeof *out_x) == 0));
        if (ok_x) {
            memcpy(&b->tokens[r][prefix], out_x, (size_t)add * sizeof *out_x);
            b->len[r] = seq;
        }
    } else if (op == 2) { /* decode every request with room */
        int64_t seq[MAX_REQS], last[MAX_REQS];
        int which[MAX_REQS], batch = 0;
        for (int i = 0; i < MAX_REQS; ++i)
            if (b->len[i] > 0 && b->len[i] < MAX_LEN) {
                which[batch] = i;
                seq[batch] = b->len[i] + 1;
                last[batch++] = b->tokens[i][b->len[i] - 1];
            }
        if (batch == 0)
            return 0;
        SAME(w_decode(x, seq, batch, last, out_x, &ok_x),
             w_decode(y, seq, batch, last, out_y, &ok_y), "alloc_decode");
        EXPECT(ok_x == ok_y && (!ok_x || memcmp(out_x, out_y, (size_t)batch * sizeof *out_x) == 0));
        for (int i = 0; ok_x && i < batch; ++i)
            b->tokens[which[i]][b->len[which[i]]++] = out_x[i];
    } else if (op == 3 && b->len[r] > 0) { /* free a request (refused inside a window) */
        const kvpool_status s = w_free(x, b->tokens[r], b->len[r]);
        SAME(s, w_free(y, b->tokens[r], b->len[r]), "free");
        if (s == KVPOOL_OK)
            b->len[r] = 0;
    } else if (op == 4 && has_swa(x) && b->len[r] > b->swa_freed[r]) { /* the window moves on */
        const int64_t n = 1 + rnd(b->len[r] - b->swa_freed[r]);
        const int64_t* first = &b->tokens[r][b->swa_freed[r]];
        const kvpool_status s = w_free_swa(x, first, n);
        SAME(s, w_free_swa(y, first, n), "free_swa");
        if (s == KVPOOL_OK)
            b->swa_freed[r] += n;
    } else if (op == 5 && has_slots(x)) { /* state slots: allocate, or free the last few */
        if (rnd(2) == 0 && b->slot_count + 3 <= MAX_SLOTS) {
            const int64_t n = 1 + rnd(3);
            SAME(w_state_slots(x, n, out_x, &ok_x), w_state_slots(y, n, out_y, &ok_y),
                 "alloc_state_slots");
            EXPECT(ok_x == ok_y && (!ok_x || memcmp(out_x, out_y, (size_t)n * sizeof *out_x) == 0));
            for (int i = 0; ok_x && i < n; ++i)
                b->slots[b->slot_count++] = out_x[i];
        } else if (b->slot_count > 0) {
            const int64_t n = 1 + rnd(b->slot_count);
            const int64_t* last = &b->slots[b->slot_count - n];
            const int k = state_side(x);
            const kvpool_status s = kvpool_multi_ended_allocator_free(x->side[k], NULL, last, n, 0);
            SAME(s, kvpool_multi_ended_allocator_free(y->side[k], NULL, last, n, 0),
                 "free of state slots");
            if (s == KVPOOL_OK)
                b->slot_count -= (int)n;
        }
    } else if (op == 6 && b->len[r] > 0) { /* gate a request's pages (and the slots) */
        kvpool_completion_token* token = NULL;
        CHECK(kvpool_completion_token_from_query(done_query, NULL, NULL, &token));
        const int64_t ns = has_slots(x) ? b->slot_count : 0;
        SAME(w_gate(x, token, b->tokens[r], b->len[r], b->slots, ns),
             w_gate(y, token, b->tokens[r], b->len[r], b->slots, ns), "gate_transfer");
        kvpool_completion_token_release(token);
    } else if (op == 7 || (x->snapshot != NULL && rnd(3) == 0)) {
        /* a backup window opens, or (soon: frees wait for it) closes by restore or commit */
        if (x->snapshot == NULL) {
            SAME(w_backup(x), w_backup(y), "backup_state");
            *saved = *b;
        } else {
            const int restore = (int)rnd(2);
            const kvpool_status s = w_close_window(x, restore);
            SAME(s, w_close_window(y, restore), "restore_state / commit_state");
            if (s == KVPOOL_OK && restore)
                *b = *saved;
        }
    } else if (op == 8 && b->len[r] > 0) { /* translate a request (its full side) */
        SAME(w_translate(x, b->tokens[r], b->len[r], out_x),
             w_translate(y, b->tokens[r], b->len[r], out_y), "translate");
        EXPECT(memcmp(out_x, out_y, (size_t)b->len[r] * sizeof *out_x) == 0);
    } else if (op >= 9 && has_own_hooks(x)) {
        int hook = (int)rnd(8);
        if ((hook == 6 && rnd(8) != 0) || ((hook == 4 || hook == 6) && x->snapshot != NULL))
            hook = 7;    /* clear rarely; free groups and clear outside a window (one refused
                            there leaves its group open, for a free after the window) */
        if (hook == 4) { /* a free group around a request's free */
            SAME(w_hook(x, 4, NULL, NULL, 0, NULL), w_hook(y, 4, NULL, NULL, 0, NULL),
                 "free_group_begin");
            if (b->len[r] > 0) {
                const kvpool_status s = w_free(x, b->tokens[r], b->len[r]);
                SAME(s, w_free(y, b->tokens[r], b->len[r]), "free in a group");
                if (s == KVPOOL_OK)
                    b->len[r] = 0;
            }
            hook = 5;
        }
        int64_t moved_x = -1, moved_y = -1;
        kvpool_completion_token* forward = NULL;
        CHECK(kvpool_completion_token_from_query(forward_query, NULL, (void*)forwards_made++,
                                                 &forward));
        const kvpool_status s = w_hook(x, hook, forward, b->tokens[r], b->len[r], &moved_x);
        SAME(s, w_hook(y, hook, forward, b->tokens[r], b->len[r], &moved_y), "a hook");
        kvpool_completion_token_release(forward);
        EXPECT(moved_x == moved_y);
        if (hook == 6 && s == KVPOOL_OK)
            memset(b, 0, sizeof *b);
    }
    int64_t size_x = -1, size_y = -2;
    uint64_t digest_x = 0, digest_y = 1;
    CHECK(w_available(x, &size_x));
    CHECK(w_available(y, &size_y));
    CHECK(w_digest(x, &digest_x));
    CHECK(w_digest(y, &digest_y));
    if (size_x != size_y || digest_x != digest_y) {
        fprintf(stderr, "kv_test: step %d (op %d): available %lld / %lld, digests differ: %d\n",
                step, op, (long long)size_x, (long long)size_y, digest_x != digest_y);
        return fail("the two allocators diverged");
    }
    return 0;
}

/* Both worlds of kind through STEPS random steps of seed. */
static int run_kind(int kind, uint64_t seed) {
    world x, y;
    book b, saved;
    memset(&b, 0, sizeof b);
    rng_state = seed;
    const int lazy = (int)rnd(2);
    if (make_world(&x, kind, 0, lazy) || make_world(&y, kind, 1, lazy))
        return 1;
    for (int step = 0; step < STEPS; ++step)
        if (step_both(&x, &y, &b, &saved, step)) {
            fprintf(stderr, "kv_test: kind %d, seed %llu, lazy %d\n", kind,
                    (unsigned long long)seed, lazy);
            return 1;
        }
    if (x.snapshot != NULL) {
        CHECK(w_close_window(&x, 0));
        CHECK(w_close_window(&y, 0));
    }
    if (has_own_hooks(&x))
        CHECK(w_hook(&x, 7, NULL, NULL, 0, NULL));
    CHECK(kvpool_kv_check_invariants(y.kv, NULL));
    destroy_world(&x);
    destroy_world(&y);
    EXPECT(kvpool_live_handles() == 0);
    return 0;
}

/* An op a kind has no part for is refused, naming it, and changes nothing. */
static int refusals(void) {
    world side, swa;
    if (make_world(&side, KVPOOL_KV_MULTI_ENDED_ALLOCATOR, 1, 0) ||
        make_world(&swa, KVPOOL_KV_UNIFIED_SWA_ALLOCATOR, 1, 0))
        return 1;
    int64_t ids[4], slot = 1;
    int ok = 0;
    uint64_t before = 0, after = 1;
    CHECK(kvpool_kv_alloc(side.kv, NULL, 4, ids, &ok));
    EXPECT(ok);
    CHECK(kvpool_kv_state_digest(side.kv, &before));
    EXPECT(kvpool_kv_free_swa(side.kv, NULL, ids, 4) == KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(strstr(kvpool_last_error(), "a side has no sliding-window side") != NULL);
    EXPECT(kvpool_kv_alloc_state_slots(swa.kv, NULL, 1, ids, &ok) == KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(strstr(kvpool_last_error(), "the SWA pair has no state slots") != NULL);
    EXPECT(kvpool_kv_gate_transfer(side.kv, NULL, ids, 4, &slot, 1) ==
           KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(kvpool_kv_set_eviction_callback(side.kv, NULL, NULL) == KVPOOL_ERROR_INVALID_ARGUMENT);
    kvpool_multi_ended_allocator* none = NULL;
    EXPECT(kvpool_kv_side(swa.kv, 2, &none) == KVPOOL_ERROR_INVALID_ARGUMENT && none == NULL);
    EXPECT(kvpool_kv_alloc(NULL, NULL, 4, ids, &ok) == KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(kvpool_kv_set_caller_checks_memory(side.kv, 2) == KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(strstr(kvpool_last_error(), "caller_checks is 0 or 1") != NULL);
    EXPECT(kvpool_kv_set_caller_checks_memory(NULL, 1) == KVPOOL_ERROR_INVALID_ARGUMENT);
    /* A snapshot of a side is not the SWA pair's. */
    kvpool_kv_snapshot* snapshot = NULL;
    CHECK(kvpool_kv_backup_state(side.kv, &snapshot));
    EXPECT(kvpool_kv_commit_state(swa.kv, snapshot) == KVPOOL_ERROR_INVALID_STATE);
    EXPECT(strstr(kvpool_last_error(), "not of the SWA pair") != NULL);
    CHECK(kvpool_kv_commit_state(side.kv, snapshot));
    kvpool_kv_snapshot_destroy(snapshot);
    CHECK(kvpool_kv_state_digest(side.kv, &after));
    EXPECT(before == after);
    destroy_world(&side);
    destroy_world(&swa);
    EXPECT(kvpool_live_handles() == 0);
    return 0;
}

/* A KV handle keeps its allocator alive; one made on a side before
 * bind_peer keeps the peer alive too. */
static int lifetimes(void) {
    const kvpool_sub_pool_spec s[2] = {{"full", FULL_BYTES, PAGE, KVPOOL_GROW_UP, 0, 0.0},
                                       {"swa", SWA_BYTES, PAGE, KVPOOL_GROW_DOWN, 0, 0.0}};
    kvpool_unified_kv_pool* pool = NULL;
    kvpool_multi_ended_allocator *up = NULL, *down = NULL;
    kvpool_kv_allocator* kv = NULL;
    CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 14, s, 2, NULL, NULL, &pool));
    CHECK(kvpool_multi_ended_allocator_create(pool, "full", NULL, NULL, &up));
    CHECK(kvpool_multi_ended_allocator_create(pool, "swa", NULL, NULL, &down));
    CHECK(kvpool_multi_ended_allocator_kv(up, &kv));
    CHECK(kvpool_multi_ended_allocator_bind_peer(up, down));
    kvpool_multi_ended_allocator_destroy(up);
    kvpool_multi_ended_allocator_destroy(down);
    kvpool_unified_kv_pool_destroy(pool);
    int64_t ids[8];
    int ok = 0;
    CHECK(kvpool_kv_alloc(kv, NULL, 8, ids, &ok));
    EXPECT(ok);
    CHECK(kvpool_kv_free(kv, NULL, ids, 8));
    CHECK(kvpool_kv_check_invariants(kv, NULL));
    kvpool_kv_destroy(kv);
    EXPECT(kvpool_live_handles() == 0);

    world tri;
    if (make_world(&tri, KVPOOL_KV_UNIFIED_MAMBA_SWA_ALLOCATOR, 1, 1))
        return 1;
    for (int i = 0; i < 3; ++i)
        kvpool_multi_ended_allocator_destroy(tri.side[i]);
    kvpool_unified_mamba_swa_allocator_destroy(tri.tri);
    kvpool_unified_kv_pool_destroy(tri.pool);
    CHECK(kvpool_kv_alloc_state_slots(tri.kv, NULL, 2, ids, &ok));
    EXPECT(ok);
    CHECK(kvpool_kv_check_invariants(tri.kv, NULL));
    kvpool_kv_destroy(tri.kv);
    EXPECT(kvpool_live_handles() == 0);
    return 0;
}

int main(int argc, char** argv) {
    /* The first seed: argv[1], else a fixed one; printed for a rerun. */
    const uint64_t first = argc > 1 ? strtoull(argv[1], NULL, 10) : 28;
    printf("kv_test: seeds %llu to %llu\n", (unsigned long long)first,
           (unsigned long long)(first + SEEDS - 1));
    for (uint64_t seed = first; seed < first + SEEDS; ++seed)
        for (int kind = KVPOOL_KV_MULTI_ENDED_ALLOCATOR;
             kind <= KVPOOL_KV_UNIFIED_MAMBA_SWA_ALLOCATOR; ++kind)
            if (run_kind(kind, seed))
                return 1;
    if (refusals() || lifetimes())
        return 1;
    return 0;
}
