"""A zarr-python 3 store over zarrgate's StoreService (gRPC, grpc.aio).

``ZarrgateStore("127.0.0.1:50051")`` can be given to ``zarr.open_array``,
``zarr.create_array``, ``zarr.open_group`` ... as ``store=``. Every key is
passed to the server unchanged, so the arrays land in the server's backend
exactly as a local zarr store would write them.

Event loops: a ``grpc.aio`` channel belongs to the event loop it was made on,
and zarr-python runs store coroutines on its own loop thread while tests or
applications may use others. The store therefore keeps one channel per event
loop (made on first use) plus one blocking channel for the ``*_sync``
methods. It pickles as its settings (address, ``read_only``, timeout,
channel options, TLS material, token and batching), so it can be sent to
dask or multiprocessing workers, which connect on first use with the same
options.

Batching: zarr-python reads an array's chunks with up to
``async.concurrency`` gets at once. Those gets go out together, as one
GetPartialValues call per batch (``max_batch`` keys at most, ``max_inflight``
calls at once per loop; the gets made while they are all busy wait and form
the next batch), each answered as soon as its last part arrives. A batch
costs the client one call instead of one per chunk, and the server one
stream; the parts are read by hand (zarrgate._wire) as views of gRPC's
bytes, without the copies the generated classes would make.

Same host: when the server offers a shared-memory segment and this process
can map it (the server's host and user), batches go instead over
long-lived GetPartialValuesShared calls (up to ``max_inflight``, each one
batch at a time): the server reads each value straight into the segment
and sends only where it is; the value is copied out into a ``bytes`` of its
own (zarr's Buffer must own its data) and its space released. Otherwise, or
with ``shared_memory=False``, the socket path above.

Security: ``tls=True`` (or a ``grpcs://`` address) connects with TLS and the
system's roots, ``tls_ca`` with a CA bundle of one's own, ``tls_cert`` and
``tls_key`` present a client certificate (mTLS), and ``token`` (or
``$ZARRGATE_TOKEN``) is sent as ``authorization: Bearer TOKEN`` with every
call, as the Go CLI's ``--tls``, ``--tls-ca``, ``--tls-cert``, ``--tls-key``
and ``--token`` do. A token goes only over TLS, or in plaintext to a loopback
address or unix socket (gRPC's local channel credentials), as in the Go
client: anything else is refused before dialling.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import grpc
import grpc.aio
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from zarrgate._gen.zarrgate.store.v1 import store_pb2 as pb
from zarrgate._gen.zarrgate.store.v1 import store_pb2_grpc as pb_grpc
from zarrgate import _slab, _wire
from zarrgate._conn import TOKEN_ENV, Conn
from zarrgate.errors import (
    ZarrgateDeadlineExceeded,
    ZarrgateError,
    ZarrgateFailedPrecondition,
    ZarrgateInvalidArgument,
    ZarrgateNotFound,
    ZarrgateOutOfRange,
    ZarrgatePermissionDenied,
    ZarrgateUnauthenticated,
    ZarrgateUnavailable,
)

__all__ = [
    "ZarrgateError",
    "ZarrgatePermissionDenied",
    "ZarrgateStore",
    "ZarrgateUnauthenticated",
]

#: Size of the data frames a Set sends (the server's Get frames are <= 1 MiB too).
FRAME_SIZE = 1 << 20

#: Channel options: allow messages somewhat larger than a frame either way.
DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", 16 << 20),
    ("grpc.max_send_message_length", 16 << 20),
)


#: Most gets one batched call (GetPartialValues) carries.
DEFAULT_MAX_BATCH = 64

#: Most batched calls in flight at once per event loop; further gets wait
#: and go out together in the next call (group commit: the more gets are
#: waiting, the larger the batch).
DEFAULT_MAX_INFLIGHT = 2

GET_PARTIAL_VALUES = "/zarrgate.store.v1.StoreService/GetPartialValues"
GET_PARTIAL_VALUES_SHARED = "/zarrgate.store.v1.StoreService/GetPartialValuesShared"

#: Whether stores use the server's shared memory when ``shared_memory`` is
#: not given (the tests run the batched path both ways through it).
SHARED_MEMORY = True

#: A GetPartialValuesShared call idle this long (seconds) is ended, giving
#: its segment back to the server for other clients (the server ends idle
#: calls itself after 2 s).
SHARED_IDLE = 0.5

#: Batches sent through the socket after a server had no segment to offer,
#: before the next shared call is tried.
SHARED_RETRY_AFTER = 32

#: Codes of a failed batched call that each get in it would meet too (the
#: connection, the caller, the deadline): every get fails with it. On any
#: other code (a range past the end, a key the caller may not read, ...)
#: each get is asked again on its own, so that it gets its own answer.
_BATCH_FATAL = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
})


def _range_to_proto(byte_range: ByteRequest | None) -> pb.ByteRange | None:
    """Map a zarr ByteRequest to the wire range (None: the whole value)."""
    if byte_range is None:
        return None
    if isinstance(byte_range, RangeByteRequest):
        if byte_range.start < 0 or byte_range.end < byte_range.start:
            raise ValueError(f"Invalid byte_range {byte_range}: want 0 <= start <= end.")
        return pb.ByteRange(
            bounded=pb.ByteRange.Bounded(
                offset=byte_range.start, length=byte_range.end - byte_range.start
            )
        )
    if isinstance(byte_range, OffsetByteRequest):
        if byte_range.offset < 0:
            raise ValueError(f"Invalid byte_range {byte_range}: negative offset.")
        return pb.ByteRange(from_offset=byte_range.offset)
    if isinstance(byte_range, SuffixByteRequest):
        if byte_range.suffix < 0:
            raise ValueError(f"Invalid byte_range {byte_range}: negative suffix.")
        return pb.ByteRange(suffix_length=byte_range.suffix)
    raise TypeError(f"Unexpected byte_range, got {byte_range}.")


def _slice(data: bytes, byte_range: ByteRequest | None) -> bytes:
    """Cut a range out of a whole value the way zarr's LocalStore reads a file:
    a range past the end is cut short, not an error."""
    if byte_range is None:
        return data
    if isinstance(byte_range, RangeByteRequest):
        return data[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return data[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return data[max(0, len(data) - byte_range.suffix) :]
    raise TypeError(f"Unexpected byte_range, got {byte_range}.")


def _dir_prefix(prefix: str) -> str:
    """"" stays ""; anything else gets one trailing "/"."""
    return prefix if prefix == "" or prefix.endswith("/") else prefix + "/"


def _set_requests(key: str, data: bytes, condition: pb.Condition | None) -> Iterator[pb.SetRequest]:
    yield pb.SetRequest(header=pb.SetHeader(key=key, condition=condition))
    view = memoryview(data)
    for off in range(0, len(view), FRAME_SIZE):
        yield pb.SetRequest(data=bytes(view[off : off + FRAME_SIZE]))


def _as_bytes(value: Buffer, method: str) -> bytes:
    if not isinstance(value, Buffer):
        raise TypeError(
            f"ZarrgateStore.{method}(): `value` must be a Buffer instance. "
            f"Got an instance of {type(value)} instead."
        )
    return value.to_bytes()


#: What _assemble returns for a value whose last part is still to come.
_MORE = object()


def _assemble(pieces: dict[int, list[Any]], part: Any) -> Any:
    """One part of an inline value: the whole value once its last part is
    in (the parts before it kept in ``pieces``, by request index), _MORE
    until then."""
    if not part.last:
        pieces.setdefault(part.index, []).append(part.data)
        return _MORE
    if part.index in pieces:
        return b"".join([*pieces.pop(part.index), part.data])
    return part.data


class _SharedCall:
    """A GetPartialValuesShared call, answering one batch at a time, and
    its mapping of the server's segment (None: values come inline)."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.m: _slab.Mapping | None = None
        #: Shared values copied out and not released yet, and their bytes;
        #: released once they reach an eighth of the segment, with the
        #: next read, or when the loop has nothing more to ask.
        self.held = 0
        self.held_bytes = 0
        self.release_at = 0


