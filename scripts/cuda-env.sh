# Sourced by scripts that build with CUDA: kvpool_cuda_env sets up the environment a build with
# Debian's CUDA 11.8 (/usr/bin/nvcc) needs, never /usr/local/cuda (CUDA 13 breaks Kokkos 3.4),
# the same as the cuda-hopper preset's. Returns non-zero, saying why on stderr, when nvcc is not
# Debian's 11.8.
kvpool_cuda_env() {
    unset CUDA_HOME CUDA_PATH CUDACXX LIBRARY_PATH
    # Drop /usr/local/cuda*/bin and every other directory with its own nvcc or ptxas (some
    # machines have /usr/local/bin/nvcc -> CUDA 13): Debian's nvcc finds ptxas through PATH.
    local IFS=: d newpath=()
    for d in $PATH; do
        [[ $d == /usr/local/cuda* ]] && continue
        [[ $d != /usr/bin && ( -x $d/nvcc || -x $d/ptxas ) ]] && continue
        newpath+=("$d")
    done
    PATH="${newpath[*]}"
    export PATH
    export NVCC_WRAPPER_DEFAULT_COMPILER=g++-11
    export NVCC_APPEND_FLAGS="-gencode arch=compute_90,code=sm_90"

    local nvcc
    nvcc=$(command -v nvcc || true)
    if [[ $nvcc != /usr/bin/nvcc ]]; then
        printf 'nvcc resolves to %s, expected /usr/bin/nvcc\n' "'${nvcc:-nothing}'" >&2
        return 1
    fi
    if [[ $(nvcc --version) != *'release 11.8'* ]]; then
        printf '/usr/bin/nvcc is not CUDA 11.8\n' >&2
        return 1
    fi
}
