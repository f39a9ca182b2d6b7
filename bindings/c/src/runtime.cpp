// The C API's runtime: Kokkos initialisation and finalisation (the GPU's
// stream instances cleared first), error translation, completion tokens.
#include "handles.hpp"

#include <kvpool/device_faults.hpp>
#include <kvpool/kernels/event_token.hpp>

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>

namespace kvpool::capi {

namespace {

// Whether the host can read caller memory: the GPU runtime tells where there is one.
template <class Gpu> bool host_can_access([[maybe_unused]] const void* data) {
    if constexpr (kernels::NativeBackend<Gpu>::available)
        return kernels::NativeBackend<Gpu>::runtime::host_can_access(data);
    else
        return true;
}

// The device Kokkos is to run on: the engine's current one where there is a
// GPU runtime (Kokkos would otherwise take device 0, or one named by MPI
// variables); -1 leaves the choice to Kokkos.
template <class Gpu> int device_for_kokkos() {
    if constexpr (kernels::NativeBackend<Gpu>::available)
        return kernels::NativeBackend<Gpu>::runtime::current_device();
    else
        return -1;
}

// What kvpool_backend() reports: the GPU runtime's name, or "host".
template <class Gpu> const char* backend_name() {
    if constexpr (kernels::NativeBackend<Gpu>::available)
        return kernels::NativeBackend<Gpu>::runtime::name;
    else
        return "host";
}

std::mutex runtime_mutex;
bool initialized_here = false; // kvpool called Kokkos::initialize
bool finalize_requested = false;
bool finalized = false; // Kokkos 3.4 cannot be initialised again
std::atomic<std::int64_t> live_handles{0};

thread_local std::string last_error;
thread_local std::string returned_string;
thread_local bool callback_failed = false;
thread_local std::string callback_error;
thread_local bool caller_checked_memory = false;

kvpool_status code_of(ErrorCode code) {
    switch (code) {
    case ErrorCode::invalid_argument:
        return KVPOOL_ERROR_INVALID_ARGUMENT;
    case ErrorCode::misaligned:
        return KVPOOL_ERROR_MISALIGNED;
    case ErrorCode::out_of_range:
        return KVPOOL_ERROR_OUT_OF_RANGE;
    case ErrorCode::not_allocated:
        return KVPOOL_ERROR_NOT_ALLOCATED;
    case ErrorCode::wrong_role:
        return KVPOOL_ERROR_WRONG_ROLE;
    case ErrorCode::invalid_state:
        return KVPOOL_ERROR_INVALID_STATE;
    case ErrorCode::internal:
        return KVPOOL_ERROR_INTERNAL;
    case ErrorCode::device:
        return KVPOOL_ERROR_RUNTIME;
    }
    return KVPOOL_ERROR_INTERNAL;
}

template <class S> void clear_stream_instances() {
    if constexpr (kernels::NativeBackend<S>::available)
        StreamInstances<S>::clear();
}

void finalize_locked() {
    clear_stream_instances<GpuSpace>();
    Kokkos::finalize();
    initialized_here = false;
    finalized = true;
}

void finalize_if_due_locked() {
    if (!finalize_requested || !initialized_here || live_handles.load() != 0 ||
        !Kokkos::is_initialized())
        return;
    finalize_locked();
}

// Objects still alive when the process exits (an interpreter that never freed
// them) are never destroyed; Kokkos is finalised anyway, before its own static
// teardown, which otherwise reports a missing finalize on CUDA. Registered after
// Kokkos::initialize, so it runs before the statics that call made (and before the
// CUDA runtime's own exit handlers).
void finalize_at_exit() {
    std::lock_guard<std::mutex> lock(runtime_mutex);
    if (initialized_here && Kokkos::is_initialized())
        finalize_locked();
}

void initialize_locked() {
    if (Kokkos::is_initialized())
        return;
    if (finalized)
        throw Error(ErrorCode::invalid_state,
                    "kvpool finalised Kokkos, which cannot be initialised again in this process");
    const int device = device_for_kokkos<GpuSpace>();
#if KOKKOS_VERSION >= 30700
    Kokkos::InitializationSettings settings;
    settings.set_disable_warnings(true);
    if (device >= 0)
        settings.set_device_id(device);
    Kokkos::initialize(settings);
#else
    Kokkos::InitArguments args;
    args.disable_warnings = true;
    if (device >= 0)
        args.device_id = device;
    Kokkos::initialize(args);
#endif
    initialized_here = true;
    std::atexit(finalize_at_exit);
}

} // namespace

void ensure_initialized() {
    std::lock_guard<std::mutex> lock(runtime_mutex);
    initialize_locked();
}

LiveHandle::LiveHandle() {
    ++live_handles;
}
LiveHandle::~LiveHandle() {
    if (--live_handles == 0) {
        std::lock_guard<std::mutex> lock(runtime_mutex);
        finalize_if_due_locked();
    }
}

std::vector<index_t> host_ids(const std::int64_t* data, std::int64_t n) {
    require(n >= 0, "a negative element count");
    if (n != 0 && data == nullptr)
        argument_error("a NULL array of " + std::to_string(n) + " elements");
    require_host_reachable(data, n);
    return std::vector<index_t>(data, data + n);
}

bool caller_checks_memory() {
    return caller_checked_memory;
}

CallerChecksMemory::CallerChecksMemory(bool checks) : saved_(caller_checked_memory) {
    caller_checked_memory = checks;
}
CallerChecksMemory::~CallerChecksMemory() {
    caller_checked_memory = saved_;
}

void require_host_reachable(const void* data, std::int64_t n) {
    if (data != nullptr && n > 0 && !caller_checked_memory && !host_can_access<GpuSpace>(data))
        argument_error("an array of " + std::to_string(n) +
                       " elements the host reads is GPU memory: a host handle's arrays, and every "
                       "handle's *_host arrays, are host memory");
}

void argument_error(const std::string& what) {
    throw Error(ErrorCode::invalid_argument, what);
}

void note_callback_failure(const std::string& what) {
    if (!callback_failed)
        callback_error = what;
    callback_failed = true;
}

NestedCalls::NestedCalls() : failed_(callback_failed), error_(callback_error) {}
NestedCalls::~NestedCalls() {
    callback_failed = failed_;
    callback_error = std::move(error_);
}

void begin_call() {
    callback_failed = false;
    callback_error.clear();
}

kvpool_status end_call() {
    if (!callback_failed)
        return KVPOOL_OK;
    last_error = callback_error;
    return KVPOOL_ERROR_CALLBACK;
}

kvpool_status status_of_current_exception() {
    try {
        throw;
    } catch (const Error& e) {
        last_error = e.what();
        return code_of(e.code());
    } catch (const std::bad_alloc&) {
        last_error = "out of host memory for kvpool's bookkeeping";
    } catch (const std::exception& e) {
        last_error = e.what();
    } catch (...) {
        last_error = "unknown exception";
    }
    return KVPOOL_ERROR_RUNTIME;
}

const char* thread_string(std::string s) {
    returned_string = std::move(s);
    return returned_string.c_str();
}

namespace {

// A token whose completion the host asks its owner about.
class QueryToken final : public CompletionToken {
public:
    QueryToken(kvpool_query_fn query, void* user) : query_(query), user_(user) {}
    bool is_complete() const override {
        const CallerChecksMemory unchecked(false); // for the calls the query makes
        const int done = query_(user_);
        if (done < 0) {
            // Treated as complete, so that nothing waits forever on it.
            note_callback_failure("a completion token's query failed");
            return true;
        }
        return done != 0;
    }

private:
    kvpool_query_fn query_;
    void* user_;
};

// The owner's release(user) runs when kvpool's last reference goes.
kvpool_completion_token* make_token(CompletionToken* token, kvpool_release_fn release, void* user) {
    auto* handle = new kvpool_completion_token;
    handle->token = CompletionTokenPtr(token, [release, user](const CompletionToken* t) {
        delete t;
        if (release)
            release(user);
    });
    return handle;
}

// A token over an event of the runtime this library is built for.
template <class Gpu> CompletionToken* new_event_token([[maybe_unused]] void* event) {
    using backend = kernels::NativeBackend<Gpu>;
    if constexpr (backend::available) {
        using runtime = typename backend::runtime;
        return new kernels::EventToken<runtime>(static_cast<typename runtime::event_type>(event));
    } else {
        throw Error(ErrorCode::internal, "a host build has no device event tokens");
    }
}

// A vendor's event makes a token only in a library built for that vendor.
kvpool_status token_from_event(const char* call, const std::string& vendor, void* event,
                               kvpool_release_fn release, void* user,
                               kvpool_completion_token** out) {
    return guarded([&] {
        if (vendor != kvpool_backend())
            throw Error(ErrorCode::invalid_argument, std::string(call) +
                                                         ": this library is built for " +
                                                         kvpool_backend() + ", not " + vendor);
        require(event != nullptr, std::string(call) + ": event is NULL (never recorded?)");
        kvpool_completion_token*& slot = deref(out, "out");
        slot = make_token(new_event_token<GpuSpace>(event), release, user);
    });
}

} // namespace

} // namespace kvpool::capi

