// The native CUDA kernels behind the allocator's hot paths, by overload on Kokkos::Cuda.
#pragma once

#include <cuda/native_kernels.hpp>

#include <kvpool/kokkos_compat.hpp>

#define KVPOOL_GPU_SPACE Kokkos::Cuda
#define KVPOOL_GPU_NAMESPACE cuda
#define KVPOOL_GPU_STREAM cuda_stream
#include <gpu/kokkos_overloads.inl>
#undef KVPOOL_GPU_SPACE
#undef KVPOOL_GPU_NAMESPACE
#undef KVPOOL_GPU_STREAM
