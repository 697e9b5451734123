"""An xarray backend: datasets and trees of groups on a zarrgate gateway.

    import xarray as xr
    ds = xr.open_dataset("grpc://127.0.0.1:50051/climate", engine="zarrgate")
    tree = xr.open_datatree("grpcs://zarrgate.example:443/climate", engine="zarrgate",
                            tls_ca="ca.pem")          # token: token=... or $ZARRGATE_TOKEN

Opening costs two calls (GetNode of the group, ListChildren of its
members; a tree: one recursive ListChildren) and reads no chunk: variables
are lazy, and each indexing of one (``ds.t[0, :10].values``, a dask task,
``ds.mean()``) is one ReadSlab of a slab holding the selection, from which
numpy selects what a list of indices or a mask picks. xarray itself reads the dimension coordinates it
makes indexes of, as it does from any backend
(``create_default_indexes=False`` skips that).

What a variable is made of is what ``xr.open_zarr`` makes of the same
data, so that the two give identical datasets: dimensions from v3
``dimension_names``, xarray's ``_ARRAY_DIMENSIONS`` (v2) or NCZarr's
dimension references (the gateway resolves all three, and hides their
attributes); attributes (NCZarr's ``_nc*`` hidden as xarray hides them);
the fill value as ``_FillValue`` where xarray's zarr backend takes it as
one (v2 and NCZarr; v3 only with ``use_zarr_fill_value_as_mask=True``),
and CF decoding (masking, scaling, times, ``coordinates``) by xarray's
own ``decode_cf_variables``. One difference: a netCDF scalar in an NCZarr
dataset is a 0-d variable, as netCDF reads it, where ``xr.open_zarr``
shows its storage (a dimension ``_scalar_`` of length 1, netCDF-C 4.10's
form) or fails on it (4.9.0's).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import grpc
import numpy as np
from xarray.backends.common import (
    AbstractDataStore,
    BackendArray,
    BackendEntrypoint,
    datatree_from_dict_with_io_cleanup,
)
from xarray.backends.store import StoreBackendEntrypoint
from xarray.backends.zarr import FillValueCoder
from xarray.core import indexing
from xarray.core.utils import FrozenDict
from xarray.core.variable import Variable

from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb
from zarrgate.client import Array, Client, Group, connect
from zarrgate.errors import ZarrgateNodeTypeError

__all__ = [
    "ZarrgateBackendArray",
    "ZarrgateBackendEntrypoint",
    "ZarrgateDataStore",
    "parse_url",
]

#: The connection options a URL's dataset may be opened with, as keyword
#: arguments or in ``storage_options`` (those of :func:`zarrgate.connect`).
CONNECT_OPTIONS = ("tls", "tls_ca", "tls_cert", "tls_key", "token", "timeout",
                   "shared_memory", "bulk", "channel_options")

_SCHEMES = ("grpc", "grpcs")


def parse_url(url: str) -> tuple[str, str]:
    """``grpc://host:port/path`` (``grpcs://``: TLS) as the address to dial
    (with its scheme, which :func:`zarrgate.connect` reads) and the node
    path ("" for the root). The path is percent-decoded; a user, password,
    query or fragment is refused (a token goes in ``token=`` or
    ``$ZARRGATE_TOKEN``, never in a URL, which ends up in logs and reprs)."""
    if not isinstance(url, str):
        raise TypeError(f"a zarrgate URL is a str, not {type(url).__name__}")
    # The messages never quote the URL whole: it may hold a secret.
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise ValueError("a zarrgate URL starts with grpc:// or grpcs://")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"{scheme}:// URL with credentials: pass the token as token=... "
            "(or $ZARRGATE_TOKEN), not in the URL"
        )
    if parts.query or parts.fragment:
        raise ValueError(
            f"{scheme}:// URL with a query or fragment: options (token=, tls_ca=, ...) "
            "are arguments, not parts of the URL"
        )
    try:
        port = parts.port
    except ValueError as e:
        raise ValueError(f"{scheme}://{parts.netloc}: {e}") from None
    if not parts.hostname or port is None:
        raise ValueError(f"{scheme}://{parts.netloc}: want {scheme}://host:port/path")
    path = unquote(parts.path).strip("/")
    if any(p in ("", ".", "..") for p in path.split("/")) and path:
        raise ValueError(f"path {path!r}: an empty, '.' or '..' segment")
    return f"{scheme}://{parts.netloc}", path


def _join(base: str, group: str | None) -> str:
    if not group:
        return base
    g = group.strip("/")
    if any(p in ("", ".", "..") for p in g.split("/")) and g:
        raise ValueError(f"group {group!r}: an empty, '.' or '..' segment")
    return f"{base}/{g}" if base and g else base or g


# -- fill values -------------------------------------------------------------


def _float(v: Any, dtype: np.dtype) -> Any:
    if isinstance(v, str):
        if v == "NaN":
            return dtype.type(np.nan)
        if v == "Infinity":
            return dtype.type(np.inf)
        if v == "-Infinity":
            return dtype.type(-np.inf)
        if v.startswith("0x"):  # the bits of a non-canonical NaN
            bits = np.array(int(v, 16), dtype=f"<u{dtype.itemsize}")
            return bits.view(dtype.newbyteorder("<"))[()].astype(dtype)
    return dtype.type(v)


def fill_scalar(fill_json: str, data_type: str, dtype: np.dtype) -> Any:
    """The fill value a GetNode reports (v3 JSON form; "" or null: none)
    as the numpy scalar zarr-python gives as ``Array.fill_value``."""
    if not fill_json:
        return None
    v = json.loads(fill_json)
    if v is None:
        return None
    if data_type == "string" or dtype.kind == "U":
        return np.str_(v)
    if data_type == "bytes" or dtype.kind == "S":
        return np.bytes_(base64.standard_b64decode(v))
    if dtype.kind == "V":
        return np.void(bytes(v)) if isinstance(v, list) else np.void(base64.standard_b64decode(v))
    if dtype.kind == "b":
        return np.bool_(v)
    if dtype.kind in "iu":
        return dtype.type(v)
    if dtype.kind == "f":
        return _float(v, dtype)
    if dtype.kind == "c":
        half = np.dtype(f"f{dtype.itemsize // 2}")
        return dtype.type(complex(_float(v[0], half), _float(v[1], half)))
    return v


# -- arrays and stores -------------------------------------------------------


class ZarrgateBackendArray(BackendArray):
    """A gateway array as xarray's lazily indexed backend array: each
    indexer is one ReadSlab. Basic ones read what they select; outer ones
    (arrays of indices, masks) a stepped slab holding what they select,
    from which numpy selects; vectorized ones the slab spanning them
    (xarray's BASIC support). ``async_getitem`` (``ds.load_async()``)
    runs the read in a thread."""

    __slots__ = ("_array", "dtype", "shape")

    def __init__(self, array: Array) -> None:
        self._array = array
        self.shape = array.shape
        self.dtype = array.dtype

    @property
    def array(self) -> Array:
        return self._array

    def __reduce__(self) -> tuple[Any, ...]:
        # For dask's workers: the client pickles as its settings (and
        # reconnects), the array as its node's metadata.
        return (_backend_array, (self._array.client, self._array._node.SerializeToString()))

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        if isinstance(key, indexing.OuterIndexer):
            return self._outer(key)
        return indexing.explicit_indexing_adapter(
            _no_empty_reversed(key, self.shape), self.shape, indexing.IndexingSupport.BASIC,
            self._read,
        )

    def _outer(self, key: indexing.OuterIndexer) -> np.ndarray:
        """An outer indexer in one read: each array of indices as the
        stepped slice holding it (the step: the greatest common divisor of
        its distances from its least index, so that ``[0, 100, 300]`` reads
        4 elements, not 301), reversed slices forward; then numpy selects
        and reverses in what was read."""
        backend: list[Any] = []
        select: list[Any] = []  # per dimension of the result read
        for k, n in zip(key.tuple, self.shape):
            if isinstance(k, np.ndarray) and k.ndim == 0:
                k = int(k)
            if isinstance(k, np.ndarray):
                k = np.where(k < 0, k + n, k).astype(np.int64)
                if k.size == 0:
                    backend.append(slice(0, 0))
                    select.append(slice(None))
                    continue
                lo, hi = int(k.min()), int(k.max())
                if lo < 0 or hi >= n:
                    raise IndexError(f"index {hi if hi >= n else lo - n} is out of bounds for size {n}")
                step = int(np.gcd.reduce(k - lo)) or 1
                backend.append(slice(lo, hi + 1, step))
                select.append((k - lo) // step)
            elif isinstance(k, slice) and k.step is not None and k.step < 0:
                r = range(*k.indices(n))
                if not r:
                    backend.append(slice(0, 0))
                    select.append(slice(None))
                else:
                    backend.append(slice(r[-1], r[0] + 1, -r.step))
                    select.append(slice(None, None, -1))
            else:
                backend.append(k)  # an integer (no dimension in the result) or a slice
                if not isinstance(k, (int, np.integer)):
                    select.append(slice(None))
        out = self._read(tuple(backend))
        for axis, sel in enumerate(select):
            if not (isinstance(sel, slice) and sel == slice(None)):
                out = out[(slice(None),) * axis + (sel,)]
        return out

    async def async_getitem(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        # ds.load_async(): the read in a thread (gRPC releases the GIL while
        # it waits), so that the variables of a dataset load concurrently.
        return await asyncio.to_thread(self.__getitem__, key)

    def _read(self, key: tuple[Any, ...]) -> np.ndarray:
        out = self._array[key]
        if not isinstance(out, np.ndarray):
            # All integers: a scalar; keep the dtype (StringDType too).
            out = np.asarray(out, dtype=self.dtype)
        return out


def _backend_array(client: Client, node: bytes) -> ZarrgateBackendArray:
    return ZarrgateBackendArray(Array(client, gpb.Node.FromString(node)))


def _no_empty_reversed(key: indexing.ExplicitIndexer, shape: tuple[int, ...]) -> indexing.ExplicitIndexer:
    """key with each empty slice of negative step (``[2:5:-1]``) as an
    empty forward one: xarray's decomposition for BASIC backends indexes
    the empty range such a slice gives and fails (IndexError)."""
    items = key.tuple
    fixed = tuple(
        slice(0, 0, 1)
        if isinstance(k, slice) and k.step is not None and k.step < 0 and not range(*k.indices(n))
        else k
        for k, n in zip(items, shape)
    )
    return type(key)(fixed) if any(a is not b for a, b in zip(fixed, items)) else key


def _format(node: gpb.Node) -> int | str:
    return {gpb.FORMAT_ZARR_V2: 2, gpb.FORMAT_NCZARR: "nczarr"}.get(node.format, 3)


def _hide_nc(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Without NCZarr's and netCDF's own attributes (``_nczarr_*``,
    ``_NCProperties``): what xarray's zarr backend hides."""
    return {k: v for k, v in attrs.items() if not k.lower().startswith("_nc")}


class ZarrgateDataStore(AbstractDataStore):
    """One group of a gateway as an xarray data store: its attributes and
    its arrays as lazy variables. Built from nodes already fetched; reads
    nothing until a variable is indexed."""

    __slots__ = ("_arrays", "_client", "_group", "_owns_client", "_use_mask")

    def __init__(self, client: Client, group: Group, arrays: Iterable[Array], *,
                 use_zarr_fill_value_as_mask: bool | None = None,
                 owns_client: bool = False) -> None:
        self._client = client
        self._group = group
        self._arrays = {a.path.rpartition("/")[2]: a for a in arrays}
        if use_zarr_fill_value_as_mask is None:
            # xarray's default: the fill value masks in v2 (and NCZarr),
            # not in v3, where xarray writes _FillValue as an attribute.
            use_zarr_fill_value_as_mask = _format(group._node) != 3
        self._use_mask = use_zarr_fill_value_as_mask
        self._owns_client = owns_client

    @property
    def group(self) -> Group:
        return self._group

    def open_store_variable(self, name: str, a: Array) -> Variable:
        dims = a.dims or ()
        if len(dims) != a.ndim or not all(dims):
            raise KeyError(
                f"array {a.path!r} has no name for each of its {a.ndim} dimensions "
                "(v3 dimension_names, v2 _ARRAY_DIMENSIONS or NCZarr dimensions): "
                "xarray needs them"
            )
        fmt = _format(a._node)
        attrs = dict(a.attrs) if fmt == 3 else _hide_nc(a.attrs)
        data = indexing.LazilyIndexedArray(ZarrgateBackendArray(a))
        encoding: dict[str, Any] = {
            "chunks": a.chunks,
            "preferred_chunks": dict(zip(dims, a.chunks)),
            "shards": a.shards,
        }
        if a.dtype.kind == "T":
            encoding["dtype"] = a.dtype
        fill = fill_scalar(a._node.array.fill_value_json, a.data_type, a.dtype)
        if self._use_mask:
            if fill is not None:
                attrs["_FillValue"] = fill
        else:
            if fmt == 3:
                encoding["fill_value"] = fill
            if "_FillValue" in attrs:
                attrs["_FillValue"] = FillValueCoder.decode(attrs["_FillValue"], a.dtype)
        return Variable(dims, data, attrs, encoding)

    def get_variables(self) -> FrozenDict:
        return FrozenDict((k, self.open_store_variable(k, a)) for k, a in self._arrays.items())

    def get_attrs(self) -> dict[str, Any]:
        return _hide_nc(self._group.attrs)

    def get_dimensions(self) -> dict[str, int]:
        dims: dict[str, int] = {}
        for a in self._arrays.values():
            for d, n in zip(a.dims or (), a.shape):
                if dims.setdefault(d, n) != n:
                    raise ValueError(f"found conflicting lengths for dimension {d} ({n} != {dims[d]})")
        return dims

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __reduce__(self) -> tuple[Any, ...]:
        # A pickled dataset carries its store (its close): nodes as their
        # metadata, the client as its settings.
        return (_data_store, (self._client, self._group._node.SerializeToString(),
                              [a._node.SerializeToString() for a in self._arrays.values()],
                              self._use_mask, self._owns_client))


def _data_store(client: Client, group: bytes, arrays: list[bytes], use_mask: bool,
                owns: bool) -> ZarrgateDataStore:
    return ZarrgateDataStore(
        client, Group(client, gpb.Node.FromString(group)),
        [Array(client, gpb.Node.FromString(a)) for a in arrays],
        use_zarr_fill_value_as_mask=use_mask, owns_client=owns)


# -- the entry point ---------------------------------------------------------


def _connect_options(storage_options: Mapping[str, Any] | None, given: dict[str, Any]) -> dict[str, Any]:
    opts = dict(storage_options or {})
    unknown = sorted(set(opts) - set(CONNECT_OPTIONS))
    if unknown:
        raise TypeError(f"storage_options: unknown {unknown}; zarrgate takes {list(CONNECT_OPTIONS)}")
    for k, v in given.items():
        if v is None:
            continue
        if k in opts and opts[k] is not v and opts[k] != v:
            raise ValueError(f"{k} given twice, as an argument and in storage_options")
        opts[k] = v
    return opts


def _open(filename_or_obj: Any, group: str | None, storage_options: Mapping[str, Any] | None,
          given: dict[str, Any]) -> tuple[Client, Group, bool]:
    """The client, the group to open, and whether the client is ours (to
    close with the dataset)."""
    if isinstance(filename_or_obj, Group):
        if storage_options or any(v is not None for v in given.values()):
            raise ValueError("connection options with a zarrgate.Group: its client has them")
        base = filename_or_obj
        client = base.client
        if not isinstance(client, Client):
            raise TypeError("a zarrgate.Group of the synchronous client (zarrgate.connect)")
        if not group:
            return client, base, False
        return client, client.open_group(_join(base.path, group)), False
    if isinstance(filename_or_obj, os.PathLike):
        filename_or_obj = os.fspath(filename_or_obj)
    addr, path = parse_url(filename_or_obj)
    client = connect(addr, **_connect_options(storage_options, given))
    try:
        node = client.get_node(_join(path, group), "group")
        if node.kind != gpb.NODE_KIND_GROUP:
            raise ZarrgateNodeTypeError(
                f"open {node.path!r}: an array, not a group; open the group that holds it",
                grpc.StatusCode.FAILED_PRECONDITION, "")
        return client, Group(client, node), True
    except BaseException:
        client.close()
        raise


class ZarrgateBackendEntrypoint(BackendEntrypoint):
    """Open groups of a zarrgate gateway: ``grpc://host:port/path`` (or
    ``grpcs://`` for TLS) with ``engine="zarrgate"``, or a
    :class:`zarrgate.Group` of a client already connected.

    Connection options (those of :func:`zarrgate.connect`): ``token``
    (default ``$ZARRGATE_TOKEN``), ``tls``, ``tls_ca``, ``tls_cert``,
    ``tls_key``, ``timeout``, ``shared_memory``, given as arguments or in
    ``storage_options``. ``group``: a group below the URL's path.
    ``use_zarr_fill_value_as_mask``: as ``xr.open_zarr``'s.
    """

    description = "Open Zarr groups served by a zarrgate gateway (grpc:// and grpcs:// URLs)"
    url = "https://github.com/zarrgate/zarrgate/blob/main/clients/python/README.md"
    supports_groups = True

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if isinstance(filename_or_obj, Group):
            return True
        return isinstance(filename_or_obj, str) and filename_or_obj.lower().startswith(
            ("grpc://", "grpcs://")
        )

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        token: str | None = None,
        tls: bool | None = None,
        tls_ca: Any = None,
        tls_cert: Any = None,
        tls_key: Any = None,
        timeout: float | None = None,
        shared_memory: bool | None = None,
    ) -> Any:
        given = dict(token=token, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
                     timeout=timeout, shared_memory=shared_memory)
        client, g, owns = _open(filename_or_obj, group, storage_options, given)
        try:
            arrays = [m for m in g.members() if isinstance(m, Array)]
            store = ZarrgateDataStore(client, g, arrays, owns_client=owns,
                                      use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask)
            return _decode(store, mask_and_scale, decode_times, concat_characters,
                           decode_coords, drop_variables, use_cftime, decode_timedelta)
        except BaseException:
            if owns:
                client.close()
            raise

    def open_groups_as_dict(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        token: str | None = None,
        tls: bool | None = None,
        tls_ca: Any = None,
        tls_cert: Any = None,
        tls_key: Any = None,
        timeout: float | None = None,
        shared_memory: bool | None = None,
    ) -> dict[str, Any]:
        given = dict(token=token, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
                     timeout=timeout, shared_memory=shared_memory)
        client, root, owns = _open(filename_or_obj, group, storage_options, given)
        try:
            # One recursive listing: every group and array below the root.
            groups: dict[str, Group] = {root.path: root}
            arrays: dict[str, list[Array]] = {root.path: []}
            members = root.members(recursive=True)
            for m in members:
                if isinstance(m, Group):
                    groups[m.path] = m
                    arrays.setdefault(m.path, [])
            for m in members:
                if isinstance(m, Array):
                    arrays.setdefault(m.path.rpartition("/")[0] if "/" in m.path else "", []).append(m)
            prefix = root.path + "/" if root.path else ""
            out: dict[str, Any] = {}
            # Parents before children; the root's first.
            for path in sorted(groups, key=lambda p: (p != root.path, p.count("/"), p)):
                rel = "/" + path[len(prefix):] if path != root.path else "/"
                store = ZarrgateDataStore(client, groups[path], arrays.get(path, []),
                                          use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
                                          # the root's store closes the client, once
                                          owns_client=owns and path == root.path)
                out[rel] = _decode(store, mask_and_scale, decode_times, concat_characters,
                                   decode_coords, drop_variables, use_cftime, decode_timedelta)
            return out
        except BaseException:
            if owns:
                client.close()
            raise

    def open_datatree(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        token: str | None = None,
        tls: bool | None = None,
        tls_ca: Any = None,
        tls_cert: Any = None,
        tls_key: Any = None,
        timeout: float | None = None,
        shared_memory: bool | None = None,
    ) -> Any:
        groups = self.open_groups_as_dict(
            filename_or_obj, mask_and_scale=mask_and_scale, decode_times=decode_times,
            concat_characters=concat_characters, decode_coords=decode_coords,
            drop_variables=drop_variables, use_cftime=use_cftime,
            decode_timedelta=decode_timedelta, group=group,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
            storage_options=storage_options, token=token, tls=tls, tls_ca=tls_ca,
            tls_cert=tls_cert, tls_key=tls_key, timeout=timeout, shared_memory=shared_memory)
        return datatree_from_dict_with_io_cleanup(groups)


def _decode(store: ZarrgateDataStore, mask_and_scale: bool, decode_times: Any,
            concat_characters: bool, decode_coords: Any, drop_variables: Any,
            use_cftime: Any, decode_timedelta: Any) -> Any:
    """xarray's own CF decoding of the store's variables (as every xarray
    backend over an AbstractDataStore does)."""
    return StoreBackendEntrypoint().open_dataset(
        store, mask_and_scale=mask_and_scale, decode_times=decode_times,
        concat_characters=concat_characters, decode_coords=decode_coords,
        drop_variables=drop_variables, use_cftime=use_cftime,
        decode_timedelta=decode_timedelta)
