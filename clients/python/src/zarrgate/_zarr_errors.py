"""The exceptions of :mod:`zarrgate.errors` that derive from zarr-python's:
a module of their own, imported (with zarr) only when one is first needed
(zarrgate.errors' module ``__getattr__``), so that importing zarrgate does
not import zarr. They are ``zarrgate.errors``' names: use them from there."""

from __future__ import annotations

from zarr.errors import (
    ArrayNotFoundError,
    BoundsCheckError,
    ContainsArrayError,
    ContainsGroupError,
    GroupNotFoundError,
    NegativeStepError,
    NodeTypeValidationError,
)

from zarrgate.errors import ZarrgateAlreadyExists, ZarrgateError, ZarrgateNotFound


class ZarrgateArrayNotFound(ZarrgateNotFound, ArrayNotFoundError):
    """NOT_FOUND where an array was asked for: zarr's ``ArrayNotFoundError``."""


class ZarrgateGroupNotFound(ZarrgateNotFound, GroupNotFoundError):
    """NOT_FOUND where a group was asked for: zarr's ``GroupNotFoundError``."""


class ZarrgateContainsArray(ZarrgateAlreadyExists, ContainsArrayError):
    """ALREADY_EXISTS creating an array: zarr's ``ContainsArrayError``."""


class ZarrgateContainsGroup(ZarrgateAlreadyExists, ContainsGroupError):
    """ALREADY_EXISTS creating a group: zarr's ``ContainsGroupError``."""


class ZarrgateNodeTypeError(ZarrgateError, NodeTypeValidationError):
    """A group where an array was asked for, or an array where a group was:
    zarr's ``NodeTypeValidationError`` (a :class:`ValueError`)."""


class ZarrgateNegativeStep(NegativeStepError):
    """A slice with a negative step: the gateway reads forward only (zarr's
    ``NegativeStepError``, an :class:`IndexError`)."""


class ZarrgateBoundsError(BoundsCheckError):
    """An integer index outside its dimension, or too many indices (zarr's
    ``BoundsCheckError``, an :class:`IndexError`)."""


# Named, pickled and shown as zarrgate.errors' (whose __getattr__ finds them).
for _cls in (ZarrgateArrayNotFound, ZarrgateGroupNotFound, ZarrgateContainsArray,
             ZarrgateContainsGroup, ZarrgateNodeTypeError, ZarrgateNegativeStep,
             ZarrgateBoundsError):
    _cls.__module__ = "zarrgate.errors"
del _cls
