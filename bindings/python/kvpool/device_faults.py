"""The device-fault seam, for tests of an engine's error handling.

``fail_nth("launch", 2)`` makes the second device kernel launch kvpool issues
from now on, on the calling thread, fail once: the call raises
:class:`kvpool.errors.RuntimeFailure` and leaves every kvpool object as it
was. Kinds: "allocation", "upload", "copy", "launch".
"""

from ._lib import check, lib

KINDS = ("allocation", "upload", "copy", "launch")


def _op(kind):
    if kind not in KINDS:
        raise ValueError(f"device fault kind {kind!r} is none of {KINDS}")
    return KINDS.index(kind)


def fail_nth(kind, nth):
    """The nth operation of this kind from now on (1: the next one) fails, once."""
    check(lib.kvpool_device_faults_fail_nth(_op(kind), nth))


def reset():
    """Disarms every fault and zeroes the counts."""
    lib.kvpool_device_faults_reset()


def count(kind):
    """Operations of this kind issued on this thread since the last reset()."""
    return lib.kvpool_device_faults_count(_op(kind))


__all__ = ["KINDS", "fail_nth", "reset", "count"]
