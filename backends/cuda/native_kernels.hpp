// Native CUDA versions of the hot paths: the all-layer KV page move, the
// compaction plan, translate and the fused alloc-bind.
#pragma once

#include <kvpool/types.hpp>

#include <cuda_runtime.h>

#include <cstdint>

namespace kvpool::cuda {

using gpu_stream_t = cudaStream_t;
#include "../gpu/native_kernels_decl.inl"

}  // namespace kvpool::cuda