class _LoopChannel:
    """A grpc.aio channel of one event loop, its stubs, and the batcher of
    the gets made on that loop.

    ``get`` queues its request and waits; a batch goes out as one
    GetPartialValues call as soon as fewer than ``max_inflight`` calls are
    in flight (first on the loop's next turn, so that the gets zarr-python
    starts together go out together). Each get is answered as soon as its
    last part arrives, while the rest of its batch is still streaming; the
    data are views of the response's bytes, not copies.
    """

    def __init__(self, store: ZarrgateStore, channel: grpc.aio.Channel) -> None:
        self.store = store
        self.channel = channel
        self.stub = pb_grpc.StoreServiceStub(channel)
        self.gpv = channel.unary_stream(
            GET_PARTIAL_VALUES,
            request_serializer=pb.GetPartialValuesRequest.SerializeToString,
            response_deserializer=None,
        )
        self.gpvs = channel.stream_stream(
            GET_PARTIAL_VALUES_SHARED, request_serializer=None, response_deserializer=None
        )
        #: Shared calls waiting for their next batch, with when they went idle.
        self.shared_idle: list[tuple[_SharedCall, float]] = []
        #: Shared memory given up for good (the server lacks it, or its
        #: segments cannot be mapped here: another host); shared_skip:
        #: batches left to send by the socket before trying it again.
        self.shared_off = not store.shared_memory
        self.shared_skip = 0
        self.maps = _slab.Mappings()
        #: Batches answered through shared memory, values copied out of it.
        self.shared_batches = 0
        self.shared_values = 0
        self.reaper: asyncio.Task[None] | None = None
        self.pending: list[tuple[str, ByteRequest | None, pb.KeyRange, asyncio.Future[Any]]] = []
        self.inflight = 0
        self.scheduled = False
        self.tasks: set[asyncio.Task[None]] = set()
        #: Batched calls made, and gets they carried (for tests and tuning).
        self.batches = 0
        self.batched_gets = 0
        #: Most calls seen in flight at once, most gets in one call.
        self.peak_inflight = 0
        self.largest_batch = 0

    async def get(self, key: str, byte_range: ByteRequest | None) -> bytes | memoryview | None:
        kr = pb.KeyRange(key=key, range=_range_to_proto(byte_range))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((key, byte_range, kr, fut))
        self._kick()
        return await fut

    def _kick(self) -> None:
        if self.pending and not self.scheduled and self.inflight < self.store.max_inflight:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self._send)

    def _send(self) -> None:
        self.scheduled = False
        loop = asyncio.get_running_loop()
        while self.pending and self.inflight < self.store.max_inflight:
            n = self.store.max_batch
            batch = [p for p in self.pending[:n] if not p[3].done()]
            del self.pending[:n]
            if not batch:
                continue
            self.inflight += 1
            self.peak_inflight = max(self.peak_inflight, self.inflight)
            task = loop.create_task(self._run(batch))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _run(
        self, batch: list[tuple[str, ByteRequest | None, pb.KeyRange, asyncio.Future[Any]]]
    ) -> None:
        self.batches += 1
        self.batched_gets += len(batch)
        self.largest_batch = max(self.largest_batch, len(batch))
        try:
            if self.shared_skip > 0:
                self.shared_skip -= 1
            elif not self.shared_off and await self._call_shared(batch):
                return
            await self._call([p for p in batch if not p[3].done()])
        except Exception as e:  # noqa: BLE001 - handed to the waiting gets
            for *_, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
        finally:
            # Cancelled (the loop is closing) or interrupted: no get waits forever.
            for *_, fut in batch:
                if not fut.done():
                    fut.cancel()
            self.inflight -= 1
            self._kick()

    async def _call(
        self, batch: list[tuple[str, ByteRequest | None, pb.KeyRange, asyncio.Future[Any]]]
    ) -> None:
        req = pb.GetPartialValuesRequest(ranges=[kr for _, _, kr, _ in batch])
        pieces: dict[int, list[memoryview]] = {}
        try:
            async for raw in self.gpv(req, timeout=self.store.timeout):
                for part in _wire.parse_partial_values(raw):
                    i = part.index
                    if i >= len(batch):
                        raise _wire.WireError(f"part of request {i}, of {len(batch)}")
                    fut = batch[i][3]
                    if part.missing:
                        value: Any = None
                    else:
                        value = _assemble(pieces, part)
                        if value is _MORE:
                            continue
                    if not fut.done():
                        fut.set_result(value)
        except grpc.RpcError as e:
            code = e.code()  # type: ignore[attr-defined]
            if code in _BATCH_FATAL:
                raise self.store._rpc_error(e, f"get {len(batch)} keys") from e
            # Each get on its own: the single-key path maps NOT_FOUND and
            # OUT_OF_RANGE the way zarr's stores do, and raises the rest.
            await asyncio.gather(
                *(self._single(key, r, fut) for key, r, _, fut in batch if not fut.done())
            )
            return
        except _wire.WireError as e:
            raise ZarrgateError(
                f"get {len(batch)} keys: malformed response: {e}", grpc.StatusCode.DATA_LOSS, ""
            ) from e
        for key, _, _, fut in batch:
            if not fut.done():
                fut.set_exception(
                    ZarrgateError(
                        f"get {key!r}: the server's answer ended without it",
                        grpc.StatusCode.DATA_LOSS,
                        "",
                    )
                )

    # -- same host: GetPartialValuesShared ----------------------------------

    async def _call_shared(
        self, batch: list[tuple[str, ByteRequest | None, pb.KeyRange, asyncio.Future[Any]]]
    ) -> bool:
        """Answer the batch through a GetPartialValuesShared call, values
        copied out of the server's segment; False if the socket path is to
        answer it (or what is left of it) instead."""
        now = asyncio.get_running_loop().time()
        sc: _SharedCall | None = None
        while self.shared_idle:
            c, since = self.shared_idle.pop()
            if now - since < SHARED_IDLE:
                sc = c
                break
            self._drop_shared(c)
        for _ in range(2):  # a reused call the server ended while idle: once more
            batch = [p for p in batch if not p[3].done()]
            if not batch:
                return True
            req = pb.GetPartialValuesRequest(ranges=[kr for _, _, kr, _ in batch])
            fresh = sc is None
            try:
                if sc is None:
                    sc = await self._open_shared(req)
                    if sc is None:
                        return False
                else:
                    msg = pb.GetPartialValuesSharedRequest(read=req, release=sc.held)
                    sc.held = sc.held_bytes = 0
                    await sc.call.write(msg.SerializeToString())
                if self.store.timeout is None:
                    answered = await self._answer_shared(sc, batch)
                else:
                    answered = await asyncio.wait_for(
                        self._answer_shared(sc, batch), self.store.timeout
                    )
            except asyncio.TimeoutError:
                self._drop_shared(sc)
                raise ZarrgateDeadlineExceeded(
                    f"get {len(batch)} keys: no answer in {self.store.timeout} s",
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    "",
                ) from None
            except grpc.RpcError as e:
                self._drop_shared(sc)
                code = e.code()  # type: ignore[attr-defined]
                if code == grpc.StatusCode.UNIMPLEMENTED:
                    self.shared_off = True  # a server without it
                    return False
                if code in _BATCH_FATAL:
                    raise self.store._rpc_error(e, f"get {len(batch)} keys") from e
                await asyncio.gather(
                    *(self._single(key, r, fut) for key, r, _, fut in batch if not fut.done())
                )
                return True
            except (_wire.WireError, asyncio.InvalidStateError, ZarrgateError) as e:
                self._drop_shared(sc)
                if isinstance(e, asyncio.InvalidStateError) and not fresh:
                    sc = None  # written to a call that had ended: a new one
                    continue
                raise ZarrgateError(
                    f"get {len(batch)} keys: malformed response: {e}",
                    grpc.StatusCode.DATA_LOSS,
                    "",
                ) from e
            if answered:
                self.shared_batches += 1
                if sc.m is None:
                    self._drop_shared(sc)  # answered inline: no segment to keep a call for
                    return True
                # What it holds is released with its next read (or when it
                # is ended, idle).
                self.shared_idle.append((sc, asyncio.get_running_loop().time()))
                if self.reaper is None or self.reaper.done():
                    self.reaper = asyncio.get_running_loop().create_task(self._reap_shared())
                    # It sleeps while calls are idle: one left asleep when
                    # the program ends is no error to report.
                    self.reaper._log_destroy_pending = False  # type: ignore[attr-defined]
                return True
            # The server ended the call (idle) before answering.
            self._drop_shared(sc)
            if fresh:
                return False
            sc = None
        return False

    async def _open_shared(self, req: pb.GetPartialValuesRequest) -> _SharedCall | None:
        """A new shared call, its first read sent and the offer answered;
        None if the server offers no segment or it cannot be mapped here
        (the batch goes by the socket)."""
        call = self.gpvs()
        sc = _SharedCall(call)
        try:
            await call.write(pb.GetPartialValuesSharedRequest(read=req).SerializeToString())
            raw = await call.read()
            if raw is grpc.aio.EOF:
                self._drop_shared(sc)
                return None
            offer = pb.GetPartialValuesSharedResponse.FromString(raw)
            if not offer.HasField("segment"):
                # No segment to spare now: the read is answered inline on
                # this call; the next batches go by the socket.
                self.shared_skip = SHARED_RETRY_AFTER
                return sc
            sc.m = self.maps.attach(offer.segment)
            if sc.m is None:
                self.shared_off = True  # another host, user or namespace
            await call.write(
                pb.GetPartialValuesSharedRequest(attach=sc.m is not None).SerializeToString()
            )
        except BaseException:
            self._drop_shared(sc)
            raise
        if sc.m is not None:
            sc.release_at = (sc.m.size - _slab.SHM_DATA_OFFSET) // 8
        return sc

    async def _answer_shared(
        self,
        sc: _SharedCall,
        batch: list[tuple[str, ByteRequest | None, pb.KeyRange, asyncio.Future[Any]]],
    ) -> bool:
        """Receive the answer to a read of batch; False if the call ended
        before it."""
        pieces: dict[int, list[memoryview]] = {}
        left = len(batch)
        while left > 0:
            raw = await sc.call.read()
            if raw is grpc.aio.EOF:
                return False
            for part in _wire.parse_partial_values(raw):
                i = part.index
                if i >= len(batch):
                    raise _wire.WireError(f"part of request {i}, of {len(batch)}")
                fut = batch[i][3]
                if part.shared is not None:
                    if sc.m is None or not part.last:
                        raise _wire.WireError("a shared value without a segment, or split")
                    off, n = part.shared
                    # zarr's Buffer must own its bytes: copied out, and
                    # the segment's space released later.
                    value: Any = bytes(sc.m.data(off, n))
                    sc.held += 1
                    sc.held_bytes += n
                    self.shared_values += 1
                elif part.missing:
                    value = None
                else:
                    value = _assemble(pieces, part)
                    if value is _MORE:
                        continue
                left -= 1
                if not fut.done():
                    fut.set_result(value)
            if sc.held and sc.held_bytes >= sc.release_at:
                msg = pb.GetPartialValuesSharedRequest(release=sc.held)
                sc.held = sc.held_bytes = 0
                await sc.call.write(msg.SerializeToString())
        return True

    async def _reap_shared(self) -> None:
        """End the shared calls once idle for SHARED_IDLE, until none is
        idle."""
        loop = asyncio.get_running_loop()
        while self.shared_idle:
            oldest = min(since for _, since in self.shared_idle)
            await asyncio.sleep(max(0.0, oldest + SHARED_IDLE - loop.time()))
            now = loop.time()
            ended = [sc for sc, since in self.shared_idle if now - since >= SHARED_IDLE]
            self.shared_idle = [(sc, t) for sc, t in self.shared_idle if now - t < SHARED_IDLE]
            for sc in ended:
                try:
                    # Bounded: a server that does not end it is cut off.
                    await asyncio.wait_for(self._end_shared(sc), 5)
                except asyncio.TimeoutError:
                    pass

    async def _end_shared(self, sc: _SharedCall) -> None:
        """End an idle shared call cleanly: release what it holds and close
        its side, so that the server can lend the segment again."""
        try:
            if sc.held:
                await sc.call.write(
                    pb.GetPartialValuesSharedRequest(release=sc.held).SerializeToString()
                )
            await sc.call.done_writing()
            while await sc.call.read() is not grpc.aio.EOF:
                pass
        except (grpc.RpcError, asyncio.InvalidStateError):
            pass
        finally:
            self._drop_shared(sc)

    def _drop_shared(self, sc: _SharedCall | None) -> None:
        if sc is None:
            return
        sc.call.cancel()
        self.maps.detach(sc.m, keep=True)
        sc.m = None

    async def _single(
        self, key: str, byte_range: ByteRequest | None, fut: asyncio.Future[Any]
    ) -> None:
        try:
            value = await self.store._get_bytes_raw(key, byte_range)
        except Exception as e:  # noqa: BLE001 - handed to the waiting get
            if not fut.done():
                fut.set_exception(e)
        else:
            if not fut.done():
                fut.set_result(value)


