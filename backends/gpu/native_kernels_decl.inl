// Declarations of the native kernels of both GPU vendors (defined in
// native_kernels.inl). The including header defines gpu_stream_t inside its
// namespace first. Plain launch functions on a caller's stream, no Kokkos.

// The id-following side of a pair (the SWA side), bound in the same launch as
// the owner's pages: v2p[v] = physical_pages[k] and p2v[physical_pages[k]] = v
// for the owner's k-th new virtual page v. All null when there is none.
struct FollowerTables {
    index_t* v2p = nullptr;
    index_t* p2v = nullptr;
    const index_t* physical_pages = nullptr;
};

// Copies page src[i] onto page dst[i] (page_bytes each) inside base, for all i
// in one launch; 16-byte accesses when page_bytes and base allow.
void move_pages(gpu_stream_t stream, std::uint8_t* base, index_t page_bytes, const index_t* src,
                const index_t* dst, index_t pages);

// table[index[i]] = value[i] for v2p and p2v.
void apply_table_writes(gpu_stream_t stream, index_t* v2p, const index_t* v2p_index, const index_t* v2p_value,
                        index_t v2p_writes, index_t* p2v, const index_t* p2v_index, const index_t* p2v_value,
                        index_t p2v_writes);

// A compaction plan in one launch: the page moves and the table writes (they
// touch disjoint memory, so one grid does both).
void apply_plan(gpu_stream_t stream, std::uint8_t* base, index_t page_bytes, const index_t* src,
                const index_t* dst, index_t pages, index_t* v2p, const index_t* v2p_index,
                const index_t* v2p_value, index_t v2p_writes, index_t* p2v, const index_t* p2v_index,
                const index_t* p2v_value, index_t p2v_writes);

// Virtual token ids -> physical token ids (ids outside the table and unbound
// pages give the sink slot 0); out may alias in.
void translate_tokens(gpu_stream_t stream, const index_t* v2p, index_t virtual_pages, index_t page_size,
                      const index_t* in, index_t n, index_t* out);
void translate_tokens(gpu_stream_t stream, const index_t* v2p, index_t virtual_pages, index_t page_size,
                      const index_t* in, index_t n, std::int32_t* out);

// out[t] = virtual_pages[t / ps] * ps + t % ps; binds virtual_pages[k] <-> physical_pages[k].
void bind_pages_emit_tokens(gpu_stream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                            const index_t* physical_pages, index_t pages, index_t page_size,
                            FollowerTables follower, index_t* out);

// SGLang's alloc_extend in virtual space plus the bind of each request's new pages.
void alloc_extend_bind(gpu_stream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                       const index_t* physical_pages, const index_t* prefix_lens, const index_t* seq_lens,
                       const index_t* out_start, const index_t* page_start, const index_t* last_loc,
                       index_t batch, index_t page_size, FollowerTables follower, index_t* out);

// One token per request; a new page only when the token starts one.
void alloc_decode_bind(gpu_stream_t stream, index_t* v2p, index_t* p2v, const index_t* virtual_pages,
                       const index_t* physical_pages, const index_t* seq_lens, const index_t* page_start,
                       const index_t* last_loc, index_t batch, index_t page_size, FollowerTables follower,
                       index_t* out);
