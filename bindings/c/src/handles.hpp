// What the C API's opaque handles hold, and the helpers every entry point
// uses: the execution spaces a library serves and the instance of a stream on
// each, Views over caller memory, and the translation of exceptions into status
// codes and the last-error message. A handle holds its objects typed for the
// space they live on (OnEachSpace); an entry point visits them (on()), so its
// body is one template over the space.
#pragma once

#include <kvpool/c_api.h>
#include <kvpool/error.hpp>
#include <kvpool/kernels/native_backend.hpp>
#include <kvpool/mamba_pair.hpp>
#include <kvpool/mamba_swa_allocator.hpp>
#include <kvpool/multi_ended_allocator.hpp>
#include <kvpool/requests/hybrid_req_to_token_pool.hpp>
#include <kvpool/requests/req_to_token_pool.hpp>
#include <kvpool/storage/unified_kv_pool.hpp>
#include <kvpool/swa_pair.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace kvpool::capi {

// The execution spaces one library serves, each with its own memory: the
// host's in every build and, beside it in a GPU build, the GPU's (Cuda, HIP).
// A pool or request table is made on one of them (KVPOOL_DEVICE_*); everything
// made from it runs there. In a host build the two are the same space.
using HostSpace = Kokkos::DefaultHostExecutionSpace;
using GpuSpace = Kokkos::DefaultExecutionSpace;
inline constexpr bool serves_gpu = !std::is_same_v<HostSpace, GpuSpace>;

// Of<S> for each space served, in the order of KVPOOL_DEVICE_HOST, _GPU: what a
// handle holds, typed for the space its objects live on.
template <template <class> class Of>
using OnEachSpace = std::conditional_t<serves_gpu, std::variant<Of<HostSpace>, Of<GpuSpace>>,
                                       std::variant<Of<HostSpace>>>;

template <class S> using PoolOn = UnifiedKVPool<typename S::memory_space>;
template <class S> using IdsOn = Kokkos::View<index_t*, typename S::memory_space>;
template <class S> using Ids32On = Kokkos::View<std::int32_t*, typename S::memory_space>;

// Initialises Kokkos if nobody has (on the current device).
void ensure_initialized();

// The instances made for the streams used so far on a GPU space (making one
// costs a device synchronisation); cleared before Kokkos::finalize. Never
// destroyed at exit: the GPU runtime may be gone by then.
template <class S> class StreamInstances {
    using stream_type = typename kernels::NativeBackend<S>::runtime::stream_type;

public:
    static S of(void* stream) {
        std::lock_guard<std::mutex> lock(mutex());
        auto& map = instances();
        const auto key = static_cast<stream_type>(stream);
        auto it = map.find(key);
        if (it == map.end())
            it = map.emplace(key, S(key)).first;
        return it->second;
    }
    static void clear() {
        std::lock_guard<std::mutex> lock(mutex());
        instances().clear();
    }

private:
    static std::mutex& mutex() {
        static std::mutex m;
        return m;
    }
    static std::map<stream_type, S>& instances() {
        static auto* map = new std::map<stream_type, S>;
        return *map;
    }
};

// The instance of S that runs on the stream: on a GPU space the stream's own
// (NULL: the default instance); the host spaces ignore the stream.
template <class S> S space_of([[maybe_unused]] void* stream) {
    if constexpr (kernels::NativeBackend<S>::available) {
        if (stream != nullptr)
            return StreamInstances<S>::of(stream);
    }
    return S();
}

// What a handle's typed part derives from: its space, and the space's
// instance for a stream.
template <class S> struct OnSpace {
    using execution_space = S;
    static S space(void* stream) { return space_of<S>(stream); }
};

