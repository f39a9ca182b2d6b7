/* kvpool's C API: the Kokkos-free entry point for engines in other languages
 * (the Python package calls it through ctypes). Plain C, opaque handles.
 *
 * Conventions
 * - Every function returns a kvpool_status: KVPOOL_OK, or an error whose message
 *   kvpool_last_error() returns (per thread, until the next failing call). A
 *   failing call changes nothing. Running out of memory is not an error: the
 *   allocation functions set *allocated to 0 instead.
 * - Devices: every build serves the host (KVPOOL_DEVICE_HOST: host memory, the
 *   host execution space); a CUDA or HIP build serves the GPU as well
 *   (KVPOOL_DEVICE_GPU), in the same process. A pool or request table is made
 *   on one of them (kvpool_unified_kv_pool_create_on, kvpool_req_to_token_pool_create_on; the calls
 *   without _on use the GPU in a GPU build, the host in a host build), and
 *   everything made from it (sides, pairs, hybrid request tables) lives and
 *   runs there.
 * - Device memory: token ids, output buffers and last_loc are int64 arrays in
 *   the memory of the handle's device (GPU memory for a GPU pool, host memory
 *   for a host pool). Arrays named *_host are host memory and are read before
 *   the call returns. A GPU build asks its runtime where each array lives and
 *   refuses (KVPOOL_ERROR_INVALID_ARGUMENT) one the call's code cannot reach:
 *   pageable host memory for a GPU handle (managed and page-locked memory
 *   serve; so does any host memory where the GPU reads pageable memory), GPU
 *   memory for a host handle or a *_host array; a KV handle whose caller
 *   checks that itself asks nothing (kvpool_kv_set_caller_checks_memory).
 * - stream: the cudaStream_t (hipStream_t) to run on (NULL: the default
 *   stream) for GPU handles; ignored by host handles, whose calls complete
 *   before they return. No call fences the stream, except
 *   kvpool_*_check_invariants.
 * - Kokkos is initialised on first use (or by kvpool_initialize), on the
 *   calling thread's current CUDA device; in a GPU build that initialises the
 *   GPU even when only host pools are made (Kokkos starts every backend it
 *   has), so a GPU build needs a GPU. Handles are not thread-safe: calls
 *   on one handle (and on the sides of one pair) must not overlap.
 */
#ifndef KVPOOL_C_API_H
#define KVPOOL_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KVPOOL_C_EXPORT __declspec(dllexport)
#else
#define KVPOOL_C_EXPORT __attribute__((visibility("default")))
#endif

typedef int kvpool_status;

/* 1..7 are kvpool::ErrorCode + 1; its device code (a failed GPU runtime call)
 * is KVPOOL_ERROR_RUNTIME. */
enum {
    KVPOOL_OK = 0,
    KVPOOL_ERROR_INVALID_ARGUMENT = 1,
    KVPOOL_ERROR_MISALIGNED = 2,
    KVPOOL_ERROR_OUT_OF_RANGE = 3,
    KVPOOL_ERROR_NOT_ALLOCATED = 4,
    KVPOOL_ERROR_WRONG_ROLE = 5,
    KVPOOL_ERROR_INVALID_STATE = 6,
    KVPOOL_ERROR_INTERNAL = 7,
    /* A callback (a KV move or a completion query) reported failure. The call
     * itself completed: tables and allocator state are consistent. */
    KVPOOL_ERROR_CALLBACK = 100,
    /* The Kokkos or device runtime failed, or memory for kvpool's own
     * bookkeeping could not be allocated. */
    KVPOOL_ERROR_RUNTIME = 101,
};

typedef struct kvpool_unified_kv_pool kvpool_unified_kv_pool;
typedef struct kvpool_multi_ended_allocator kvpool_multi_ended_allocator;
typedef struct kvpool_unified_swa_allocator kvpool_unified_swa_allocator;
typedef struct kvpool_unified_mamba_allocator kvpool_unified_mamba_allocator;
typedef struct kvpool_req_to_token_pool kvpool_req_to_token_pool;
typedef struct kvpool_hybrid_req_to_token_pool kvpool_hybrid_req_to_token_pool;
typedef struct kvpool_completion_token kvpool_completion_token;
typedef struct kvpool_allocator_snapshot kvpool_allocator_snapshot;
typedef struct kvpool_pair_snapshot kvpool_pair_snapshot;
typedef struct kvpool_unified_mamba_swa_allocator kvpool_unified_mamba_swa_allocator;
typedef struct kvpool_mamba_swa_snapshot kvpool_mamba_swa_snapshot;

/* ------------------------------------------------------------------ runtime */

KVPOOL_C_EXPORT const char* kvpool_last_error(void);
/* "cuda", "hip" or "host": the GPU runtime this library is built for ("host": none). */
KVPOOL_C_EXPORT const char* kvpool_backend(void);
/* Where a pool or request table lives and runs. */
enum {
    KVPOOL_DEVICE_HOST = 0, /* host memory, the host execution space: every build */
    KVPOOL_DEVICE_GPU = 1   /* GPU memory, the CUDA or HIP execution space: GPU builds */
};
/* 1 if this library serves device (a KVPOOL_DEVICE_*), else 0. */
KVPOOL_C_EXPORT int kvpool_serves(int device);
KVPOOL_C_EXPORT int kvpool_is_initialized(void);
/* Initialises Kokkos on the current device (no-op if kvpool or the program already has). */
KVPOOL_C_EXPORT kvpool_status kvpool_initialize(void);
/* Finalises Kokkos once no handle is left (at once if none is), if kvpool
 * initialised it. */
