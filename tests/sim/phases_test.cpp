// Workload phases: the shift workload's mixes, phases from a trace's phase
// column and from --phases, and how the scheduler accounts a run per phase.
#include "cli_options.hpp"
#include "scheduler.hpp"
#include "sim_test_support.hpp"
#include "trace_reader.hpp"
#include "workload.hpp"

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>

using namespace kvpool;
using namespace kvpool::sim;
using namespace kvpool::sim::test;
using Catch::Approx;
using Catch::Matchers::ContainsSubstring;

namespace {

// Every request lies in exactly the phase that lists it, in order.
void check_partition(const Workload& w) {
    REQUIRE_FALSE(w.phases.empty());
    std::size_t next = 0;
    for (std::size_t p = 0; p < w.phases.size(); ++p) {
        CHECK(w.phases[p].first_request == next);
        CHECK(w.phases[p].requests > 0);
        for (std::size_t i = next; i < next + w.phases[p].requests; ++i)
            CHECK(w.requests[i].phase == p);
        next += w.phases[p].requests;
    }
    CHECK(next == w.requests.size());
    for (std::size_t i = 1; i < w.requests.size(); ++i)
        CHECK(w.requests[i - 1].arrival_s <= w.requests[i].arrival_s);
}

std::vector<RequestSpec> phase_requests(const Workload& w, std::size_t p) {
    const auto first = w.requests.begin() + static_cast<std::ptrdiff_t>(w.phases[p].first_request);
    return {first, first + static_cast<std::ptrdiff_t>(w.phases[p].requests)};
}

template <class Field> double median(const std::vector<RequestSpec>& requests, Field field) {
    std::vector<double> v;
    for (const RequestSpec& r : requests)
        v.push_back(static_cast<double>(r.*field));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
}

double mean_gap(const std::vector<RequestSpec>& requests) {
    return (requests.back().arrival_s - requests.front().arrival_s) /
           static_cast<double>(requests.size() - 1);
}

std::string trace_error(const std::string& text, TraceFormat format) {
    return input_error_of([&] { parse_trace(text, "t", format); });
}

} // namespace

TEST_CASE("the shift workload: chat, then long documents, then chat", "[sim][phases]") {
    const Workload w = shift_workload(default_shift_phases(), 1);
    CHECK(w.name == "shift");
    REQUIRE(w.phases.size() == 3);
    check_partition(w);
    CHECK(w.phases[0].name == "chat");
    CHECK(w.phases[1].name == "documents");
    CHECK(w.phases[2].name == "chat");
    CHECK(w.phases[0].requests == 600);
    CHECK(w.phases[1].requests == 120);
    CHECK(w.phases[2].requests == 600);
    for (std::size_t p : {0, 2}) {
        const auto chat = phase_requests(w, p);
        for (const RequestSpec& r : chat)
            CHECK(r.prompt_tokens <= 16384);
        CHECK(median(chat, &RequestSpec::prompt_tokens) > 800);
        CHECK(median(chat, &RequestSpec::prompt_tokens) < 1300);
        CHECK(median(chat, &RequestSpec::output_tokens) > 250);
        CHECK(median(chat, &RequestSpec::output_tokens) < 400);
        CHECK(mean_gap(chat) == Approx(1.0 / 50).epsilon(0.15));
    }
    const auto documents = phase_requests(w, 1);
    for (const RequestSpec& r : documents) {
        CHECK(r.prompt_tokens >= 8192);
        CHECK(r.prompt_tokens <= 131072);
    }
    CHECK(median(documents, &RequestSpec::prompt_tokens) > 18000);
    CHECK(median(documents, &RequestSpec::prompt_tokens) < 32000);
    CHECK(median(documents, &RequestSpec::output_tokens) > 140);
    CHECK(median(documents, &RequestSpec::output_tokens) < 260);
    CHECK(mean_gap(documents) == Approx(1.0 / 5).epsilon(0.25));
    // Each phase's arrivals start where the previous phase's ended.
    CHECK(w.requests[600].arrival_s - w.requests[599].arrival_s < 2.0);

    // The same seed gives the same requests; another seed others.
    const Workload again = shift_workload(default_shift_phases(), 1);
    const Workload other = shift_workload(default_shift_phases(), 2);
    const auto prompts = [](const Workload& x) {
        std::vector<index_t> v;
        for (const RequestSpec& r : x.requests)
            v.push_back(r.prompt_tokens);
        return v;
    };
    CHECK(prompts(again) == prompts(w));
    CHECK(prompts(other) != prompts(w));
}

TEST_CASE("a built-in workload without phases has one holding every request", "[sim][phases]") {
    for (auto kind : {SyntheticKind::chat, SyntheticKind::long_context}) {
        const Workload w = synthetic_workload(default_synthetic_options(kind));
        REQUIRE(w.phases.size() == 1);
        CHECK(w.phases[0].name == w.name);
        check_partition(w);
    }
}

