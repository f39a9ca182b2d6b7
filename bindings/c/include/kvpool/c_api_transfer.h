/* kvpool's C API, its PD transfer descriptors: part of c_api.h, which includes
 * this header (include either; the conventions are c_api.h's). */
#ifndef KVPOOL_C_API_TRANSFER_H
#define KVPOOL_C_API_TRANSFER_H

#include "c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ PD transfer descriptors
 * Disaggregated prefill (kvpool/storage/transfer_descriptors.hpp; README, "Disaggregated
 * prefill"). A transfer engine registers each end's whole buffer once
 * (kvpool_unified_kv_pool_bytes: base and length); per transfer, each end describes its
 * tokens of each sub-pool as (offset, length) runs over that buffer, gating
 * their pages until the transfer's token completes, and the engine copies the
 * runs the two descriptions pair into. Host-side: the descriptions come from
 * the side's host mirror, and nothing here reads or writes device memory. */
typedef struct {
    int64_t offset; /* bytes from the buffer's base */
    int64_t length;
} kvpool_byte_run;
typedef struct {
    int64_t src_offset; /* in the sender's buffer */
    int64_t dst_offset; /* in the receiver's buffer */
    int64_t length;
} kvpool_copy_run;
/* A sub-pool's page as the engine sees it: layers equal parts of a page, each
 * holding blocks_per_layer blocks, block b at block_offsets_host[b] bytes into
 * the part and page_size rows of row_bytes_host[b] (page-major MHA: K at 0
 * with rows of heads * head_dim * dtype bytes, V at page_size * that; MLA one
 * block; Mamba state the conv block at 0 and the temporal block after the
 * conv block's padded length). */
typedef struct {
    int64_t layers;
    int64_t blocks_per_layer;
    const int64_t* block_offsets_host;
    const int64_t* row_bytes_host;
    /* 0: the side's page size; else the views' page, a divisor of it: a page
     * of the side is then that many pages here, each laid out as above */
    int64_t view_page_size;
} kvpool_sub_pool_transfer_layout;
typedef struct {
    int64_t tokens;
    int64_t pages;      /* distinct pages holding them */
    int64_t page_runs;  /* runs of whole consecutive pages */
    int64_t token_runs; /* runs of consecutive physical tokens */
    int64_t page_size;
    int64_t page_bytes; /* the item length of a whole-page transfer */
    int64_t layers;
    int64_t layer_stride; /* bytes between one layer's part of a page and the next's */
    int64_t blocks_per_layer;
} kvpool_transfer_info;
typedef struct kvpool_transfer_descriptor kvpool_transfer_descriptor;

/* One end of a transfer over side a: describes the virtual tokens (host) of
 * this sub-pool, then gates their pages until token completes, as
 * kvpool_multi_ended_allocator_gate_transfer (token NULL: describes only). The sender
 * passes the tokens it sends; the receiver the tokens it allocated for them,
 * in the same order. An unbound id, a layout that does not fit the side, or
 * tokens that do not fill their pages in order (a repeated id): the error
 * names it, nothing is gated and *out is unchanged. A description is host
 * data: it holds no device memory and outlives the side. */
KVPOOL_C_EXPORT kvpool_status kvpool_transfer_describe(
    kvpool_multi_ended_allocator* a, const kvpool_sub_pool_transfer_layout* layout,
    const kvpool_completion_token* token, const int64_t* virtual_tokens_host, int64_t count,
    kvpool_transfer_descriptor** out);
KVPOOL_C_EXPORT void kvpool_transfer_destroy(kvpool_transfer_descriptor* t);
KVPOOL_C_EXPORT kvpool_status kvpool_transfer_get_info(const kvpool_transfer_descriptor* t,
                                                       kvpool_transfer_info* out);
/* Each list call copies min(capacity, count) runs into out_host and sets
 * *count to all of them (capacity 0: the count alone). */
/* The tokens' pages, whole (every layer), consecutive pages merged, in token order. */
KVPOOL_C_EXPORT kvpool_status kvpool_transfer_page_runs(const kvpool_transfer_descriptor* t,
                                                        kvpool_byte_run* out_host, int64_t capacity,
                                                        int64_t* count);
/* Block block of layer layer of the tokens, consecutive rows merged. */
KVPOOL_C_EXPORT kvpool_status kvpool_transfer_layer_runs(const kvpool_transfer_descriptor* t,
                                                         int64_t layer, int64_t block,
                                                         kvpool_byte_run* out_host,
                                                         int64_t capacity, int64_t* count);
/* Whole-page copies from the sender's description to the receiver's: both
 * must hold their tokens at the same slots of their pages (else
 * KVPOOL_ERROR_INVALID_ARGUMENT: copy layer by layer instead). */
KVPOOL_C_EXPORT kvpool_status kvpool_transfer_pair_pages(const kvpool_transfer_descriptor* src,
                                                         const kvpool_transfer_descriptor* dst,
                                                         kvpool_copy_run* out_host,
                                                         int64_t capacity, int64_t* count);
/* The copies of one layer's block, the runs split where either end's end. */
KVPOOL_C_EXPORT kvpool_status kvpool_transfer_pair_layer(const kvpool_transfer_descriptor* src,
                                                         const kvpool_transfer_descriptor* dst,
                                                         int64_t layer, int64_t block,
                                                         kvpool_copy_run* out_host,
                                                         int64_t capacity, int64_t* count);
/* The copies that carry the sender's runs into the receiver's, paired byte by
 * byte in order (both lists must hold the same number of bytes): for ends in
 * different processes, each holding only its own description and the run
 * list the other sent. Whole-page runs pair right only when both ends' tokens
 * sit at the same slots of their pages (a request allocated from a page's
 * first slot on each end); one layer's block runs always do. */
KVPOOL_C_EXPORT kvpool_status kvpool_transfer_pair_runs(
    const kvpool_byte_run* src_host, int64_t src_count, const kvpool_byte_run* dst_host,
    int64_t dst_count, kvpool_copy_run* out_host, int64_t capacity, int64_t* count);
/* The transfer engine's copy for two buffers of one device (CUDA IPC between
 * processes, two pools in one process): the paired runs copied from src
 * (src_bytes long) to dst (dst_bytes long) in one launch on stream (device: a
 * KVPOOL_DEVICE_* code; NULL the default stream), however scattered; it
 * returns before a GPU has run it (record an event after it as the
 * transfer's completion token). A run outside either buffer, or memory the
 * device cannot reach: KVPOOL_ERROR_INVALID_ARGUMENT naming it, nothing copied. */
KVPOOL_C_EXPORT kvpool_status kvpool_transfer_copy_runs(int device, void* stream, const void* src,
                                                        int64_t src_bytes, void* dst,
                                                        int64_t dst_bytes,
                                                        const kvpool_copy_run* runs_host,
                                                        int64_t count);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_C_API_TRANSFER_H */
