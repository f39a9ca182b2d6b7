#include <kvpool/error.hpp>
#include <kvpool/storage/view_descriptors.hpp>

#include <fmt/format.h>

#include <cstddef>

namespace kvpool {

namespace {

[[noreturn]] void bad(const std::string& what) {
    throw Error(ErrorCode::invalid_argument, what);
}

void check_region(const char* layout, const PagedRegion& r, KVDtype dtype) {
    if (r.page_size <= 0)
        bad(fmt::format("{} views: page_size must be > 0, got {}", layout, r.page_size));
    if (r.num_pages < 0)
        bad(fmt::format("{} views: num_pages must be >= 0, got {}", layout, r.num_pages));
    if (r.anchor_bytes < 0 || r.anchor_bytes % dtype_size(dtype) != 0)
        bad(fmt::format("{} views: anchor_bytes {} is not a non-negative multiple of the "
                        "{}-byte {}",
                        layout, r.anchor_bytes, dtype_size(dtype), to_string(dtype)));
}

ViewDescriptor descriptor(index_t offset, KVDtype dtype, std::initializer_list<index_t> shape,
                          std::initializer_list<index_t> strides) {
    ViewDescriptor d;
    d.offset = offset;
    d.dtype = dtype;
    d.ndim = static_cast<int>(shape.size());
    std::size_t i = 0;
    for (index_t x : shape)
        d.shape[i++] = x;
    i = 0;
    for (index_t x : strides)
        d.strides[i++] = x;
    return d;
}

index_t product(const std::vector<index_t>& shape) {
    index_t out = 1;
    for (index_t x : shape)
        out *= x;
    return out;
}

// The largest tensor shape a Mamba view holds: two dims go to (layers, slots).
constexpr std::size_t max_state_dims = max_view_dims - 2;

void check_state_shape(const std::vector<index_t>& shape, const std::string& name) {
    if (shape.size() > max_state_dims)
        bad(fmt::format("Mamba state: {} has {} dims, at most {}", name, shape.size(),
                        max_state_dims));
    for (index_t x : shape)
        if (x <= 0)
            bad(fmt::format("Mamba state: {} has an extent {}; extents must be > 0", name, x));
}

// Mamba state slots from anchor_bytes: each tensor's elements aligned there.
void check_slots(index_t slots, index_t anchor_bytes, KVDtype conv, KVDtype temporal) {
    if (slots < 0)
        bad(fmt::format("Mamba state views: slots must be >= 0, got {}", slots));
    for (KVDtype dtype : {conv, temporal})
        if (anchor_bytes < 0 || anchor_bytes % dtype_size(dtype) != 0)
            bad(fmt::format("Mamba state views: anchor_bytes {} is not a non-negative multiple "
                            "of the {}-byte {}",
                            anchor_bytes, dtype_size(dtype), to_string(dtype)));
}

} // namespace

index_t ViewDescriptor::byte_offset(std::initializer_list<index_t> index) const {
    if (static_cast<int>(index.size()) != ndim)
        throw Error(ErrorCode::out_of_range,
                    fmt::format("view of {} dims indexed with {}", ndim, index.size()));
    index_t elements = 0;
    int i = 0;
    for (index_t x : index) {
        if (x < 0 || x >= shape[static_cast<std::size_t>(i)])
            throw Error(ErrorCode::out_of_range,
                        fmt::format("index {} of dim {} outside its extent {}", x, i,
                                    shape[static_cast<std::size_t>(i)]));
        elements += x * strides[static_cast<std::size_t>(i++)];
    }
    return offset + elements * dtype_size(dtype);
}

index_t ViewDescriptor::end_byte() const {
    index_t last = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(ndim); ++i) {
        if (shape[i] == 0)
            return offset;
        last += (shape[i] - 1) * strides[i];
    }
    return offset + (last + 1) * dtype_size(dtype);
}

std::vector<ViewDescriptor> mha_layer_views(const MHAGeometry& g, const PagedRegion& r) {
    g.validate();
    check_region("MHA", r, g.dtype);
    const index_t size = dtype_size(g.dtype), ps = r.page_size;
    const index_t k_row = g.k_row_elements(), v_row = g.v_row_elements();
    const index_t page = ps * g.layers * (k_row + v_row); // elements
    std::vector<ViewDescriptor> out;
    for (index_t l = 0; l < g.layers; ++l) {
        const index_t k_at = r.anchor_bytes + l * ps * (k_row + v_row) * size;
        out.push_back(descriptor(k_at, g.dtype, {r.num_pages, ps, g.heads, g.head_dim},
                                 {page, k_row, g.head_dim, 1}));
        const index_t vd = g.value_head_dim();
        out.push_back(descriptor(k_at + ps * k_row * size, g.dtype, {r.num_pages, ps, g.heads, vd},
                                 {page, v_row, vd, 1}));
    }
    return out;
}