TEST_CASE("the option --phases gives the shift's phases; bad ones are named", "[sim][phases]") {
    const CliOptions o =
        parse_cli({"--workload", "shift", "--phases", "documents:7@2.5, chat:30,long-context:4"});
    REQUIRE(o.phases.has_value());
    REQUIRE(o.phases->size() == 3);
    CHECK((*o.phases)[0].kind == SyntheticKind::documents);
    CHECK((*o.phases)[0].requests == 7);
    CHECK((*o.phases)[0].arrival_rate == 2.5);
    CHECK((*o.phases)[1].kind == SyntheticKind::chat);
    CHECK((*o.phases)[1].arrival_rate == default_arrival_rate(SyntheticKind::chat));
    CHECK((*o.phases)[2].kind == SyntheticKind::long_context);
    const Workload w = shift_workload(*o.phases, 3);
    CHECK(w.requests.size() == 41);
    check_partition(w);

    const auto error_of = [](const std::vector<std::string>& args) {
        return input_error_of([&] { parse_cli(args); });
    };
    CHECK_THAT(error_of({"--workload", "shift", "--phases", "chat:0"}),
               ContainsSubstring("--phases 'chat:0': expected a whole number from 1"));
    CHECK_THAT(error_of({"--workload", "shift", "--phases", "chat:5,podcasts:3"}),
               ContainsSubstring("--phases 'podcasts:3': unknown mix 'podcasts'"));
    CHECK_THAT(error_of({"--workload", "shift", "--phases", "chat"}),
               ContainsSubstring("--phases 'chat': expected MIX:REQUESTS[@RATE]"));
    CHECK_THAT(error_of({"--workload", "shift", "--phases", "chat:5@0"}),
               ContainsSubstring("--phases 'chat:5@0': expected a number"));
    CHECK_THAT(error_of({"--workload", "shift", "--phases", "chat:5,,chat:3"}),
               ContainsSubstring("--phases '': expected MIX:REQUESTS[@RATE]"));
    std::string many = "chat:1";
    for (int i = 0; i < 100; ++i)
        many += ",chat:1";
    CHECK_THAT(error_of({"--workload", "shift", "--phases", many}),
               ContainsSubstring("--phases: at most 100 phases, got 101"));
    CHECK_THAT(
        error_of({"--phases", "chat:5"}),
        ContainsSubstring("--phases gives the phases of --workload shift, not of 'default'"));
    CHECK_THAT(error_of({"--workload", "shift", "--rate", "3"}),
               ContainsSubstring("the shift workload's phases give their own"));
}

TEST_CASE("a trace's phase column cuts it into phases", "[sim][phases]") {
    const Workload csv = parse_trace("arrival_s,phase,prompt_tokens,output_tokens\n"
                                     "0.3,chat,10,1\n"
                                     "0.0,chat,10,1\n"
                                     "0.5,docs,9000,2\n"
                                     "0.4,docs,8000,2\n"
                                     "0.9,chat,20,3\n",
                                     "t.csv", TraceFormat::csv);
    REQUIRE(csv.phases.size() == 3);
    check_partition(csv);
    CHECK(csv.phases[0].name == "chat");
    CHECK(csv.phases[0].requests == 2);
    CHECK(csv.phases[1].name == "docs");
    CHECK(csv.requests[2].prompt_tokens == 8000); // sorted by arrival before grouping
    CHECK(csv.phases[2].requests == 1);
    CHECK_THAT(csv.description, ContainsSubstring("3 phases: chat 2, docs 2, chat 1"));

    const Workload jsonl =
        parse_trace("{\"arrival_s\": 0, \"prompt_tokens\": 5, \"output_tokens\": 1, \"phase\": 1}\n"
                    "{\"arrival_s\": 1, \"prompt_tokens\": 5, \"output_tokens\": 1, \"phase\": "
                    "\"night, \\\"quiet\\\"\"}\n",
                    "t.jsonl", TraceFormat::jsonl);
    REQUIRE(jsonl.phases.size() == 2);
    CHECK(jsonl.phases[0].name == "1");
    CHECK(jsonl.phases[1].name == "night, \"quiet\"");

    const Workload plain = parse_trace("0,5,1\n1,6,1\n", "t.csv", TraceFormat::csv);
    REQUIRE(plain.phases.size() == 1);
    check_partition(plain);

    CHECK_THAT(trace_error("arrival_s,prompt_tokens,output_tokens,phase\n0,5,1,chat\n1,5,1,\n",
                           TraceFormat::csv),
               ContainsSubstring("t:3: the phase label is empty"));
    CHECK_THAT(
        trace_error("{\"arrival_s\": 0, \"prompt_tokens\": 5, \"output_tokens\": 1}\n"
                    "{\"arrival_s\": 1, \"prompt_tokens\": 5, \"output_tokens\": 1, \"phase\": "
                    "\"a\"}\n",
                    TraceFormat::jsonl),
        ContainsSubstring(
            "t:2: 'phase' is given on some lines and not on others (line 1 does not)"));
    CHECK_THAT(trace_error("{\"arrival_s\": 0, \"prompt_tokens\": 5, \"output_tokens\": 1, "
                           "\"phase\": null}\n",
                           TraceFormat::jsonl),
               ContainsSubstring("t:1: 'phase' must be a string or a number, got null"));
    std::string alternating = "arrival_s,prompt_tokens,output_tokens,phase\n";
    for (int i = 0; i < 100; ++i) // 100 phases
        alternating += std::to_string(i) + ",5,1," + (i % 2 ? "a" : "b") + "\n";
    CHECK(parse_trace(alternating, "t", TraceFormat::csv).phases.size() == 100);
    alternating += "100,5,1,b\n";
    CHECK_THAT(trace_error(alternating, TraceFormat::csv),
               ContainsSubstring("t: the phase labels change more than 99 times"));
}