// f(OnSpace<S>()) for the space of device, a KVPOOL_DEVICE_* code; a code
// that is none, or a device this library does not serve: invalid_argument,
// naming the call.
template <class F> void on_device(int device, const std::string& call, F&& f) {
    if (device == KVPOOL_DEVICE_HOST)
        return f(OnSpace<HostSpace>());
    if (device == KVPOOL_DEVICE_GPU) {
        if constexpr (serves_gpu)
            return f(OnSpace<GpuSpace>());
        throw Error(ErrorCode::invalid_argument,
                    call + ": this kvpool library is built for the host only; it serves "
                           "KVPOOL_DEVICE_HOST, not KVPOOL_DEVICE_GPU");
    }
    throw Error(ErrorCode::invalid_argument,
                call + ": device " + std::to_string(device) +
                    " is neither KVPOOL_DEVICE_HOST (0) nor KVPOOL_DEVICE_GPU (1)");
}

// The device a library's own calls (kvpool_unified_kv_pool_create, kvpool_req_to_token_pool_create)
// use: the GPU in a GPU build, else the host.
inline constexpr int default_device = serves_gpu ? KVPOOL_DEVICE_GPU : KVPOOL_DEVICE_HOST;

// Counts live handles, so that Kokkos is finalised only after the last one.
// The first member of every handle: destroyed after what it holds.
class LiveHandle {
public:
    LiveHandle();
    ~LiveHandle();
    LiveHandle(const LiveHandle&) = delete;
    LiveHandle& operator=(const LiveHandle&) = delete;
};

// Throws invalid_argument naming the parameter unless it holds. Every call
// checks its arrays and handles: a message that is more than a literal is
// built only when the check fails (argument_error), not on every call.
[[noreturn]] void argument_error(const std::string& what);
inline void require(bool condition, const char* what) {
    if (!condition)
        argument_error(what);
}
inline void require(bool condition, const std::string& what) {
    if (!condition)
        argument_error(what);
}

// Whether the running call's caller has checked where its arrays live
// (kvpool_kv_set_caller_checks_memory): then the checks below ask no runtime.
// Set for the length of one call on a KV handle (CallerChecksMemory); a call
// made from inside a callback (eviction, KV move, completion query) starts
// without it.
bool caller_checks_memory();
class CallerChecksMemory {
public:
    explicit CallerChecksMemory(bool checks);
    ~CallerChecksMemory();
    CallerChecksMemory(const CallerChecksMemory&) = delete;
    CallerChecksMemory& operator=(const CallerChecksMemory&) = delete;

private:
    bool saved_;
};

// Throws invalid_argument unless a handle's code on S can reach caller memory
// of n elements: a GPU build asks its runtime (a kernel that touches memory it
// cannot reach poisons the whole context) unless the caller has checked; a
// host build cannot tell.
void require_host_reachable(const void* data, std::int64_t n);
template <class S> void require_reachable(const void* data, std::int64_t n) {
    if constexpr (kernels::NativeBackend<S>::available) {
        if (data != nullptr && n > 0 && !caller_checks_memory() &&
            !kernels::NativeBackend<S>::runtime::device_can_access(data))
            argument_error("an array of " + std::to_string(n) +
                           " elements for a GPU handle is host memory the GPU cannot reach: "
                           "pass GPU memory (managed or page-locked host memory also serve)");
    } else {
        require_host_reachable(data, n);
    }
}

// Unmanaged Views over caller memory, in S's memory.
template <class S> IdsOn<S> device_ids(const std::int64_t* data, std::int64_t n) {
    require_reachable<S>(data, n);
    return IdsOn<S>(const_cast<index_t*>(data), static_cast<std::size_t>(n));
}
std::vector<index_t> host_ids(const std::int64_t* data, std::int64_t n);
// A caller's array of count run records the host reads (what names it in the
// error): a count >= 0, not NULL unless empty, host memory.
inline void require_host_runs(const void* runs, std::int64_t count, const std::string& what) {
    require(count >= 0, what + " count " + std::to_string(count) + " is negative");
    require(count == 0 || runs != nullptr,
            what + " is NULL with " + std::to_string(count) + " runs");
    require_host_reachable(runs, count);
}

