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
channel options, TLS material and token), so it can be sent to dask or
multiprocessing workers, which connect on first use with the same options.

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
import ipaddress
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

__all__ = [
    "ZarrgateError",
    "ZarrgatePermissionDenied",
    "ZarrgateStore",
    "ZarrgateUnauthenticated",
]

#: Where the token comes from when ``token`` is not given (the Go CLI's too).
TOKEN_ENV = "ZARRGATE_TOKEN"

#: Size of the data frames a Set sends (the server's Get frames are <= 1 MiB too).
FRAME_SIZE = 1 << 20

#: Channel options: allow messages somewhat larger than a frame either way.
DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", 16 << 20),
    ("grpc.max_send_message_length", 16 << 20),
)


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
        super().__init__(message)
        self.code = code
        self.details = details


class ZarrgateNotFound(ZarrgateError, FileNotFoundError):
    """NOT_FOUND."""


class ZarrgateInvalidArgument(ZarrgateError, ValueError):
    """INVALID_ARGUMENT (a bad key, prefix or range)."""


class ZarrgateOutOfRange(ZarrgateError, ValueError):
    """OUT_OF_RANGE."""


class ZarrgateFailedPrecondition(ZarrgateError, ValueError):
    """FAILED_PRECONDITION (a failed condition, or a read-only server)."""


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
    grpc.StatusCode.INVALID_ARGUMENT: ZarrgateInvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: ZarrgateOutOfRange,
    grpc.StatusCode.FAILED_PRECONDITION: ZarrgateFailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: ZarrgateUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: ZarrgateDeadlineExceeded,
    grpc.StatusCode.UNAUTHENTICATED: ZarrgateUnauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: ZarrgatePermissionDenied,
}


def _error(err: grpc.RpcError, what: str, hint: str = "") -> ZarrgateError:
    code: grpc.StatusCode = err.code()  # type: ignore[attr-defined]
    details: str = err.details() or ""  # type: ignore[attr-defined]
    cls = _ERRORS.get(code, ZarrgateError)
    return cls(f"{what}: {code.name}: {details}{hint}", code, details)


