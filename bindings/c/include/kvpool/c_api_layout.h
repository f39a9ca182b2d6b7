/* kvpool's C API, its layout: part of c_api.h, which includes this header
 * (include either; the conventions are c_api.h's). */
#ifndef KVPOOL_C_API_LAYOUT_H
#define KVPOOL_C_API_LAYOUT_H

#include "c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ view descriptors
 * The one derivation of the page-major layout (kvpool/storage/view_descriptors.hpp):
 * per layer, where a sub-pool's view starts in the unified buffer, its
 * element type, shape and strides, from which a caller builds its tensors
 * (torch.as_strided) instead of deriving the layout again. Host-side
 * arithmetic: nothing here touches a pool or device memory. Each call copies
 * min(capacity, count) descriptors into out_host and sets *count to all of
 * them (capacity 0: the count alone); bad geometry is
 * KVPOOL_ERROR_INVALID_ARGUMENT naming it, out_host and *count unchanged. */
#define KVPOOL_DTYPE_FP8 0
#define KVPOOL_DTYPE_FP16 1
#define KVPOOL_DTYPE_BF16 2
#define KVPOOL_DTYPE_FP32 3
#define KVPOOL_VIEW_MAX_DIMS 6
typedef struct {
    int64_t offset; /* bytes from the buffer's base to element (0, ..., 0) */
    int64_t dtype;  /* KVPOOL_DTYPE_* */
    int64_t ndim;
    int64_t shape[KVPOOL_VIEW_MAX_DIMS];
    int64_t strides[KVPOOL_VIEW_MAX_DIMS]; /* in elements */
} kvpool_view_descriptor;
/* Pages of a paged sub-pool: page p at anchor_bytes + p * page bytes (a page
 * holds every layer of its page_size tokens). */
typedef struct {
    int64_t layers;
    int64_t head_num;
    int64_t head_dim;
    int64_t v_head_dim; /* 0: head_dim */
    int64_t dtype;
    int64_t page_size;
    int64_t num_pages;
    int64_t anchor_bytes;
} kvpool_mha_view_geometry;
typedef struct {
    int64_t layers;
    int64_t kv_cache_dim; /* elements of a row: the latent, then the rope part */
    int64_t dtype;
    int64_t page_size;
    int64_t num_pages;
    int64_t anchor_bytes;
    /* 0: per layer [num_pages][page_size][1][kv_cache_dim]; else the dense
     * views, [num_pages * layers * page_size][1][kv_cache_dim], token t at row
     * (t / page_size) * page_size * layers + t % page_size of every layer's
     * view; the last layer's reaches (layers - 1) * page_size rows past the
     * pages (a tail pad) */
    int64_t dense;
} kvpool_mla_view_geometry;
/* SGLang's Mamba state (page size 1): slot s one envelope at anchor_bytes +
 * s * entry bytes, each conv tensor of every layer, then the temporal state of
 * every layer, unpadded. Each tensor has at most KVPOOL_VIEW_MAX_DIMS - 2 dims. */
typedef struct {
    int64_t layers;
    int64_t num_conv;               /* conv state tensors, at least one */
    const int64_t* conv_ndims_host; /* num_conv entries */
    const int64_t* conv_dims_host;  /* their extents, one tensor after the other */
    int64_t conv_dtype;
    int64_t temporal_ndim;
    int64_t temporal_shape[KVPOOL_VIEW_MAX_DIMS - 2];
    int64_t temporal_dtype;
    int64_t slots;
    int64_t anchor_bytes;
} kvpool_mamba_view_geometry;

/* kvpool's own page-major Mamba state (PageMajorMambaPool), page size 1:
 * slot s one page at anchor_bytes + s * entry bytes; per layer, the conv
 * block [conv_dim][conv_width] then the temporal block [heads][head_dim]
 * [state_dim], each padded to the larger element size (the padding is in no
 * view). A side holding it has entry_bytes = strides[0] of any descriptor
 * times its element size. */
typedef struct {
    int64_t layers;
    int64_t conv_dim;
    int64_t conv_width;
    int64_t conv_dtype;
    int64_t heads;
    int64_t head_dim;
    int64_t state_dim;
    int64_t temporal_dtype;
    int64_t slots;
    int64_t anchor_bytes;
} kvpool_mamba_state_view_geometry;

/* 2 * layers descriptors: layer l's K [num_pages][page_size][head_num]
 * [head_dim] at 2l, its V [...][v_head_dim] at 2l + 1. */
KVPOOL_C_EXPORT kvpool_status kvpool_layout_mha_views(const kvpool_mha_view_geometry* geometry,
                                                      kvpool_view_descriptor* out_host,
                                                      int64_t capacity, int64_t* count);
/* layers descriptors, layer l's at l. */
KVPOOL_C_EXPORT kvpool_status kvpool_layout_mla_views(const kvpool_mla_view_geometry* geometry,
                                                      kvpool_view_descriptor* out_host,
                                                      int64_t capacity, int64_t* count);
/* num_conv + 1 descriptors, each [layers][slots][shape...]: the conv tensors
 * in order, then the temporal state; strides[1] is a slot's bytes over the
 * element size. */
KVPOOL_C_EXPORT kvpool_status kvpool_layout_mamba_views(const kvpool_mamba_view_geometry* geometry,
                                                        kvpool_view_descriptor* out_host,
                                                        int64_t capacity, int64_t* count);
/* 2 * layers descriptors: layer l's conv [slots][conv_dim][conv_width] at 2l,
 * its temporal [slots][heads][head_dim][state_dim] at 2l + 1; strides[0] is a
 * slot's bytes over the element size. */
KVPOOL_C_EXPORT kvpool_status
kvpool_layout_mamba_state_views(const kvpool_mamba_state_view_geometry* geometry,
                                kvpool_view_descriptor* out_host, int64_t capacity, int64_t* count);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_C_API_LAYOUT_H */