KVPOOL_C_EXPORT kvpool_status kvpool_finalize_when_unused(void);
/* Live handles of every kind (tokens excluded). */
KVPOOL_C_EXPORT int64_t kvpool_live_handles(void);

/* ------------------------------------------------------------------ build
 * What a problem report needs (`python -m kvpool` prints it). */

/* The C API's version: raised when a declaration here or in its parts changes or is added. */
#define KVPOOL_C_API_VERSION 6
/* KVPOOL_C_API_VERSION of the header the library was built from. */
KVPOOL_C_EXPORT int kvpool_c_api_version(void);
/* kvpool's version, "MAJOR.MINOR.PATCH": the CMake project's, which the Python
 * package's metadata reads too. */
KVPOOL_C_EXPORT const char* kvpool_version(void);
/* The build, one "key: value" line each: kokkos (Kokkos' version), backends
 * (the Kokkos execution spaces compiled in, e.g. "Serial OpenMP"), arch (the GPU
 * architectures the device code is compiled for, e.g. "sm_80 sm_90"; "none" in
 * a host build), compiler. */
KVPOOL_C_EXPORT const char* kvpool_build_info(void);

/* The device-fault seam (kvpool/device_faults.hpp), for tests of an engine's
 * error handling. op: 0 allocation, 1 upload, 2 copy, 3 launch. The nth such
 * device operation from now on (1: the next), issued on the calling thread,
 * fails once: the call reports KVPOOL_ERROR_RUNTIME and changes nothing. */
KVPOOL_C_EXPORT kvpool_status kvpool_device_faults_fail_nth(int op, int64_t nth);
/* Disarms every fault and zeroes the counts (calling thread). */
KVPOOL_C_EXPORT void kvpool_device_faults_reset(void);
/* Device operations of kind op the calling thread issued since the last reset; -1 for a bad op. */
KVPOOL_C_EXPORT int64_t kvpool_device_faults_count(int op);

/* ------------------------------------------------------------------ completion tokens
 * The engine's "forward done" marker. A token keeps what it wraps alive through
 * `release(user)`, called once when kvpool drops its last reference. */
typedef int (*kvpool_query_fn)(void* user); /* 1: done, 0: not yet, <0: failed */
typedef void (*kvpool_release_fn)(void* user);

/* A marker the host polls with query(user). */
KVPOOL_C_EXPORT kvpool_status kvpool_completion_token_from_query(kvpool_query_fn query,
                                                                 kvpool_release_fn release,
                                                                 void* user,
                                                                 kvpool_completion_token** out);
/* A cudaEvent_t (CUDA builds): waits become stream waits, not host polls. */
KVPOOL_C_EXPORT kvpool_status kvpool_completion_token_from_cuda_event(
    void* event, kvpool_release_fn release, void* user, kvpool_completion_token** out);
/* A hipEvent_t (HIP builds): waits become stream waits, not host polls. */
KVPOOL_C_EXPORT kvpool_status kvpool_completion_token_from_hip_event(
    void* event, kvpool_release_fn release, void* user, kvpool_completion_token** out);
KVPOOL_C_EXPORT void kvpool_completion_token_release(kvpool_completion_token* token);

/* ------------------------------------------------------------------ unified byte buffer */
/* Where a sub-pool's band grows (kvpool_sub_pool_spec.grow, kvpool_allocator_info.grow). */
enum {
    KVPOOL_GROW_UP = 0,      /* from the low end (byte 0) up */
    KVPOOL_GROW_DOWN = 1,    /* from the high end down */
    KVPOOL_GROW_FLOATING = 2 /* between its neighbours, starting at float_at */
};

typedef struct {
    const char* name;
    int64_t entry_bytes; /* bytes of one token slot across all layers */
    int64_t page_size;
    int grow;           /* KVPOOL_GROW_*; 0 and 1 are what the former grow_down meant */
    int64_t max_tokens; /* cap on live tokens; 0: none */
    /* KVPOOL_GROW_FLOATING only (ignored otherwise): where the empty band
     * starts, as a fraction of the buffer, in (0, 1) and above the floating
     * sub-pools listed before it. */
    double float_at;
} kvpool_sub_pool_spec;

