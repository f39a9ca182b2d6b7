// copy_runs, the one-launch copy of a transfer's paired runs between two
// buffers of one device: random runs (scattered, unaligned, longer than a
// chunk) against a host model of one memcpy per run; the chunking on its own;
// bad runs refused with nothing copied.
//
// Reproduce one seed: kvpool_tests_<backend> "[transfer-copy]" --kvpool-seed N
#include <kvpool/error.hpp>
#include <kvpool/storage/transfer_copy.hpp>

#include "kv_pool_test_support.hpp"
#include "test_config.hpp"
#include "test_random.hpp"

#include <cstdio>
#include <cstring>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using DeviceBytes = Pool::bytes_view;

// The host image on the device (download gives it back).
DeviceBytes device_bytes(const Bytes& host) {
    const auto bytes = kk::uninitialized<DeviceBytes>("test::bytes", host.size());
    upload(bytes, host);
    return bytes;
}

Bytes random_bytes(Rng& rng, std::size_t n) {
    Bytes bytes(n);
    for (auto& b : bytes)
        b = static_cast<std::uint8_t>(rng.next());
    return bytes;
}

// Runs whose destinations do not overlap: the destination cut into pieces at
// random, a random subset of them filled from random places of the source.
std::vector<CopyRun> random_runs(Rng& rng, index_t src_bytes, index_t dst_bytes, bool aligned) {
    std::vector<CopyRun> runs;
    const index_t grain = aligned ? 16 : 1;
    for (index_t at = 0; at < dst_bytes;) {
        const index_t most = std::min(
            {dst_bytes - at, src_bytes, rng.chance(0.1) ? 3 * copy_chunk_bytes : index_t(5000)});
        const index_t length = std::max<index_t>(grain, rng.uniform(1, most) / grain * grain);
        if (length > dst_bytes - at)
            break;
        if (rng.chance(0.6))
            runs.push_back({rng.uniform(0, (src_bytes - length) / grain) * grain, at, length});
        at += length + grain * rng.uniform(0, 3);
    }
    return runs;
}

} // namespace

TEST_CASE("copy_runs: scattered runs land where a memcpy per run puts them",
          "[transfer-copy][randomised]") {
    for (const std::uint64_t seed : randomised_config().seed_list()) {
        std::printf("[transfer-copy] seed %llu; reproduce: kvpool_tests_%s \"[transfer-copy]\" "
                    "--kvpool-seed %llu\n",
                    static_cast<unsigned long long>(seed), KVPOOL_TEST_BACKEND_NAME,
                    static_cast<unsigned long long>(seed));
        INFO("seed " << seed);
        Rng rng(seed);
        for (const bool aligned : {true, false}) {
            const index_t src_bytes = rng.uniform(1, 4) * copy_chunk_bytes + rng.uniform(0, 999);
            const index_t dst_bytes = rng.uniform(1, 4) * copy_chunk_bytes + rng.uniform(0, 999);
            const Bytes src = random_bytes(rng, static_cast<std::size_t>(src_bytes));
            Bytes want = random_bytes(rng, static_cast<std::size_t>(dst_bytes));
            const std::vector<CopyRun> runs = random_runs(rng, src_bytes, dst_bytes, aligned);
            const DeviceBytes src_d = device_bytes(src), dst_d = device_bytes(want);
            copy_runs(Space(), src_d.data(), src_bytes, dst_d.data(), dst_bytes, runs);
            for (const CopyRun& r : runs)
                std::memcpy(want.data() + r.dst_offset, src.data() + r.src_offset,
                            static_cast<std::size_t>(r.length));
            const Bytes got = download(dst_d);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < got.size(); ++i)
                wrong += got[i] != want[i];
            INFO(runs.size() << " runs, aligned " << aligned);
            CHECK(wrong == 0);
        }
    }
}

TEST_CASE("copy_runs: within one buffer, no run writing what another reads", "[transfer-copy]") {
    Rng rng(7);
    const Bytes bytes = random_bytes(rng, 1 << 16);
    Bytes want = bytes;
    const std::vector<CopyRun> runs = {{0, 40000, 4096}, {8192, 20000, 333}, {50000, 60000, 16}};
    const DeviceBytes d = device_bytes(bytes);
    copy_runs(Space(), d.data(), 1 << 16, d.data(), 1 << 16, runs);
    for (const CopyRun& r : runs)
        std::memcpy(want.data() + r.dst_offset, bytes.data() + r.src_offset,
                    static_cast<std::size_t>(r.length));
    CHECK(download(d) == want);
}

TEST_CASE("copy_runs: long runs are cut into chunks, in order", "[transfer-copy]") {
    const std::vector<index_t> chunks = copy_chunks({{0, 100, 10}, {20, 0, 25}}, 1000, 1000, 10);
    CHECK(chunks == std::vector<index_t>{0, 100, 10, 20, 0, 10, 30, 10, 10, 40, 20, 5});
    CHECK(copy_chunks({}, 0, 0).empty());
    expect_error(ErrorCode::invalid_argument, "chunk_bytes must be > 0", [] {
        copy_chunks({{0, 0, 1}}, 1, 1, 0);
    });
}

TEST_CASE("copy_runs: a run outside either buffer is refused and nothing is copied",
          "[transfer-copy]") {
    Rng rng(11);
    const Bytes src = random_bytes(rng, 4096), dst = random_bytes(rng, 2048);
    const DeviceBytes src_d = device_bytes(src), dst_d = device_bytes(dst);
    const std::vector<std::pair<CopyRun, std::string>> bad = {
        {{4000, 0, 97},
         "run 1 (src_offset 4000, dst_offset 0, length 97) is not inside the 4096-byte source "
         "and the 2048-byte destination"},
        {{0, 2000, 49}, "run 1 (src_offset 0, dst_offset 2000, length 49)"},
        {{-1, 0, 8}, "run 1 (src_offset -1"},
        {{0, 0, 0}, "length 0)"},
    };
    for (const auto& [run, message] : bad) {
        INFO(message);
        expect_error(ErrorCode::invalid_argument, message, [&] {
            copy_runs(Space(), src_d.data(), 4096, dst_d.data(), 2048,
                      std::vector<CopyRun>{{0, 0, 64}, run});
        });
        CHECK(download(dst_d) == dst);
    }
}