template <class T> T& deref(T* handle, const char* name) {
    if (handle == nullptr)
        argument_error(std::string(name) + " is NULL");
    return *handle;
}

// A callback (KV move, completion query) failed during the current call.
void note_callback_failure(const std::string& what);

// Around a callback that may call back into the API (the eviction callback):
// the calls it makes start and end their own record of failed callbacks; the
// enclosing call's record is put back afterwards.
class NestedCalls {
public:
    NestedCalls();
    ~NestedCalls();
    NestedCalls(const NestedCalls&) = delete;
    NestedCalls& operator=(const NestedCalls&) = delete;

private:
    bool failed_;
    std::string error_;
    CallerChecksMemory unchecked_{false};
};

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

// What every handle on one side (its side handle, the KV handles and request
// tables made from it) shares: the owner, replaced by bind_peer with one that
// keeps both peers alive, for all of them at once.
struct SideOwners final : SideOwner {
    explicit SideOwners(std::shared_ptr<SideOwner> o) : held(std::move(o)) {}
    std::shared_ptr<SideOwner> held;
};

// A side's KVPOOL_GROW_* code, and the direction of one (an unknown code:
// invalid_argument, what naming the spec).
int grow_code(GrowDirection grow);
GrowDirection grow_direction(int code, const std::string& what);

// A side's options as the caller gave them; NULL: kvpool's defaults.
AllocatorOptions options_of(const kvpool_allocator_options* options);

// What the handles hold on space S.
template <class S> struct PoolRef : OnSpace<S> {
    std::shared_ptr<PoolOn<S>> pool;
};
template <class S> struct SideRef : OnSpace<S> {
    std::shared_ptr<SideOwners> owner;
    MultiEndedAllocator<S>* side = nullptr;
    std::shared_ptr<PoolOn<S>> pool;
};

// Runs f on the handle's typed part (a PoolRef, SideRef, ...) inside guarded():
// the C entry points' one way into a handle. NULL: invalid_argument naming it.
template <class Handle, class F> kvpool_status on(Handle* handle, const char* name, F&& f) {
    return guarded([&] { std::visit(f, deref(handle, name).on); });
}

// A handle on side, which owner keeps alive.
template <class S>
kvpool_multi_ended_allocator* new_side_handle(std::shared_ptr<SideOwner> owner,
                                              MultiEndedAllocator<S>& side,
                                              std::shared_ptr<PoolOn<S>> pool);

} // namespace kvpool::capi

struct kvpool_unified_kv_pool {
    kvpool::capi::LiveHandle live;
    kvpool::capi::OnEachSpace<kvpool::capi::PoolRef> on;
};

struct kvpool_multi_ended_allocator {
    kvpool::capi::LiveHandle live;
    kvpool::capi::OnEachSpace<kvpool::capi::SideRef> on;
};

namespace kvpool::capi {

template <class S>
kvpool_multi_ended_allocator* new_side_handle(std::shared_ptr<SideOwner> owner,
                                              MultiEndedAllocator<S>& side,
                                              std::shared_ptr<PoolOn<S>> pool) {
    auto handle = std::make_unique<kvpool_multi_ended_allocator>();
    SideRef<S> ref;
    ref.owner = std::make_shared<SideOwners>(std::move(owner));
    ref.side = &side;
    ref.pool = std::move(pool);
    handle->on = std::move(ref);
    return handle.release();
}

} // namespace kvpool::capi

struct kvpool_completion_token {
    kvpool::CompletionTokenPtr token;
};

struct kvpool_allocator_snapshot {
    kvpool::AllocatorSnapshot snapshot;
};

struct kvpool_pair_snapshot {
    kvpool::PairSnapshot snapshot;
};

struct kvpool_mamba_swa_snapshot {
    kvpool::MambaSWASnapshot snapshot;
};
