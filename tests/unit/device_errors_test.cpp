// GPU runtime failures surface as kvpool::Error(ErrorCode::device), carrying
// the runtime's message. Only the GPU backends have a runtime to fail.
#include <kvpool/kernels/device_ids.hpp>
#include <kvpool/kernels/dispatch.hpp>

#include "test_support.hpp"

#include <cstddef>
#include <string>

using namespace kvpool;
using namespace kvpool::test;

namespace {

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// One block per request: more requests than a grid may have blocks. The
// launch is refused before anything runs.
template <class ExecutionSpace> void check_refused_launch() {
    using Backend = kernels::NativeBackend<ExecutionSpace>;
    if constexpr (Backend::available) {
        kernels::native::AllocExtend op{};
        op.pages.page_size = 1;
        op.batch = (index_t(1) << 31) + 1;
        try {
            kernels::NativeKernels<typename Backend::runtime>::alloc_extend_bind(
                Backend::stream(ExecutionSpace()), op);
            FAIL("the launch was accepted");
        } catch (const Error& e) {
            INFO(e.what());
            CHECK(e.code() == ErrorCode::device);
            CHECK(contains(e.what(), "kvpool::alloc_extend_bind"));
            CHECK(contains(e.what(), "failed: "));
        }
    }
}

// Staging memory no device has: refused in stream order, the array keeps what
// it had, and the failure does not resurface in the next launch's check.
template <class ExecutionSpace> void check_refused_staging() {
    using Backend = kernels::NativeBackend<ExecutionSpace>;
    if constexpr (Backend::available) {
        const ExecutionSpace space;
        const auto stream = Backend::stream(space);
        kernels::StreamOrderedArray<typename Backend::runtime, index_t> ids;
        ids.reserve(stream, 3);
        index_t* const before = ids.data();
        try {
            ids.reserve(stream, std::size_t(1) << 55);
            FAIL("an allocation of 2^58 bytes was accepted");
        } catch (const Error& e) {
            INFO(e.what());
            CHECK(e.code() == ErrorCode::device);
            CHECK(contains(e.what(), "MallocAsync failed: "));
        }
        CHECK(ids.data() == before);
        CHECK(ids.size() == 3);

        const auto host = kk::uninitialized<
            kk::View<index_t*, typename kk::pinned_host_space<ExecutionSpace>::type>>("test::host",
                                                                                      3);
        host(0) = 3, host(1) = 1, host(2) = 2;
        kernels::async_upload(space, ids.data(), host.data(), 3);
        const kernels::DeviceIdsView<ExecutionSpace> staged(ids.data(), 3);
        const IndexView out("out", 3);
        Kokkos::parallel_for(
            kk::range(space, 3), KOKKOS_LAMBDA(index_t i) { out(i) = staged(i); });
        space.fence();
        CHECK(to_host(out) == std::vector<index_t>{3, 1, 2});
    }
}

} // namespace

TEST_CASE("device errors: staging memory the device cannot give throws ErrorCode::device and "
          "changes nothing",
          "[device-errors]") {
    if (!kernels::NativeBackend<Space>::available)
        SKIP("no stream-ordered staging for backend " KVPOOL_TEST_BACKEND_NAME);
    check_refused_staging<Space>();
}

TEST_CASE("device errors: a launch the device refuses throws ErrorCode::device",
          "[device-errors]") {
    if (!kernels::NativeBackend<Space>::available)
        SKIP("no native kernels for backend " KVPOOL_TEST_BACKEND_NAME);
    check_refused_launch<Space>();
    // The refusal is not sticky: the device still runs work.
    const IndexView ids = to_device({3, 1, 2});
    Space().fence();
    CHECK(to_host(ids) == std::vector<index_t>{3, 1, 2});
}

#if defined(KOKKOS_ENABLE_CUDA)
TEST_CASE("device errors: a failed CUDA call names the call and the runtime's message",
          "[device-errors]") {
    try {
        kernels::cuda::check(cudaErrorInvalidValue, "cudaMemcpyAsync (staging ids)");
        FAIL("no error");
    } catch (const Error& e) {
        INFO(e.what());
        CHECK(e.code() == ErrorCode::device);
        CHECK(contains(e.what(), "cudaMemcpyAsync (staging ids) failed"));
        CHECK(contains(e.what(), cudaGetErrorString(cudaErrorInvalidValue)));
    }
    CHECK_NOTHROW(kernels::cuda::check(cudaSuccess, "cudaMemcpyAsync (staging ids)"));
}
#endif