/* A buffer of total_bytes shared by num_specs sub-pools: one alone, two growing
 * toward each other (in either order), or more listed from the low end up, the
 * first growing up, the last down and those between floating (the tri-pool:
 * state slots, sliding-window KV, full KV). An unknown grow code, a wrong order
 * or a float_at out of range is KVPOOL_ERROR_INVALID_ARGUMENT, naming the
 * sub-pool. adopt: NULL to allocate device memory (zeroed on stream), or
 * caller-owned device memory of at least total_bytes, used as it is, that the
 * caller keeps alive while the pool lives. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_kv_pool_create(int64_t total_bytes,
                                                            const kvpool_sub_pool_spec* specs,
                                                            int num_specs, void* adopt,
                                                            void* stream,
                                                            kvpool_unified_kv_pool** out);
/* kvpool_unified_kv_pool_create on device (KVPOOL_DEVICE_*): adopt is memory of that
 * device. A device the library does not serve: KVPOOL_ERROR_INVALID_ARGUMENT. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_kv_pool_create_on(int device, int64_t total_bytes,
                                                               const kvpool_sub_pool_spec* specs,
                                                               int num_specs, void* adopt,
                                                               void* stream,
                                                               kvpool_unified_kv_pool** out);
KVPOOL_C_EXPORT void kvpool_unified_kv_pool_destroy(kvpool_unified_kv_pool* pool);
/* The KVPOOL_DEVICE_* the pool lives on. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_kv_pool_device(const kvpool_unified_kv_pool* pool,
                                                            int* device);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_kv_pool_bytes(const kvpool_unified_kv_pool* pool,
                                                           void** data, int64_t* size);
/* Bytes [0, sink_bytes) hold no data (the padding sink). */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_kv_pool_sink_bytes(const kvpool_unified_kv_pool* pool,
                                                                int64_t* sink_bytes);

/* ------------------------------------------------------------------ one side of a buffer */
typedef struct {
    int64_t entry_bytes;
    int64_t page_size;
    int64_t page_bytes;
    int64_t num_physical_pages;
    int64_t num_virtual_pages; /* this side's own virtual page space */
    int64_t min_page_index;    /* pages below overlap the padding sink */
    int64_t page_capacity;     /* pages that can be live at once */
    int grow;                  /* KVPOOL_GROW_* */
    int is_id_owner;
    int lazy;
    int64_t max_moves_per_flush; /* opportunistic flush cap */
    int zero_on_alloc;           /* handout zeroing (kvpool_allocator_options.zero_on_alloc) */
} kvpool_allocator_info;

typedef struct {
    int64_t available_size;             /* tokens allocatable now */
    int64_t schedulable_available_size; /* tokens once the peer's holes are compacted */
    int64_t allocated_count;            /* live tokens */
    int64_t watermark;                  /* up: first page past the band; down: last page below it */
    int64_t live_pages;
    int64_t hole_pages;
    int64_t pending_reuse_pages;
    int64_t free_virtual_pages; /* id owner only; 0 otherwise */
    int64_t gap_bytes;          /* free bytes beside the band: gap_below_bytes + gap_above_bytes */
    int64_t gap_below_bytes;    /* below the band (0 for a side growing up) */
    int64_t gap_above_bytes;    /* above the band (0 for a side growing down) */
} kvpool_allocator_state;

typedef struct {
    int64_t allocs, failed_allocs, frees, pages_allocated, pages_freed, pages_moved, bytes_moved,
        flushes, pages_absorbed, holes_peak;
} kvpool_allocator_counters;

/* Moves KV data of whole pages, src_pages[i] -> dst_pages[i] (physical page
 * ids, host-readable, valid during the call), on the stream of the call that
 * triggered it, before the tables are remapped. Returns 0, or nonzero on
 * failure (the triggering call then completes and returns
 * KVPOOL_ERROR_CALLBACK). */
typedef int (*kvpool_move_fn)(void* user, const int64_t* src_pages, const int64_t* dst_pages,
                              int64_t num_pages);

typedef struct {
    int lazy;                    /* 0: eager compaction, 1: lazy */
    int is_id_owner;             /* mints virtual ids (1), or binds ids minted by its peer (0) */
    int64_t max_moves_per_flush; /* opportunistic flush cap; <= 0: kvpool's default */
    /* 1: every page this side hands out (alloc, alloc_extend, alloc_decode,
     * alloc_with_virtual, state slots) has its bytes in the unified buffer
     * zeroed in the same launch; such a side takes no move callback. 0: off. */
    int zero_on_alloc;
} kvpool_allocator_options;

KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_create(
    kvpool_unified_kv_pool* pool, const char* side_name, const kvpool_allocator_options* options,
    void* stream, kvpool_multi_ended_allocator** out);
/* Destroys a standalone side or releases a pair's side handle. */
KVPOOL_C_EXPORT void kvpool_multi_ended_allocator_destroy(kvpool_multi_ended_allocator* a);
/* Binds a and peer to each other. Calling it again with the two (in either
 * order, as SGLang's a.bind_peer(b); b.bind_peer(a)) changes nothing; a side
 * bound to another peer is refused. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_bind_peer(
    kvpool_multi_ended_allocator* a, kvpool_multi_ended_allocator* peer);
/* move == NULL restores the default: the pages' bytes move inside the unified buffer. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_set_move_callback(
    kvpool_multi_ended_allocator* a, kvpool_move_fn move, void* user);
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_info(
    const kvpool_multi_ended_allocator* a, kvpool_allocator_info* out);
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_state(
    const kvpool_multi_ended_allocator* a, kvpool_allocator_state* out);
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_counters(
    const kvpool_multi_ended_allocator* a, kvpool_allocator_counters* out);
/* A description of the state for error messages; valid until the thread's next call. */
KVPOOL_C_EXPORT kvpool_status
kvpool_multi_ended_allocator_state_string(const kvpool_multi_ended_allocator* a, const char** out);
/* The device tables: v2p has *v2p_rows rows (the id owner's virtual pages and a
 * trailing row that stays -1), p2v *p2v_rows (physical pages and the same).
 * Pointers stay valid until bind_peer or destroy. */
