/* PD transfer descriptors through the C API from plain C, on the host: a
 * sender and a receiver pool (lazy sides, pages of 4 tokens, two layers of a
 * K and a V block), a request stamped on the sender, both ends described and
 * gated by one token, a "transfer engine" that memcpys the paired runs (half
 * before and half after both ends compact), then the receiver's bytes checked
 * through translate; the same copy layer by layer; a cancelled transfer that
 * leaves the receiver as it was; bad input refused. Exits 0 on success, 1
 * with a message otherwise. */
#include "c_test_check.h"

#include <stdint.h>
#include <string.h>

enum { PAGE = 4, LAYERS = 2, K_ROW = 4, V_ROW = 8, REQ = 10 };
enum { LAYER_PART = PAGE * (K_ROW + V_ROW), PAGE_BYTES = LAYERS * LAYER_PART };

static const int64_t block_offsets[2] = {0, PAGE* K_ROW};
static const int64_t row_bytes[2] = {K_ROW, V_ROW};
static const kvpool_sub_pool_transfer_layout layout = {LAYERS, 2, block_offsets, row_bytes, 0};

typedef struct {
    kvpool_unified_kv_pool* pool;
    kvpool_multi_ended_allocator* full;
    uint8_t* bytes;
} end_t;

/* What a receiver in another process computes from the two ends' page run
 * lists (kvpool_transfer_pair_runs): the copies pair_pages gives. */
static int same_from_run_lists(const kvpool_transfer_descriptor* src,
                               const kvpool_transfer_descriptor* dst, const kvpool_copy_run* want,
                               int64_t n) {
    kvpool_byte_run s[16], d[16];
    kvpool_copy_run got[64];
    int64_t ns = 0, nd = 0, ng = 0;
    CHECK(kvpool_transfer_page_runs(src, s, 16, &ns));
    CHECK(kvpool_transfer_page_runs(dst, d, 16, &nd));
    EXPECT(ns <= 16 && nd <= 16);
    CHECK(kvpool_transfer_pair_runs(s, ns, d, nd, got, 64, &ng));
    EXPECT(ng == n && memcmp(got, want, sizeof(kvpool_copy_run) * (size_t)n) == 0);
    return 0;
}

static int query(void* user) {
    return *(const int*)user;
}

static int make_end(end_t* e) {
    const kvpool_sub_pool_spec spec = {"full", LAYERS * (K_ROW + V_ROW), PAGE, KVPOOL_GROW_UP, 0,
                                       0.0};
    const kvpool_allocator_options lazy = {1, 1, 0, 0};
    int64_t size = 0;
    CHECK(kvpool_unified_kv_pool_create_on(KVPOOL_DEVICE_HOST, 1 << 14, &spec, 1, NULL, NULL,
                                           &e->pool));
    CHECK(kvpool_multi_ended_allocator_create(e->pool, "full", &lazy, NULL, &e->full));
    CHECK(kvpool_unified_kv_pool_bytes(e->pool, (void**)&e->bytes, &size));
    return 0;
}

/* The byte k of block b of layer l of the token at position i of the request. */
static uint8_t stamp(int64_t i, int l, int b, int k) {
    return (uint8_t)(i * 31 + l * 7 + b * 3 + k + 1);
}

/* Where block b of layer l of physical token p lies (the page-major layout). */
static int64_t row_at(int64_t p, int l, int b) {
    return p / PAGE * PAGE_BYTES + l * LAYER_PART + block_offsets[b] + p % PAGE * row_bytes[b];
}

/* Writes (write = 1) or checks the stamps of the request's tokens on e. */
static int stamps(end_t* e, const int64_t* tokens, int64_t n, int write) {
    int64_t physical[16];
    CHECK(kvpool_multi_ended_allocator_translate(e->full, NULL, tokens, n, physical, 0));
    for (int64_t i = 0; i < n; ++i)
        for (int l = 0; l < LAYERS; ++l)
            for (int b = 0; b < 2; ++b)
                for (int k = 0; k < row_bytes[b]; ++k) {
                    uint8_t* at = e->bytes + row_at(physical[i], l, b) + k;
                    if (write)
                        *at = stamp(i, l, b, k);
                    else
                        EXPECT(*at == stamp(i, l, b, k));
                }
    return 0;
}