TEST_CASE("each step's time goes to the phases by what their requests cost in it",
          "[sim][phases][scheduler]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        auto pool = swa_pool(4096, 1, 1, 1, mode);
        // Request 0 (phase 0) prefills 4 tokens and decodes 2; request 1 (phase 1)
        // prefills 2 and decodes 1; request 2 (phase 2) arrives at t = 100.
        const std::vector<RequestSpec> requests{{0.0, 4, 2, 0}, {0.0, 2, 1, 1}, {100.0, 3, 1, 2}};
        SchedulerConfig config = one_second_steps(1000, false);
        config.step_time = StepTimeModel{1.0, 0.5, 0.25};
        Scheduler scheduler(*pool, requests, config);
        const RunResult r = run_all(scheduler);
        REQUIRE(r.phases.size() == 3);
        // Step 1 (4 s): both prefill; overhead halved: 0.5 + 2 and 0.5 + 1.
        // Step 2 (1.5 s): both decode: 0.5 + 0.25 each; request 1 is done.
        // Step 3 (1.25 s): request 0 decodes alone, and is done at 6.75 s.
        // Idle until 100 s: the time waits for phase 2's request.
        // Steps 4 and 5 (2.5 s, 1.25 s): request 2 prefills, then decodes.
        const PhaseResult& p0 = r.phases[0];
        const PhaseResult& p1 = r.phases[1];
        const PhaseResult& p2 = r.phases[2];
        CHECK(p0.sim_seconds == Approx(2.5 + 0.75 + 1.25));
        CHECK(p1.sim_seconds == Approx(1.5 + 0.75));
        CHECK(p2.sim_seconds == Approx(100.0 - 6.75 + 2.5 + 1.25));
        CHECK(r.sim_seconds == Approx(103.75));
        // Running requests over each phase's share: two in steps 1 and 2, one after.
        CHECK(p0.running_request_seconds == Approx(2 * 2.5 + 2 * 0.75 + 1 * 1.25));
        CHECK(p1.running_request_seconds == Approx(2 * 1.5 + 2 * 0.75));
        CHECK(p2.running_request_seconds == Approx(2.5 + 1.25));
        CHECK(p1.mean_running() == Approx(2.0));
        CHECK(p0.peak_running == 2);
        CHECK(p2.peak_running == 1);
        for (const PhaseResult* p : {&p0, &p1, &p2})
            CHECK(p->completed == 1);
        CHECK(p0.first_admitted_s == 0.0);
        CHECK(p1.first_admitted_s == 0.0);
        CHECK(p2.first_admitted_s == 100.0);
        CHECK(p0.last_finished_s == Approx(6.75));
        CHECK(p1.last_finished_s == Approx(5.5));
        CHECK(p2.last_finished_s == Approx(103.75));
        CHECK(p0.completed_per_second() == Approx(1.0 / 4.5));
    }
}

TEST_CASE("retractions and aborts count in the phase of their request",
          "[sim][phases][scheduler]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        // As in the scheduler's retraction case: 10 tokens fit, the second
        // request (phase 1) is retracted in step 3; the third (phase 2) can
        // never fit and is aborted.
        auto pool = swa_pool(21, 1, 1, 1, mode);
        const std::vector<RequestSpec> requests{{0.0, 4, 4, 0}, {0.0, 4, 4, 1}, {50.0, 12, 1, 2}};
        Scheduler scheduler(*pool, requests, one_second_steps(1000, false));
        const RunResult r = run_all(scheduler);
        REQUIRE(r.phases.size() == 3);
        CHECK(r.retractions == 1);
        CHECK(r.phases[0].retractions == 0);
        CHECK(r.phases[1].retractions == 1);
        CHECK(r.phases[2].retractions == 0);
        CHECK(r.phases[2].aborted == 1);
        CHECK(r.phases[2].completed == 0);
        CHECK(r.phases[0].completed == 1);
        CHECK(r.phases[1].completed == 1);
        // An abort-only step's overhead goes to the aborted request's phase.
        double total = 0.0;
        for (const PhaseResult& p : r.phases)
            total += p.sim_seconds;
        CHECK(total == Approx(r.sim_seconds));
        CHECK(r.phases[2].sim_seconds == Approx(50.0 - 9.0 + 1.0));
    }
}