KVPOOL_C_EXPORT kvpool_status
kvpool_multi_ended_allocator_tables(const kvpool_multi_ended_allocator* a, int64_t** v2p,
                                    int64_t* v2p_rows, int64_t** p2v, int64_t* p2v_rows);
/* The id owner's free virtual pages, in the order they are handed out:
 * copies min(capacity, count) of them, sets *count to all of them. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_free_virtual_pages(
    const kvpool_multi_ended_allocator* a, int64_t* out_host, int64_t capacity, int64_t* count);
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_is_slot_allocated(
    const kvpool_multi_ended_allocator* a, int64_t virtual_token, int* out);

/* need_size virtual token ids (a multiple of the page size) into out. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_alloc(kvpool_multi_ended_allocator* a,
                                                                 void* stream, int64_t need_size,
                                                                 int64_t* out, int* allocated);
/* Non-owner: binds peer-minted virtual pages (host). */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_alloc_with_virtual(
    kvpool_multi_ended_allocator* a, void* stream, const int64_t* virtual_pages_host, int64_t count,
    int* allocated);
/* Prefill: request i grows from prefix_lens_host[i] to seq_lens_host[i];
 * last_loc[i] is its last prefix token (device); out gets out_length =
 * sum(seq - prefix) virtual token ids. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_alloc_extend(
    kvpool_multi_ended_allocator* a, void* stream, const int64_t* prefix_lens_host,
    const int64_t* seq_lens_host, int64_t batch, const int64_t* last_loc, int64_t* out,
    int64_t out_length, int* allocated);
/* Decode: one token per request; seq_lens_host count it already. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_alloc_decode(
    kvpool_multi_ended_allocator* a, void* stream, const int64_t* seq_lens_host, int64_t batch,
    const int64_t* last_loc, int64_t* out, int* allocated);
/* Frees the pages holding these virtual tokens (host); skip_unbound ignores
 * ids already unbound instead of reporting a double free. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_free(kvpool_multi_ended_allocator* a,
                                                                void* stream,
                                                                const int64_t* virtual_tokens_host,
                                                                int64_t count, int skip_unbound);
KVPOOL_C_EXPORT kvpool_status
kvpool_multi_ended_allocator_free_group_begin(kvpool_multi_ended_allocator* a);
KVPOOL_C_EXPORT kvpool_status
kvpool_multi_ended_allocator_free_group_end(kvpool_multi_ended_allocator* a, void* stream);
/* One lazy compaction pass (no-op in eager mode); *moved: pages moved. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_flush(kvpool_multi_ended_allocator* a,
                                                                 void* stream, int urgent,
                                                                 int64_t* moved);
KVPOOL_C_EXPORT kvpool_status
kvpool_multi_ended_allocator_drain_pending_reuse(kvpool_multi_ended_allocator* a);
/* token may be NULL (no forward in flight). kvpool keeps its own reference. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_set_latest_forward_done(
    kvpool_multi_ended_allocator* a, const kvpool_completion_token* token);
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_set_inflight_forward(
    kvpool_multi_ended_allocator* a, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count);
/* Move gate: a transfer (disaggregated prefill, host offload) reads the pages
 * of these virtual tokens (host) until token completes. No compaction moves
 * or overwrites them meanwhile: a lazy side leaves them where they are (an
 * allocation that needs them fails), an eager free that touches them waits
 * for an event token on the stream, and with any other token (or on the host
 * backend) is refused with KVPOOL_ERROR_INVALID_STATE until it completes.
 * Ids not allocated, or inside a backup window: an error, nothing gated. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_gate_transfer(
    kvpool_multi_ended_allocator* a, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count);
/* Virtual -> physical token ids (tombstones and -1 clamp to the sink, 0). out
 * has n entries, int64 (out_int32 = 0) or int32, and may be in itself. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_translate(
    const kvpool_multi_ended_allocator* a, void* stream, const int64_t* virtual_tokens, int64_t n,
    void* out, int out_int32);
/* Virtual -> dense token ids for per-layer dense views (MLA): physical page *
 * page_size * kernel_page_multiplier + offset; tombstones and -1 clamp to 0.
 * out: n int64 entries, may be virtual_tokens itself. kernel_page_multiplier
 * 1 is kvpool_multi_ended_allocator_translate; below 1 is KVPOOL_ERROR_INVALID_ARGUMENT. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_translate_dense(
    const kvpool_multi_ended_allocator* a, void* stream, const int64_t* virtual_tokens, int64_t n,
    int64_t* out, int64_t kernel_page_multiplier);
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_backup_state(
    kvpool_multi_ended_allocator* a, kvpool_allocator_snapshot** out);
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_restore_state(
    kvpool_multi_ended_allocator* a, void* stream, const kvpool_allocator_snapshot* snapshot);
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_commit_state(
    kvpool_multi_ended_allocator* a, const kvpool_allocator_snapshot* snapshot);
KVPOOL_C_EXPORT void kvpool_allocator_snapshot_destroy(kvpool_allocator_snapshot* snapshot);
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_clear(kvpool_multi_ended_allocator* a,
                                                                 void* stream);
/* Host state and device tables checked against each other (fences the stream). */
KVPOOL_C_EXPORT kvpool_status
kvpool_multi_ended_allocator_check_invariants(const kvpool_multi_ended_allocator* a, void* stream);

