"""The slab client: groups and arrays of a zarrgate gateway, read and written
as numpy arrays through ArrayService (the Go client's peer).

    import zarrgate
    c = zarrgate.connect("127.0.0.1:50051")          # tls=..., token=...
    a = c.open_array("climate/t2m")
    a.shape, a.dtype, a.chunks, a.shards, a.attrs, a.dims
    x = a[0, 100:200, ::2]                           # one ReadSlab, one numpy array
    a[0, :10, :10] = 1.5                             # WriteSlab, streamed in blocks
    for key, piece in a.blocks():                    # larger than memory
        ...

The gateway decodes the chunks; blocks of the result arrive already in
place order and are each copied once into one preallocated array. On the
gateway's host (a loopback or unix:// address) large reads take the
shared-memory path (ReadSlabShared): block data is copied out of the
gateway's segment, mapped read-only, instead of coming through the socket;
anything that stops it (another host, another user, an old gateway) falls
back to the socket. ``shared_memory=False`` turns it off. With a
:class:`zarrgate.SharedBuffer` (``a.read_shared(key, buf)``,
``a.write_shared(key, buf)``) the gateway writes the slab straight into
this process's memory, or reads it from there: no copy here at all.

Reads through the socket ask for a bulk connection (``bulk=True``, the
default): a gateway started with ``--bulk-listen`` then sends the blocks
over a plain TCP connection (TLS when the channel is) beside the gRPC
stream, each frame received with one ``recv_into`` into a reused buffer
and its block placed before the next: about 40 % of the client CPU of the
stream's HTTP/2 frames and per-message copies (docs/benchmarks.md). A gateway without a bulk listener sends the blocks
through the stream; a bulk connection that cannot be opened makes the
read again through the stream, and the client keeps to the stream for
BULK_RETRY_AFTER seconds. ``bulk=False`` turns it off.
"""

from __future__ import annotations

import json
import math
import os
import queue
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from zarrgate import _pool, _slab, _wire, errors, sharedbuf
from zarrgate._conn import Conn
from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb
from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2_grpc as gpb_grpc
from zarrgate.errors import ZarrgateError
from zarrgate.sharedbuf import SharedBuffer

__all__ = ["Array", "Client", "Group", "connect"]

FORMATS = {
    None: gpb.FORMAT_UNSPECIFIED,
    3: gpb.FORMAT_ZARR_V3,
    2: gpb.FORMAT_ZARR_V2,
    "nczarr": gpb.FORMAT_NCZARR,
}
_FORMAT_NAMES = {gpb.FORMAT_ZARR_V3: 3, gpb.FORMAT_ZARR_V2: 2, gpb.FORMAT_NCZARR: "nczarr"}

#: The pieces blocks() reads at a time, by default.
BLOCKS_BYTES = 64 << 20