class ZarrgateStore(Store):
    """zarr-python 3 store backed by a zarrgate server's StoreService.

    Parameters
    ----------
    addr
        ``host:port`` of the server (a gRPC target; ``dns:///...`` and
        ``unix:///path`` work too). ``grpcs://host:port`` asks for TLS, as
        ``tls=True`` does; ``grpc://host:port`` is the same as ``host:port``.
    read_only
        Refuse writes on the client side, as zarr-python expects.
    timeout
        Optional deadline in seconds for each call.
    channel_options
        Extra gRPC channel options, e.g. ``(("grpc.max_receive_message_length", n),)``
        or ``(("grpc.ssl_target_name_override", "name"),)`` to verify the
        server's certificate for another name than the host dialled.
    tls
        Connect with TLS. ``None`` (default): with TLS if ``tls_ca``,
        ``tls_cert`` or a ``grpcs://`` address asks for it, else plaintext.
        ``True`` without ``tls_ca`` verifies the server against the system's
        roots; ``False`` with any of those is an error.
    tls_ca
        PEM CA bundle (a file name, or the PEM as bytes) to verify the
        server's certificate against; implies ``tls``.
    tls_cert, tls_key
        PEM client certificate (chain) and its private key, both or neither,
        for servers run with ``--client-ca`` (mTLS); imply ``tls``.
    token
        Bearer token (from ``zarrgate token new``, or a JWT) sent as
        ``authorization: Bearer TOKEN`` with every call. ``None`` (default):
        ``$ZARRGATE_TOKEN`` if set and not empty; ``""``: no token. Sent only
        over TLS, or in plaintext to a loopback address or unix socket;
        anything else is refused here (ValueError), before dialling. The
        token never appears in ``repr``/``str`` or in error messages, but it
        is in the store's pickle (that is how dask workers get it).
    max_batch
        Most gets one call carries: concurrent gets (zarr-python
        makes ``async.concurrency`` of them at once) go out together as one
        GetPartialValues call, each answered as soon as its bytes arrive.
        ``1``: one Get call per ``get``, unbatched.
    max_inflight
        Most batched calls in flight at once (per event loop); the gets
        made meanwhile wait and go out together in the next one.
    shared_memory
        On the server's host, take the batches' values through the
        server's shared memory (GetPartialValuesShared) instead of the
        socket, when the server offers a segment and it can be mapped
        here; otherwise, and with ``False``, through the socket (default:
        the module's ``SHARED_MEMORY``, True).
    """

    supports_writes: bool = True
    supports_deletes: bool = True
    supports_listing: bool = True

    def __init__(
        self,
        addr: str,
        *,
        read_only: bool = False,
        timeout: float | None = None,
        channel_options: Iterable[tuple[str, Any]] = (),
        tls: bool | None = None,
        tls_ca: str | os.PathLike[str] | bytes | None = None,
        tls_cert: str | os.PathLike[str] | bytes | None = None,
        tls_key: str | os.PathLike[str] | bytes | None = None,
        token: str | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        shared_memory: bool | None = None,
    ) -> None:
        super().__init__(read_only=read_only)
        if max_batch < 1 or max_inflight < 1:
            raise ValueError(
                f"max_batch and max_inflight must be >= 1, got {max_batch}, {max_inflight}"
            )
        self.max_batch = max_batch
        self.max_inflight = max_inflight
        self.shared_memory = SHARED_MEMORY if shared_memory is None else shared_memory
        self._conn = Conn.make(
            addr, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token
        )
        self.timeout = timeout
        self.channel_options = tuple(channel_options)
        self._init_channels()

    def _init_channels(self) -> None:
        self._lock = threading.Lock()
        # One grpc.aio channel per event loop; dropped with the loop.
        self._aio: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopChannel] = (
            weakref.WeakKeyDictionary()
        )
        self._sync: tuple[grpc.Channel, pb_grpc.StoreServiceStub] | None = None
        self.capabilities: pb.Capabilities | None = None

    # -- pickling, equality, repr ------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        # The TLS material and the token travel as they are: a worker
        # re-opens the store with exactly these options.
        c = self._conn
        return {
            "addr": c.addr,
            "read_only": self._read_only,
            "timeout": self.timeout,
            "channel_options": self.channel_options,
            "tls": c.tls,
            "tls_ca": c.tls_ca,
            "tls_cert": c.tls_cert,
            "tls_key": c.tls_key,
            "token": c.token,
            "max_batch": self.max_batch,
            "max_inflight": self.max_inflight,
            "shared_memory": self.shared_memory,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._conn = Conn(
            addr=state["addr"],
            tls=state.get("tls", False),
            tls_ca=state.get("tls_ca"),
            tls_cert=state.get("tls_cert"),
            tls_key=state.get("tls_key"),
            token=state.get("token"),
        )
        self._read_only = state["read_only"]
        self.timeout = state["timeout"]
        self.channel_options = state["channel_options"]
        self.max_batch = state.get("max_batch", DEFAULT_MAX_BATCH)
        self.max_inflight = state.get("max_inflight", DEFAULT_MAX_INFLIGHT)
        self.shared_memory = state.get("shared_memory", SHARED_MEMORY)
        self._is_open = False
        self._init_channels()

    @property
    def addr(self) -> str:
        """The server's gRPC target (``grpc://`` / ``grpcs://`` removed)."""
        return self._conn.addr

    @property
    def tls(self) -> bool:
        """Whether the store connects with TLS."""
        return self._conn.tls

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and self._conn == other._conn

    def __hash__(self) -> int:
        return hash((type(self), self.addr))

    def __str__(self) -> str:
        return f"zarrgate://{self.addr}"

    def __repr__(self) -> str:
        # Never the token, nor the key: only whether there is one.
        return f"ZarrgateStore('{self}'{self._conn.describe()})"

    def with_read_only(self, read_only: bool = False) -> ZarrgateStore:
        # docstring inherited. Through the pickled state, so that the clone
        # has the same credentials (a token taken from the environment
        # included) without reading any file or variable again.
        clone = type(self).__new__(type(self))
        clone.__setstate__({**self.__getstate__(), "read_only": read_only})
        return clone

    # -- channels -----------------------------------------------------------

    def _options(self) -> list[tuple[str, Any]]:
        return [*DEFAULT_CHANNEL_OPTIONS, *self.channel_options]

    def _loop_channel(self) -> _LoopChannel:
        """The channel, stubs and batcher of the running event loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._aio.get(loop)
            if entry is None:
                entry = _LoopChannel(self, self._conn.aio_channel(self._options()))
                self._aio[loop] = entry
        return entry

    def _stub(self) -> pb_grpc.StoreServiceStub:
        """The async stub for the running event loop."""
        return self._loop_channel().stub

    def _sync_stub(self) -> pb_grpc.StoreServiceStub:
        with self._lock:
            if self._sync is None:
                channel = self._conn.channel(self._options())
                self._sync = (channel, pb_grpc.StoreServiceStub(channel))
            return self._sync[1]

    def _rpc_error(self, err: grpc.RpcError, what: str) -> ZarrgateError:
        """The exception for a failed call, with a hint at the likely cause
        of a refused connection or call (never quoting the token)."""
        return self._conn.error(err, what)

    async def _open(self) -> None:
        # docstring inherited
        await super()._open()
        try:
            resp = await self._stub().GetCapabilities(
                pb.GetCapabilitiesRequest(), timeout=self.timeout
            )
        except grpc.RpcError as e:
            self._is_open = False
            raise self._rpc_error(e, f"open {self}") from e
        self.capabilities = resp.capabilities

    def close(self) -> None:
        # docstring inherited
        super().close()
        with self._lock:
            aio, self._aio = list(self._aio.items()), weakref.WeakKeyDictionary()
            sync, self._sync = self._sync, None
        if sync is not None:
            sync[0].close()
        for loop, entry in aio:
            channel = entry.channel
            # An aio channel must be closed on its own loop; a loop that is
            # gone or idle takes its channel with it.
            if not loop.is_closed() and loop.is_running():
                try:
                    asyncio.run_coroutine_threadsafe(channel.close(), loop)
                except RuntimeError:
                    pass

    # -- reads --------------------------------------------------------------

    async def _get_bytes_raw(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        req = pb.GetRequest(key=key, range=_range_to_proto(byte_range))
        frames: list[bytes] = []
        try:
            async for resp in self._stub().Get(req, timeout=self.timeout):
                frames.append(resp.data)
        except grpc.RpcError as e:
            code = e.code()  # type: ignore[attr-defined]
            if code == grpc.StatusCode.NOT_FOUND:
                return None
            if code == grpc.StatusCode.OUT_OF_RANGE and byte_range is not None:
                # zarr's stores cut a range past the end short (LocalStore
                # reads a file, MemoryStore slices): read all and slice.
                whole = await self._get_bytes_raw(key, None)
                return None if whole is None else _slice(whole, byte_range)
            raise self._rpc_error(e, f"get {key!r}") from e
        return frames[0] if len(frames) == 1 else b"".join(frames)

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        # docstring inherited
        if prototype is None:
            prototype = default_buffer_prototype()
        if not self._is_open:
            await self._open()
        if self.max_batch > 1:
            data = await self._loop_channel().get(key, byte_range)
        else:
            data = await self._get_bytes_raw(key, byte_range)
        return None if data is None else prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        # docstring inherited
        key_ranges = list(key_ranges)
        if not key_ranges:
            return []
        if not self._is_open:
            await self._open()
        req = pb.GetPartialValuesRequest(
            ranges=[pb.KeyRange(key=k, range=_range_to_proto(r)) for k, r in key_ranges]
        )
        parts: list[list[bytes] | None] = [[] for _ in key_ranges]
        try:
            async for resp in self._stub().GetPartialValues(req, timeout=self.timeout):
                for part in resp.parts:
                    if part.missing:
                        parts[part.index] = None
                    else:
                        parts[part.index].append(part.data)  # type: ignore[union-attr]
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.OUT_OF_RANGE:  # type: ignore[attr-defined]
                raise self._rpc_error(e, "get_partial_values") from e
            # A range past the end fails the whole call: answer one by one,
            # each cut short like zarr's own stores do.
            return list(
                await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges))
            )
        return [None if p is None else prototype.buffer.from_bytes(b"".join(p)) for p in parts]

    async def _stat(self, key: str) -> pb.ValueInfo | None:
        """The value's info (generation, size) without its bytes; None if missing."""
        req = pb.GetRequest(
            key=key, range=pb.ByteRange(bounded=pb.ByteRange.Bounded(offset=0, length=0))
        )
        try:
            async for resp in self._stub().Get(req, timeout=self.timeout):
                if resp.HasField("info"):
                    return resp.info
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return None
            raise self._rpc_error(e, f"stat {key!r}") from e
        raise ZarrgateError(
            f"stat {key!r}: the server sent no ValueInfo", grpc.StatusCode.INTERNAL, ""
        )

    async def exists(self, key: str) -> bool:
        # docstring inherited
        if not self._is_open:
            await self._open()
        return await self._stat(key) is not None

    async def getsize(self, key: str) -> int:
        # docstring inherited
        if not self._is_open:
            await self._open()
        info = await self._stat(key)
        if info is None:
            raise FileNotFoundError(key)
        return int(info.size)

    # -- writes -------------------------------------------------------------

    async def _set(self, key: str, data: bytes, condition: pb.Condition | None) -> str:
        try:
            resp = await self._stub().Set(
                _set_requests(key, data, condition), timeout=self.timeout
            )
        except grpc.RpcError as e:
            raise self._rpc_error(e, f"set {key!r}") from e
        return resp.generation

    async def set(self, key: str, value: Buffer) -> None:
        # docstring inherited
        if not self._is_open:
            await self._open()
        self._check_writable()
        await self._set(key, _as_bytes(value, "set"), None)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        # docstring inherited; atomic on the server (Condition.if_absent).
        if not self._is_open:
            await self._open()
        self._check_writable()
        try:
            await self._set(
                key, _as_bytes(value, "set_if_not_exists"), pb.Condition(if_absent=True)
            )
        except ZarrgateFailedPrecondition:
            # The key exists. (A read-only *server* also answers
            # FAILED_PRECONDITION; tell the two apart so that is not hidden.)
            if await self._stat(key) is None:
                raise
        except ZarrgatePermissionDenied as denied:
            # A policy checks `write` before the condition, so a caller
            # without write on an existing key is refused where the contract
            # says "nothing to do". zarr-python calls this on every parent
            # group's metadata when it creates a node (ensure_parents): a
            # caller with write on "proj" only could not create "proj/x" in
            # an existing hierarchy otherwise. Existence is asked with a
            # read, which the policy checks too: a caller learns nothing it
            # may not read.
            try:
                exists = await self._stat(key) is not None
            except ZarrgateError:
                exists = False
            if not exists:
                raise denied

    async def delete(self, key: str) -> None:
        # docstring inherited
        if not self._is_open:
            await self._open()
        self._check_writable()
        try:
            await self._stub().Erase(pb.EraseRequest(key=key), timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return
            raise self._rpc_error(e, f"delete {key!r}") from e

    async def delete_dir(self, prefix: str) -> None:
        # docstring inherited
        if not self._is_open:
            await self._open()
        self._check_writable()
        prefix = _dir_prefix(prefix)
        try:
            await self._stub().ErasePrefix(
                pb.ErasePrefixRequest(prefix=prefix), timeout=self.timeout
            )
        except grpc.RpcError as e:
            raise self._rpc_error(e, f"delete_dir {prefix!r}") from e

    async def clear(self) -> None:
        # docstring inherited
        await self.delete_dir("")

    # -- listing ------------------------------------------------------------

    async def list(self) -> AsyncIterator[str]:
        # docstring inherited
        try:
            async for resp in self._stub().List(pb.ListRequest(), timeout=self.timeout):
                for key in resp.keys:
                    yield key
        except grpc.RpcError as e:
            raise self._rpc_error(e, "list") from e

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        # docstring inherited. The server takes "" or "dir/" prefixes; any
        # other string prefix lists its directory and filters, so that this
        # is the plain "starts with" zarr's MemoryStore implements.
        wire = prefix if prefix == "" or prefix.endswith("/") else prefix[: prefix.rfind("/") + 1]
        try:
            async for resp in self._stub().ListPrefix(
                pb.ListPrefixRequest(prefix=wire), timeout=self.timeout
            ):
                for key in resp.keys:
                    if key.startswith(prefix):
                        yield key
        except grpc.RpcError as e:
            raise self._rpc_error(e, f"list_prefix {prefix!r}") from e

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        # docstring inherited: the names (not keys) of the keys and "directories"
        # right below prefix, without trailing "/".
        prefix = _dir_prefix(prefix)
        try:
            async for resp in self._stub().ListDir(
                pb.ListDirRequest(prefix=prefix), timeout=self.timeout
            ):
                for key in resp.keys:
                    yield key.removeprefix(prefix)
                for sub in resp.prefixes:
                    yield sub.removeprefix(prefix).rstrip("/")
        except grpc.RpcError as e:
            raise self._rpc_error(e, f"list_dir {prefix!r}") from e

    async def is_empty(self, prefix: str) -> bool:
        # docstring inherited
        async for _ in self.list_prefix(_dir_prefix(prefix)):
            return False
        return True

    # -- blocking API (zarr.abc.store.SupportsSyncStore) ----------------------

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        if prototype is None:
            prototype = default_buffer_prototype()
        req = pb.GetRequest(key=key, range=_range_to_proto(byte_range))
        try:
            data = b"".join(r.data for r in self._sync_stub().Get(req, timeout=self.timeout))
        except grpc.RpcError as e:
            code = e.code()  # type: ignore[attr-defined]
            if code == grpc.StatusCode.NOT_FOUND:
                return None
            if code == grpc.StatusCode.OUT_OF_RANGE and byte_range is not None:
                whole = self.get_sync(key, prototype=prototype)
                return None if whole is None else prototype.buffer.from_bytes(
                    _slice(whole.to_bytes(), byte_range)
                )
            raise self._rpc_error(e, f"get {key!r}") from e
        return prototype.buffer.from_bytes(data)

    def set_sync(self, key: str, value: Buffer) -> None:
        self._check_writable()
        data = _as_bytes(value, "set_sync")
        try:
            self._sync_stub().Set(_set_requests(key, data, None), timeout=self.timeout)
        except grpc.RpcError as e:
            raise self._rpc_error(e, f"set {key!r}") from e

    def delete_sync(self, key: str) -> None:
        self._check_writable()
        try:
            self._sync_stub().Erase(pb.EraseRequest(key=key), timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return
            raise self._rpc_error(e, f"delete {key!r}") from e
