"""The errors rlx-serve raises: part of ``rlx_core``'s hierarchy, so ``except RlxError``
catches them too.

Per-request failures cross process boundaries (replica -> ingress -> caller) as
:class:`RequestError`, which pickles with its HTTP status and the name of the error class
the replica raised; the caller's mistakes are :class:`BadRequestError`, an ``InputError``
as well, so ``except InputError`` works the same against a local ``run`` and a deployment.
"""
from __future__ import annotations

from rlx_core.errors import InputError, RlxError

__all__ = ["ServeError", "ServeConfigError", "RequestError", "BadRequestError", "request_error", "as_request_error"]


class ServeError(RlxError):
    """Base class of rlx-serve's errors."""


class ServeConfigError(ServeError, ValueError):
    """A deployment or ``rlx serve`` setting is invalid, or Ray would not stay on loopback."""


class RequestError(ServeError):
    """A request failed: ``status`` is its HTTP status, ``kind`` the error class behind it."""

    def __init__(self, message: str, status: int = 500, kind: str = "RlxError"):
        super().__init__(message)
        self.status, self.kind = status, kind

    def __reduce__(self):
        return (request_error, (str(self), self.status, self.kind))


class BadRequestError(RequestError, InputError):
    """The request itself is wrong (a 4xx): bad payload, unknown input, wrong dims or dtype."""

    def __init__(self, message: str, status: int = 400, kind: str = "InputError"):
        super().__init__(message, status, kind)


def request_error(message: str, status: int, kind: str) -> RequestError:
    """The RequestError (4xx: BadRequestError) of this status."""
    cls = BadRequestError if 400 <= status < 500 else RequestError
    return cls(message, status, kind)


def as_request_error(exc: BaseException) -> RequestError:
    """The RequestError a caller gets for ``exc``: 400 for the caller's own mistakes (the
    errors fallback chains never retry: bad inputs or params), 503 when no device could run
    the graph, 500 for anything else; the message is the error's own."""
    from rlx_core.errors import DeviceFallbackError, ParamError
    if isinstance(exc, RequestError):
        return exc
    kind = type(exc).__name__
    if isinstance(exc, (InputError, ParamError)):
        return BadRequestError(str(exc), 400, kind)
    if isinstance(exc, DeviceFallbackError):
        return RequestError(str(exc), 503, kind)
    return RequestError(str(exc) if isinstance(exc, RlxError) else f"{kind}: {exc}", 500, kind)
