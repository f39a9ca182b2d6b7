// Native HIP versions of the hot paths (see backends/cuda/native_kernels.hpp).
#pragma once

#include <kvpool/types.hpp>

#include <hip/hip_runtime.h>

#include <cstdint>

namespace kvpool::hip {

using gpu_stream_t = hipStream_t;
#include "../gpu/native_kernels_decl.inl"

}  // namespace kvpool::hip
