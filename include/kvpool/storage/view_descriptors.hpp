// Per-layer view descriptors of the page-major layouts: where a layer's view
// of a sub-pool starts in the unified buffer (bytes), its element type, shape
// and strides (elements). The one derivation of the layout that the C API
// exports (c_api_layout.h) and the Python pools build their tensors from; the
// descriptors address the bytes the page-major pools' views do
// (page_major_pools.hpp). Host only, no Kokkos.
#pragma once

#include <kvpool/storage/kv_dtype.hpp>
#include <kvpool/storage/model_geometry.hpp>
#include <kvpool/types.hpp>

#include <array>
#include <initializer_list>
#include <vector>

namespace kvpool {

inline constexpr int max_view_dims = 6;

struct ViewDescriptor {
    index_t offset = 0; // bytes from the buffer's base to element (0, ..., 0)
    KVDtype dtype = KVDtype::bf16;
    int ndim = 0;
    std::array<index_t, max_view_dims> shape{};
    std::array<index_t, max_view_dims> strides{}; // in elements

    // Bytes from the buffer's base to the element at index (ndim indices,
    // each inside its extent; otherwise out_of_range).
    index_t byte_offset(std::initializer_list<index_t> index) const;
    // One past the last byte the view reaches (offset when it is empty).
    index_t end_byte() const;
};

// Where a paged sub-pool's pages are: page p at anchor_bytes + p * page bytes,
// num_pages of page_size tokens.
struct PagedRegion {
    index_t page_size = 1;
    index_t num_pages = 0;
    index_t anchor_bytes = 0;
};

// Page-major MHA (PageMajorMHAPool): per layer, K [num_pages][page_size][heads]
// [head_dim] then V [...][v_head_dim]. 2 * layers descriptors: layer l's K at
// 2l, its V at 2l + 1. Bad geometry or region: invalid_argument naming it.
std::vector<ViewDescriptor> mha_layer_views(const MHAGeometry& geometry, const PagedRegion& region);

// Page-major MLA (PageMajorMLAPool): per layer [num_pages][page_size][1][row].
std::vector<ViewDescriptor> mla_layer_views(const MLAGeometry& geometry, const PagedRegion& region);
// The same bytes as dense views (paged MLA kernels': one block table for every
// layer): layer l is [num_pages * layers * page_size][1][row] from layer l's
// first row of page 0, so dense row (t / page_size) * page_size * layers +
// t % page_size of every layer's view is token t's row of that layer. View l
// reaches (layers - 1 - l) * page_size rows past the last page: the last
// layer's view needs a tail pad of (layers - 1) * page_size rows.
std::vector<ViewDescriptor> mla_dense_layer_views(const MLAGeometry& geometry,
                                                  const PagedRegion& region);

// Page-major Mamba state (PageMajorMambaPool): page size 1, slot s one page of
// geometry.entry_bytes() at anchor_bytes + s * entry_bytes(); per layer, the
// conv block then the temporal block, each padded to the larger element size
// (the padding is in no view). 2 * layers descriptors: layer l's conv
// [slots][conv_dim][conv_width] at 2l, its temporal [slots][heads][head_dim]
// [state_dim] at 2l + 1; strides[0] is a slot's bytes over the element size.
std::vector<ViewDescriptor> mamba_state_views(const MambaStateGeometry& geometry, index_t slots,
                                              index_t anchor_bytes);

// Mamba state as the SGLang-compatible pools lay it out: page size 1, slot s
// one envelope of entry_bytes() at anchor_bytes + s * entry_bytes(), holding
// each conv tensor of every layer, then the temporal state of every layer,
// unpadded (SGLang's layout; PageMajorMambaPool pads instead, per layer).
struct MambaTensorsGeometry {
    index_t layers = 0;
    std::vector<std::vector<index_t>> conv_shapes; // one or more, each up to 4 dims
    KVDtype conv_dtype = KVDtype::bf16;
    std::vector<index_t> temporal_shape; // up to 4 dims
    KVDtype temporal_dtype = KVDtype::fp32;

    index_t entry_bytes() const;
    // Positive layers and extents, at least one conv tensor, every tensor
    // aligned for its dtype in the envelope; otherwise invalid_argument.
    void validate() const;
};

// One descriptor per conv tensor, then the temporal state's, each
// [layers][slots][shape...].
std::vector<ViewDescriptor> mamba_tensor_views(const MambaTensorsGeometry& geometry, index_t slots,
                                               index_t anchor_bytes);

} // namespace kvpool
