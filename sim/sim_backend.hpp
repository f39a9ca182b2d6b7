// Where the allocators run: Kokkos' default host execution space, or its
// default execution space (the GPU in a CUDA or HIP build).
#pragma once

#include "experiment.hpp"

#include <string>

namespace kvpool::sim {

enum class Backend { host, device };

// "OpenMP", "Serial", "Cuda", ...
std::string backend_name(Backend backend);
// True when the device space is another space than the host one.
bool has_distinct_device();
PoolFactory pool_factory(Backend backend);

} // namespace kvpool::sim
