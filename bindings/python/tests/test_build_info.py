"""The build queries (kvpool_version, kvpool_c_api_version, kvpool_build_info) and
``python -m kvpool``, which prints them."""

import os
import re
import subprocess
import sys

import kvpool
from kvpool._lib import LIBRARY_PATH, lib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")


def _read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def _build_info():
    return dict(line.split(": ", 1) for line in lib.kvpool_build_info().decode().splitlines())


def test_version_is_the_cmake_projects():
    # One number: CMake's project(VERSION), which pip's metadata reads too (pyproject.toml).
    cmake = re.search(r"project\(kvpool VERSION ([0-9.]+)", _read("CMakeLists.txt")).group(1)
    assert kvpool.__version__ == cmake


def test_c_api_version_is_the_headers():
    header = _read("bindings/c/include/kvpool/c_api.h")
    version = re.search(r"#define KVPOOL_C_API_VERSION (\d+)", header)
    assert lib.kvpool_c_api_version() == int(version.group(1))


def test_build_info_names_kokkos_backends_and_arch():
    info = _build_info()
    assert set(info) == {"kokkos", "backends", "arch", "compiler"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", info["kokkos"])
    backends = info["backends"].split()
    assert backends and set(backends) <= {"Serial", "OpenMP", "Threads", "Cuda", "HIP"}
    device = {"cuda": "Cuda", "hip": "HIP"}.get(kvpool.backend())
    if device is None:
        assert info["arch"] == "none" and not {"Cuda", "HIP"} & set(backends)
    else:
        assert device in backends and info["arch"] != "none"
    if "Cuda" in backends:
        assert re.fullmatch(r"sm_\d+( sm_\d+)*", info["arch"])


def test_python_m_kvpool_reports_the_loaded_library():
    out = subprocess.run(
        [sys.executable, "-m", "kvpool"], check=True, capture_output=True, text=True
    ).stdout
    lines = dict(line.split(": ", 1) for line in out.splitlines()[1:])
    assert out.splitlines()[0] == f"kvpool {kvpool.__version__}"
    assert lines["library"].split(" (")[0] == os.path.realpath(LIBRARY_PATH)
    assert lines["kokkos"] == _build_info()["kokkos"]
    assert lines["device arrays"] == kvpool.backend()
