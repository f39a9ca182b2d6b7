// C API: the unified byte buffer.
#include "handles.hpp"

using namespace kvpool::capi;
using kvpool::index_t;

namespace kvpool::capi {

int grow_code(GrowDirection grow) {
    switch (grow) {
    case GrowDirection::up:
        return KVPOOL_GROW_UP;
    case GrowDirection::down:
        return KVPOOL_GROW_DOWN;
    case GrowDirection::floating:
        break;
    }
    return KVPOOL_GROW_FLOATING;
}

GrowDirection grow_direction(int code, const std::string& what) {
    switch (code) {
    case KVPOOL_GROW_UP:
        return GrowDirection::up;
    case KVPOOL_GROW_DOWN:
        return GrowDirection::down;
    case KVPOOL_GROW_FLOATING:
        return GrowDirection::floating;
    default:
        break;
    }
    throw Error(ErrorCode::invalid_argument,
                what + ": grow is " + std::to_string(code) +
                    ", not KVPOOL_GROW_UP (0), KVPOOL_GROW_DOWN (1) or KVPOOL_GROW_FLOATING (2)");
}

} // namespace kvpool::capi

extern "C" {

int kvpool_serves(int device) {
    return device == KVPOOL_DEVICE_HOST || (device == KVPOOL_DEVICE_GPU && serves_gpu) ? 1 : 0;
}

kvpool_status kvpool_unified_kv_pool_create_on(int device, int64_t total_bytes,
                                               const kvpool_sub_pool_spec* specs, int num_specs,
                                               void* adopt, void* stream,
                                               kvpool_unified_kv_pool** out) {
    return guarded([&] {
        require(out != nullptr, "kvpool_unified_kv_pool_create: out is NULL");
        require(num_specs > 0 && specs != nullptr,
                "kvpool_unified_kv_pool_create: no sub-pool specs");
        std::vector<kvpool::SubPoolSpec> sides;
        for (int i = 0; i < num_specs; ++i) {
            const kvpool_sub_pool_spec& s = specs[i];
            const std::string what =
                "kvpool_unified_kv_pool_create: sub-pool spec " + std::to_string(i);
            require(s.name != nullptr, what + " has no name");
            kvpool::SubPoolSpec side;
            side.name = s.name;
            side.entry_bytes = s.entry_bytes;
            side.page_size = s.page_size;
            side.grow = grow_direction(s.grow, what + " ('" + side.name + "')");
            side.max_tokens = s.max_tokens;
            if (side.grow == kvpool::GrowDirection::floating)
                side.float_at = s.float_at;
            sides.push_back(std::move(side));
        }
        kvpool::PoolLayout layout(total_bytes, std::move(sides));
        on_device(device, "kvpool_unified_kv_pool_create", [&](auto on) {
            using S = typename decltype(on)::execution_space;
            using Pool = PoolOn<S>;
            ensure_initialized();
            auto handle = std::make_unique<kvpool_unified_kv_pool>();
            PoolRef<S> ref;
            if (adopt != nullptr)
                ref.pool = std::make_shared<Pool>(
                    std::move(layout),
                    typename Pool::bytes_view(static_cast<std::uint8_t*>(adopt),
                                              static_cast<std::size_t>(total_bytes)));
            else
                ref.pool = std::make_shared<Pool>(on.space(stream), std::move(layout));
            handle->on = std::move(ref);
            *out = handle.release();
        });
    });
}

kvpool_status kvpool_unified_kv_pool_create(int64_t total_bytes, const kvpool_sub_pool_spec* specs,
                                            int num_specs, void* adopt, void* stream,
                                            kvpool_unified_kv_pool** out) {
    return kvpool_unified_kv_pool_create_on(default_device, total_bytes, specs, num_specs, adopt,
                                            stream, out);
}

void kvpool_unified_kv_pool_destroy(kvpool_unified_kv_pool* pool) {
    delete pool;
}

kvpool_status kvpool_unified_kv_pool_device(const kvpool_unified_kv_pool* pool, int* device) {
    return guarded(
        [&] { deref(device, "device") = static_cast<int>(deref(pool, "pool").on.index()); });
}

kvpool_status kvpool_unified_kv_pool_bytes(const kvpool_unified_kv_pool* pool, void** data,
                                           int64_t* size) {
    return on(pool, "pool", [&](const auto& p) {
        deref(data, "data") = p.pool->bytes().data();
        deref(size, "size") = static_cast<int64_t>(p.pool->total_bytes());
    });
}

kvpool_status kvpool_unified_kv_pool_sink_bytes(const kvpool_unified_kv_pool* pool,
                                                int64_t* sink_bytes) {
    return on(pool, "pool", [&](const auto& p) {
        deref(sink_bytes, "sink_bytes") = p.pool->layout().sink_bytes();
    });
}

} // extern "C"