static void copy(const end_t* src, end_t* dst, const kvpool_copy_run* runs, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        memcpy(dst->bytes + runs[i].dst_offset, src->bytes + runs[i].src_offset,
               (size_t)runs[i].length);
}

/* Each transfer's completion flag, read by its token's query: kvpool may poll
 * a token after its caller released it (the gate holds its own reference),
 * so a flag outlives its transfer. */
static int completed[4];

/* Transfer k of the request's first REQ tokens; cancel: the receiver gives up. */
static int transfer(end_t* a, end_t* b, int k, int whole_pages, int cancel) {
    int64_t before[PAGE], sent[3 * PAGE], dst[3 * PAGE], where[3 * PAGE], now[3 * PAGE];
    int ok = 0;
    int* done = &completed[k];
    kvpool_completion_token* token = NULL;
    kvpool_transfer_descriptor *src_t = NULL, *dst_t = NULL;
    kvpool_allocator_state b_state, b_after;
    kvpool_copy_run runs[64];
    int64_t n = 0, moved = 0;
    CHECK(kvpool_multi_ended_allocator_alloc(a->full, NULL, PAGE, before, &ok));
    CHECK(kvpool_multi_ended_allocator_alloc(a->full, NULL, 3 * PAGE, sent, &ok));
    EXPECT(ok);
    CHECK(stamps(a, sent, REQ, 1));
    CHECK(kvpool_multi_ended_allocator_flush(b->full, NULL, 1, &moved));
    CHECK(kvpool_multi_ended_allocator_state(b->full, &b_state));
    CHECK(kvpool_completion_token_from_query(query, NULL, done, &token));

    CHECK(kvpool_transfer_describe(a->full, &layout, token, sent, REQ, &src_t));
    CHECK(kvpool_multi_ended_allocator_alloc(b->full, NULL, 3 * PAGE, dst, &ok));
    EXPECT(ok);
    CHECK(kvpool_transfer_describe(b->full, &layout, token, dst, REQ, &dst_t));
    kvpool_transfer_info info;
    CHECK(kvpool_transfer_get_info(src_t, &info));
    EXPECT(info.tokens == REQ && info.pages == 3 && info.page_bytes == PAGE_BYTES &&
           info.layer_stride == LAYER_PART && info.blocks_per_layer == 2);
    if (whole_pages) {
        CHECK(kvpool_transfer_pair_pages(src_t, dst_t, runs, 64, &n));
        CHECK(same_from_run_lists(src_t, dst_t, runs, n));
    } else {
        int64_t m = 0;
        for (int l = 0; l < LAYERS; ++l)
            for (int blk = 0; blk < 2; ++blk) {
                CHECK(kvpool_transfer_pair_layer(src_t, dst_t, l, blk, runs + n, 64 - n, &m));
                n += m;
            }
    }
    copy(a, b, runs, n / 2);

    /* In flight: the sender frees the request below and packs urgently; the gate holds. */
    CHECK(kvpool_multi_ended_allocator_translate(a->full, NULL, sent, REQ, where, 0));
    CHECK(kvpool_multi_ended_allocator_free(a->full, NULL, before, PAGE, 0));
    CHECK(kvpool_multi_ended_allocator_flush(a->full, NULL, 1, &moved));
    CHECK(kvpool_multi_ended_allocator_flush(b->full, NULL, 1, &moved));
    CHECK(kvpool_multi_ended_allocator_translate(a->full, NULL, sent, REQ, now, 0));
    EXPECT(memcmp(where, now, sizeof(int64_t) * REQ) == 0);
    *done = 1;
    if (cancel) {
        CHECK(kvpool_multi_ended_allocator_free(b->full, NULL, dst, 3 * PAGE, 0));
        CHECK(kvpool_multi_ended_allocator_flush(b->full, NULL, 1, &moved));
        CHECK(kvpool_multi_ended_allocator_state(b->full, &b_after));
        EXPECT(b_after.allocated_count == b_state.allocated_count &&
               b_after.available_size == b_state.available_size);
    } else {
        copy(a, b, runs + n / 2, n - n / 2);
        CHECK(stamps(b, dst, REQ, 0));
        CHECK(kvpool_multi_ended_allocator_free(b->full, NULL, dst, 3 * PAGE, 0));
    }
    CHECK(stamps(a, sent, REQ, 0));
    CHECK(kvpool_multi_ended_allocator_free(a->full, NULL, sent, 3 * PAGE, 0));
    kvpool_transfer_destroy(src_t);
    kvpool_transfer_destroy(dst_t);
    kvpool_completion_token_release(token);
    CHECK(kvpool_multi_ended_allocator_check_invariants(a->full, NULL));
    CHECK(kvpool_multi_ended_allocator_check_invariants(b->full, NULL));
    return 0;
}

