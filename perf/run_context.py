"""What a result file's context needs besides what kvpool-bench records itself:
the commit and configuration of the build (bin/kvpool-build.json, written at
every build) and the GPU and driver of the machine that ran it."""
import json
import os
import re
import shutil
import subprocess

BUILD_INFO = "kvpool-build.json"


def build_info(binary_dir):
    """The build's own description next to its binaries; {} when there is none."""
    try:
        with open(os.path.join(binary_dir, BUILD_INFO)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def describe_build(info):
    """One line: build type, compiler, Kokkos configuration, extra nvcc flags."""
    parts = (info.get(key) for key in ("build_type", "compiler", "kokkos", "nvcc_append_flags"))
    return "; ".join(p for p in parts if p)


def _nvidia_smi(index):
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader", "-i", str(index)], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    fields = [f.strip() for f in out.stdout.splitlines()[0].split(",")] if out.stdout.strip() else []
    if out.returncode != 0 or len(fields) != 3:
        return None
    return {"gpu": fields[0], "driver": "NVIDIA " + fields[1], "gpu_memory": fields[2]}


def rocminfo_gpus(text):
    """The GPU agents of rocminfo's output, in its order (the HIP device order), as "<marketing
    name> (<gfx name>)"; CPU agents are left out."""
    gpus = []
    for agent in re.split(r"\n\*+\s*\nAgent \d+\s*\n\*+", text)[1:]:
        fields = dict(re.findall(r"^\s{2}([A-Za-z][A-Za-z ]*?):\s+(.*?)\s*$", agent, re.MULTILINE))
        if fields.get("Device Type") == "GPU":
            gpus.append(f"{fields.get('Marketing Name') or 'AMD GPU'} ({fields.get('Name', 'unknown')})")
    return gpus


def _rocminfo(index):
    """An AMD GPU's name from ROCm's rocminfo (untested on an AMD machine: no AMD GPU was at hand)."""
    if not shutil.which("rocminfo"):
        return None
    try:
        out = subprocess.run(["rocminfo"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    gpus = rocminfo_gpus(out.stdout) if out.returncode == 0 else []
    if index >= len(gpus):
        return None
    return {"gpu": gpus[index], **_driver_from_kernel()}


def _driver_from_kernel():
    for path, pattern, vendor in (("/proc/driver/nvidia/version", r"Kernel Module\s+(\S+)", "NVIDIA"),
                                  ("/sys/module/amdgpu/version", r"(\S+)", "amdgpu")):
        try:
            with open(path) as f:
                found = re.search(pattern, f.read())
        except OSError:
            continue
        if found:
            return {"driver": f"{vendor} {found.group(1)}"}
    return {}


def gpu_info(index=0):
    """Name, driver release and memory of this machine's GPU number index, as far as they are
    found: nvidia-smi first, then ROCm's rocminfo, then the kernel module's version. {} on a
    machine without a GPU driver."""
    return _nvidia_smi(index) or _rocminfo(index) or _driver_from_kernel()


def context(binary_dir, device_index=0):
    """Context entries for results of the binaries in binary_dir run on this machine's GPU
    number device_index."""
    info = build_info(binary_dir)
    entries = {"commit": info.get("commit", "unknown"), "build": describe_build(info)}
    entries.update(gpu_info(device_index))
    return entries
