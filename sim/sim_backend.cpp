#include "sim_backend.hpp"

#include "mamba_sim_pool.hpp"
#include "swa_sim_pool.hpp"
#include "tri_sim_pool.hpp"

#include <Kokkos_Core.hpp>

#include <type_traits>

namespace kvpool::sim {

namespace {

template <class ExecutionSpace> std::unique_ptr<SimPool> make_pool(const PoolPlan& plan) {
    switch (plan.kind) {
    case HybridKind::sliding_window:
        return std::make_unique<SwaSimPool<ExecutionSpace>>(plan.layout, plan.mode, plan.real);
    case HybridKind::mamba:
        return std::make_unique<MambaSimPool<ExecutionSpace>>(plan.layout, plan.mode, plan.real);
    case HybridKind::mamba_sliding_window:
        break;
    }
    return std::make_unique<TriSimPool<ExecutionSpace>>(plan.layout, plan.mode, plan.real);
}

} // namespace

std::string backend_name(Backend backend) {
    return backend == Backend::host ? Kokkos::DefaultHostExecutionSpace::name()
                                    : Kokkos::DefaultExecutionSpace::name();
}

bool has_distinct_device() {
    return !std::is_same_v<Kokkos::DefaultExecutionSpace, Kokkos::DefaultHostExecutionSpace>;
}

PoolFactory pool_factory(Backend backend) {
    if (backend == Backend::device)
        return &make_pool<Kokkos::DefaultExecutionSpace>;
    return &make_pool<Kokkos::DefaultHostExecutionSpace>;
}

} // namespace kvpool::sim
