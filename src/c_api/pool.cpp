// C API: the unified byte buffer.
#include "handles.hpp"

using namespace kvpool::capi;
using kvpool::index_t;

extern "C" {

kvpool_status kvpool_pool_create(int64_t total_bytes, const kvpool_sub_pool_spec* specs,
                                 int num_specs, void* adopt, void* stream, kvpool_pool** out) {
    return guarded([&] {
        require(out != nullptr, "kvpool_pool_create: out is NULL");
        require(num_specs > 0 && specs != nullptr, "kvpool_pool_create: no sub-pool specs");
        std::vector<kvpool::SubPoolSpec> sides;
        for (int i = 0; i < num_specs; ++i) {
            const kvpool_sub_pool_spec& s = specs[i];
            require(s.name != nullptr,
                    "kvpool_pool_create: sub-pool spec " + std::to_string(i) + " has no name");
            kvpool::SubPoolSpec side;
            side.name = s.name;
            side.entry_bytes = s.entry_bytes;
            side.page_size = s.page_size;
            side.grow = s.grow_down ? kvpool::GrowDirection::down : kvpool::GrowDirection::up;
            side.max_tokens = s.max_tokens;
            sides.push_back(std::move(side));
        }
        kvpool::PoolLayout layout(total_bytes, std::move(sides));
        ensure_initialized();
        auto handle = std::make_unique<kvpool_pool>();
        if (adopt != nullptr)
            handle->pool = std::make_shared<Pool>(
                std::move(layout), Pool::bytes_view(static_cast<std::uint8_t*>(adopt),
                                                    static_cast<std::size_t>(total_bytes)));
        else
            handle->pool = std::make_shared<Pool>(space_of(stream), std::move(layout));
        *out = handle.release();
    });
}

void kvpool_pool_destroy(kvpool_pool* pool) {
    delete pool;
}

kvpool_status kvpool_pool_bytes(const kvpool_pool* pool, void** data, int64_t* size) {
    return guarded([&] {
        const auto& bytes = deref(pool, "pool").pool->bytes();
        deref(data, "data") = bytes.data();
        deref(size, "size") = static_cast<int64_t>(pool->pool->total_bytes());
    });
}

kvpool_status kvpool_pool_sink_bytes(const kvpool_pool* pool, int64_t* sink_bytes) {
    return guarded(
        [&] { deref(sink_bytes, "sink_bytes") = deref(pool, "pool").pool->layout().sink_bytes(); });
}

} // extern "C"
