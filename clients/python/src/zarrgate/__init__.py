"""zarrgate: Python client for the zarrgate gRPC gateway.

- :func:`connect` returns a :class:`Client` of the gateway's ArrayService:
  groups and arrays read and written as numpy arrays (:mod:`zarrgate.aio`
  is its asyncio twin). :class:`SharedBuffer` is client memory a gateway
  on this host reads slabs into and writes them from itself
  (``Array.read_shared`` / ``Array.write_shared``).
- :func:`to_dask` and :func:`to_zarrgate` (:mod:`zarrgate.dask`, needs
  dask) read an array as a dask array and write one into it, a ReadSlab or
  WriteSlab per task.
- :class:`ZarrgateStore` is a zarr-python 3 store (``zarr.abc.store.Store``)
  over ``zarrgate.store.v1.StoreService`` (imported, with zarr, on first
  use: the slab client does not import zarr).
- The generated protobuf / gRPC stubs live in :mod:`zarrgate._gen`; the usual
  ones are re-exported here as ``store_pb2``, ``store_pb2_grpc``,
  ``gateway_pb2`` and ``gateway_pb2_grpc``.
"""

from typing import TYPE_CHECKING

from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from zarrgate._gen.zarrgate.store.v1 import store_pb2, store_pb2_grpc
from zarrgate.client import Array, Client, Group, connect
from zarrgate.sharedbuf import SharedBuffer
from zarrgate.errors import (
    ZarrgateError,
    ZarrgateNotFound,
    ZarrgatePermissionDenied,
    ZarrgateUnauthenticated,
)

if TYPE_CHECKING:
    from zarrgate.store import ZarrgateStore

__all__ = [
    "Array",
    "Client",
    "Group",
    "SharedBuffer",
    "ZarrgateNotFound",
    "connect",
    "ZarrgateError",
    "ZarrgatePermissionDenied",
    "ZarrgateStore",
    "ZarrgateUnauthenticated",
    "gateway_pb2",
    "gateway_pb2_grpc",
    "store_pb2",
    "store_pb2_grpc",
    "to_dask",
    "to_zarrgate",
]


def __getattr__(name: str) -> object:
    # zarrgate.dask imports dask, an optional dependency: only when asked.
    if name in ("to_dask", "to_zarrgate"):
        from zarrgate import dask as _dask

        return getattr(_dask, name)
    # zarrgate.store imports zarr-python (its Store class), whose import
    # costs a process about 13 MiB: the slab client does without.
    if name == "ZarrgateStore":
        from zarrgate.store import ZarrgateStore

        return ZarrgateStore
    raise AttributeError(f"module 'zarrgate' has no attribute {name!r}")
