"""kvpool's exceptions: one class per error code of the C API.

Misuse that SGLang's reference allocator answers with a failed ``assert``
(double free, an unaligned size, an ``out=`` of the wrong dtype or shape, a
call on the wrong side) raises a subclass of both :class:`KVPoolError` and
:class:`AssertionError`, so engine code written against the reference catches
it unchanged.
"""


class KVPoolError(Exception):
    """Any kvpool error. ``code`` is the C API's status, ``message`` kvpool's text."""

    code = None
    code_name = "error"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"[kvpool {self.code_name}] {self.message}"


class KVPoolAssertionError(KVPoolError, AssertionError):
    """A kvpool error where the reference asserts."""


class InvalidArgumentError(KVPoolAssertionError):
    code, code_name = 1, "invalid_argument"


class MisalignedError(KVPoolAssertionError):
    code, code_name = 2, "misaligned"


class OutOfRangeError(KVPoolAssertionError):
    code, code_name = 3, "out_of_range"


class NotAllocatedError(KVPoolAssertionError):
    code, code_name = 4, "not_allocated"


class WrongRoleError(KVPoolAssertionError):
    code, code_name = 5, "wrong_role"


class InvalidStateError(KVPoolError):
    code, code_name = 6, "invalid_state"


class InternalError(KVPoolAssertionError):
    code, code_name = 7, "internal"


class CallbackError(KVPoolError):
    code, code_name = 100, "callback"


class RuntimeFailure(KVPoolError, RuntimeError):
    code, code_name = 101, "runtime"


BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        MisalignedError,
        OutOfRangeError,
        NotAllocatedError,
        WrongRoleError,
        InvalidStateError,
        InternalError,
        CallbackError,
        RuntimeFailure,
    )
}
