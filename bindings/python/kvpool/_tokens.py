"""The engine's forward-done marker as a kvpool completion token.

Any object with ``.query()`` (True once the marked work is done) will do; a
recorded ``torch.cuda.Event`` becomes an event token of the library's backend
(CUDA, or HIP under ROCm's PyTorch), so that kvpool's waits on it are stream
waits instead of host polls. kvpool keeps the object alive until it drops its
last reference to the token.
"""

import ctypes
import itertools

import torch

from ._lib import BACKEND, QUERY_FN, RELEASE_FN, lib, note_callback_exception, raise_status

_markers = {}  # token key -> the engine's object
_keys = itertools.count(1)


@QUERY_FN
def _query(key):
    try:
        return 1 if _markers[key].query() else 0
    except BaseException as e:  # reported to the caller once the C call returns
        note_callback_exception(e)
        return -1


@RELEASE_FN
def _release(key):
    _markers.pop(key, None)


# The C call that makes a token of a device event, for the backends that have one.
_FROM_EVENT = {
    "cuda": lib.kvpool_completion_token_from_cuda_event,
    "hip": lib.kvpool_completion_token_from_hip_event,
}


def _device_event_handle(marker):
    if BACKEND not in _FROM_EVENT or not isinstance(marker, torch.cuda.Event):
        return 0
    # ROCm's PyTorch names its hipEvent_t cuda_event too.
    return getattr(marker, "cuda_event", 0) or 0


class Token:
    """A C API token for one marker; pass ``handle`` to the C calls, then drop it."""

    __slots__ = ("handle",)

    def __init__(self, marker):
        if not callable(getattr(marker, "query", None)):
            raise TypeError(
                f"a forward-done marker needs a query() method, got {type(marker).__name__}"
            )
        key = next(_keys)
        _markers[key] = marker
        handle = ctypes.c_void_p()
        event = _device_event_handle(marker)
        if event:
            status = _FROM_EVENT[BACKEND](event, _release, key, ctypes.byref(handle))
        else:
            status = lib.kvpool_completion_token_from_query(
                _query, _release, key, ctypes.byref(handle)
            )
        if status:
            _markers.pop(key, None)
            raise_status(status)
        self.handle = handle.value

    def __del__(self):
        lib.kvpool_completion_token_release(self.handle)


def token_handle(marker):
    """(Token or None, its handle or None) for an optional marker."""
    if marker is None:
        return None, None
    token = Token(marker)
    return token, token.handle
