"""Dask arrays over the slab client: each task reads its block with one
ReadSlab, or writes it with one WriteSlab.

    import zarrgate
    a = zarrgate.connect("127.0.0.1:50051").open_array("climate/t2m")
    x = zarrgate.to_dask(a)                   # one dask chunk per zarr chunk
    x.mean(axis=0).compute()

    out = zarrgate.connect(...).create_array("climate/anomaly", shape=a.shape,
                                             dtype="f4", chunks=a.chunks, shards=a.shards)
    zarrgate.to_zarrgate(x - x.mean(axis=0), out)

Tasks carry the array pickled: its client's settings (address, TLS
material, token) and its metadata (see :meth:`zarrgate.Array.__reduce__`).
A worker process opens one channel per distinct settings on first use
(:mod:`zarrgate._pool`) and closes it when it exits. The token travels
with every task: a worker, or a pickled graph, holds the caller's
credentials.

Writes need no lock: the gateway writes every chunk or shard a block only
partly covers by read-modify-write conditioned on the stored generation,
and merges again when another writer changed it in between, so concurrent
tasks writing disjoint blocks into the same shard lose nothing. Blocks
aligned to the shards (``x.rechunk(a.shards or a.chunks)``) never
contend, and are written without that read.
"""

from __future__ import annotations

from typing import Any

try:
    import dask.array as da
    from dask.base import normalize_token, tokenize
except ImportError as e:  # pragma: no cover - the tests have dask
    raise ImportError("zarrgate.dask needs dask: pip install 'zarrgate[dask]'") from e

import numpy as np

from zarrgate import _pool, _slab
from zarrgate.client import Array

__all__ = ["to_dask", "to_zarrgate"]


def _check(array: Any, what: str) -> Array:
    from zarrgate import aio

    if isinstance(array, aio.Array):
        # Tasks run synchronously: the same array (its metadata, as opened)
        # on this process's synchronous client with the same settings, as
        # a pickled array is in a worker (zarrgate._pool).
        return _pool.reopen_array(*_pool.array_reduce(array)[1])
    if not isinstance(array, Array):
        raise TypeError(
            f"{what} takes a zarrgate.Array (from zarrgate.connect(...).open_array), "
            f"not {type(array).__module__}.{type(array).__name__}"
        )
    return array


def _node_bytes(a: Array) -> bytes:
    return a._node.SerializeToString(deterministic=True)


@normalize_token.register(Array)
def _tokenize_array(a: Array) -> tuple[Any, ...]:
    # What names the array: where it is and its metadata (not its data).
    return ("zarrgate.Array", a.client.addr, _node_bytes(a))


def to_dask(
    array: Array,
    chunks: Any = None,
    *,
    name: str | None = None,
    inline_array: bool = True,
) -> da.Array:
    """A dask array reading ``array``: each block one ReadSlab, in the task.

    ``chunks``: ``None`` (default), the array's chunks (its inner chunks when
    sharded), one task per chunk; ``"shards"``, the shards (the chunks if
    not sharded); ``"auto"``, dask's choice of block size made of whole
    shards (or chunks); or any chunks ``dask.array.from_array`` takes
    (blocks not on the chunk grid read whole chunks in part, and again for
    each block they touch).

    ``name``: the dask name. By default it is derived from the address, the
    array's metadata and the chunks, so that the same array gives the same
    graph: it does not change when the data does (dask caches nothing by it
    unless asked to, e.g. by ``persist``); pass a name of your own to tell
    two readings apart.

    ``inline_array``: put the (small) pickled array into every task, as
    dask.array.from_zarr can, rather than as one key every task depends on.
    """
    a = _check(array, "to_dask")
    grid = a.shards or a.chunks
    if chunks is None:
        chunks = a.chunks
    elif isinstance(chunks, str) and chunks == "shards":
        chunks = grid
    chunks = da.core.normalize_chunks(chunks, a.shape, dtype=a.dtype, previous_chunks=grid)
    if name is None:
        name = "zarrgate-" + tokenize(a, chunks)
    return da.from_array(
        a,
        chunks=chunks,
        name=name,
        lock=False,
        asarray=True,
        fancy=False,
        inline_array=inline_array,
        meta=np.empty((0,) * a.ndim, dtype=a.dtype),
    )


def to_zarrgate(
    x: da.Array,
    array: Array,
    region: Any = None,
    *,
    lock: Any = False,
    compute: bool = True,
    return_stored: bool = False,
    **kwargs: Any,
) -> Any:
    """Write the dask array ``x`` into ``array`` (or into ``array[region]``):
    each block of ``x`` one WriteSlab, in the task that computed it
    (``dask.array.store`` with the array as its target).

    ``region``: a tuple of slices with step 1 (numpy's rules: negative
    bounds count from the end, bounds clip); ``x`` must have its shape.
    ``lock``: none by default: the gateway makes concurrent writes of
    disjoint blocks safe, also into a shared chunk or shard (see the module
    docstring). Writes of overlapping blocks race as in numpy: some block
    wins each element. ``compute``, ``return_stored`` and ``kwargs``
    (the scheduler, ...) are those of ``dask.array.store``: with
    ``compute=False``, the delayed to compute later.
    """
    a = _check(array, "to_zarrgate")
    if not isinstance(x, da.Array):
        raise TypeError(f"to_zarrgate writes a dask array, not {type(x).__name__}")
    # What each block's write would refuse (strings into numbers), now.
    _slab.check_value_dtype(a.path, np.empty(0, x.dtype), a.dtype)
    if region is None:
        target_shape = a.shape
        regions = None
    else:
        key = region if isinstance(region, tuple) else (region,)
        if not all(isinstance(k, slice) for k in key):
            raise TypeError("to_zarrgate: region is a tuple of slices, one per dimension")
        p = a._plan(key)
        if any(step != 1 for _, _, step in p.slices):
            raise ValueError("to_zarrgate: region slices take step 1")
        target_shape = p.slab_shape
        regions = tuple(slice(start, start + n) for (start, _, _), n in zip(p.slices, p.slab_shape))
    if tuple(x.shape) != tuple(target_shape):
        where = "the array" if region is None else f"the region {region!r}"
        raise ValueError(f"to_zarrgate: a dask array of shape {x.shape} into {where} of shape "
                         f"{tuple(target_shape)}")
    return da.store(x, a, regions=regions, lock=lock, compute=compute,
                    return_stored=return_stored, **kwargs)
