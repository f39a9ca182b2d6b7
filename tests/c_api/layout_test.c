/* View descriptors through the C API from plain C: page-major MHA and
 * kvpool's padded Mamba state (every element against the documented byte
 * formula), dense MLA and SGLang's Mamba slots (offsets and strides), the
 * count-only query and a short output array, and bad geometry refused with
 * the output untouched.
 * Exits 0 on success, 1 with a message otherwise. */
#include "c_test_check.h"

#include <string.h>

enum { LAYERS = 2, HEADS = 2, HD = 4, VHD = 6, PS = 4, PAGES = 3, ANCHOR = 64, SIZE = 2 };
enum { K_ROW = HEADS * HD, V_ROW = HEADS * VHD, PAGE_BYTES = PS * LAYERS * (K_ROW + V_ROW) * SIZE };

static int64_t at(const kvpool_view_descriptor* d, const int64_t* index) {
    int64_t e = 0;
    for (int64_t k = 0; k < d->ndim; ++k)
        e += index[k] * d->strides[k];
    return d->offset + e * SIZE;
}

static int mha(void) {
    const kvpool_mha_view_geometry g = {LAYERS, HEADS, HD, VHD, KVPOOL_DTYPE_BF16,
                                        PS,     PAGES, ANCHOR};
    kvpool_view_descriptor out[2 * LAYERS];
    int64_t count = -1;
    CHECK(kvpool_layout_mha_views(&g, NULL, 0, &count));
    EXPECT(count == 2 * LAYERS);
    CHECK(kvpool_layout_mha_views(&g, out, 2 * LAYERS, &count));
    for (int64_t l = 0; l < LAYERS; ++l)
        for (int64_t v = 0; v < 2; ++v) {
            const kvpool_view_descriptor* d = &out[2 * l + v];
            const int64_t dim = v ? VHD : HD, row = v ? V_ROW : K_ROW;
            EXPECT(d->dtype == KVPOOL_DTYPE_BF16 && d->ndim == 4);
            EXPECT(d->shape[0] == PAGES && d->shape[1] == PS && d->shape[2] == HEADS &&
                   d->shape[3] == dim);
            for (int64_t p = 0; p < PAGES; ++p)
                for (int64_t s = 0; s < PS; ++s)
                    for (int64_t h = 0; h < HEADS; ++h)
                        for (int64_t e = 0; e < dim; ++e) {
                            const int64_t index[4] = {p, s, h, e};
                            const int64_t block = ANCHOR + p * PAGE_BYTES +
                                                  l * PS * (K_ROW + V_ROW) * SIZE +
                                                  v * PS * K_ROW * SIZE;
                            EXPECT(at(d, index) == block + (s * row + h * dim + e) * SIZE);
                        }
        }
    /* A short array gets the first descriptors and the full count. */
    kvpool_view_descriptor first;
    CHECK(kvpool_layout_mha_views(&g, &first, 1, &count));
    EXPECT(count == 2 * LAYERS && memcmp(&first, &out[0], sizeof first) == 0);
    return 0;
}

static int mla(void) {
    const kvpool_mla_view_geometry g = {3, 10, KVPOOL_DTYPE_BF16, 2, 5, 0, 1};
    kvpool_view_descriptor out[3];
    int64_t count = 0;
    CHECK(kvpool_layout_mla_views(&g, out, 3, &count));
    EXPECT(count == 3);
    for (int64_t l = 0; l < 3; ++l) {
        EXPECT(out[l].ndim == 3 && out[l].shape[0] == 5 * 3 * 2 && out[l].shape[1] == 1 &&
               out[l].shape[2] == 10);
        EXPECT(out[l].strides[0] == 10 && out[l].strides[1] == 10 && out[l].strides[2] == 1);
        EXPECT(out[l].offset == l * 2 * 10 * SIZE);
    }
    return 0;
}

