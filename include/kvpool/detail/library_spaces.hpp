// The execution spaces libkvpool compiles the allocator templates for: each
// enabled Kokkos backend. The headers declare these instantiations extern and
// src/instantiate/ defines them, so that the members compile once, in the
// library, rather than in every program that includes them. Other spaces
// still instantiate from the headers, which keep the definitions.
#pragma once

#include <kvpool/kokkos_compat.hpp>

#if defined(KOKKOS_ENABLE_SERIAL)
#define KVPOOL_SERIAL_INSTANCE(keyword, name) keyword template class name<Kokkos::Serial>;
#else
#define KVPOOL_SERIAL_INSTANCE(keyword, name)
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
#define KVPOOL_OPENMP_INSTANCE(keyword, name) keyword template class name<Kokkos::OpenMP>;
#else
#define KVPOOL_OPENMP_INSTANCE(keyword, name)
#endif
#if defined(KOKKOS_ENABLE_CUDA)
#define KVPOOL_CUDA_INSTANCE(keyword, name) keyword template class name<Kokkos::Cuda>;
#else
#define KVPOOL_CUDA_INSTANCE(keyword, name)
#endif
#if defined(KOKKOS_ENABLE_HIP)
#define KVPOOL_HIP_INSTANCE(keyword, name) keyword template class name<::kvpool::kk::HIP>;
#else
#define KVPOOL_HIP_INSTANCE(keyword, name)
#endif

#define KVPOOL_LIBRARY_INSTANCES(keyword, name)                                                    \
    KVPOOL_SERIAL_INSTANCE(keyword, name)                                                          \
    KVPOOL_OPENMP_INSTANCE(keyword, name)                                                          \
    KVPOOL_CUDA_INSTANCE(keyword, name)                                                            \
    KVPOOL_HIP_INSTANCE(keyword, name)

// In a header, after the class template: the library defines these.
#define KVPOOL_EXTERN_LIBRARY_INSTANCES(name) KVPOOL_LIBRARY_INSTANCES(extern, name)
// In src/instantiate/: the definitions.
#define KVPOOL_DEFINE_LIBRARY_INSTANCES(name) KVPOOL_LIBRARY_INSTANCES(, name)
