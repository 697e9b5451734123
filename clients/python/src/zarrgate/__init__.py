"""zarrgate: Python client for the zarrgate gRPC gateway.

- :class:`ZarrgateStore` is a zarr-python 3 store (``zarr.abc.store.Store``)
  over ``zarrgate.store.v1.StoreService``.
- The generated protobuf / gRPC stubs live in :mod:`zarrgate._gen`; the usual
  ones are re-exported here as ``store_pb2``, ``store_pb2_grpc``,
  ``gateway_pb2`` and ``gateway_pb2_grpc``.
"""

from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from zarrgate._gen.zarrgate.store.v1 import store_pb2, store_pb2_grpc
from zarrgate.store import (
    ZarrgateError,
    ZarrgatePermissionDenied,
    ZarrgateStore,
    ZarrgateUnauthenticated,
)

__all__ = [
    "ZarrgateError",
    "ZarrgatePermissionDenied",
    "ZarrgateStore",
    "ZarrgateUnauthenticated",
    "gateway_pb2",
    "gateway_pb2_grpc",
    "store_pb2",
    "store_pb2_grpc",
]
