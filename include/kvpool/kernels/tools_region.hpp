// Kokkos Tools (kernel timers, the NVTX and ROCTX connectors) see Kokkos' own
// kernels by their labels, but the native CUDA/HIP launches bypass Kokkos: so
// every dispatched device op runs inside a Kokkos Tools region of its name, on
// every backend (the portable kernels then show up inside it). Without a tool
// loaded this is one flag test per op: no string is built, nothing is fenced.
#pragma once

#include <Kokkos_Core.hpp>

namespace kvpool::kernels {

class ToolsRegion {
public:
    explicit ToolsRegion(const char* name) : active_(Kokkos::Profiling::profileLibraryLoaded()) {
        if (active_)
            Kokkos::Profiling::pushRegion(name);
    }
    ~ToolsRegion() {
        if (active_)
            Kokkos::Profiling::popRegion();
    }
    ToolsRegion(const ToolsRegion&) = delete;
    ToolsRegion& operator=(const ToolsRegion&) = delete;

private:
    bool active_;
};

} // namespace kvpool::kernels