using namespace kvpool::capi;

extern "C" {

const char* kvpool_last_error(void) {
    return last_error.c_str();
}

const char* kvpool_backend(void) {
    return backend_name<GpuSpace>();
}

int kvpool_is_initialized(void) {
    return Kokkos::is_initialized() ? 1 : 0;
}

kvpool_status kvpool_initialize(void) {
    return guarded([] { ensure_initialized(); });
}

kvpool_status kvpool_finalize_when_unused(void) {
    return guarded([] {
        std::lock_guard<std::mutex> lock(runtime_mutex);
        finalize_requested = true;
        finalize_if_due_locked();
    });
}

int64_t kvpool_live_handles(void) {
    return live_handles.load();
}

kvpool_status kvpool_device_faults_fail_nth(int op, int64_t nth) {
    return guarded([&] {
        require(op >= 0 && op < kvpool::device_op_kinds,
                "kvpool_device_faults_fail_nth: op " + std::to_string(op) +
                    " is none of 0 (allocation), 1 (upload), 2 (copy), 3 (launch)");
        require(nth >= 1, "kvpool_device_faults_fail_nth: nth " + std::to_string(nth) +
                              " (counts from 1, the next operation)");
        kvpool::device_faults::fail_nth(static_cast<kvpool::DeviceOp>(op),
                                        static_cast<std::uint64_t>(nth));
    });
}

void kvpool_device_faults_reset(void) {
    kvpool::device_faults::reset();
}

int64_t kvpool_device_faults_count(int op) {
    if (op < 0 || op >= kvpool::device_op_kinds)
        return -1;
    return static_cast<int64_t>(kvpool::device_faults::count(static_cast<kvpool::DeviceOp>(op)));
}

kvpool_status kvpool_completion_token_from_query(kvpool_query_fn query, kvpool_release_fn release,
                                                 void* user, kvpool_completion_token** out) {
    return guarded([&] {
        require(query != nullptr, "kvpool_completion_token_from_query: query is NULL");
        deref(out, "out") = make_token(new QueryToken(query, user), release, user);
    });
}

kvpool_status kvpool_completion_token_from_cuda_event(void* event, kvpool_release_fn release,
                                                      void* user, kvpool_completion_token** out) {
    return token_from_event("kvpool_completion_token_from_cuda_event", "cuda", event, release, user,
                            out);
}

kvpool_status kvpool_completion_token_from_hip_event(void* event, kvpool_release_fn release,
                                                     void* user, kvpool_completion_token** out) {
    return token_from_event("kvpool_completion_token_from_hip_event", "hip", event, release, user,
                            out);
}

void kvpool_completion_token_release(kvpool_completion_token* token) {
    delete token;
}

} // extern "C"