std::vector<ViewDescriptor> mla_layer_views(const MLAGeometry& g, const PagedRegion& r) {
    g.validate();
    check_region("MLA", r, g.dtype);
    const index_t row = g.row_elements(), ps = r.page_size;
    std::vector<ViewDescriptor> out;
    for (index_t l = 0; l < g.layers; ++l)
        out.push_back(descriptor(r.anchor_bytes + l * ps * row * dtype_size(g.dtype), g.dtype,
                                 {r.num_pages, ps, 1, row}, {ps * g.layers * row, row, row, 1}));
    return out;
}

std::vector<ViewDescriptor> mla_dense_layer_views(const MLAGeometry& g, const PagedRegion& r) {
    std::vector<ViewDescriptor> out = mla_layer_views(g, r);
    const index_t row = g.row_elements();
    for (ViewDescriptor& d : out)
        d = descriptor(d.offset, g.dtype, {r.num_pages * g.layers * r.page_size, 1, row},
                       {row, row, 1});
    return out;
}

std::vector<ViewDescriptor> mamba_state_views(const MambaStateGeometry& g, index_t slots,
                                              index_t anchor_bytes) {
    g.validate();
    check_slots(slots, anchor_bytes, g.conv_dtype, g.temporal_dtype);
    const index_t conv_size = dtype_size(g.conv_dtype),
                  temporal_size = dtype_size(g.temporal_dtype);
    const index_t entry = g.entry_bytes();
    std::vector<ViewDescriptor> out;
    for (index_t l = 0; l < g.layers; ++l) {
        const index_t conv_at = anchor_bytes + l * g.layer_bytes();
        out.push_back(descriptor(conv_at, g.conv_dtype, {slots, g.conv_dim, g.conv_width},
                                 {entry / conv_size, g.conv_width, 1}));
        out.push_back(
            descriptor(conv_at + g.conv_block_bytes(), g.temporal_dtype,
                       {slots, g.heads, g.head_dim, g.state_dim},
                       {entry / temporal_size, g.head_dim * g.state_dim, g.state_dim, 1}));
    }
    return out;
}

index_t MambaTensorsGeometry::entry_bytes() const {
    index_t conv = 0;
    for (const auto& shape : conv_shapes)
        conv += product(shape);
    return layers *
           (conv * dtype_size(conv_dtype) + product(temporal_shape) * dtype_size(temporal_dtype));
}

void MambaTensorsGeometry::validate() const {
    kv_detail::require_positive("Mamba state", "layers", layers);
    if (conv_shapes.empty())
        bad("Mamba state: conv_state_shapes must be non-empty");
    for (std::size_t i = 0; i < conv_shapes.size(); ++i)
        check_state_shape(conv_shapes[i], fmt::format("conv state {}", i));
    check_state_shape(temporal_shape, "the temporal state");
    // Each tensor starts where the one before it ends, slot after slot.
    const index_t entry = entry_bytes();
    index_t at = 0;
    const auto place = [&](const std::vector<index_t>& shape, KVDtype dtype) {
        const index_t size = dtype_size(dtype);
        if (at % size != 0 || entry % size != 0)
            bad(fmt::format("Mamba state: a {} state at byte {} of {}-byte slots is misaligned",
                            to_string(dtype), at, entry));
        at += layers * product(shape) * size;
    };
    for (const auto& shape : conv_shapes)
        place(shape, conv_dtype);
    place(temporal_shape, temporal_dtype);
}

std::vector<ViewDescriptor> mamba_tensor_views(const MambaTensorsGeometry& g, index_t slots,
                                               index_t anchor_bytes) {
    g.validate();
    check_slots(slots, anchor_bytes, g.conv_dtype, g.temporal_dtype);
    const index_t entry = g.entry_bytes();
    index_t at = anchor_bytes;
    std::vector<ViewDescriptor> out;
    const auto add = [&](const std::vector<index_t>& shape, KVDtype dtype) {
        const index_t size = dtype_size(dtype), inner = product(shape);
        ViewDescriptor d;
        d.offset = at;
        d.dtype = dtype;
        d.ndim = static_cast<int>(shape.size()) + 2;
        d.shape[0] = g.layers;
        d.strides[0] = inner;
        d.shape[1] = slots;
        d.strides[1] = entry / size;
        index_t stride = 1;
        for (std::size_t i = shape.size(); i-- > 0;) {
            d.shape[i + 2] = shape[i];
            d.strides[i + 2] = stride;
            stride *= shape[i];
        }
        out.push_back(d);
        at += g.layers * inner * size;
    };
    for (const auto& shape : g.conv_shapes)
        add(shape, g.conv_dtype);
    add(g.temporal_shape, g.temporal_dtype);
    return out;
}

} // namespace kvpool