def connect(
    addr: str,
    *,
    tls: bool | None = None,
    tls_ca: str | os.PathLike[str] | bytes | None = None,
    tls_cert: str | os.PathLike[str] | bytes | None = None,
    tls_key: str | os.PathLike[str] | bytes | None = None,
    token: str | None = None,
    timeout: float | None = None,
    shared_memory: bool | None = None,
    bulk: bool = True,
    channel_options: Iterable[tuple[str, Any]] = (),
) -> Client:
    """Connect to the gateway at ``addr`` (``host:port``, ``grpc://``,
    ``grpcs://``, ``unix:///path``); the connection is made on first use.

    ``tls``, ``tls_ca``, ``tls_cert``, ``tls_key`` and ``token`` are those of
    :class:`zarrgate.ZarrgateStore` (``token=None`` takes ``$ZARRGATE_TOKEN``).
    ``timeout``: a deadline in seconds for each call. ``shared_memory``:
    large reads through the gateway's shared memory; default on for
    loopback and unix:// addresses (where it can work), off otherwise.
    ``bulk``: reads of 1 MiB and more that go through the socket take
    their blocks over the gateway's bulk connection when it offers one
    (``--bulk-listen``; TLS with the channel's settings when the channel
    uses TLS); off: every block comes through the gRPC stream.
    """
    conn = Conn.make(addr, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
    return Client(conn, timeout=timeout, shared_memory=shared_memory, bulk=bulk,
                  channel_options=channel_options)


#: The receive window of a stream from a gateway on this host (loopback or
#: unix socket): gRPC's BDP probe off and this lookahead. On loopback the
#: bandwidth-delay product is next to nothing, and the window the probe
#: grows (16 MiB and more) only lets messages pile up in the client ahead
#: of the reading thread: 25 to 55 MiB above a 512 MiB result, against 4 to
#: 8 MiB with this window (docs/benchmarks.md). Other hosts keep gRPC's
#: probe, which sizes the window to the link.
LOCAL_WINDOW = 2 << 20


def _options(extra: Iterable[tuple[str, Any]], local: bool = False) -> list[tuple[str, Any]]:
    """The channel's options: message size limits, the user's, then a
    fixed receive window for a local gateway (gRPC takes an option's first
    value: the user's window wins, not the user's limits)."""
    window: list[tuple[str, Any]] = []
    if local:
        window = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", LOCAL_WINDOW)]
    return [
        ("grpc.max_receive_message_length", _slab.MAX_MESSAGE),
        ("grpc.max_send_message_length", _slab.MAX_MESSAGE),
        *extra,
        *window,
    ]


class _Base:
    """What the sync and asyncio clients share: settings, pickling, repr."""

    def __init__(
        self,
        conn: Conn,
        *,
        timeout: float | None = None,
        shared_memory: bool | None = None,
        bulk: bool = True,
        channel_options: Iterable[tuple[str, Any]] = (),
    ) -> None:
        self._conn = conn
        self.timeout = timeout
        self.shared_memory = conn.local if shared_memory is None else bool(shared_memory)
        self.channel_options = tuple(channel_options)
        self._bulk = _slab.BulkSwitch(bool(bulk))
        self._ssl: ssl.SSLContext | None = None
        self._ssl_lock = threading.Lock()
        self.stats = _slab.Stats()
        self._maps = _slab.Mappings()
        _slab.tune_malloc()
        self._setup()

    def _setup(self) -> None:
        raise NotImplementedError

    @property
    def bulk(self) -> bool:
        """Whether reads ask for a bulk connection (see :func:`connect`)."""
        return self._bulk.on

    @bulk.setter
    def bulk(self, on: bool) -> None:
        self._bulk.on = bool(on)

    @property
    def addr(self) -> str:
        return self._conn.addr

    def _bulk_open(self, offer: gpb.BulkOffer) -> Any:
        """The offered bulk connection, its hello sent (BulkUnavailable if
        it cannot be had)."""
        ctx = None
        if self._conn.tls:
            with self._ssl_lock:
                if self._ssl is None:
                    try:
                        self._ssl = self._conn.ssl_context()
                    except (OSError, ValueError) as e:
                        raise _slab.BulkUnavailable(f"TLS settings: {e}") from e
                ctx = self._ssl
        host, port = _slab.bulk_address(offer, self._conn.host())
        return _slab.bulk_connect(host, port, offer.ticket, ctx,
                                  self._conn.server_name(self.channel_options))

    def _bulk_fallback(self, e: _slab.BulkUnavailable, call: Any, sock: Any, r: _slab.Reader) -> None:
        """A read's offered bulk connection could not be used, before any
        block was placed: end its call, connection and reader, count it,
        and (as e says) read without bulk for a while. The caller then
        makes the read again through the stream."""
        call.cancel()
        if sock is not None:
            sock.close()
        r.close()
        if e.switch_off:
            self._bulk.failed()
        self.stats.bulk_fallbacks += 1
        self.stats.bulk_reads -= 1

    def __getstate__(self) -> dict[str, Any]:
        # A client pickles as its settings (TLS material and token
        # included), so that workers reconnect with the same options.
        return {"conn": self._conn, "timeout": self.timeout,
                "shared_memory": self.shared_memory, "bulk": self.bulk,
                "channel_options": self.channel_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _Base.__init__(self, state["conn"], timeout=state["timeout"],
                       shared_memory=state["shared_memory"], bulk=state.get("bulk", True),
                       channel_options=state["channel_options"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self.addr}'{self._conn.describe()})"


class Client(_Base):
    """A connection to a gateway (thread-safe). Use :func:`connect`."""

    def _setup(self) -> None:
        self._channel = self._conn.channel(_options(self.channel_options, self._conn.local))
        self._stub = gpb_grpc.ArrayServiceStub(self._channel)
        self._copier = _slab.Copier()
        # Slab streams with raw bytes: see _wire.
        self._read_slab = self._channel.unary_stream(
            _slab.READ_SLAB, request_serializer=gpb.ReadSlabRequest.SerializeToString,
            response_deserializer=None)
        self._read_slab_shared = self._channel.stream_stream(
            _slab.READ_SLAB_SHARED, request_serializer=_wire.identity, response_deserializer=None)
        self._write_slab = self._channel.stream_unary(
            _slab.WRITE_SLAB, request_serializer=_wire.identity,
            response_deserializer=gpb.WriteSlabResponse.FromString)
        # Small-reads connections: idle ones (most recently used last),
        # whether the gateway has none, until when not to ask after one
        # could not be made.
        self._small_lock = threading.Lock()
        self._small_idle: list[_slab.SmallConn] = []
        self._small_open_now = 0  # idle, in use or being opened
        self._small_most = 0  # the most open at once (tests)
        self._small_off = False
        self._small_off_until = 0.0

    def close(self) -> None:
        self._copier.close()
        self._maps.close()
        with self._small_lock:
            idle, self._small_idle, self._small_off = self._small_idle, [], True
            self._small_open_now -= len(idle)
        for sc in idle:
            sc.close()
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Any, req: Any, what: str, node: str = "") -> Any:
        try:
            return method(req, timeout=self.timeout)
        except grpc.RpcError as e:
            raise self._conn.error(e, what, node) from e

    # -- nodes ------------------------------------------------------------------

    def get_node(self, path: str, node: str = "") -> gpb.Node:
        return self._call(self._stub.GetNode, gpb.GetNodeRequest(path=path), f"open {path!r}", node).node

    def open_array(self, path: str) -> Array:
        """The array at path: zarr's ArrayNotFoundError if there is none,
        NodeTypeValidationError if a group is there."""
        n = self.get_node(path, "array")
        if n.kind != gpb.NODE_KIND_ARRAY:
            raise errors.ZarrgateNodeTypeError(f"open {path!r}: a group, not an array",
                                        grpc.StatusCode.FAILED_PRECONDITION, "")
        return Array(self, n)

    def open_group(self, path: str = "") -> Group:
        """The group at path ("" is the root)."""
        n = self.get_node(path, "group")
        if n.kind != gpb.NODE_KIND_GROUP:
            raise errors.ZarrgateNodeTypeError(f"open {path!r}: an array, not a group",
                                        grpc.StatusCode.FAILED_PRECONDITION, "")
        return Group(self, n)

    def open(self, path: str = "") -> Array | Group:
        """The array or group at path."""
        n = self.get_node(path)
        return Array(self, n) if n.kind == gpb.NODE_KIND_ARRAY else Group(self, n)

    def create_array(self, path: str, *args: Any, **kwargs: Any) -> Array:
        """Create an array (and the groups missing above it): see
        :func:`create_array_request` for the arguments. ContainsArrayError
        (an ALREADY_EXISTS) if a node is there."""
        req = create_array_request(path, *args, **kwargs)
        resp = self._call(self._stub.CreateArray, req, f"create array {path!r}", "array")
        return Array(self, resp.node)

    def create_group(self, path: str, attributes: dict[str, Any] | None = None,
                     *, zarr_format: int | str | None = None) -> Group:
        """Create a group (and the groups missing above it)."""
        req = gpb.CreateGroupRequest(path=path, format=FORMATS[zarr_format],
                                     attributes_json=json.dumps(attributes) if attributes else "")
        resp = self._call(self._stub.CreateGroup, req, f"create group {path!r}", "group")
        return Group(self, resp.node)

    def delete(self, path: str) -> None:
        """Delete the node at path and everything below it."""
        self._call(self._stub.DeleteNode, gpb.DeleteNodeRequest(path=path), f"delete {path!r}")

    def list(self, path: str = "", recursive: bool = False) -> list[Array | Group]:
        """The children of the group at path (all descendants if recursive)."""
        try:
            out: list[Array | Group] = []
            for resp in self._stub.ListChildren(
                gpb.ListChildrenRequest(path=path, recursive=recursive), timeout=self.timeout
            ):
                out += [Array(self, n) if n.kind == gpb.NODE_KIND_ARRAY else Group(self, n)
                        for n in resp.nodes]
            return out
        except grpc.RpcError as e:
            raise self._conn.error(e, f"list {path!r}", "group") from e

    # -- slabs ---------------------------------------------------------------

    def _read(self, a: Array, p: _slab.Plan, out: np.ndarray | None) -> np.ndarray:
        sink = _slab.Sink(a.path, p, a.dtype, a.data_type, out)
        if p.size == 0:
            return sink.out
        if self.shared_memory and not sink.variable and p.size >= _slab.SHARED_MIN_ELEMENTS:
            try:
                return self._read_shared(a, p, sink)
            except _Unimplemented:
                self.shared_memory = False  # a gateway without ReadSlabShared
                sink = _slab.Sink(a.path, p, a.dtype, a.data_type, out)
        if not sink.variable and p.size * sink.item < _slab.BULK_MIN_BYTES and self._bulk.on:
            if (got := self._read_small(a, p, sink)) is not None:
                return got
            sink = _slab.Sink(a.path, p, a.dtype, a.data_type, out)
        return self._read_socket(a, p, sink)

    # -- small reads over a kept connection ----------------------------------

    def _small_take(self) -> tuple[_slab.SmallConn | None, bool]:
        """An idle usable connection; or None, and whether the caller may
        open one (then counted open: it must call _small_opened)."""
        now = time.monotonic()
        with self._small_lock:
            while self._small_idle:
                sc = self._small_idle.pop()
                if sc.usable(now):
                    return sc, False
                sc.close()
                self._small_open_now -= 1
            if self._small_off or now < self._small_off_until or self._small_open_now >= _slab.SMALL_MAX:
                return None, False
            self._small_open_now += 1
            self._small_most = max(self._small_most, self._small_open_now)
            return None, True

    def _small_put(self, sc: _slab.SmallConn) -> None:
        with self._small_lock:
            if not self._small_off:
                self._small_idle.append(sc)
                return
            self._small_open_now -= 1
        sc.close()

    def _small_discard(self, sc: _slab.SmallConn | None) -> None:
        """Close sc (None: an open that failed) and uncount it."""
        if sc is not None:
            sc.close()
        with self._small_lock:
            self._small_open_now -= 1

    def _small_open(self) -> _slab.SmallConn | None:
        """A new small-reads connection, or None: the gateway has none (not
        asked again) or it could not be made (not asked for a while)."""
        try:
            terms = self._stub.OpenSmallReads(gpb.OpenSmallReadsRequest(), timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.FAILED_PRECONDITION):  # type: ignore[attr-defined]
                with self._small_lock:
                    self._small_off = True
            return None
        try:
            sock = self._bulk_open(terms.offer)
        except _slab.BulkUnavailable:
            with self._small_lock:
                self._small_off_until = time.monotonic() + _slab.BULK_RETRY_AFTER
            return None
        return _slab.SmallConn(sock, terms)

    def _read_small(self, a: Array, p: _slab.Plan, sink: _slab.Sink) -> np.ndarray | None:
        """The read over a small-reads connection, or None when it could
        not be made there (no connection, it failed before the answer, the
        gateway answered UNAVAILABLE): the caller makes it as a call."""
        sc, fresh = self._small_take()
        if fresh:
            if (sc := self._small_open()) is None:
                self._small_discard(None)
                return None
        if sc is None:
            return None  # as many open as the client keeps, all busy
        req = gpb.ReadSlabSmallRequest(path=a.path, selection=p.proto())
        if req.ByteSize() + 16 > sc.max_request:
            self._small_put(sc)
            return None
        try:
            resp = sc.read(req, self.timeout)
        except _slab.SmallStatus as e:
            self._small_put(sc)
            if e.code == grpc.StatusCode.UNAVAILABLE:
                return None
            raise errors.status_error(e.code, e.message, f"read {a.path!r}",
                                      self._conn.hint(e.code, e.message), "array") from None
        except (OSError, _wire.WireError, DecodeError):
            self._small_discard(sc)
            if fresh:
                with self._small_lock:
                    self._small_off_until = time.monotonic() + _slab.BULK_RETRY_AFTER
            return None
        self._small_put(sc)
        sink.header(resp.header)
        for b in resp.blocks:
            sink.place(_wire.Block(list(b.origin), list(b.shape), b.data), b.data)
        got = sink.done()
        self.stats.socket_reads += 1
        self.stats.small_reads += 1
        self.stats.socket_bytes += got.nbytes
        return got

    def _read_socket(self, a: Array, p: _slab.Plan, sink: _slab.Sink,
                     bulk: bool | None = None) -> np.ndarray:
        if bulk is None:
            bulk = self._bulk.ask(sink)
        call = self._read_slab(_slab.read_msg(a.path, p, bulk), timeout=self.timeout)
        r = _slab.Reader(a.path, sink, self.stats, None, self._copier)
        sock = None
        ended: _slab.BulkEnded | None = None
        try:
            for raw in call:
                r.message(raw)
                if r.offer is not None and sock is None:
                    # The blocks come over the bulk connection; the stream
                    # then ends with the read's status.
                    sock = self._bulk_open(r.offer)
                    call.add_done_callback(_shutdown_on_failure(sock))
                    try:
                        r.bulk(sock)
                    except _slab.BulkEnded as e:
                        ended = e  # the stream's status says why
            if ended is not None:
                raise _slab.data_loss(f"read {a.path!r}: {ended}, and the call ended OK")
            return r.done()
        except _slab.BulkUnavailable as e:
            # Nothing placed yet: the read again, through the stream.
            self._bulk_fallback(e, call, sock, r)
            sock = None
            return self._read_socket(a, p, sink, bulk=False)
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

    def _read_shared(self, a: Array, p: _slab.Plan, sink: _slab.Sink,
                     buf: SharedBuffer | None = None) -> np.ndarray:
        # The request stream stays open until the call ends: the gateway
        # takes a half-close before then as a client that can no longer
        # release its blocks.
        dest = None if buf is None else buf.destination()
        q: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        q.put(_slab.shared_read_msg(a.path, p, dest))

        def requests() -> Iterator[bytes]:
            while (m := q.get()) is not None:
                yield m

        call = self._read_slab_shared(requests(), timeout=self.timeout)
        r = _slab.Reader(a.path, sink, self.stats, self._maps, self._copier, q.put, dest is not None)
        try:
            for raw in call:
                if (reply := r.message(raw)) is not None:
                    q.put(reply)
                if buf is not None and not r.first:
                    buf._in_place, buf._refused = r.in_place, r.refused
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
            q.put(None)
            r.close()

    def _read_buf(self, a: Array, p: _slab.Plan, buf: SharedBuffer) -> np.ndarray:
        with buf._lock:
            out, dest = sharedbuf.begin(buf, "read", a, p, self.shared_memory)
            if dest is not None and p.size:
                try:
                    return self._read_shared(a, p, _slab.Sink(a.path, p, a.dtype, a.data_type, out), buf)
                except _Unimplemented:
                    self.shared_memory = False  # a gateway without ReadSlabShared
                    buf._refused = "the gateway has no shared memory (an older version)"
            return self._read(a, p, out)

    def _write_buf(self, a: Array, p: _slab.Plan, buf: SharedBuffer) -> gpb.WriteSlabResponse:
        with buf._lock:
            src, dest = sharedbuf.begin(buf, "write", a, p, self.shared_memory)
            if dest is not None and p.size:
                try:
                    resp = self._stub.WriteSlabShared(sharedbuf.write_request(a, p, dest), timeout=self.timeout)
                except grpc.RpcError as e:
                    if not sharedbuf.write_refused_by_old_gateway(buf, e):
                        raise self._conn.error(e, f"write {a.path!r}", "array") from e
                else:
                    if (done := sharedbuf.write_answer(buf, resp)) is not None:
                        return done
            return self._write(a, p, src.reshape(p.out_shape))

    def _write(self, a: Array, p: _slab.Plan, value: Any) -> gpb.WriteSlabResponse:
        _slab.check_value_dtype(a.path, value, a.dtype)
        if p.size == 0:
            _slab.source(p, value, a.dtype)  # the broadcast check numpy would make
            return gpb.WriteSlabResponse()
        msgs = _slab.write_messages(a.path, p, value, a.dtype)
        failed: list[BaseException] = []

        def requests() -> Iterator[bytes]:
            # gRPC turns an exception here into UNKNOWN: keep it to raise.
            try:
                yield from msgs
            except BaseException as e:
                failed.append(e)
                raise

        try:
            return self._write_slab(requests(), timeout=self.timeout)
        except grpc.RpcError as e:
            if failed:
                raise failed[0] from None
            raise self._conn.error(e, f"write {a.path!r}", "array") from e


class _Unimplemented(Exception):
    pass


def _shutdown_on_failure(sock: Any) -> Any:
    """A done callback of a read's call that wakes the thread reading its
    bulk connection when the call fails (deadline, cancel, a gateway gone
    without closing the connection)."""
    def cb(call: Any) -> None:
        if call.code() != grpc.StatusCode.OK:
            _slab.bulk_shutdown(sock)
    return cb


def create_array_request(
    path: str,
    shape: Iterable[int],
    dtype: Any,
    chunks: Iterable[int] | None = None,
    *,
    shards: Iterable[int] | None = None,
    fill_value: Any = None,
    codecs: list[dict[str, Any]] | str | None = None,
    compressor: str | dict[str, Any] | None = "default",
    attributes: dict[str, Any] | None = None,
    dimension_names: Iterable[str | None] | None = None,
    zarr_format: int | str | None = None,
) -> gpb.CreateArrayRequest:
    """The CreateArray request of ``create_array``.

    ``shape``, ``dtype`` (a numpy dtype, ``str`` / ``"string"`` for UTF-8
    strings, ``bytes`` / ``"bytes"``), ``chunks`` (default: the shape, one
    chunk), ``shards`` (v3 sharding: the shard shape; the chunks are its
    inner chunks), ``fill_value`` (default: the type's zero), ``codecs``
    (the v3 ``codecs`` chain, of the inner chunks when sharded, as a list
    or JSON) or ``compressor`` (``"default"``: the gateway's bytes + zstd;
    ``None``: uncompressed; a name such as ``"zstd"`` / ``"gzip"`` or a v3
    codec dict: bytes + that), ``attributes``, ``dimension_names``,
    ``zarr_format`` (3, 2 or ``"nczarr"``; default 3).
    """
    shape = tuple(int(n) for n in shape)
    dt = _slab.zarr_data_type(dtype)
    if codecs is None and compressor != "default":
        chain: list[dict[str, Any]] = []
        if dt not in ("string", "bytes"):
            chain.append({"name": "bytes", "configuration": {"endian": "little"}})
        else:
            chain.append({"name": "vlen-utf8" if dt == "string" else "vlen-bytes"})
        if isinstance(compressor, str):
            chain.append({"name": compressor, "configuration": {}})
        elif isinstance(compressor, dict):
            chain.append(compressor)
        codecs = chain
    return gpb.CreateArrayRequest(
        path=path,
        format=FORMATS[zarr_format],
        shape=shape,
        data_type=dt,
        chunk_shape=tuple(int(n) for n in (chunks if chunks is not None else shape)),
        shard_shape=tuple(int(n) for n in shards) if shards is not None else (),
        codecs_json=codecs if isinstance(codecs, str) else (json.dumps(codecs) if codecs else ""),
        fill_value_json=_slab.fill_json(fill_value, dt),
        dimension_names=[n or "" for n in dimension_names] if dimension_names else (),
        attributes_json=json.dumps(attributes) if attributes else "",
    )


class _NodeBase:
    """Metadata of a node, as GetNode describes it."""

    def __init__(self, client: Any, node: gpb.Node) -> None:
        self._client = client
        self._node = node
        self.path: str = node.path
        self.attrs: dict[str, Any] = json.loads(node.attributes_json or "{}")
        self.zarr_format = _FORMAT_NAMES.get(node.format, 3)

    @property
    def client(self) -> Any:
        return self._client

    @property
    def name(self) -> str:
        return "/" + self.path


class Group(_NodeBase):
    """A group: ``path``, ``attrs``, ``zarr_format``; ``members()`` lists
    its children, ``group[name]`` opens one."""

    def members(self, recursive: bool = False) -> list[Array | Group]:
        return self._client.list(self.path, recursive)

    def _child(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name

    def __getitem__(self, name: str) -> Array | Group:
        return self._client.open(self._child(name))

    def __repr__(self) -> str:
        return f"<zarrgate.Group {self.name!r}>"


class _ArrayBase(_NodeBase):
    """An array's metadata and indexing, shared by the sync and asyncio
    arrays."""

    def __init__(self, client: Any, node: gpb.Node) -> None:
        super().__init__(client, node)
        info = node.array
        self.shape: tuple[int, ...] = tuple(info.shape)
        self.data_type: str = info.data_type
        self.dtype: np.dtype = _slab.numpy_dtype(info.data_type)
        self.chunks: tuple[int, ...] = tuple(info.chunk_shape)
        self.shards: tuple[int, ...] | None = tuple(info.shard_shape) or None
        names = list(info.dimension_names)
        self.dims: tuple[str, ...] | None = tuple(names) if any(names) else None
        self.fill_value: Any = json.loads(info.fill_value_json) if info.fill_value_json else None
        self.codecs: list[Any] = json.loads(info.codecs_json) if info.codecs_json else []

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<zarrgate.Array {self.name!r} shape={self.shape} dtype={self.dtype}>"

    def _plan(self, key: Any) -> _slab.Plan:
        return _slab.plan(key, self.shape)

    def _grid(self) -> tuple[int, ...]:
        return self.shards or self.chunks


class Array(_ArrayBase):
    """An array on the gateway: ``shape``, ``dtype`` (numpy), ``chunks``,
    ``shards``, ``attrs``, ``dims``, ``fill_value``; numpy basic indexing
    to read (``a[...]``) and write (``a[...] = value``)."""

    def __getitem__(self, key: Any) -> Any:
        p = self._plan(key)
        return _slab.finish(p, self._client._read(self, p, None))

    def read(self, key: Any = ..., *, out: np.ndarray | None = None) -> Any:
        """``a[key]``; with ``out``, into that C-contiguous array of the
        slab's shape (integer-indexed dimensions kept, as length 1) and the
        little-endian dtype, instead of a new one."""
        p = self._plan(key)
        return _slab.finish(p, self._client._read(self, p, out))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = np.asarray(self[...])
        return a if dtype is None else a.astype(dtype)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._client._write(self, self._plan(key), value)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickles as its client's settings (token included) and its
        # metadata; unpickled, it uses its process's one client with those
        # settings (zarrgate._pool), opened on first use.
        return _pool.array_reduce(self)

    def write(self, key: Any, value: Any) -> dict[str, int]:
        """``a[key] = value``, returning what was stored: chunks (or shards)
        and encoded bytes written."""
        r = self._client._write(self, self._plan(key), value)
        return {"chunks_written": r.chunks_written, "bytes_written": r.bytes_written}

    def read_shared(self, key: Any, buf: SharedBuffer) -> Any:
        """``a[key]`` read into buf (a :class:`zarrgate.SharedBuffer` of at
        least the slab's bytes), returned as a view of its first bytes,
        valid until buf is read into again. Through shared memory (the
        default to a gateway on this host) the gateway writes the slab into
        buf itself; otherwise, or if it refuses (``buf.in_place`` says
        why), the data comes as for ``read`` and is copied in."""
        p = self._plan(key)
        return _slab.finish(p, self._client._read_buf(self, p, buf))

    def write_shared(self, key: Any, buf: SharedBuffer) -> dict[str, int]:
        """``a[key] = v`` for v the slab's elements in buf's first bytes
        (C order, the array's dtype little-endian: ``buf.array(dtype,
        shape)`` is that view). Through shared memory the gateway reads
        them from buf itself and only the request travels; otherwise, or
        if it refuses (``buf.in_place`` says why), they are sent as
        ``write`` sends them. buf must not change during the call."""
        r = self._client._write_buf(self, self._plan(key), buf)
        return {"chunks_written": r.chunks_written, "bytes_written": r.bytes_written}

    def blocks(self, key: Any = ..., *, max_bytes: int = BLOCKS_BYTES) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """Read ``a[key]`` in chunk-aligned pieces (shard-aligned if
        sharded) of at most about max_bytes (one chunk at least), one read
        each, for slabs larger than memory: yields ``(piece_key, data)``,
        ``data`` being ``a[piece_key]``; the pieces tile the selection in C
        order."""
        p = self._plan(key)
        if p.size == 0:
            return
        for k in _slab.pieces(p, self._grid(), max(self.dtype.itemsize, 16 if self.dtype.kind in "OT" else 1), max_bytes):
            yield k, self[k]

    def update_attributes(self, attrs: dict[str, Any], merge: bool = True) -> None:
        c = self._client
        resp = c._call(c._stub.UpdateAttributes, gpb.UpdateAttributesRequest(
            path=self.path, attributes_json=json.dumps(attrs), merge=merge), f"update {self.path!r}")
        self.attrs = json.loads(resp.node.attributes_json or "{}")

