// What a Kokkos Tools library (a kernel timer, the NVTX or ROCTX connector)
// sees of an allocator's calls: each dispatched device op as a region of its
// name, the native launches included, and every kvpool kernel by its label.
#include <kvpool/kernels/native_backend.hpp>

#include "test_support.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;

namespace {

struct ToolEvent {
    enum Kind { push, pop, kernel } kind;
    std::string name;
};

std::vector<ToolEvent>& tool_events() {
    static std::vector<ToolEvent> events;
    return events;
}

void on_push(const char* name) {
    tool_events().push_back({ToolEvent::push, name});
}
void on_pop() {
    tool_events().push_back({ToolEvent::pop, {}});
}
void on_begin_for(const char* name, std::uint32_t, std::uint64_t*) {
    tool_events().push_back({ToolEvent::kernel, name});
}
void on_end_for(std::uint64_t) {}

// Registers the callbacks as a tool library would; removes them however the test ends.
struct RecordingTool {
    RecordingTool() {
        tool_events().clear();
        namespace tools = Kokkos::Tools::Experimental;
        tools::set_push_region_callback(on_push);
        tools::set_pop_region_callback(on_pop);
        tools::set_begin_parallel_for_callback(on_begin_for);
        tools::set_end_parallel_for_callback(on_end_for);
    }
    ~RecordingTool() {
        namespace tools = Kokkos::Tools::Experimental;
        tools::set_push_region_callback(nullptr);
        tools::set_pop_region_callback(nullptr);
        tools::set_begin_parallel_for_callback(nullptr);
        tools::set_end_parallel_for_callback(nullptr);
    }
    RecordingTool(const RecordingTool&) = delete;
    RecordingTool& operator=(const RecordingTool&) = delete;
};

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.compare(0, prefix.size(), prefix) == 0;
}

} // namespace

TEST_CASE("tools: every device op of the allocator runs in a kvpool region a tool sees",
          "[tools]") {
    constexpr index_t page = 16;
    Pool pool(PoolLayout(256 * 1024, {spec("full", 32, page, GrowDirection::up),
                                      spec("swa", 16, page, GrowDirection::down)}));
    Allocator full(pool, "full", options(CompactionMode::eager));
    Allocator swa(pool, "swa", options(CompactionMode::eager));
    full.bind_peer(swa);
    const std::vector<index_t> lens = {40, 17, 64, 5};
    index_t total = 0;
    for (index_t n : lens)
        total += n;

    std::vector<ToolEvent> events;
    std::vector<index_t> live;
    {
        const RecordingTool tool;
        IndexView prefill("prefill", static_cast<std::size_t>(total));
        REQUIRE(full.alloc_extend(Space(), std::vector<index_t>(lens.size(), 0), lens,
                                  to_device(std::vector<index_t>(lens.size(), -1)), prefill));
        std::vector<index_t> ids = to_host(prefill);
        std::vector<index_t> seq, last;
        index_t end = 0;
        for (index_t n : lens) {
            end += n;
            seq.push_back(n + 1);
            last.push_back(ids[static_cast<std::size_t>(end - 1)]);
        }
        IndexView decoded("decoded", lens.size());
        REQUIRE(full.alloc_decode(Space(), seq, to_device(last), decoded));
        for (index_t id : to_host(decoded))
            ids.push_back(id);
        stamp_tokens(pool, full, 0, ids);
        full.translate(Space(), prefill);
        // The first request leaves (its decoded token shares its last page): eager compaction
        // moves later pages into its hole.
        std::vector<index_t> first(ids.begin(), ids.begin() + lens[0]);
        first.push_back(ids[static_cast<std::size_t>(total)]);
        full.free(Space(), first);
        live.assign(ids.begin() + lens[0], ids.begin() + total);
        live.insert(live.end(), ids.begin() + total + 1, ids.end());
        Space().fence();
        events = tool_events();
    }
    CHECK(full.counters().pages_moved > 0);

    std::set<std::string> regions;
    int depth = 0;
    bool kernel_in_every_region = true;
    bool kernel_seen = false;
    for (const ToolEvent& e : events) {
        switch (e.kind) {
        case ToolEvent::push:
            regions.insert(e.name);
            ++depth;
            kernel_seen = false;
            break;
        case ToolEvent::pop:
            REQUIRE(depth > 0);
            --depth;
            kernel_in_every_region = kernel_in_every_region && kernel_seen;
            break;
        case ToolEvent::kernel:
            INFO("kernel " << e.name);
            // An unlabelled kernel would carry its functor's mangled type name; Kokkos' own
            // (View initialisation) carry the View's kvpool label inside theirs.
            if (e.name.find("kvpool") != std::string::npos)
                CHECK((starts_with(e.name, "kvpool::") || starts_with(e.name, "Kokkos::")));
            kernel_seen = kernel_seen || depth > 0;
            break;
        }
    }
    CHECK(depth == 0);
    for (const char* op :
         {"kvpool::alloc_extend_bind", "kvpool::alloc_decode_bind", "kvpool::translate_tokens"}) {
        INFO("region " << op);
        CHECK(regions.count(op) == 1);
    }
    CHECK(regions.count("kvpool::apply_plan") + regions.count("kvpool::move_pages") >= 1);
    for (const std::string& name : regions)
        CHECK(starts_with(name, "kvpool::"));
    // Portably each region holds the op's Kokkos kernels; natively the launch bypasses Kokkos and
    // the region is all a tool sees of it.
    if (!kernels::NativeBackend<Space>::available)
        CHECK(kernel_in_every_region);

    // With the tool gone, the same calls report nothing.
    tool_events().clear();
    REQUIRE(full.alloc(Space(), page).has_value());
    CHECK(tool_events().empty());
    check_all(pool, full, 0, live);
}