static int bad_input(end_t* a) {
    int64_t tokens[PAGE];
    int ok = 0;
    kvpool_transfer_descriptor* t = NULL;
    int64_t n = 0;
    CHECK(kvpool_multi_ended_allocator_alloc(a->full, NULL, PAGE, tokens, &ok));
    const int64_t unbound[2] = {tokens[0], 4000};
    EXPECT(kvpool_transfer_describe(a->full, &layout, NULL, unbound, 2, &t) ==
               KVPOOL_ERROR_INVALID_ARGUMENT &&
           t == NULL && strstr(kvpool_last_error(), "token 4000 (position 1) is not bound"));
    const int64_t too_long[2] = {K_ROW, 2 * V_ROW};
    const kvpool_sub_pool_transfer_layout bad = {LAYERS, 2, block_offsets, too_long, 0};
    EXPECT(kvpool_transfer_describe(a->full, &bad, NULL, tokens, PAGE, &t) ==
               KVPOOL_ERROR_INVALID_ARGUMENT &&
           t == NULL && strstr(kvpool_last_error(), "block 1"));
    CHECK(kvpool_transfer_describe(a->full, &layout, NULL, tokens, PAGE, &t));
    EXPECT(kvpool_transfer_page_runs(t, NULL, 1, &n) == KVPOOL_ERROR_INVALID_ARGUMENT);
    CHECK(kvpool_transfer_page_runs(t, NULL, 0, &n));
    EXPECT(n == 1);
    EXPECT(kvpool_transfer_layer_runs(t, LAYERS, 0, NULL, 0, &n) == KVPOOL_ERROR_OUT_OF_RANGE);
    kvpool_transfer_destroy(t);
    const kvpool_byte_run eight[1] = {{0, 8}}, four[1] = {{16, 4}}, empty[1] = {{32, 0}};
    kvpool_copy_run copies[2];
    EXPECT(kvpool_transfer_pair_runs(eight, 1, four, 1, copies, 2, &n) ==
               KVPOOL_ERROR_INVALID_ARGUMENT &&
           strstr(kvpool_last_error(), "runs hold 8 bytes, the receiver's 4"));
    EXPECT(kvpool_transfer_pair_runs(eight, 1, empty, 1, copies, 2, &n) ==
               KVPOOL_ERROR_INVALID_ARGUMENT &&
           strstr(kvpool_last_error(), "dst run 0 (offset 32, length 0)"));
    EXPECT(kvpool_transfer_pair_runs(NULL, 1, four, 1, copies, 2, &n) ==
               KVPOOL_ERROR_INVALID_ARGUMENT &&
           strstr(kvpool_last_error(), "src is NULL with 1 runs"));
    CHECK(kvpool_multi_ended_allocator_free(a->full, NULL, tokens, PAGE, 0));
    return 0;
}

int main(void) {
    end_t a, b;
    if (make_end(&a) || make_end(&b))
        return 1;
    for (int whole_pages = 0; whole_pages < 2; ++whole_pages)
        for (int cancel = 0; cancel < 2; ++cancel)
            if (transfer(&a, &b, 2 * whole_pages + cancel, whole_pages, cancel))
                return 1;
    if (bad_input(&a))
        return 1;
    kvpool_multi_ended_allocator_destroy(a.full);
    kvpool_multi_ended_allocator_destroy(b.full);
    kvpool_unified_kv_pool_destroy(a.pool);
    kvpool_unified_kv_pool_destroy(b.pool);
    EXPECT(kvpool_live_handles() == 0);
    printf("transfer_test: ok\n");
    return 0;
}
