// What the C API's opaque handles hold, and the helpers every entry point
// uses: the execution-space instance of a stream, Views over caller memory, and
// the translation of exceptions into status codes and the last-error message.
#pragma once

#include <kvpool/c_api.h>
#include <kvpool/error.hpp>
#include <kvpool/hybrid_req_to_token_pool.hpp>
#include <kvpool/mamba_pair.hpp>
#include <kvpool/mamba_swa_allocator.hpp>
#include <kvpool/multi_ended_allocator.hpp>
#include <kvpool/req_to_token_pool.hpp>
#include <kvpool/swa_pair.hpp>
#include <kvpool/unified_kv_pool.hpp>

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace kvpool::capi {

// One library per Kokkos configuration: its default execution space.
using Space = Kokkos::DefaultExecutionSpace;
using Memory = Space::memory_space;
using Pool = UnifiedKVPool<Memory>;
using Side = MultiEndedAllocator<Space>;
using SwaPair = UnifiedSWAAllocator<Space>;
using MambaPair = UnifiedMambaAllocator<Space>;
using MambaSwa = UnifiedMambaSWAAllocator<Space>;
using ReqPool = ReqToTokenPool<Space>;
using HybridPool = HybridReqToTokenPool<Space>;
using Ids = Kokkos::View<index_t*, Memory>;
using Ids32 = Kokkos::View<std::int32_t*, Memory>;

// Initialises Kokkos if nobody has (on the current device).
void ensure_initialized();

// The instance that runs on the stream (cached per stream: making one costs a
// device synchronisation). Host builds: the default instance.
Space space_of(void* stream);

// Counts live handles, so that Kokkos is finalised only after the last one.
// The first member of every handle: destroyed after what it holds.
class LiveHandle {
public:
    LiveHandle();
    ~LiveHandle();
    LiveHandle(const LiveHandle&) = delete;
    LiveHandle& operator=(const LiveHandle&) = delete;
};

// Unmanaged Views over caller memory.
inline Ids device_ids(const std::int64_t* data, std::int64_t n) {
    return Ids(const_cast<index_t*>(data), static_cast<std::size_t>(n));
}
std::vector<index_t> host_ids(const std::int64_t* data, std::int64_t n);

// Throws invalid_argument naming the parameter unless it holds.
void require(bool condition, const std::string& what);
template <class T> T& deref(T* handle, const char* name) {
    require(handle != nullptr, std::string(name) + " is NULL");
    return *handle;
}

// A callback (KV move, completion query) failed during the current call.
void note_callback_failure(const std::string& what);

// Runs f, translating what it throws into a status and the thread's last error.
kvpool_status status_of_current_exception();
void begin_call();
kvpool_status end_call();
template <class F> kvpool_status guarded(F&& f) {
    begin_call();
    try {
        f();
    } catch (...) {
        return status_of_current_exception();
    }
    return end_call();
}

// A string that outlives the call (valid until the thread's next one).
const char* thread_string(std::string s);

// The object a handle keeps alive and the side it addresses: a standalone
// side, two sides bound as peers, or a side of a pair or of the tri-pool.
struct SideOwner {
    virtual ~SideOwner() = default;
};

// A side's KVPOOL_GROW_* code, and the direction of one (an unknown code:
// invalid_argument, what naming the spec).
int grow_code(GrowDirection grow);
GrowDirection grow_direction(int code, const std::string& what);

// A side's options as the caller gave them; NULL: kvpool's defaults.
AllocatorOptions options_of(const kvpool_side_options* options);

// A handle on side, which owner keeps alive.
kvpool_allocator* new_side_handle(std::shared_ptr<SideOwner> owner, Side& side,
                                  std::shared_ptr<Pool> pool);

} // namespace kvpool::capi

struct kvpool_pool {
    kvpool::capi::LiveHandle live;
    std::shared_ptr<kvpool::capi::Pool> pool;
};

struct kvpool_allocator {
    kvpool::capi::LiveHandle live;
    std::shared_ptr<kvpool::capi::SideOwner> owner;
    kvpool::capi::Side* side = nullptr;
    std::shared_ptr<kvpool::capi::Pool> pool;
};

struct kvpool_token {
    kvpool::CompletionTokenPtr token;
};

struct kvpool_snapshot {
    kvpool::AllocatorSnapshot snapshot;
};

struct kvpool_pair_snapshot {
    kvpool::PairSnapshot snapshot;
};

struct kvpool_mamba_swa_snapshot {
    kvpool::MambaSWASnapshot snapshot;
};
