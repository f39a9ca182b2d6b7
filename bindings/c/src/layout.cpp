// C API: per-layer view descriptors (kvpool/storage/view_descriptors.hpp) of the
// page-major layouts (MHA, MLA, SGLang's and kvpool's padded Mamba state), for
// callers that build their tensors from them.
#include "handles.hpp"

#include <kvpool/storage/view_descriptors.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace kvpool::capi;
using kvpool::index_t;

namespace {

// The codes are KVDtype's values: a descriptor's dtype crosses as it is.
static_assert(static_cast<int>(kvpool::KVDtype::fp8) == KVPOOL_DTYPE_FP8 &&
              static_cast<int>(kvpool::KVDtype::fp16) == KVPOOL_DTYPE_FP16 &&
              static_cast<int>(kvpool::KVDtype::bf16) == KVPOOL_DTYPE_BF16 &&
              static_cast<int>(kvpool::KVDtype::fp32) == KVPOOL_DTYPE_FP32);
static_assert(kvpool::max_view_dims == KVPOOL_VIEW_MAX_DIMS);

kvpool::KVDtype dtype_of(int64_t code, const char* call, const char* field) {
    require(code >= KVPOOL_DTYPE_FP8 && code <= KVPOOL_DTYPE_FP32,
            std::string(call) + ": " + field + " " + std::to_string(code) +
                " is not a KVPOOL_DTYPE_* code");
    return static_cast<kvpool::KVDtype>(code);
}

// Checks the output first, then copies min(capacity, size) descriptors into
// out and sets *count to the size: nothing is written before the geometry
// has passed (make throws first).
template <class Make>
void copy_out(Make&& make, kvpool_view_descriptor* out, int64_t capacity, int64_t* count,
              const char* call) {
    require(count != nullptr, std::string(call) + ": count is NULL");
    require(capacity >= 0 && (capacity == 0 || out != nullptr), std::string(call) + ": capacity " +
                                                                    std::to_string(capacity) +
                                                                    " needs an output array");
    const std::vector<kvpool::ViewDescriptor> list = make();
    const std::size_t n = std::min(list.size(), static_cast<std::size_t>(capacity));
    for (std::size_t i = 0; i < n; ++i) {
        const kvpool::ViewDescriptor& d = list[i];
        kvpool_view_descriptor& o = out[i];
        o = kvpool_view_descriptor{};
        o.offset = d.offset;
        o.dtype = static_cast<int64_t>(d.dtype);
        o.ndim = d.ndim;
        std::copy(d.shape.begin(), d.shape.end(), o.shape);
        std::copy(d.strides.begin(), d.strides.end(), o.strides);
    }
    *count = static_cast<int64_t>(list.size());
}

std::vector<index_t> shape_of(const int64_t* dims, int64_t ndim, const std::string& what) {
    require(ndim >= 0 && ndim <= KVPOOL_VIEW_MAX_DIMS - 2,
            "kvpool_layout_mamba_views: " + what + " has " + std::to_string(ndim) +
                " dims, at most " + std::to_string(KVPOOL_VIEW_MAX_DIMS - 2));
    require(ndim == 0 || dims != nullptr, "kvpool_layout_mamba_views: " + what + " is NULL");
    return std::vector<index_t>(dims, dims + ndim);
}

kvpool::MambaTensorsGeometry mamba_of(const kvpool_mamba_view_geometry& g) {
    const char* call = "kvpool_layout_mamba_views";
    require(g.num_conv >= 0 && (g.num_conv == 0 || g.conv_ndims_host != nullptr),
            std::string(call) + ": num_conv " + std::to_string(g.num_conv) +
                " needs conv_ndims_host");
    kvpool::MambaTensorsGeometry out;
    out.layers = g.layers;
    const int64_t* dims = g.conv_dims_host;
    for (int64_t i = 0; i < g.num_conv; ++i) {
        const int64_t ndim = g.conv_ndims_host[i];
        out.conv_shapes.push_back(shape_of(dims, ndim, "conv state " + std::to_string(i)));
        dims += ndim;
    }
    out.conv_dtype = dtype_of(g.conv_dtype, call, "conv_dtype");
    out.temporal_shape = shape_of(g.temporal_shape, g.temporal_ndim, "the temporal state");
    out.temporal_dtype = dtype_of(g.temporal_dtype, call, "temporal_dtype");
    return out;
}

} // namespace

extern "C" {

kvpool_status kvpool_layout_mha_views(const kvpool_mha_view_geometry* geometry,
                                      kvpool_view_descriptor* out_host, int64_t capacity,
                                      int64_t* count) {
    return guarded([&] {
        const char* call = "kvpool_layout_mha_views";
        const kvpool_mha_view_geometry& g = deref(geometry, "geometry");
        const kvpool::MHAGeometry mha{g.layers, g.head_num, g.head_dim, g.v_head_dim,
                                      dtype_of(g.dtype, call, "dtype")};
        copy_out(
            [&] {
                return kvpool::mha_layer_views(mha, {g.page_size, g.num_pages, g.anchor_bytes});
            },
            out_host, capacity, count, call);
    });
}

kvpool_status kvpool_layout_mla_views(const kvpool_mla_view_geometry* geometry,
                                      kvpool_view_descriptor* out_host, int64_t capacity,
                                      int64_t* count) {
    return guarded([&] {
        const char* call = "kvpool_layout_mla_views";
        const kvpool_mla_view_geometry& g = deref(geometry, "geometry");
        // The latent and rope parts are one row here: kv_cache_dim stands for both.
        require(g.kv_cache_dim > 0, std::string(call) + ": kv_cache_dim must be > 0, got " +
                                        std::to_string(g.kv_cache_dim));
        const kvpool::MLAGeometry mla{g.layers, g.kv_cache_dim, 0,
                                      dtype_of(g.dtype, call, "dtype")};
        const kvpool::PagedRegion region{g.page_size, g.num_pages, g.anchor_bytes};
        copy_out(
            [&] {
                return g.dense ? kvpool::mla_dense_layer_views(mla, region)
                               : kvpool::mla_layer_views(mla, region);
            },
            out_host, capacity, count, call);
    });
}

kvpool_status kvpool_layout_mamba_views(const kvpool_mamba_view_geometry* geometry,
                                        kvpool_view_descriptor* out_host, int64_t capacity,
                                        int64_t* count) {
    return guarded([&] {
        const kvpool_mamba_view_geometry& g = deref(geometry, "geometry");
        const kvpool::MambaTensorsGeometry mamba = mamba_of(g);
        copy_out([&] { return kvpool::mamba_tensor_views(mamba, g.slots, g.anchor_bytes); },
                 out_host, capacity, count, "kvpool_layout_mamba_views");
    });
}

kvpool_status kvpool_layout_mamba_state_views(const kvpool_mamba_state_view_geometry* geometry,
                                              kvpool_view_descriptor* out_host, int64_t capacity,
                                              int64_t* count) {
    return guarded([&] {
        const char* call = "kvpool_layout_mamba_state_views";
        const kvpool_mamba_state_view_geometry& g = deref(geometry, "geometry");
        const kvpool::MambaStateGeometry mamba{
            g.layers, g.conv_dim, g.conv_width, dtype_of(g.conv_dtype, call, "conv_dtype"),
            g.heads,  g.head_dim, g.state_dim,  dtype_of(g.temporal_dtype, call, "temporal_dtype")};
        copy_out([&] { return kvpool::mamba_state_views(mamba, g.slots, g.anchor_bytes); },
                 out_host, capacity, count, call);
    });
}

} // extern "C"
