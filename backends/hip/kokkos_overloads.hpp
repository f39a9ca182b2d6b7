// The native HIP kernels behind the allocator's hot paths, by overload on Kokkos' HIP space.
#pragma once

#include <hip/native_kernels.hpp>

#include <kvpool/kokkos_compat.hpp>

#define KVPOOL_GPU_SPACE kvpool::kk::HIP
#define KVPOOL_GPU_NAMESPACE hip
#define KVPOOL_GPU_STREAM hip_stream
#include <gpu/kokkos_overloads.inl>
#undef KVPOOL_GPU_SPACE
#undef KVPOOL_GPU_NAMESPACE
#undef KVPOOL_GPU_STREAM