def _pem(value: str | os.PathLike[str] | bytes | None, what: str) -> bytes | None:
    """PEM bytes from a file name or the PEM itself. Read once, here: the
    bytes (not the name) travel with a pickled store, so workers on other
    hosts need no copy of the files."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        data, name = bytes(value), "the bytes given"
    elif isinstance(value, (str, os.PathLike)):
        with open(value, "rb") as f:
            data, name = f.read(), repr(os.fspath(value))
    else:
        raise TypeError(f"{what} must be a file name or PEM bytes, got {type(value).__name__}")
    # Never quote the content: it may be a private key.
    if b"-----BEGIN " not in data:
        raise ValueError(f"{what}: {name} is not PEM (no '-----BEGIN' line)")
    return data


def _check_token(token: str) -> str:
    """The same rule as the Go client's WithToken. The message never quotes
    the token."""
    if not isinstance(token, str):
        raise TypeError(f"token must be a str, got {type(token).__name__}")
    if token.lower().startswith("bearer "):
        raise ValueError("token: give the token alone, without 'Bearer '")
    if any(c <= " " or c >= "\x7f" for c in token):
        raise ValueError("token: with spaces or control characters (is it the whole token?)")
    return token


def _is_local(target: str) -> bool:
    """The target is on this host (a loopback address or a unix socket):
    the only place a token may go in plaintext (as the Go client's isLocal)."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    t = target.removeprefix("passthrough:///")
    if t.startswith("["):
        end = t.find("]")
        if end < 0 or not t[end + 1 :].startswith(":"):
            return False
        host = t[1:end]
    else:
        host, sep, _ = t.rpartition(":")
        if not sep or ":" in host:
            return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    """

    supports_writes: bool = True
    supports_deletes: bool = True
    supports_listing: bool = True

    addr: str
    tls: bool

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
    ) -> None:
        super().__init__(read_only=read_only)
        if not isinstance(addr, str) or not addr:
            raise TypeError(f"addr must be a non-empty 'host:port' string, got {addr!r}")
        scheme_tls = None
        if addr.startswith("grpcs://"):
            addr, scheme_tls = addr.removeprefix("grpcs://"), True
        elif addr.startswith("grpc://"):
            addr = addr.removeprefix("grpc://")
        if not addr:
            raise TypeError("addr: no host:port after the scheme")
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        wants_tls = scheme_tls or tls_ca is not None or tls_cert is not None
        if tls is False and wants_tls:
            raise ValueError("tls=False contradicts grpcs://, tls_ca or tls_cert")
        self.addr = addr
        self.tls = bool(tls or wants_tls)
        self._tls_ca = _pem(tls_ca, "tls_ca")
        self._tls_cert = _pem(tls_cert, "tls_cert")
        self._tls_key = _pem(tls_key, "tls_key")
        if token is None:
            token = os.environ.get(TOKEN_ENV) or None
        elif token == "":
            token = None
        self._token = None if token is None else _check_token(token)
        if self._token is not None and not self.tls and not _is_local(addr):
            raise ValueError(
                f"a token is sent only over TLS (tls=True or tls_ca=...), or in plaintext "
                f"to a loopback address or unix socket; {addr} is neither"
            )
        self.timeout = timeout
        self.channel_options = tuple(channel_options)
        self._init_channels()

    def _init_channels(self) -> None:
        self._lock = threading.Lock()
        # One grpc.aio channel per event loop; dropped with the loop.
        self._aio: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[grpc.aio.Channel, pb_grpc.StoreServiceStub]
        ] = weakref.WeakKeyDictionary()
        self._sync: tuple[grpc.Channel, pb_grpc.StoreServiceStub] | None = None
        self.capabilities: pb.Capabilities | None = None

    # -- pickling, equality, repr ------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        # The TLS material and the token travel as they are: a worker
        # re-opens the store with exactly these options.
        return {
            "addr": self.addr,
            "read_only": self._read_only,
            "timeout": self.timeout,
            "channel_options": self.channel_options,
            "tls": self.tls,
            "tls_ca": self._tls_ca,
            "tls_cert": self._tls_cert,
            "tls_key": self._tls_key,
            "token": self._token,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.addr = state["addr"]
        self._read_only = state["read_only"]
        self.timeout = state["timeout"]
        self.channel_options = state["channel_options"]
        self.tls = state.get("tls", False)
        self._tls_ca = state.get("tls_ca")
        self._tls_cert = state.get("tls_cert")
        self._tls_key = state.get("tls_key")
        self._token = state.get("token")
        self._is_open = False
        self._init_channels()

    def _identity(self) -> tuple[Any, ...]:
        return (self.addr, self.tls, self._tls_ca, self._tls_cert, self._tls_key, self._token)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash((type(self), self.addr))

    def __str__(self) -> str:
        return f"zarrgate://{self.addr}"

    def __repr__(self) -> str:
        # Never the token, nor the key: only whether there is one.
        extra = ""
        if self.tls:
            extra += ", tls=True"
        if self._tls_cert is not None:
            extra += ", tls_cert=<set>"
        if self._token is not None:
            extra += ", token=<hidden>"
        return f"ZarrgateStore('{self}'{extra})"

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

    def _credentials(self) -> grpc.ChannelCredentials | None:
        """The channel's credentials; None: a plain insecure channel."""
        if self.tls:
            creds = grpc.ssl_channel_credentials(
                root_certificates=self._tls_ca,
                private_key=self._tls_key,
                certificate_chain=self._tls_cert,
            )
        elif self._token is not None:
            # gRPC refuses call credentials on an insecure channel. Local
            # credentials are plaintext too, but only to a loopback address
            # or a unix socket (gRPC checks the connection), so the token can
            # ride on them; the constructor refused any other address.
            kind = (
                grpc.LocalConnectionType.UDS
                if self.addr.startswith(("unix:", "unix-abstract:"))
                else grpc.LocalConnectionType.LOCAL_TCP
            )
            creds = grpc.local_channel_credentials(kind)
        else:
            return None
        if self._token is not None:
            creds = grpc.composite_channel_credentials(
                creds, grpc.access_token_call_credentials(self._token)
            )
        return creds

    def _stub(self) -> pb_grpc.StoreServiceStub:
        """The async stub for the running event loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._aio.get(loop)
            if entry is None:
                creds = self._credentials()
                if creds is None:
                    channel = grpc.aio.insecure_channel(self.addr, options=self._options())
                else:
                    channel = grpc.aio.secure_channel(self.addr, creds, options=self._options())
                entry = (channel, pb_grpc.StoreServiceStub(channel))
                self._aio[loop] = entry
        return entry[1]

    def _sync_stub(self) -> pb_grpc.StoreServiceStub:
        with self._lock:
            if self._sync is None:
                creds = self._credentials()
                if creds is None:
                    channel = grpc.insecure_channel(self.addr, options=self._options())
                else:
                    channel = grpc.secure_channel(self.addr, creds, options=self._options())
                self._sync = (channel, pb_grpc.StoreServiceStub(channel))
            return self._sync[1]

    def _rpc_error(self, err: grpc.RpcError, what: str) -> ZarrgateError:
        """_error with a hint at the likely cause of a refused connection or
        call, from this store's settings (never quoting the token)."""
        code = err.code()  # type: ignore[attr-defined]
        details = (err.details() or "").lower()  # type: ignore[attr-defined]
        hint = ""
        if code == grpc.StatusCode.UNAUTHENTICATED and self._token is None:
            hint = f" (this store sends no token: pass token=... or set ${TOKEN_ENV})"
        elif (
            code == grpc.StatusCode.UNAVAILABLE
            and self.tls
            and self._tls_cert is None
            and ("certificate_required" in details or "tsi_data_corrupted" in details)
        ):
            # TLS 1.3: a server's refusal of a client without certificate
            # arrives after the handshake, as an alert gRPC reports as
            # "Unwrap failed (TSI_DATA_CORRUPTED)".
            hint = " (does the server want a client certificate? pass tls_cert and tls_key)"
        elif code == grpc.StatusCode.UNAVAILABLE and "handshake" in details:
            hint = (
                " (the TLS handshake failed: is tls_ca the CA that signed the server's "
                "certificate, and does that certificate name the host dialled?)"
            )
        elif code == grpc.StatusCode.UNAVAILABLE and not self.tls and "socket closed" in details:
            hint = " (does the server want TLS? pass tls=True or tls_ca=...)"
        return _error(err, what, hint)

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
        for loop, (channel, _) in aio:
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
