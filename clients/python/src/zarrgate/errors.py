"""Exceptions: a gRPC status from the server as a Python exception.

Every one derives from :class:`ZarrgateError` (with the status ``code`` and
``details``) and from the builtin or zarr-python exception callers expect
for that status, so code written against zarr-python or the standard
library catches them unchanged:

================================  ==========================================
status                            also an instance of
================================  ==========================================
NOT_FOUND                         :class:`FileNotFoundError`; opening an
                                  array / group: zarr's
                                  ``ArrayNotFoundError`` /
                                  ``GroupNotFoundError``
ALREADY_EXISTS                    :class:`FileExistsError`; zarr's
                                  ``ContainsArrayError`` /
                                  ``ContainsGroupError`` when known which
INVALID_ARGUMENT, OUT_OF_RANGE,   :class:`ValueError`
FAILED_PRECONDITION
RESOURCE_EXHAUSTED                :class:`MemoryError`
UNAVAILABLE                       :class:`ConnectionError`
DEADLINE_EXCEEDED                 :class:`TimeoutError`
UNAUTHENTICATED,                  :class:`PermissionError`
PERMISSION_DENIED
================================  ==========================================

A path that holds a group where an array was asked for (or the other way
round) is :class:`ZarrgateNodeTypeError`, a zarr ``NodeTypeValidationError``.
Selections numpy would refuse raise :class:`IndexError` subclasses of zarr's
(``NegativeStepError``, ``BoundsCheckError``) before any call.

The classes that derive from zarr's exceptions (``ZarrgateArrayNotFound``,
``ZarrgateGroupNotFound``, ``ZarrgateContainsArray``,
``ZarrgateContainsGroup``, ``ZarrgateNodeTypeError``,
``ZarrgateNegativeStep``, ``ZarrgateBoundsError``) are made when first
needed, to raise one or when named (``zarrgate.errors.ZarrgateArrayNotFound``
imports zarr): importing zarrgate does not import zarr-python, whose import
costs a process about 13 MiB of resident memory and a third of a second.
Whatever is raised is still an instance of zarr's exception: zarr is
imported then, before the exception exists.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from zarrgate._zarr_errors import (
        ZarrgateArrayNotFound,
        ZarrgateBoundsError,
        ZarrgateContainsArray,
        ZarrgateContainsGroup,
        ZarrgateGroupNotFound,
        ZarrgateNegativeStep,
        ZarrgateNodeTypeError,
    )

__all__ = [
    "ZarrgateArrayNotFound",
    "ZarrgateBoundsError",
    "ZarrgateContainsArray",
    "ZarrgateContainsGroup",
    "ZarrgateAlreadyExists",
    "ZarrgateDeadlineExceeded",
    "ZarrgateError",
    "ZarrgateFailedPrecondition",
    "ZarrgateGroupNotFound",
    "ZarrgateInvalidArgument",
    "ZarrgateNegativeStep",
    "ZarrgateNodeTypeError",
    "ZarrgateNotFound",
    "ZarrgateOutOfRange",
    "ZarrgatePermissionDenied",
    "ZarrgateResourceExhausted",
    "ZarrgateUnauthenticated",
    "ZarrgateUnavailable",
]


class ZarrgateError(Exception):
    """A gRPC status from the server, with its ``code`` and ``details``.

    Subclasses also derive from the builtin exception zarr-python and callers
    expect for that status: :class:`FileNotFoundError` for NOT_FOUND,
    :class:`ValueError` for INVALID_ARGUMENT, OUT_OF_RANGE and
    FAILED_PRECONDITION, :class:`ConnectionError` for UNAVAILABLE,
    :class:`TimeoutError` for DEADLINE_EXCEEDED, :class:`PermissionError` for
    UNAUTHENTICATED and PERMISSION_DENIED.
    """

    def __init__(self, message: str, code: grpc.StatusCode, details: str) -> None:
        # Exception.__init__ directly: zarr's BaseZarrError formats its
        # arguments as a template when given more than one.
        Exception.__init__(self, message)
        self.code = code
        self.details = details

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled with its code and details (a dask worker's error reaches
        # the client so), as the class it is.
        return (type(self), (str(self), self.code, self.details), self.__dict__)


class ZarrgateNotFound(ZarrgateError, FileNotFoundError):
    """NOT_FOUND."""


class ZarrgateAlreadyExists(ZarrgateError, FileExistsError):
    """ALREADY_EXISTS: a node is where one was to be created."""


class ZarrgateInvalidArgument(ZarrgateError, ValueError):
    """INVALID_ARGUMENT (a bad key, prefix, range, selection or metadata)."""


class ZarrgateOutOfRange(ZarrgateError, ValueError):
    """OUT_OF_RANGE."""


class ZarrgateFailedPrecondition(ZarrgateError, ValueError):
    """FAILED_PRECONDITION (a failed condition, or a read-only server)."""


class ZarrgateResourceExhausted(ZarrgateError, MemoryError):
    """RESOURCE_EXHAUSTED: a limit of the server (slab size, memory budget);
    the details name it."""


class ZarrgateUnavailable(ZarrgateError, ConnectionError):
    """UNAVAILABLE."""


class ZarrgateDeadlineExceeded(ZarrgateError, TimeoutError):
    """DEADLINE_EXCEEDED."""


class ZarrgateUnauthenticated(ZarrgateError, PermissionError):
    """UNAUTHENTICATED: no token (or client certificate) where the server needs
    one, or one it refuses (unknown, expired, malformed)."""


class ZarrgatePermissionDenied(ZarrgateError, PermissionError):
    """PERMISSION_DENIED: the server's policy does not grant the caller this
    call on this key or prefix (the details name the permission and prefix)."""


_ERRORS: dict[grpc.StatusCode, type[ZarrgateError]] = {
    grpc.StatusCode.NOT_FOUND: ZarrgateNotFound,
    grpc.StatusCode.ALREADY_EXISTS: ZarrgateAlreadyExists,
    grpc.StatusCode.INVALID_ARGUMENT: ZarrgateInvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: ZarrgateOutOfRange,
    grpc.StatusCode.FAILED_PRECONDITION: ZarrgateFailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ZarrgateResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: ZarrgateUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: ZarrgateDeadlineExceeded,
    grpc.StatusCode.UNAUTHENTICATED: ZarrgateUnauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: ZarrgatePermissionDenied,
}

#: Sharper classes (their names: they derive from zarr's, made on first
#: use) for a status when the caller knows what it was after:
#: ``{"array": {NOT_FOUND: "ZarrgateArrayNotFound", ...}, ...}``.
_NODE_ERRORS: dict[str, dict[grpc.StatusCode, str]] = {
    "array": {
        grpc.StatusCode.NOT_FOUND: "ZarrgateArrayNotFound",
        grpc.StatusCode.ALREADY_EXISTS: "ZarrgateContainsArray",
    },
    "group": {
        grpc.StatusCode.NOT_FOUND: "ZarrgateGroupNotFound",
        grpc.StatusCode.ALREADY_EXISTS: "ZarrgateContainsGroup",
    },
}

#: The classes that derive from zarr's exceptions (zarrgate._zarr_errors).
_ZARR_DERIVED = frozenset({
    "ZarrgateArrayNotFound",
    "ZarrgateBoundsError",
    "ZarrgateContainsArray",
    "ZarrgateContainsGroup",
    "ZarrgateGroupNotFound",
    "ZarrgateNegativeStep",
    "ZarrgateNodeTypeError",
})


def __getattr__(name: str) -> type[Exception]:
    # The classes deriving from zarr's: made (zarr imported) on first use.
    if name in _ZARR_DERIVED:
        from zarrgate import _zarr_errors

        cls: type[Exception] = getattr(_zarr_errors, name)
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def status_error(
    code: grpc.StatusCode, details: str, what: str, hint: str = "", node: str = ""
) -> ZarrgateError:
    """The exception for a status; ``node`` ("array", "group") picks zarr's
    sharper class where there is one."""
    sharper = _NODE_ERRORS.get(node, {}).get(code)
    cls = getattr(sys.modules[__name__], sharper) if sharper else _ERRORS.get(code, ZarrgateError)
    return cls(f"{what}: {code.name}: {details}{hint}", code, details)