static int mamba(void) {
    const int64_t conv_ndims[1] = {2}, conv_dims[2] = {4, 3};
    /* conv fp16 (4, 3): 24 bytes a layer; temporal fp32 (2, 2): 16; slot 80 bytes */
    const kvpool_mamba_view_geometry g = {
        2, 1, conv_ndims, conv_dims, KVPOOL_DTYPE_FP16, 2, {2, 2}, KVPOOL_DTYPE_FP32, 3, 0};
    kvpool_view_descriptor out[2];
    int64_t count = 0;
    CHECK(kvpool_layout_mamba_views(&g, out, 2, &count));
    EXPECT(count == 2);
    EXPECT(out[0].offset == 0 && out[0].dtype == KVPOOL_DTYPE_FP16 && out[0].ndim == 4);
    EXPECT(out[0].shape[0] == 2 && out[0].shape[1] == 3 && out[0].shape[2] == 4);
    EXPECT(out[0].strides[0] == 12 && out[0].strides[1] == 40 && out[0].strides[2] == 3);
    EXPECT(out[1].offset == 48 && out[1].dtype == KVPOOL_DTYPE_FP32 && out[1].ndim == 4);
    EXPECT(out[1].strides[0] == 4 && out[1].strides[1] == 20 && out[1].strides[3] == 1);
    return 0;
}

/* kvpool's padded Mamba state: bf16 conv 3 x 3 (18 bytes, padded to 20 for
 * the fp32 temporal state), fp32 temporal 2 x 2 x 3 (48 bytes): a layer 68
 * bytes, a slot 136. */
enum { M_LAYERS = 2, M_SLOTS = 3, M_ANCHOR = 8, CONV_BLOCK = 20, LAYER_BYTES = 68, SLOT = 136 };

static int64_t byte_of(const kvpool_view_descriptor* d, const int64_t* index, int64_t size) {
    int64_t e = 0;
    for (int64_t k = 0; k < d->ndim; ++k)
        e += index[k] * d->strides[k];
    return d->offset + e * size;
}

static int mamba_state(void) {
    const kvpool_mamba_state_view_geometry g = {
        M_LAYERS, 3, 3, KVPOOL_DTYPE_BF16, 2, 2, 3, KVPOOL_DTYPE_FP32, M_SLOTS, M_ANCHOR};
    kvpool_view_descriptor out[2 * M_LAYERS];
    int64_t count = -1;
    CHECK(kvpool_layout_mamba_state_views(&g, NULL, 0, &count));
    EXPECT(count == 2 * M_LAYERS);
    CHECK(kvpool_layout_mamba_state_views(&g, out, 2 * M_LAYERS, &count));
    for (int64_t l = 0; l < M_LAYERS; ++l) {
        const kvpool_view_descriptor* conv = &out[2 * l];
        const kvpool_view_descriptor* temporal = &out[2 * l + 1];
        EXPECT(conv->dtype == KVPOOL_DTYPE_BF16 && conv->ndim == 3);
        EXPECT(conv->shape[0] == M_SLOTS && conv->shape[1] == 3 && conv->shape[2] == 3);
        EXPECT(temporal->dtype == KVPOOL_DTYPE_FP32 && temporal->ndim == 4);
        EXPECT(temporal->shape[0] == M_SLOTS && temporal->shape[1] == 2 &&
               temporal->shape[2] == 2 && temporal->shape[3] == 3);
        EXPECT(conv->strides[0] * 2 == SLOT && temporal->strides[0] * 4 == SLOT);
        for (int64_t s = 0; s < M_SLOTS; ++s) {
            const int64_t layer = M_ANCHOR + s * SLOT + l * LAYER_BYTES;
            for (int64_t c = 0; c < 3; ++c)
                for (int64_t w = 0; w < 3; ++w) {
                    const int64_t index[3] = {s, c, w};
                    EXPECT(byte_of(conv, index, 2) == layer + (c * 3 + w) * 2);
                }
            for (int64_t h = 0; h < 2; ++h)
                for (int64_t d = 0; d < 2; ++d)
                    for (int64_t x = 0; x < 3; ++x) {
                        const int64_t index[4] = {s, h, d, x};
                        EXPECT(byte_of(temporal, index, 4) ==
                               layer + CONV_BLOCK + ((h * 2 + d) * 3 + x) * 4);
                    }
        }
    }
    return 0;
}

