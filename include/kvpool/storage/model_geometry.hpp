// Model geometry of the KV storage (MHA, MLA, Mamba state) and the bytes one
// token slot takes across all layers, so a PoolLayout can be built from the
// model. Host only, no Kokkos.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/storage/kv_dtype.hpp>
#include <kvpool/storage/pool_layout.hpp>
#include <kvpool/types.hpp>

#include <cstdint>
#include <string>

namespace kvpool {

namespace kv_detail {

inline void require_positive(const char* layout, const char* field, index_t value) {
    if (value <= 0)
        throw Error(ErrorCode::invalid_argument, std::string(layout) + " geometry: " + field +
                                                     " must be > 0, got " + std::to_string(value));
}

inline index_t round_up(index_t x, index_t to) {
    return (x + to - 1) / to * to;
}

} // namespace kv_detail

// Multi-head attention: per layer a K row [heads][head_dim] and a V row
// [heads][v_head_dim] per token.
struct MHAGeometry {
    index_t layers = 0;
    index_t heads = 0;
    index_t head_dim = 0;
    index_t v_head_dim = 0; // 0: same as head_dim
    KVDtype dtype = KVDtype::bf16;

    index_t value_head_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
    index_t k_row_elements() const { return heads * head_dim; }
    index_t v_row_elements() const { return heads * value_head_dim(); }
    // Bytes of one token across all layers, K and V: a side's SubPoolSpec::entry_bytes.
    index_t entry_bytes() const {
        return layers * (k_row_elements() + v_row_elements()) * dtype_size(dtype);
    }
    void validate() const {
        kv_detail::require_positive("MHA", "layers", layers);
        kv_detail::require_positive("MHA", "heads", heads);
        kv_detail::require_positive("MHA", "head_dim", head_dim);
        if (v_head_dim < 0)
            throw Error(ErrorCode::invalid_argument,
                        "MHA geometry: v_head_dim must be >= 0 (0: head_dim), got " +
                            std::to_string(v_head_dim));
    }
};

// Multi-head latent attention: one row per token per layer, the compressed
// latent (kv_lora_rank) followed by the rope part (qk_rope_head_dim).
struct MLAGeometry {
    index_t layers = 0;
    index_t kv_lora_rank = 0;
    index_t qk_rope_head_dim = 0;
    KVDtype dtype = KVDtype::bf16;

    index_t row_elements() const { return kv_lora_rank + qk_rope_head_dim; }
    index_t entry_bytes() const { return layers * row_elements() * dtype_size(dtype); }
    void validate() const {
        kv_detail::require_positive("MLA", "layers", layers);
        kv_detail::require_positive("MLA", "kv_lora_rank", kv_lora_rank);
        if (qk_rope_head_dim < 0)
            throw Error(ErrorCode::invalid_argument,
                        "MLA geometry: qk_rope_head_dim must be >= 0, got " +
                            std::to_string(qk_rope_head_dim));
    }
};

// Mamba (SSM) state of one request slot: per layer a conv state
// [conv_dim][conv_width] and a temporal state [heads][head_dim][state_dim],
// each with its own dtype.
struct MambaStateGeometry {
    index_t layers = 0;
    index_t conv_dim = 0;
    index_t conv_width = 0; // the conv kernel size minus one
    KVDtype conv_dtype = KVDtype::bf16;
    index_t heads = 0;
    index_t head_dim = 0;
    index_t state_dim = 0;
    KVDtype temporal_dtype = KVDtype::fp32;

    index_t conv_elements() const { return conv_dim * conv_width; }
    index_t temporal_elements() const { return heads * head_dim * state_dim; }
    index_t conv_row_bytes() const { return conv_elements() * dtype_size(conv_dtype); }
    index_t temporal_row_bytes() const { return temporal_elements() * dtype_size(temporal_dtype); }
    // Page-major blocks are padded to the larger element size, so that both
    // blocks of every layer of every slot start aligned for either type.
    index_t block_alignment() const {
        const index_t c = dtype_size(conv_dtype), t = dtype_size(temporal_dtype);
        return c > t ? c : t;
    }
    index_t conv_block_bytes() const {
        return kv_detail::round_up(conv_row_bytes(), block_alignment());
    }
    index_t temporal_block_bytes() const {
        return kv_detail::round_up(temporal_row_bytes(), block_alignment());
    }
    index_t layer_bytes() const { return conv_block_bytes() + temporal_block_bytes(); }
    // Bytes of one slot across all layers in the page-major layout.
    index_t entry_bytes() const { return layers * layer_bytes(); }
    void validate() const {
        kv_detail::require_positive("Mamba state", "layers", layers);
        kv_detail::require_positive("Mamba state", "conv_dim", conv_dim);
        kv_detail::require_positive("Mamba state", "conv_width", conv_width);
        kv_detail::require_positive("Mamba state", "heads", heads);
        kv_detail::require_positive("Mamba state", "head_dim", head_dim);
        kv_detail::require_positive("Mamba state", "state_dim", state_dim);
    }
};

// The sub-pool spec of a side holding this geometry page-major.
template <class Geometry>
SubPoolSpec sub_pool_spec(const std::string& name, const Geometry& geometry, index_t page_size,
                          GrowDirection grow, index_t max_tokens = 0) {
    geometry.validate();
    SubPoolSpec spec;
    spec.name = name;
    spec.entry_bytes = geometry.entry_bytes();
    spec.page_size = page_size;
    spec.grow = grow;
    spec.max_tokens = max_tokens;
    return spec;
}

} // namespace kvpool