/* ------------------------------------------------------------------ eviction
 * A composite's eviction callback (kvpool/eviction.hpp, README; NULL removes it)
 * returns the bytes it freed (> 0), 0 when it can free nothing more (the
 * allocation fails, changing nothing), or < 0 on failure (KVPOOL_ERROR_CALLBACK). */
typedef struct {
    const char* side;        /* the short sub-pool's name (valid during the call) */
    int64_t pages;           /* pages of that side the allocation lacks, >= 1 */
    int64_t bytes;           /* bytes freeing them opens, at the allocation's cost per page */
    int64_t requested_pages; /* pages the allocation asks of that side */
} kvpool_eviction_shortfall;
typedef int64_t (*kvpool_evict_fn)(void* user, const kvpool_eviction_shortfall* shortfall);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_set_eviction_callback(
    kvpool_unified_swa_allocator* pair, kvpool_evict_fn evict, void* user);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_set_eviction_callback(
    kvpool_unified_mamba_allocator* pair, kvpool_evict_fn evict, void* user);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_set_eviction_callback(
    kvpool_unified_mamba_swa_allocator* tri, kvpool_evict_fn evict, void* user);

/* ------------------------------------------------------------------ SWA pair
 * The full side mints virtual ids; the SWA side binds the same ids. Every
 * allocation binds both sides or neither. Side handles (0: full, 1: swa) take
 * the per-side calls above and keep the pair alive. */
typedef struct {
    int64_t available_size; /* joint: what one allocation can take now */
    int64_t conserve_full_available_size;
    int64_t conserve_swa_available_size;
    int64_t schedulable_full_available_size;
    int64_t schedulable_swa_available_size;
    int64_t full_available_size;
    int64_t swa_available_size;
} kvpool_swa_sizes;

/* Each side takes its options (NULL: kvpool's defaults, eager); the pair sets
 * is_id_owner (the full side owns the ids). */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_create(
    kvpool_unified_kv_pool* pool, const char* full_name, const char* swa_name,
    const kvpool_allocator_options* full_options, const kvpool_allocator_options* swa_options,
    kvpool_unified_swa_allocator** out);
