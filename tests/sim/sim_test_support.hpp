// Helpers of the simulator tests: tiny real pools on the host execution space
// and a step-time model where every step takes one simulated second.
#pragma once

#include "experiment.hpp"
#include "input_error.hpp"
#include "mamba_sim_pool.hpp"
#include "swa_sim_pool.hpp"
#include "tri_sim_pool.hpp"

#include <Kokkos_Core.hpp>

#include <memory>
#include <string>

namespace kvpool::sim::test {

using HostSpace = Kokkos::DefaultHostExecutionSpace;

// Sides of entry_bytes per token (full, sliding-window), page size page_size;
// the sliding-window side's page window_page_size (0: page_size).
inline std::unique_ptr<SimPool> swa_pool(index_t total_bytes, index_t full_entry,
                                         index_t window_entry, index_t page_size,
                                         CompactionMode mode, index_t window_page_size = 0) {
    const index_t window_page = window_page_size > 0 ? window_page_size : page_size;
    PoolLayout layout(total_bytes, {{"full", full_entry, page_size, GrowDirection::up, 0},
                                    {"swa", window_entry, window_page, GrowDirection::down, 0}});
    return std::make_unique<SwaSimPool<HostSpace>>(layout, mode, RealPageBytes{1.0, 1.0});
}

inline std::unique_ptr<SimPool> mamba_pool(index_t total_bytes, index_t full_entry,
                                           index_t state_bytes, CompactionMode mode) {
    PoolLayout layout(total_bytes, {{"full", full_entry, 1, GrowDirection::up, 0},
                                    {"mamba", state_bytes, 1, GrowDirection::down, 0}});
    return std::make_unique<MambaSimPool<HostSpace>>(layout, mode, RealPageBytes{1.0, 1.0});
}

// The tri-pool: state slots of state_bytes (up), sliding-window tokens of
// window_entry floating from the middle, full tokens of full_entry (down); KV
// pages of page_size tokens, the sliding-window side's of window_page_size (0:
// page_size).
inline std::unique_ptr<SimPool> tri_pool(index_t total_bytes, index_t state_bytes,
                                         index_t window_entry, index_t full_entry,
                                         index_t page_size, CompactionMode mode,
                                         index_t window_page_size = 0) {
    const index_t window_page = window_page_size > 0 ? window_page_size : page_size;
    PoolLayout layout(total_bytes, {{"mamba", state_bytes, 1, GrowDirection::up, 0},
                                    {"swa", window_entry, window_page, GrowDirection::floating, 0},
                                    {"full", full_entry, page_size, GrowDirection::down, 0}});
    return std::make_unique<TriSimPool<HostSpace>>(layout, mode, RealPageBytes{1.0, 1.0, 1.0});
}

// An experiment observer that reports nothing.
class QuietObserver final : public RunObserver {
public:
    void run_started(const std::string&, std::size_t, std::size_t) override {}
    void run_progress(double) override {}
    void all_done() override {}
};

inline SchedulerConfig one_second_steps(index_t window, bool state_slots, double reserve = 0.0) {
    SchedulerConfig c;
    c.sliding_window = window;
    c.state_slot_per_request = state_slots;
    c.decode_reserve = reserve;
    c.step_time = StepTimeModel{1.0, 0.0, 0.0};
    c.check_invariants_every_step = true;
    return c;
}

inline RunResult run_all(Scheduler& scheduler) {
    return run_to_completion(scheduler, [](double) {});
}

// The message of the InputError that f() throws, or "no error".
template <class F> std::string input_error_of(F&& f) {
    try {
        f();
    } catch (const InputError& e) {
        return e.what();
    }
    return "no error";
}

} // namespace kvpool::sim::test
