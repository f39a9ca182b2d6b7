// The fuzz targets' inputs replayed on every backend: the seed corpus
// (fuzz/corpus/<target>/) and every crash the fuzzer found, kept as a
// regression test (fuzz/regressions/<target>/), each decoded into the same
// run the target makes of it (fuzz_input.hpp).
#include "bands_run.hpp"
#include "fuzz_input.hpp"
#include "mamba_run.hpp"
#include "req_table_run.hpp"
#include "side_run.hpp"
#include "swa_run.hpp"
#include "test_config.hpp"
#include "tri_pool_run.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

using namespace kvpool;
using namespace kvpool::test;

namespace {

// Every input file of the target, corpus and regressions, in name order.
std::vector<std::filesystem::path> inputs_of(const std::string& target) {
    std::vector<std::filesystem::path> files;
    for (const char* kind : {"corpus", "regressions"}) {
        const std::filesystem::path dir =
            std::filesystem::path(randomised_config().fuzz_dir) / kind / target;
        if (std::filesystem::is_directory(dir))
            for (const auto& entry : std::filesystem::directory_iterator(dir))
                files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    return files;
}

template <class Run, class Config>
void replay(const std::string& target, const std::vector<Config>& configs) {
    const auto files = inputs_of(target);
    INFO("fuzz inputs looked for under " << randomised_config().fuzz_dir
                                         << " (--kvpool-fuzz-dir or KVPOOL_FUZZ_DIR)");
    REQUIRE(!files.empty());
    for (const auto& file : files) {
        std::ifstream in(file, std::ios::binary);
        const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                              std::istreambuf_iterator<char>());
        INFO("input " << file.string() << " (" << bytes.size() << " bytes)");
        auto run = run_from_input<Run>(configs, bytes.data(), bytes.size());
        if (!run)
            continue;
        try {
            run->run();
        } catch (const Mismatch& e) {
            FAIL_CHECK(e.what());
        }
    }
}

} // namespace

TEST_CASE("fuzz inputs replayed: one side and its peer", "[fuzz-replay]") {
    replay<side_run::SideRun>("side_fuzz", side_run::all_configs());
}

TEST_CASE("fuzz inputs replayed: the SWA pair", "[fuzz-replay]") {
    replay<swa_run::SwaRun>("swa_pair_fuzz", pair_configs());
}

TEST_CASE("fuzz inputs replayed: the Mamba pair", "[fuzz-replay]") {
    replay<mamba_run::MambaRun>("mamba_pair_fuzz", pair_configs());
}

TEST_CASE("fuzz inputs replayed: the tri-pool", "[fuzz-replay]") {
    replay<tri_run::TriRun>("tri_pool_fuzz", tri_run::all_configs());
}

TEST_CASE("fuzz inputs replayed: N bands with floating ones", "[fuzz-replay]") {
    replay<bands_run::BandsRun>("bands_fuzz", bands_run::all_configs());
}

TEST_CASE("fuzz inputs replayed: the hybrid request table", "[fuzz-replay]") {
    replay<req_table_run::RandomRun>("req_table_fuzz", req_table_run::all_configs());
}