KVPOOL_C_EXPORT void kvpool_unified_swa_allocator_destroy(kvpool_unified_swa_allocator* pair);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_side(kvpool_unified_swa_allocator* pair,
                                                                int which,
                                                                kvpool_multi_ended_allocator** out);
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_swa_allocator_sizes(const kvpool_unified_swa_allocator* pair, kvpool_swa_sizes* out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_alloc(kvpool_unified_swa_allocator* pair,
                                                                 void* stream, int64_t need_size,
                                                                 int64_t* out, int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_alloc_extend(
    kvpool_unified_swa_allocator* pair, void* stream, const int64_t* prefix_lens_host,
    const int64_t* seq_lens_host, int64_t batch, const int64_t* last_loc, int64_t* out,
    int64_t out_length, int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_alloc_decode(
    kvpool_unified_swa_allocator* pair, void* stream, const int64_t* seq_lens_host, int64_t batch,
    const int64_t* last_loc, int64_t* out, int* allocated);
/* Both sides (SWA pages already released by free_swa are skipped). */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_free(kvpool_unified_swa_allocator* pair,
                                                                void* stream,
                                                                const int64_t* virtual_tokens_host,
                                                                int64_t count);
/* Tokens that left the window: the SWA side only. */
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_swa_allocator_free_swa(kvpool_unified_swa_allocator* pair, void* stream,
                                      const int64_t* virtual_tokens_host, int64_t count);
/* The move gate (kvpool_multi_ended_allocator_gate_transfer) on both sides: the full
 * side's pages and the SWA side's still bound; checked on both first. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_gate_transfer(
    kvpool_unified_swa_allocator* pair, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count);
/* A backup window over both sides (speculative decoding): restore_state undoes
 * every allocation on either side since the snapshot, commit_state keeps them;
 * both sides or neither. Inside it, frees are refused and flushes move nothing.
 * A snapshot of another pair, of a closed window, or made stale by an earlier
 * restore: KVPOOL_ERROR_INVALID_STATE, and neither side changes. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_backup_state(
    kvpool_unified_swa_allocator* pair, kvpool_pair_snapshot** out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_restore_state(
    kvpool_unified_swa_allocator* pair, void* stream, const kvpool_pair_snapshot* snapshot);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_commit_state(
    kvpool_unified_swa_allocator* pair, const kvpool_pair_snapshot* snapshot);
KVPOOL_C_EXPORT void kvpool_pair_snapshot_destroy(kvpool_pair_snapshot* snapshot);

/* ------------------------------------------------------------------ Mamba pair
 * Full KV (paged) and state slots (page size 1), each side owning its ids.
 * Side handles: 0: full, 1: state. */
typedef struct {
    int64_t available_size; /* full tokens once the state side's holes are compacted */
    int64_t state_slots_available;
    int64_t state_slot_full_token_cost; /* full-token equivalents of gap one state slot costs */
    int state_slot_starved;
} kvpool_mamba_sizes;

/* Each side takes its options (NULL: kvpool's defaults, eager); both own
 * their ids, whatever is_id_owner says. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_create(
    kvpool_unified_kv_pool* pool, const char* full_name, const char* state_name,
    const kvpool_allocator_options* full_options, const kvpool_allocator_options* state_options,
    kvpool_unified_mamba_allocator** out);
KVPOOL_C_EXPORT void kvpool_unified_mamba_allocator_destroy(kvpool_unified_mamba_allocator* pair);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_side(
    kvpool_unified_mamba_allocator* pair, int which, kvpool_multi_ended_allocator** out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_sizes(
    const kvpool_unified_mamba_allocator* pair, kvpool_mamba_sizes* out);
/* Side 0's allocations and side 1's state slots, asking the eviction callback. */
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_mamba_allocator_alloc(kvpool_unified_mamba_allocator* pair, void* stream,
                                     int64_t need_size, int64_t* out, int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_alloc_extend(
    kvpool_unified_mamba_allocator* pair, void* stream, const int64_t* prefix_lens_host,
    const int64_t* seq_lens_host, int64_t batch, const int64_t* last_loc, int64_t* out,
    int64_t out_length, int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_alloc_decode(
    kvpool_unified_mamba_allocator* pair, void* stream, const int64_t* seq_lens_host, int64_t batch,
    const int64_t* last_loc, int64_t* out, int* allocated);
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_mamba_allocator_alloc_state_slots(kvpool_unified_mamba_allocator* pair, void* stream,
                                                 int64_t count, int64_t* out, int* allocated);
/* The move gate (kvpool_multi_ended_allocator_gate_transfer) on full tokens and state
 * slots (host arrays; either count may be 0); checked on both sides first. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_gate_transfer(
    kvpool_unified_mamba_allocator* pair, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count, const int64_t* state_slots_host,
    int64_t slot_count);
/* A backup window over the full side and the state slots, as the SWA pair's.
 * A request table cannot take state slots from a side inside a window (a
 * restore would take them back from under it). */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_backup_state(
    kvpool_unified_mamba_allocator* pair, kvpool_pair_snapshot** out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_restore_state(
    kvpool_unified_mamba_allocator* pair, void* stream, const kvpool_pair_snapshot* snapshot);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_commit_state(
    kvpool_unified_mamba_allocator* pair, const kvpool_pair_snapshot* snapshot);

/* ------------------------------------------------------------------ Mamba + SWA tri-pool
 * Three bands in one buffer, from the low end up: state slots (KVPOOL_GROW_UP,
 * page size 1), sliding-window KV (KVPOOL_GROW_FLOATING) and full KV
 * (KVPOOL_GROW_DOWN), the two KV sides with one page size. The full side mints
 * the virtual token ids and the sliding-window side binds them (both or
 * neither, as in the SWA pair); state slots own theirs. The floating band
 * shifts out of the way when a neighbour needs its bytes.
 * Side handles (0: full, 1: swa, 2: state) take the per-side calls above and
 * keep the tri-pool alive: translate of each kind (the sliding-window side's
 * into int32), free of state slots (kvpool_multi_ended_allocator_free on side 2), tables,
 * state and counters. */
typedef struct {
    int64_t available_size;             /* KV tokens one allocation always gets now */
    int64_t state_slots_available;      /* state slots one allocation always gets now */
    int64_t state_slot_full_token_cost; /* full-token equivalents of bytes one state slot costs */
} kvpool_mamba_swa_sizes;

/* Each side takes its options (NULL: kvpool's defaults, eager); the tri-pool
 * sets is_id_owner. The pool's sub-pools must be state_name, swa_name and
 * full_name, in that order from the low end up. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_create(
    kvpool_unified_kv_pool* pool, const char* full_name, const char* swa_name,
    const char* state_name, const kvpool_allocator_options* full_options,
    const kvpool_allocator_options* swa_options, const kvpool_allocator_options* state_options,
    kvpool_unified_mamba_swa_allocator** out);
KVPOOL_C_EXPORT void
kvpool_unified_mamba_swa_allocator_destroy(kvpool_unified_mamba_swa_allocator* tri);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_side(
    kvpool_unified_mamba_swa_allocator* tri, int which, kvpool_multi_ended_allocator** out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_sizes(
    const kvpool_unified_mamba_swa_allocator* tri, kvpool_mamba_swa_sizes* out);
/* KV allocation, as kvpool_unified_swa_allocator_*: both KV sides or neither. Short of
 * room, lazy sides flush and the floating band shifts before it gives up. */
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_mamba_swa_allocator_alloc(kvpool_unified_mamba_swa_allocator* tri, void* stream,
                                         int64_t need_size, int64_t* out, int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_alloc_extend(
    kvpool_unified_mamba_swa_allocator* tri, void* stream, const int64_t* prefix_lens_host,
    const int64_t* seq_lens_host, int64_t batch, const int64_t* last_loc, int64_t* out,
    int64_t out_length, int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_alloc_decode(
    kvpool_unified_mamba_swa_allocator* tri, void* stream, const int64_t* seq_lens_host,
    int64_t batch, const int64_t* last_loc, int64_t* out, int* allocated);
/* Both KV sides (sliding-window pages already released by free_swa are skipped). */
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_mamba_swa_allocator_free(kvpool_unified_mamba_swa_allocator* tri, void* stream,
                                        const int64_t* virtual_tokens_host, int64_t count);
/* Tokens that left the window: the sliding-window side only. */
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_mamba_swa_allocator_free_swa(kvpool_unified_mamba_swa_allocator* tri, void* stream,
                                            const int64_t* virtual_tokens_host, int64_t count);
/* Frees on any of the three sides between these two calls compact together. */
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_mamba_swa_allocator_free_group_begin(kvpool_unified_mamba_swa_allocator* tri);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_free_group_end(
    kvpool_unified_mamba_swa_allocator* tri, void* stream);
/* count state slots (virtual slot ids) into out (device), or *allocated = 0:
 * the state side's holes and gap, then the floating band shifts up; short
 * still, a lazy full side flushes and it is tried again. Freed with
 * kvpool_multi_ended_allocator_free on side 2. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_alloc_state_slots(
    kvpool_unified_mamba_swa_allocator* tri, void* stream, int64_t count, int64_t* out,
    int* allocated);
/* The move gate on full tokens (both KV sides, the sliding-window side's pages
 * where still bound) and state slots (host arrays; either count may be 0);
 * checked on every side first. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_gate_transfer(
    kvpool_unified_mamba_swa_allocator* tri, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count, const int64_t* state_slots_host,
    int64_t slot_count);
/* One opportunistic lazy compaction pass over every side; *moved (may be
 * NULL): pages moved. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_flush_opportunistic(
    kvpool_unified_mamba_swa_allocator* tri, void* stream, int64_t* moved);
/* The forward's hooks over every side (token may be NULL); the in-flight
 * forward writes these virtual tokens on both KV sides. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_set_latest_forward_done(
    kvpool_unified_mamba_swa_allocator* tri, const kvpool_completion_token* token);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_set_inflight_forward(
    kvpool_unified_mamba_swa_allocator* tri, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count);
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_mamba_swa_allocator_drain_pending_reuse(kvpool_unified_mamba_swa_allocator* tri);
/* A backup window over all three sides, as the pairs': restore_state undoes
 * every allocation since the snapshot (KV and state slots), commit_state keeps
 * them; every side or none. A snapshot of another tri-pool, of a closed
 * window, or made stale by an earlier restore: KVPOOL_ERROR_INVALID_STATE. */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_backup_state(
    kvpool_unified_mamba_swa_allocator* tri, kvpool_mamba_swa_snapshot** out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_restore_state(
    kvpool_unified_mamba_swa_allocator* tri, void* stream,
    const kvpool_mamba_swa_snapshot* snapshot);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_commit_state(
    kvpool_unified_mamba_swa_allocator* tri, const kvpool_mamba_swa_snapshot* snapshot);
KVPOOL_C_EXPORT void kvpool_mamba_swa_snapshot_destroy(kvpool_mamba_swa_snapshot* snapshot);
/* Frees everything on every side (the floating band back where the layout starts it). */
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_mamba_swa_allocator_clear(kvpool_unified_mamba_swa_allocator* tri, void* stream);
/* Every side's host state and device tables checked (fences the stream). */
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_check_invariants(
    const kvpool_unified_mamba_swa_allocator* tri, void* stream);

/* ------------------------------------------------------------------ request tables */
/* size request slots (1..size) and the padding row 0, max_context_len columns,
 * int64, row-major, zeroed. */
KVPOOL_C_EXPORT kvpool_status kvpool_req_to_token_pool_create(int64_t size, int64_t max_context_len,
                                                              void* stream,
                                                              kvpool_req_to_token_pool** out);
/* kvpool_req_to_token_pool_create on device (KVPOOL_DEVICE_*). A hybrid request table
 * lives on the device of its state slots' side. */
KVPOOL_C_EXPORT kvpool_status kvpool_req_to_token_pool_create_on(int device, int64_t size,
                                                                 int64_t max_context_len,
                                                                 void* stream,
                                                                 kvpool_req_to_token_pool** out);
KVPOOL_C_EXPORT void kvpool_req_to_token_pool_destroy(kvpool_req_to_token_pool* pool);
KVPOOL_C_EXPORT kvpool_status kvpool_req_to_token_pool_table(const kvpool_req_to_token_pool* pool,
                                                             int64_t** table, int64_t* rows,
                                                             int64_t* columns);
KVPOOL_C_EXPORT kvpool_status
kvpool_req_to_token_pool_available(const kvpool_req_to_token_pool* pool, int64_t* out);
KVPOOL_C_EXPORT kvpool_status kvpool_req_to_token_pool_generation(
    const kvpool_req_to_token_pool* pool, int64_t slot, int64_t* out);
/* n slots into slots_host, or *allocated = 0. */
KVPOOL_C_EXPORT kvpool_status kvpool_req_to_token_pool_alloc(kvpool_req_to_token_pool* pool,
                                                             int64_t n, int64_t* slots_host,
                                                             int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_req_to_token_pool_free(kvpool_req_to_token_pool* pool,
                                                            const int64_t* slots_host,
                                                            int64_t count);
KVPOOL_C_EXPORT kvpool_status kvpool_req_to_token_pool_clear(kvpool_req_to_token_pool* pool);
/* Row slot, columns [start, start + n) = ids (device). */
KVPOOL_C_EXPORT kvpool_status kvpool_req_to_token_pool_write(kvpool_req_to_token_pool* pool,
                                                             void* stream, int64_t slot,
                                                             int64_t start, const int64_t* ids,
                                                             int64_t n);
KVPOOL_C_EXPORT kvpool_status
kvpool_req_to_token_pool_check_invariants(const kvpool_req_to_token_pool* pool, void* stream);

/* Request table of a hybrid model: + request -> Mamba state slot (+ ping-pong
 * track slots), the state slots coming from `states` (a page-size-1 side, e.g.
 * a Mamba pair's state side, kept alive by the pool). */
typedef struct {
    int enable_mamba_extra_buffer;
    int enable_mamba_extra_buffer_lazy;
    int64_t mamba_ping_pong_track_buffer_size; /* 1 or 2 */
} kvpool_hybrid_req_to_token_pool_options;

KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_create(
    int64_t size, int64_t max_context_len, kvpool_multi_ended_allocator* states,
    const kvpool_hybrid_req_to_token_pool_options* options, void* stream,
    kvpool_hybrid_req_to_token_pool** out);
KVPOOL_C_EXPORT void kvpool_hybrid_req_to_token_pool_destroy(kvpool_hybrid_req_to_token_pool* pool);
/* The token table as kvpool_req_to_token_pool_table; mamba_map: (rows) request slot ->
 * state slot; track_map: rows x track_columns (0 columns without the extra buffer). */
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_tables(
    const kvpool_hybrid_req_to_token_pool* pool, int64_t** table, int64_t* rows, int64_t* columns,
    int64_t** mamba_map, int64_t** track_map, int64_t* track_columns);
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_available(
    const kvpool_hybrid_req_to_token_pool* pool, int64_t* out);
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_generation(
    const kvpool_hybrid_req_to_token_pool* pool, int64_t slot, int64_t* out);
/* One request per entry of mamba_slots_host: an entry >= 0 is a state slot the
 * caller holds and hands to that request, -1 allocates a fresh one. Request
 * slots into slots_host, or *allocated = 0. */
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_alloc(
    kvpool_hybrid_req_to_token_pool* pool, void* stream, const int64_t* mamba_slots_host, int64_t n,
    int64_t* slots_host, int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_free(
    kvpool_hybrid_req_to_token_pool* pool, const int64_t* slots_host, int64_t count);
/* Releases the request's state slots except the track slot at keep_idx (-1:
 * none), which passes to the caller: *kept (-1 if none). */
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_free_mamba_cache(
    kvpool_hybrid_req_to_token_pool* pool, void* stream, int64_t req, int64_t keep_idx,
    int64_t* kept);
/* The request's state: its Mamba slot (-1 after free_mamba_cache), its track
 * slots (track_columns entries) and next track index. */
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_request(
    const kvpool_hybrid_req_to_token_pool* pool, int64_t req, int64_t* mamba_slot,
    int64_t* tracks_host, int64_t* next_track_idx);
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_set_next_track_idx(
    kvpool_hybrid_req_to_token_pool* pool, int64_t req, int64_t idx);
/* Puts value at track index idx; *previous: the slot that was there, passing to the caller. */
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_set_track_slot(
    kvpool_hybrid_req_to_token_pool* pool, void* stream, int64_t req, int64_t idx, int64_t value,
    int64_t* previous);
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_donate_track_slot(
    kvpool_hybrid_req_to_token_pool* pool, void* stream, int64_t req, int64_t new_slot,
    int64_t* donated);
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_alloc_track_slot(
    kvpool_hybrid_req_to_token_pool* pool, void* stream, int64_t req, int64_t idx, int* allocated);
KVPOOL_C_EXPORT kvpool_status
kvpool_hybrid_req_to_token_pool_clear(kvpool_hybrid_req_to_token_pool* pool, void* stream);
KVPOOL_C_EXPORT kvpool_status kvpool_hybrid_req_to_token_pool_check_invariants(
    const kvpool_hybrid_req_to_token_pool* pool, void* stream);
#ifdef __cplusplus
}
#endif
#include "c_api_digest.h"   /* the state digests of tensor-parallel ranks */
#include "c_api_kv.h"       /* the KV-allocator handle: one entry point per shared op */
#include "c_api_layout.h"   /* the view descriptors */
#include "c_api_transfer.h" /* the PD transfer descriptors */
#endif                      /* KVPOOL_C_API_H */
