"""python -m kvpool: what a problem report needs about this kvpool and the machine it runs on."""

import os
import platform
import sys

import kvpool
from kvpool._lib import LIBRARY_PATH, lib


def _lines():
    yield f"kvpool {kvpool.__version__}"
    yield f"package: {os.path.dirname(os.path.abspath(kvpool.__file__))}"
    override = " (KVPOOL_LIBRARY)" if os.environ.get("KVPOOL_LIBRARY") else ""
    yield f"library: {os.path.realpath(LIBRARY_PATH)}{override}"
    yield f"C API version: {lib.kvpool_c_api_version()}"
    yield f"device arrays: {kvpool.backend()}"
    yield from lib.kvpool_build_info().decode().splitlines()
    yield f"python: {platform.python_version()} ({sys.executable})"
    import torch

    devices = "none"
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        arch = getattr(props, "gcnArchName", "?") if torch.version.hip else f"sm_{props.major}{props.minor}"
        devices = f"{torch.cuda.device_count()}, current: {props.name} ({arch})"
    runtime = f"CUDA {torch.version.cuda}" if torch.version.cuda else None
    runtime = f"HIP {torch.version.hip}" if torch.version.hip else runtime
    yield f"torch: {torch.__version__} ({runtime or 'CPU only'}); GPUs: {devices}"


def main():
    for line in _lines():
        print(line)


if __name__ == "__main__":
    main()
