"""The slab client over grpc.aio: :func:`connect` as :func:`zarrgate.connect`,
with coroutines where the sync client blocks.

    import zarrgate.aio
    async with zarrgate.aio.connect("127.0.0.1:50051") as c:
        a = await c.open_array("climate/t2m")
        x = await a[0, 100:200]          # or await a.read(key)
        await a.write((0, slice(0, 10)), 1.5)
        async for key, piece in a.blocks():
            ...

Indexing, data types, block placement and the shared-memory protocol are
the sync client's (zarrgate._slab); the channel belongs to the event loop
the client was first used on. Blocks are copied out on the event loop (one
memcpy each, about 1 MiB); a read whose blocks come over a bulk connection
(``bulk=True``, as the sync client's) receives them on a thread
(``asyncio.to_thread``), the blocks copied into place by the client's
copier threads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import numpy as np

from zarrgate import _slab, _wire, errors, sharedbuf
from zarrgate._conn import Conn
from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb
from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2_grpc as gpb_grpc
from zarrgate.client import (
    BLOCKS_BYTES,
    FORMATS,
    Group as _SyncGroup,
    _ArrayBase,
    _Base,
    _options,
    create_array_request,
)
from zarrgate.sharedbuf import SharedBuffer

__all__ = ["Array", "Client", "Group", "connect"]


def connect(addr: str, **kwargs: Any) -> Client:
    """As :func:`zarrgate.connect`, for asyncio."""
    # No channel is made until the first call: grpc.aio channels belong to
    # the event loop they are made on.
    opts = {k: kwargs.pop(k) for k in ("timeout", "shared_memory", "bulk", "channel_options")
            if k in kwargs}
    return Client(Conn.make(addr, **kwargs), **opts)


class Client(_Base):
    """An asyncio connection to a gateway. Use :func:`connect`."""

    def _setup(self) -> None:
        self._channel: grpc.aio.Channel | None = None
        self._copier = _slab.Copier()  # threads started by the first bulk read

    def _ch(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = self._conn.aio_channel(_options(self.channel_options, self._conn.local))
            self._stub = gpb_grpc.ArrayServiceStub(self._channel)
            self._read_slab = self._channel.unary_stream(
                _slab.READ_SLAB, request_serializer=gpb.ReadSlabRequest.SerializeToString,
                response_deserializer=None)
            self._read_slab_shared = self._channel.stream_stream(
                _slab.READ_SLAB_SHARED, request_serializer=_wire.identity,
                response_deserializer=None)
            self._write_slab = self._channel.stream_unary(
                _slab.WRITE_SLAB, request_serializer=_wire.identity,
                response_deserializer=gpb.WriteSlabResponse.FromString)
        return self._channel

    async def close(self) -> None:
        self._copier.close()
        self._maps.close()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, name: str, req: Any, what: str, node: str = "") -> Any:
        self._ch()
        try:
            return await getattr(self._stub, name)(req, timeout=self.timeout)
        except grpc.RpcError as e:
            raise self._conn.error(e, what, node) from e

    async def get_node(self, path: str, node: str = "") -> gpb.Node:
        return (await self._call("GetNode", gpb.GetNodeRequest(path=path), f"open {path!r}", node)).node

    async def open_array(self, path: str) -> Array:
        n = await self.get_node(path, "array")
        if n.kind != gpb.NODE_KIND_ARRAY:
            raise errors.ZarrgateNodeTypeError(f"open {path!r}: a group, not an array",
                                        grpc.StatusCode.FAILED_PRECONDITION, "")
        return Array(self, n)

    async def open_group(self, path: str = "") -> Group:
        n = await self.get_node(path, "group")
        if n.kind != gpb.NODE_KIND_GROUP:
            raise errors.ZarrgateNodeTypeError(f"open {path!r}: an array, not a group",
                                        grpc.StatusCode.FAILED_PRECONDITION, "")
        return Group(self, n)

    async def open(self, path: str = "") -> Array | Group:
        n = await self.get_node(path)
        return Array(self, n) if n.kind == gpb.NODE_KIND_ARRAY else Group(self, n)

    async def create_array(self, path: str, *args: Any, **kwargs: Any) -> Array:
        req = create_array_request(path, *args, **kwargs)
        return Array(self, (await self._call("CreateArray", req, f"create array {path!r}", "array")).node)

    async def create_group(self, path: str, attributes: dict[str, Any] | None = None,
                           *, zarr_format: int | str | None = None) -> Group:
        req = gpb.CreateGroupRequest(path=path, format=FORMATS[zarr_format],
                                     attributes_json=json.dumps(attributes) if attributes else "")
        return Group(self, (await self._call("CreateGroup", req, f"create group {path!r}", "group")).node)

    async def delete(self, path: str) -> None:
        await self._call("DeleteNode", gpb.DeleteNodeRequest(path=path), f"delete {path!r}")

    async def list(self, path: str = "", recursive: bool = False) -> list[Array | Group]:
        self._ch()
        out: list[Array | Group] = []
        try:
            async for resp in self._stub.ListChildren(
                gpb.ListChildrenRequest(path=path, recursive=recursive), timeout=self.timeout
            ):
                out += [Array(self, n) if n.kind == gpb.NODE_KIND_ARRAY else Group(self, n)
                        for n in resp.nodes]
        except grpc.RpcError as e:
            raise self._conn.error(e, f"list {path!r}", "group") from e
        return out

    # -- slabs ---------------------------------------------------------------

    async def _read(self, a: Array, p: _slab.Plan, out: np.ndarray | None) -> np.ndarray:
        self._ch()
        sink = _slab.Sink(a.path, p, a.dtype, a.data_type, out)
        if p.size == 0:
            return sink.out
        if self.shared_memory and not sink.variable and p.size >= _slab.SHARED_MIN_ELEMENTS:
            try:
                return await self._read_shared(a, p, sink)
            except _Unimplemented:
                self.shared_memory = False
                sink = _slab.Sink(a.path, p, a.dtype, a.data_type, out)
        return await self._read_socket(a, p, sink)

    async def _read_socket(self, a: Array, p: _slab.Plan, sink: _slab.Sink,
                           bulk: bool | None = None) -> np.ndarray:
        if bulk is None:
            bulk = self._bulk.ask(sink)
        call = self._read_slab(_slab.read_msg(a.path, p, bulk), timeout=self.timeout)
        r = _slab.Reader(a.path, sink, self.stats, None, self._copier)
        sock = None
        ended: _slab.BulkEnded | None = None
        try:
            while (raw := await call.read()) is not grpc.aio.EOF:
                r.message(raw)
                if r.offer is not None and sock is None:
                    # The blocks come over the bulk connection, read on a
                    # thread; the stream then ends with the read's status.
                    sock = await asyncio.to_thread(self._bulk_open, r.offer)
                    call.add_done_callback(_shutdown_on_failure(sock))
                    try:
                        await asyncio.to_thread(r.bulk, sock)
                    except _slab.BulkEnded as e:
                        ended = e
            await _check(call)
            if ended is not None:
                raise _slab.data_loss(f"read {a.path!r}: {ended}, and the call ended OK")
            return r.done()
        except _slab.BulkUnavailable as e:
            self._bulk_fallback(e, call, sock, r)
            sock = None
            return await self._read_socket(a, p, sink, bulk=False)
        except grpc.RpcError as e:
            raise self._conn.error(e, f"read {a.path!r}", "array") from e
        except _wire.WireError as e:
            call.cancel()
            raise _slab.data_loss(f"read {a.path!r}: {e}") from e
        except BaseException:
            call.cancel()
            raise
        finally:
            if sock is not None:
                _slab.bulk_shutdown(sock)  # wakes a thread still reading it
                sock.close()
            r.close()

    async def _read_shared(self, a: Array, p: _slab.Plan, sink: _slab.Sink,
                           buf: SharedBuffer | None = None) -> np.ndarray:
        dest = None if buf is None else buf.destination()
        call = self._read_slab_shared(timeout=self.timeout)
        r = _slab.Reader(a.path, sink, self.stats, self._maps, dest=dest is not None)
        try:
            await call.write(_slab.shared_read_msg(a.path, p, dest))
            while (raw := await call.read()) is not grpc.aio.EOF:
                if (reply := r.message(raw)) is not None:
                    await call.write(reply)
                if buf is not None and not r.first:
                    buf._in_place, buf._refused = r.in_place, r.refused
            await call.done_writing()
            await _check(call)
            return r.done()
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED and "ReadSlabShared" in (e.details() or ""):  # type: ignore[attr-defined]
                raise _Unimplemented from e
            raise self._conn.error(e, f"read {a.path!r}", "array") from e
        except _wire.WireError as e:
            call.cancel()
            raise _slab.data_loss(f"read {a.path!r}: {e}") from e
        except BaseException:
            call.cancel()
            raise
        finally:
            r.close()

    async def _read_buf(self, a: Array, p: _slab.Plan, buf: SharedBuffer) -> np.ndarray:
        async with _locked(buf):
            self._ch()
            out, dest = sharedbuf.begin(buf, "read", a, p, self.shared_memory)
            if dest is not None and p.size:
                try:
                    return await self._read_shared(a, p, _slab.Sink(a.path, p, a.dtype, a.data_type, out), buf)
                except _Unimplemented:
                    self.shared_memory = False
                    buf._refused = "the gateway has no shared memory (an older version)"
            return await self._read(a, p, out)

    async def _write_buf(self, a: Array, p: _slab.Plan, buf: SharedBuffer) -> gpb.WriteSlabResponse:
        async with _locked(buf):
            self._ch()
            src, dest = sharedbuf.begin(buf, "write", a, p, self.shared_memory)
            if dest is not None and p.size:
                try:
                    resp = await self._stub.WriteSlabShared(sharedbuf.write_request(a, p, dest), timeout=self.timeout)
                except grpc.RpcError as e:
                    if not sharedbuf.write_refused_by_old_gateway(buf, e):
                        raise self._conn.error(e, f"write {a.path!r}", "array") from e
                else:
                    if (done := sharedbuf.write_answer(buf, resp)) is not None:
                        return done
            return await self._write(a, p, src.reshape(p.out_shape))

    async def _write(self, a: Array, p: _slab.Plan, value: Any) -> gpb.WriteSlabResponse:
        self._ch()
        _slab.check_value_dtype(a.path, value, a.dtype)
        if p.size == 0:
            _slab.source(p, value, a.dtype)
            return gpb.WriteSlabResponse()
        call = self._write_slab(timeout=self.timeout)
        try:
            for msg in _slab.write_messages(a.path, p, value, a.dtype):
                await call.write(msg)
            await call.done_writing()
            return await call
        except grpc.RpcError as e:
            raise self._conn.error(e, f"write {a.path!r}", "array") from e
        except BaseException:
            call.cancel()
            raise


class _Unimplemented(Exception):
    pass


class _locked:
    """A SharedBuffer's lock (a thread lock: sync and asyncio calls share
    it), taken without blocking the event loop: polled, so that a call
    cancelled while it waits leaves the lock as it was."""

    def __init__(self, buf: SharedBuffer) -> None:
        self.lock = buf._lock

    async def __aenter__(self) -> None:
        while not self.lock.acquire(blocking=False):
            await asyncio.sleep(0.002)

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()


def _shutdown_on_failure(sock: Any) -> Any:
    """A done callback (run on the event loop) of a read's call that
    wakes the thread reading its bulk connection when the call fails."""
    def cb(call: Any) -> None:
        async def check() -> None:
            if await call.code() != grpc.StatusCode.OK:
                _slab.bulk_shutdown(sock)
        _pending.add(t := asyncio.ensure_future(check()))
        t.add_done_callback(_pending.discard)
    return cb


_pending: set[Any] = set()


async def _check(call: Any) -> None:
    """Raise the status of a finished streaming call if it failed."""
    code = await call.code()
    if code != grpc.StatusCode.OK:
        raise grpc.aio.AioRpcError(code, await call.initial_metadata(),
                                   await call.trailing_metadata(), await call.details())


class Group(_SyncGroup):
    """A group: ``await group.members()``; ``await group.get(name)``."""

    async def members(self, recursive: bool = False) -> list[Array | Group]:  # type: ignore[override]
        return await self._client.list(self.path, recursive)

    async def get(self, name: str) -> Array | Group:
        return await self._client.open(self._child(name))

    def __getitem__(self, name: str) -> Any:
        return self.get(name)


class Array(_ArrayBase):
    """An array: ``await a[key]`` reads, ``await a.write(key, value)``
    writes, ``async for key, piece in a.blocks()`` reads in pieces."""

    def __getitem__(self, key: Any) -> Any:
        return self.read(key)

    async def read(self, key: Any = ..., *, out: np.ndarray | None = None) -> Any:
        p = self._plan(key)
        return _slab.finish(p, await self._client._read(self, p, out))

    async def write(self, key: Any, value: Any) -> dict[str, int]:
        r = await self._client._write(self, self._plan(key), value)
        return {"chunks_written": r.chunks_written, "bytes_written": r.bytes_written}

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("an asyncio array is written with 'await a.write(key, value)'")

    async def read_shared(self, key: Any, buf: SharedBuffer) -> Any:
        """The sync Array.read_shared: the slab read into buf, a view of it."""
        p = self._plan(key)
        return _slab.finish(p, await self._client._read_buf(self, p, buf))

    async def write_shared(self, key: Any, buf: SharedBuffer) -> dict[str, int]:
        """The sync Array.write_shared: the slab in buf's first bytes written."""
        r = await self._client._write_buf(self, self._plan(key), buf)
        return {"chunks_written": r.chunks_written, "bytes_written": r.bytes_written}

    async def blocks(self, key: Any = ..., *, max_bytes: int = BLOCKS_BYTES) -> AsyncIterator[tuple[tuple[Any, ...], Any]]:
        p = self._plan(key)
        if p.size == 0:
            return
        item = max(self.dtype.itemsize, 16 if self.dtype.kind in "OT" else 1)
        for k in _slab.pieces(p, self._grid(), item, max_bytes):
            yield k, await self.read(k)