static int refused(kvpool_status status, const kvpool_view_descriptor* out, int64_t count) {
    kvpool_view_descriptor untouched;
    memset(&untouched, 0x5a, sizeof untouched);
    EXPECT(status == KVPOOL_ERROR_INVALID_ARGUMENT);
    EXPECT(memcmp(out, &untouched, sizeof untouched) == 0 && count == 77);
    return 0;
}

static int bad_geometry(void) {
    kvpool_view_descriptor out;
    int64_t count = 77;
    memset(&out, 0x5a, sizeof out);
    const kvpool_mha_view_geometry no_heads = {2, 0, 4, 0, KVPOOL_DTYPE_BF16, 1, 4, 0};
    if (refused(kvpool_layout_mha_views(&no_heads, &out, 1, &count), &out, count))
        return 1;
    EXPECT(strstr(kvpool_last_error(), "heads") != NULL);
    const kvpool_mha_view_geometry dtype = {2, 2, 4, 0, 9, 1, 4, 0};
    if (refused(kvpool_layout_mha_views(&dtype, &out, 1, &count), &out, count))
        return 1;
    EXPECT(strstr(kvpool_last_error(), "KVPOOL_DTYPE_") != NULL);
    const kvpool_mla_view_geometry no_dim = {2, 0, KVPOOL_DTYPE_BF16, 1, 4, 0, 1};
    if (refused(kvpool_layout_mla_views(&no_dim, &out, 1, &count), &out, count))
        return 1;
    EXPECT(strstr(kvpool_last_error(), "kv_cache_dim") != NULL);
    /* fp8 conv (3,) puts the fp32 temporal state at byte 3 */
    const int64_t ndims[1] = {1}, dims[1] = {3};
    const kvpool_mamba_view_geometry misaligned = {
        1, 1, ndims, dims, KVPOOL_DTYPE_FP8, 1, {2}, KVPOOL_DTYPE_FP32, 2, 0};
    if (refused(kvpool_layout_mamba_views(&misaligned, &out, 1, &count), &out, count))
        return 1;
    EXPECT(strstr(kvpool_last_error(), "misaligned") != NULL);
    const kvpool_mamba_state_view_geometry no_state = {
        1, 3, 3, KVPOOL_DTYPE_BF16, 2, 2, 0, KVPOOL_DTYPE_FP32, 2, 0};
    if (refused(kvpool_layout_mamba_state_views(&no_state, &out, 1, &count), &out, count))
        return 1;
    EXPECT(strstr(kvpool_last_error(), "state_dim") != NULL);
    /* bf16 conv, fp32 temporal: slots from byte 2 misalign the temporal state */
    const kvpool_mamba_state_view_geometry unaligned = {
        1, 3, 3, KVPOOL_DTYPE_BF16, 2, 2, 3, KVPOOL_DTYPE_FP32, 2, 2};
    if (refused(kvpool_layout_mamba_state_views(&unaligned, &out, 1, &count), &out, count))
        return 1;
    EXPECT(strstr(kvpool_last_error(), "anchor_bytes 2") != NULL);
    if (refused(kvpool_layout_mamba_state_views(NULL, &out, 1, &count), &out, count))
        return 1;
    if (refused(kvpool_layout_mha_views(NULL, &out, 1, &count), &out, count))
        return 1;
    return 0;
}

int main(void) {
    if (mha() || mla() || mamba() || mamba_state() || bad_geometry())
        return 1;
    return 0;
}
