"""What the sync and the asyncio slab clients share, without I/O: data
types, numpy indexing turned into a slab selection, placing received
blocks into the result, cutting a value to write into blocks, splitting a
selection into chunk-aligned pieces, and the client's side of the
gateway's shared-memory segments (as client/shared.go and internal/shm)."""

from __future__ import annotations

import collections
import itertools
import json
import math
import mmap
import operator
import os
import queue
import socket
import ssl
import stat
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import grpc
import numpy as np

from zarrgate import _wire, errors
from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb
from zarrgate.errors import ZarrgateError

#: The largest message either side sends or receives (the gateway's too).
MAX_MESSAGE = 64 << 20

#: Reads of fewer elements go through the socket: setting up the shared
#: segment costs more than it saves (the Go client's threshold).
SHARED_MIN_ELEMENTS = 1 << 18

#: Size of the blocks a write sends.
WRITE_BLOCK_BYTES = 1 << 20

#: Where block data may start in a segment, and its token's length
#: (internal/shm).
SHM_DATA_OFFSET = 64
SHM_TOKEN_BYTES = 16

#: A bulk connection's hello, before the offer's ticket
#: (gateway.proto's BulkOffer), and the ticket's length.
BULK_HELLO = b"ZGBULK1\n"
BULK_TICKET_BYTES = 16

#: Reads of fewer bytes (strings counted at 16 bytes an element) do not
#: ask for a bulk connection: opening one (a TCP connection, a TLS
#: handshake) costs more than the stream's overhead on that much.
BULK_MIN_BYTES = 1 << 20

#: How long connecting to the gateway's bulk listener may take.
BULK_CONNECT_TIMEOUT = 2.0

#: After a bulk connection could not be opened, the client reads through
#: the stream alone for this long (seconds) before asking again.
BULK_RETRY_AFTER = 60.0

#: Whether a bulk read of COPIER_MIN bytes or more hands its blocks to the
#: copier's threads, to be copied into place while the next frames are
#: received. Off: each block is placed on the reading thread before the
#: next frame is received (as the Go client does). On the 2-core machine
#: of docs/benchmarks.md the hand-over cost more CPU than the overlap
#: saved (about 325 against 270 ms of client CPU per 512 MiB read, and
#: slower); a client with cores to spare may gain from it.
BULK_COPIER = False

#: The blocks of a bulk read handed to the copier's threads at once
#: (bytes): a hand-over costs a thread's wake-up, more than the copy of a
#: small block. At most MAX_BATCHES such batches wait for the copiers,
#: and one more is being received: the frame buffers of a read hold about
#: (MAX_BATCHES + 1) times this, plus a frame each.
BULK_BATCH_BYTES = 512 << 10

READ_SLAB = "/zarrgate.gateway.v1.ArrayService/ReadSlab"
READ_SLAB_SHARED = "/zarrgate.gateway.v1.ArrayService/ReadSlabShared"
WRITE_SLAB = "/zarrgate.gateway.v1.ArrayService/WriteSlab"


def data_loss(what: str) -> ZarrgateError:
    return ZarrgateError(f"{what}: DATA_LOSS", grpc.StatusCode.DATA_LOSS, what)


# -- data types --------------------------------------------------------------

_VARIABLE = ("string", "bytes")
_HAS_STRINGDTYPE = hasattr(np.dtypes, "StringDType")


def string_dtype() -> np.dtype:
    """numpy's StringDType when there is one (numpy >= 2), else object."""
    return np.dtypes.StringDType() if _HAS_STRINGDTYPE else np.dtype(object)


def numpy_dtype(data_type: str) -> np.dtype:
    """The numpy dtype of a gateway data type name (native byte order)."""
    if data_type == "string":
        return string_dtype()
    if data_type == "bytes":
        return np.dtype(object)
    if data_type[:1] == "r" and data_type[1:].isdigit():
        return np.dtype(f"V{int(data_type[1:]) // 8}")
    if data_type[:1] in ("S", "U") and data_type[1:].isdigit():
        return np.dtype(data_type)
    try:
        return np.dtype(data_type)
    except TypeError as e:
        raise ZarrgateError(
            f"data type {data_type!r} has no numpy dtype", grpc.StatusCode.UNIMPLEMENTED, ""
        ) from e


def wire_dtype(dt: np.dtype) -> np.dtype:
    """Block data is little-endian: the dtype that reads it on any host."""
    if dt.kind in "iufcU":
        return dt.newbyteorder("<")
    return dt


def zarr_data_type(dtype: Any) -> str:
    """The v3 data type name create_array sends for a numpy dtype (or a
    gateway name such as "string" or "r16" given as is)."""
    if isinstance(dtype, str) and (dtype in _VARIABLE or (dtype[:1] == "r" and dtype[1:].isdigit())):
        return dtype
    if dtype is str or (_HAS_STRINGDTYPE and isinstance(dtype, np.dtypes.StringDType)):
        return "string"
    if dtype is bytes:
        return "bytes"
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return "bool"
    if dt.kind in "iufc":
        return dt.name
    if dt.kind == "V" and dt.fields is None:
        return f"r{dt.itemsize * 8}"
    if dt.kind in "OTU":
        return "string"
    raise TypeError(f"dtype {dt} has no zarrgate data type (numbers, bool, strings, raw 'V')")


def _fill(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, complex):
        return [_fill(value.real), _fill(value.imag)]
    if isinstance(value, bytes):
        return list(value)
    return value


def fill_json(value: Any, data_type: str = "") -> str:
    """A fill value in v3 JSON form ("" = the data type's zero), cast to a
    numeric or bool data type first (0 for a bool array is false)."""
    if value is None:
        return ""
    if data_type in _NUMERIC and not isinstance(value, str):
        value = np.asarray(value).astype(data_type).item()
    return json.dumps(_fill(value))


_NUMERIC = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64", "complex64", "complex128"}


# -- selections --------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """A numpy index on an array: per array dimension (start, stop, step),
    with stop tight (the last element + 1) and step >= 1; the slab's shape
    (one entry per array dimension, 1 for integer indices); the numpy
    result's shape; and whether the result is a scalar."""

    slices: tuple[tuple[int, int, int], ...]
    slab_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    scalar: bool
    ints: tuple[bool, ...]  # which array dimensions an integer selects

    @property
    def size(self) -> int:
        return math.prod(self.slab_shape)

    def proto(self) -> list[gpb.Slice]:
        return [gpb.Slice(start=a, stop=b, step=s) for a, b, s in self.slices]


def plan(key: Any, shape: tuple[int, ...]) -> Plan:
    """numpy's basic indexing: ints (negative from the end), slices with
    positive steps, ``...`` and ``None``. Slice bounds clip as numpy's do;
    integers out of range, negative steps and anything else numpy would
    call advanced indexing are refused with IndexError subclasses."""
    if not isinstance(key, tuple):
        key = (key,)
    nd = len(shape)
    n_ellipsis = sum(1 for k in key if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    named = sum(1 for k in key if k is not None and k is not Ellipsis)
    if named > nd:
        raise errors.ZarrgateBoundsError(
            f"too many indices for array: array is {nd}-dimensional, but {named} were indexed"
        )
    items: list[Any] = []
    for k in key:
        if k is Ellipsis:
            items.extend([slice(None)] * (nd - named))
        else:
            items.append(k)
    if n_ellipsis == 0:
        items.extend([slice(None)] * (nd - named))
    slices: list[tuple[int, int, int]] = []
    slab: list[int] = []
    out: list[int] = []
    ints: list[bool] = []
    d = 0
    for k in items:
        if k is None:
            out.append(1)
            continue
        n = shape[d]
        if isinstance(k, slice):
            start, stop, step = k.indices(n) if k.step is None or _index(k.step, d) > 0 else (0, 0, 0)
            if k.step is not None and _index(k.step, d) == 0:
                raise ValueError("slice step cannot be zero")
            if k.step is not None and _index(k.step, d) < 0:
                raise errors.ZarrgateNegativeStep(
                    f"dimension {d}: slice step {k.step} is negative; the gateway reads "
                    f"forward only: select with a positive step and reverse the result "
                    f"(result[::-1])"
                )
            length = len(range(start, stop, step))
            if length == 0:
                start = stop = min(start, n)
            else:
                stop = start + (length - 1) * step + 1
            slices.append((start, stop, step))
            slab.append(length)
            out.append(length)
            ints.append(False)
        else:
            i = _index(k, d)
            if i < -n or i >= n:
                raise errors.ZarrgateBoundsError(
                    f"index {i} is out of bounds for axis {d} with size {n}"
                )
            if i < 0:
                i += n
            slices.append((i, i + 1, 1))
            slab.append(1)
            ints.append(True)
        d += 1
    scalar = n_ellipsis == 0 and not out and all(ints)
    return Plan(tuple(slices), tuple(slab), tuple(out), scalar, tuple(ints))


def _index(k: Any, d: int) -> int:
    if isinstance(k, (bool, np.bool_)):
        raise IndexError(f"dimension {d}: boolean indices are not supported (basic indexing only)")
    try:
        return operator.index(k)
    except TypeError:
        raise IndexError(
            f"dimension {d}: only integers, slices (':'), ellipsis ('...') and None are "
            f"valid indices, not {type(k).__name__} (arrays of indices and masks are not "
            f"supported: read a slab and index it with numpy)"
        ) from None


def finish(p: Plan, slab: np.ndarray) -> Any:
    """The numpy result from the slab: a view of the result's shape, or a
    scalar."""
    if p.scalar:
        return slab.reshape(())[()]
    return slab.reshape(p.out_shape)


# -- receiving blocks --------------------------------------------------------


class Sink:
    """Places the blocks of one read into a preallocated slab array."""

    def __init__(
        self, path: str, p: Plan, dtype: np.dtype, data_type: str, out: np.ndarray | None = None
    ) -> None:
        self.path = path
        self.strings = data_type == "string"
        self.plan = p
        self.variable = dtype.kind in "OT"
        self.wire = wire_dtype(dtype)
        if out is None:
            out = np.empty(p.slab_shape, dtype=self.wire)
        elif out.shape != p.slab_shape or out.dtype != self.wire:
            raise ValueError(f"out: want shape {p.slab_shape} and dtype {self.wire}")
        self.out = out
        self.got = 0
        self.item = self.wire.itemsize

    def header(self, h: gpb.SlabHeader) -> None:
        if tuple(h.shape) != self.plan.slab_shape:
            raise data_loss(f"read {self.path!r}: the server sends a slab of shape "
                            f"{tuple(h.shape)}, not {self.plan.slab_shape}")
        if not self.variable and h.element_size != self.item:
            raise data_loss(f"read {self.path!r}: the server sends {h.element_size}-byte "
                            f"elements, not {self.item}")
        if self.variable and h.element_size != 0:
            raise data_loss(f"read {self.path!r}: fixed-size elements for a string array")

    def box(self, b: _wire.Block) -> tuple[slice, ...]:
        shape = self.plan.slab_shape
        if len(b.origin) != len(shape) or len(b.shape) != len(shape):
            raise data_loss(f"read {self.path!r}: block rank {len(b.origin)}, slab rank {len(shape)}")
        for o, s, n in zip(b.origin, b.shape, shape):
            if o + s > n:
                raise data_loss(f"read {self.path!r}: block at {b.origin} shape {b.shape} "
                                f"outside the slab {shape}")
        return tuple(slice(o, o + s) for o, s in zip(b.origin, b.shape))

    def target(self, b: _wire.Block, data: Any) -> tuple[np.ndarray, np.ndarray]:
        """A fixed-size block's place in the result and its data (a buffer)
        as an array of the block's shape, checked; counted as received.
        The copy of one into the other is the caller's (place, or a
        Copier's thread)."""
        box = self.box(b)
        n = math.prod(b.shape)
        if len(data) != n * self.item:
            raise data_loss(f"read {self.path!r}: block at {b.origin} has {len(data)} bytes, "
                            f"want {n * self.item}")
        self.got += n
        return self.out[box + (...,)], np.frombuffer(data, dtype=self.wire, count=n).reshape(b.shape)

    def place(self, b: _wire.Block, data: Any) -> None:
        """Copy a fixed-size block's data (a buffer) into place: one copy."""
        dst, src = self.target(b, data)
        np.copyto(dst, src)

    def place_strings(self, b: _wire.Block) -> None:
        """Decode a variable-length block (str for "string", bytes for
        "bytes") into place."""
        box = self.box(b)
        n = math.prod(b.shape)
        offs = b.offsets or [0]
        if len(offs) != n + 1 or offs[-1] > len(b.data) or any(
            offs[k] > offs[k + 1] for k in range(n)
        ):
            raise data_loss(f"read {self.path!r}: block at {b.origin} has bad offsets")
        data = bytes(b.data)
        arr = np.empty(n, dtype=object)
        if self.strings:
            arr[:] = [data[offs[k] : offs[k + 1]].decode("utf-8", "surrogateescape") for k in range(n)]
        else:
            arr[:] = [data[offs[k] : offs[k + 1]] for k in range(n)]
        self.out[box] = arr.reshape(b.shape)
        self.got += n

    def done(self) -> np.ndarray:
        if self.got != self.plan.size:
            raise data_loss(f"read {self.path!r}: the server sent {self.got} of "
                            f"{self.plan.size} elements")
        return self.out


# -- writing -----------------------------------------------------------------


def boxes(shape: tuple[int, ...], elem: int, limit: int) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Cut a slab into C-order boxes of about limit bytes: whole trailing
    dimensions, a run along one dimension, single indices before it."""
    nd = len(shape)
    if nd == 0:
        yield (), ()
        return
    if math.prod(shape) == 0:
        return
    inner, d = elem, nd - 1
    while d > 0 and inner * shape[d] <= limit:
        inner *= shape[d]
        d -= 1
    k = max(1, limit // inner)
    for idx in itertools.product(*(range(n) for n in shape[:d])):
        for s in range(0, shape[d], k):
            yield (
                idx + (s,) + (0,) * (nd - d - 1),
                (1,) * d + (min(k, shape[d] - s),) + tuple(shape[d + 1 :]),
            )


def source(p: Plan, value: Any, dtype: np.dtype) -> np.ndarray:
    """The value to write as a view of the slab's shape (broadcast as numpy
    assignment does; no copy of the whole)."""
    if dtype.kind in "OT":
        v = np.asarray(value, dtype=object if not isinstance(value, np.ndarray) else None)
    else:
        v = np.asarray(value)
    try:
        v = np.broadcast_to(v, p.out_shape)
    except ValueError:
        raise ValueError(
            f"could not broadcast input array from shape {np.shape(value)} into shape {p.out_shape}"
        ) from None
    return v.reshape(p.slab_shape) if v.size else np.empty(p.slab_shape, v.dtype)


def write_messages(path: str, p: Plan, value: Any, dtype: np.dtype) -> Iterator[bytes]:
    """The WriteSlab stream: the header, then blocks of about 1 MiB, each
    cast (as numpy assignment casts) and encoded as it is sent, so that the
    whole value is never copied at once. The value's shape is checked
    here, before the stream starts."""
    return _write_messages(path, p, source(p, value, dtype), dtype)


def _write_messages(path: str, p: Plan, src: np.ndarray, dtype: np.dtype) -> Iterator[bytes]:
    yield gpb.WriteSlabRequest(
        header=gpb.WriteSlabHeader(path=path, selection=p.proto())
    ).SerializeToString()
    if dtype.kind in "OT":
        for origin, shape in boxes(p.slab_shape, 32, WRITE_BLOCK_BYTES):
            box = tuple(slice(o, o + s) for o, s in zip(origin, shape))
            parts, offsets, at = [], [0], 0
            for v in src[box].ravel().tolist():
                if isinstance(v, str):
                    v = v.encode("utf-8", "surrogateescape")
                elif not isinstance(v, (bytes, bytearray)):
                    raise TypeError(f"write {path!r}: a {type(v).__name__} in a string array")
                parts.append(v)
                at += len(v)
                offsets.append(at)
            yield _wire.write_string_block(origin, shape, b"".join(parts), offsets)
        return
    wire = wire_dtype(dtype)
    for origin, shape in boxes(p.slab_shape, wire.itemsize, WRITE_BLOCK_BYTES):
        box = tuple(slice(o, o + s) for o, s in zip(origin, shape))
        block = np.ascontiguousarray(src[box], dtype=wire) if src.dtype != wire else np.ascontiguousarray(src[box])
        yield _wire.write_block(origin, shape, memoryview(block).cast("B"))


def check_value_dtype(path: str, value: Any, dtype: np.dtype) -> None:
    """Refuse what numpy assignment would refuse: strings into numbers."""
    if dtype.kind in "OT":
        return
    v = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if v.dtype.kind in "OTUS" and dtype.kind not in "SUV":
        raise TypeError(f"write {path!r}: {v.dtype} values into a {dtype} array")


# -- chunk-aligned pieces ----------------------------------------------------


def pieces(p: Plan, grid: tuple[int, ...], itemsize: int, limit: int) -> Iterator[tuple[Any, ...]]:
    """Split a plan into keys of chunk-aligned pieces (of grid) of at most
    about limit bytes (one chunk at least), in C order; each key indexes
    the array as numpy would, integer dimensions kept as integers."""
    nd = len(p.slices)
    cuts: list[list[int]] = []  # per dimension: output indices where a grid cell starts, and the end
    for (start, stop, step), length, g in zip(p.slices, p.slab_shape, grid):
        c = [0]
        if length:
            last = start + (length - 1) * step
            for cell in range(start // g + 1, last // g + 1):
                i = -(-(cell * g - start) // step)
                if i > c[-1] and i < length:
                    c.append(i)
        c.append(length)
        cuts.append(c)
    # How many grid cells per piece along each dimension: one everywhere
    # to start with (the smallest piece), then as many as fit along the
    # last dimension, and if that takes it whole, along the one before...
    segs = [max((b - a for a, b in zip(c, c[1:])), default=0) for c in cuts]
    per = [1] * nd
    budget = max(limit // max(itemsize, 1), 1)
    size = math.prod(max(s, 1) for s in segs)
    for d in range(nd - 1, -1, -1):
        cells = max(len(cuts[d]) - 1, 1)
        rest = size // max(segs[d], 1)
        per[d] = max(1, min(cells, budget // max(rest * max(segs[d], 1), 1)))
        size = rest * max(min(per[d] * segs[d], p.slab_shape[d]), 1)
        if per[d] < cells:
            break
    ranges = []
    for d in range(nd):
        c, k = cuts[d], per[d]
        ranges.append([(c[i], c[min(i + k, len(c) - 1)]) for i in range(0, max(len(c) - 1, 1), k)])
    for combo in itertools.product(*ranges):
        key = []
        for d, (a, b) in enumerate(combo):
            start, _, step = p.slices[d]
            if p.ints[d]:
                key.append(start)
            else:
                key.append(slice(start + a * step, start + (b - 1) * step + 1 if b > a else start + a * step, step))
        yield tuple(key)


# -- bulk connections --------------------------------------------------------


class BulkUnavailable(Exception):
    """The offered bulk connection could not be opened (connect, TLS
    handshake, hello) or failed before its first frame: the read is made
    again without bulk; ``switch_off``: and the client reads without bulk
    for BULK_RETRY_AFTER seconds. A connection the gateway closed before
    any frame (its limit of connections reached, or the read failed
    before its first block) does not switch bulk off: the read is made
    again through the stream, whose status then tells a failure."""

    def __init__(self, why: str, switch_off: bool = True) -> None:
        super().__init__(why)
        self.switch_off = switch_off


class BulkEnded(Exception):
    """The bulk connection ended (or failed) before its end frame, after
    ``frames`` frames: the stream's status says why."""

    def __init__(self, frames: int, why: str) -> None:
        super().__init__(why)
        self.frames = frames


def _recv(sock: socket.socket, view: memoryview, n: int, plain: bool, frame: int) -> None:
    """Fill view[:n] from the bulk connection (frame: how many frames
    were received before)."""
    got = 0
    flags = socket.MSG_WAITALL if plain else 0
    while got < n:
        try:
            k = sock.recv_into(view[got:n], n - got, flags)
        except OSError as e:
            if frame == 0:
                raise BulkUnavailable(f"bulk connection: {e}") from e
            raise BulkEnded(frame - 1, f"bulk connection: {e}") from e
        if k == 0:
            if frame == 0:
                raise BulkUnavailable("bulk connection closed before its first frame", False)
            raise BulkEnded(frame - 1, "bulk connection closed before its end frame")
        got += k


def bulk_address(offer: gpb.BulkOffer, dialled: str) -> tuple[str, int]:
    """Where to connect for an offer: its host, or the host the gRPC
    address dials when the offer names none."""
    return (offer.host or dialled), offer.port


def bulk_connect(host: str, port: int, ticket: bytes, ctx: ssl.SSLContext | None,
                 server_name: str, timeout: float = BULK_CONNECT_TIMEOUT) -> socket.socket:
    """A bulk connection to host:port, TLS with ctx when given (the
    certificate checked against server_name), its hello sent; blocking
    from then on. BulkUnavailable if any of it fails."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise BulkUnavailable(f"bulk connection to {host}:{port}: {e}") from e
    try:
        if ctx is not None:
            sock = ctx.wrap_socket(sock, server_hostname=server_name)
        sock.sendall(BULK_HELLO + ticket)
        sock.settimeout(None)
    except OSError as e:  # ssl.SSLError included
        sock.close()
        raise BulkUnavailable(f"bulk connection to {host}:{port}: {e}") from e
    return sock


# -- small-reads connections (OpenSmallReads) ------------------------------

#: The most small-reads connections a client has open at once (reads
#: beyond them go through the stream), all kept when idle: a client whose
#: threads read at once (dask) reuses them instead of opening one a read.
SMALL_MAX = 16
#: A kept connection is not used within this many seconds of the
#: gateway's closing it (idle, or at the end of its lifetime).
SMALL_MARGIN = 5.0

_CODES = {c.value[0]: c for c in grpc.StatusCode}


class SmallStatus(Exception):
    """A small read the gateway answered with a status other than OK."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class SmallConn:
    """One small-reads connection: ReadSlabSmall requests written as
    frames, each answered by one frame (gateway.proto, OpenSmallReads)."""

    def __init__(self, sock: socket.socket, terms: gpb.OpenSmallReadsResponse) -> None:
        self.sock = sock
        self.max_request = terms.max_request_bytes
        now = time.monotonic()
        self.idle_for = terms.idle_timeout_ms / 1000
        self.expires = now + terms.lifetime_ms / 1000
        self.last_used = now

    def usable(self, now: float) -> bool:
        return now + SMALL_MARGIN < self.expires and now - self.last_used < self.idle_for - SMALL_MARGIN

    def read(self, req: gpb.ReadSlabSmallRequest, timeout: float | None) -> gpb.ReadSlabSmallResponse:
        """One read: its answer, SmallStatus for a status, OSError or
        WireError when the connection failed (then unusable)."""
        m = gpb.SmallReadsRequest(read=req)
        if timeout is not None:
            m.timeout_ms = max(1, math.ceil(timeout * 1000))
        raw = m.SerializeToString()
        self.sock.settimeout(timeout)
        self.sock.sendall(struct.pack("<Q", len(raw)) + raw)
        head = self._recv(8)
        (n,) = struct.unpack("<Q", head)
        if n == 0 or n > MAX_MESSAGE:
            raise _wire.WireError(f"small-reads connection: a frame of {n} bytes")
        out = gpb.SmallReadsResponse.FromString(self._recv(n))
        if out.code != 0:
            raise SmallStatus(_CODES.get(out.code, grpc.StatusCode.UNKNOWN), out.message)
        if not out.HasField("read"):
            raise SmallStatus(grpc.StatusCode.DATA_LOSS, "the gateway answered a small read with neither a slab nor an error")
        self.last_used = time.monotonic()
        return out.read

    def _recv(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError("small-reads connection closed")
            got += k
        return buf  # parsed where it lies: no copy into a bytes

    def close(self) -> None:
        self.sock.close()


def bulk_shutdown(sock: socket.socket) -> None:
    """Wake a thread blocked reading the bulk connection (its call has
    failed): the socket's own shutdown, under TLS too."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class BulkSwitch:
    """A client's choice to ask for bulk connections: on unless turned
    off, or for BULK_RETRY_AFTER seconds after one could not be opened."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.off_until = 0.0

    def ask(self, sink: Sink) -> bool:
        if not self.on or time.monotonic() < self.off_until:
            return False
        item = 16 if sink.variable else sink.item
        return sink.plan.size * item >= BULK_MIN_BYTES

    def failed(self) -> None:
        self.off_until = time.monotonic() + BULK_RETRY_AFTER


# -- shared memory -----------------------------------------------------------


class SharedAttachError(Exception):
    """The offered segment cannot be used here (another host, user or
    namespace; or a bad offer): blocks come inline instead."""


class Mapping:
    """A read-only mapping of a gateway segment, checked by its token."""

    def __init__(self, path: str, size: int, token: bytes) -> None:
        if len(token) != SHM_TOKEN_BYTES or size < SHM_DATA_OFFSET:
            raise SharedAttachError(f"segment {path}: bad offer ({size} bytes, {len(token)}-byte token)")
        # Without blocking on a FIFO or taking a terminal: the path comes
        # from the other side of the call.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise SharedAttachError(f"segment {path}: {e}") from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                raise SharedAttachError(f"segment {path}: not a regular file of {size} bytes")
            # Not populated: the pages of a block are mapped when it is
            # copied out and unmapped after (drop), so that the segment
            # adds little to the client's resident memory.
            self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        except OSError as e:
            raise SharedAttachError(f"segment {path}: {e}") from e
        finally:
            os.close(fd)
        if self.mm[:SHM_TOKEN_BYTES] != token:
            self.mm.close()
            raise SharedAttachError(f"segment {path}: token differs (another host's file?)")
        self.key = (path, size, bytes(token))
        self.size = size
        self.view = memoryview(self.mm)

    def data(self, off: int, n: int) -> memoryview:
        if off < SHM_DATA_OFFSET or off > self.size or n > self.size - off:
            raise data_loss(f"shared block range [{off}, +{n}) outside the {self.size}-byte segment")
        return self.view[off : off + n]

    def drop(self, off: int, n: int) -> None:
        """Unmap the whole pages of [off, off+n), copied out: they stay in
        the segment (the gateway's), but leave this process's resident
        memory until a later block maps them again."""
        start = -(-off // mmap.PAGESIZE) * mmap.PAGESIZE
        stop = (off + n) // mmap.PAGESIZE * mmap.PAGESIZE
        if stop > start and _DONTNEED is not None:
            self.mm.madvise(_DONTNEED, start, stop - start)

    def close(self) -> None:
        self.view.release()
        self.mm.close()


_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


class Mappings:
    """Up to two mappings of segments whose reads have ended: a gateway
    lends its idle segments to later reads, and a client that still has one
    mapped skips opening and mapping it again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[Mapping] = []

    def attach(self, seg: gpb.SharedSegment) -> Mapping | None:
        key = (seg.path, seg.size, bytes(seg.token))
        with self._lock:
            for i, m in enumerate(self._idle):
                if m.key == key:
                    return self._idle.pop(i)
        try:
            return Mapping(seg.path, seg.size, seg.token)
        except SharedAttachError:
            return None

    def detach(self, m: Mapping | None, keep: bool) -> None:
        if m is None:
            return
        if not keep:
            m.close()
            return
        with self._lock:
            if len(self._idle) == 2:
                self._idle.pop(0).close()
            self._idle.append(m)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for m in idle:
            m.close()


class SharedIn:
    """The releases of one read's shared blocks: blocks are done with in
    arrival order (they are copied out as they arrive), and released once
    they add up to an eighth of the segment, as the gateway's ring expects
    (internal/shm.Ring); ``send`` sends a request."""

    def __init__(self, m: Mapping) -> None:
        self.m = m
        self.batch = (m.size - SHM_DATA_OFFSET) // 8
        self.blocks = 0
        self.bytes = 0
        self.ended = False

    def done(self, n: int) -> bytes | None:
        """Record a block of n bytes as copied out; the release to send, if
        one is due."""
        self.blocks += 1
        self.bytes += n
        if self.bytes >= self.batch:
            return self.release()
        return None

    def release(self) -> bytes | None:
        if self.blocks == 0:
            return None
        msg = release_msg(self.blocks)
        self.blocks = self.bytes = 0
        return msg


def read_msg(path: str, p: Plan, bulk: bool = False) -> gpb.ReadSlabRequest:
    return gpb.ReadSlabRequest(path=path, selection=p.proto(), bulk=bulk)


def shared_read_msg(path: str, p: Plan, dest: gpb.SharedDestination | None = None) -> bytes:
    """The first message of a ReadSlabShared call; with dest, asking the
    gateway to write the slab into that client memory."""
    return gpb.ReadSlabSharedRequest(read=read_msg(path, p), destination=dest).SerializeToString()


def attach_msg(attached: bool) -> bytes:
    return gpb.ReadSlabSharedRequest(attach=gpb.SharedAttach(attached=attached)).SerializeToString()


def release_msg(blocks: int) -> bytes:
    return gpb.ReadSlabSharedRequest(release=gpb.SharedRelease(blocks=blocks)).SerializeToString()


#: glibc malloc settings made by :func:`tune_malloc`: allocations below
#: MMAP_THRESHOLD come from the heap, up to TRIM_THRESHOLD of freed heap
#: stays with the process, in at most ARENA_MAX arenas.
MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 16 << 20
ARENA_MAX = 1

#: Environment variables with which the user sets glibc's malloc: any of
#: them leaves it alone.
MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX")
_tuned = False


def tune_malloc() -> bool:
    """Keep glibc from mapping and unmapping memory for every message, and
    freed messages from piling up in per-thread arenas.

    grpcio hands each received message over as a new ``bytes`` (a block:
    256 KiB and more), freed once copied out. With glibc's default
    (dynamic) thresholds, such buffers are mapped fresh or trimmed off the
    heap and faulted in again, message after message: page faults and
    zeroing that cost a socket read about a fifth of its CPU here. Fixed
    thresholds (MMAP_THRESHOLD, TRIM_THRESHOLD: as ``MALLOC_MMAP_THRESHOLD_``
    and ``MALLOC_TRIM_THRESHOLD_`` would set them) keep those buffers on the
    heap. But the buffers are allocated on gRPC's threads and freed on the
    reader's, and glibc gives each thread an arena of its own, each keeping
    up to TRIM_THRESHOLD of freed memory: a full socket read left four
    arenas holding 9 to 12 MiB each of nothing, 40 MiB above the result.
    One arena (ARENA_MAX, as ``MALLOC_ARENA_MAX=1``) keeps it to one
    heap's, for the threads started after this (gRPC's are started with
    the first channel, after it).

    Process-wide, once; not done where any of MALLOC_ENV is set or
    ``GLIBC_TUNABLES`` names a malloc tunable (the user's choice), nor off
    glibc. True if the settings were made."""
    global _tuned
    if _tuned or any(v in os.environ for v in MALLOC_ENV) or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    _tuned = True
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return False
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, ValueError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
    return all([bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)),
                bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)),
                bool(mallopt(M_ARENA_MAX, ARENA_MAX))])


#: Threads that copy blocks out of messages or the segment into results,
#: per client (as the Go client's min(GOMAXPROCS, 4) goroutines).
COPY_THREADS = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1), 4)

#: Reads of fewer bytes copy their blocks on the reading thread.
COPIER_MIN = 4 << 20

#: Batches (an eighth of the segment each) a shared read may have waiting
#: for the copiers before it waits for them.
MAX_BATCHES = 2


class Copier:
    """A client's threads that copy blocks into place (numpy copies
    without the GIL, so they run while the reading thread waits for gRPC's
    next message). Started on first use; shared by the client's reads."""

    def __init__(self, threads: int = COPY_THREADS) -> None:
        self.threads = threads
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._pid = 0
        self._closed = False

    def submit(self, batch: _Batch) -> None:
        with self._lock:
            if self._closed:
                run_here = True
            else:
                run_here = False
                if self._pid != os.getpid():  # none yet, or a forked child's
                    self._pid, self._workers = os.getpid(), []
                    self._q = queue.SimpleQueue()
                for k in range(self.threads - len(self._workers)):
                    t = threading.Thread(target=self._work, name=f"zarrgate-copy-{k}", daemon=True)
                    t.start()
                    self._workers.append(t)
        if run_here:  # a read racing the client's close: copy here
            batch.run()
        else:
            self._q.put(batch)

    def _work(self) -> None:
        while (batch := self._q.get()) is not None:
            batch.run()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        for _ in workers:
            self._q.put(None)
        for t in workers:
            if t is not threading.current_thread():
                t.join()


class _Batch:
    """Blocks of one read handed to the copiers together: (destination,
    source, shared range to drop or None) each."""

    __slots__ = ("owner", "items", "blocks", "done", "err")

    def __init__(self, owner: Batches, items: list[tuple[np.ndarray, np.ndarray, tuple[int, int] | None]]) -> None:
        self.owner = owner
        self.items = items
        self.blocks = len(items)
        self.done = False
        self.err: BaseException | None = None

    def run(self) -> None:
        try:
            m = self.owner.m
            for dst, src, shared in self.items:
                np.copyto(dst, src)
                if shared is not None and m is not None:
                    m.drop(*shared)
        except BaseException as e:  # raised by the read's done()
            self.err = e
        self.items = []
        self.owner.finished(self)


class Batches:
    """One shared read's blocks on their way through a Copier: gathered
    into batches (an eighth of the segment, as the releases), at most
    MAX_BATCHES of them waiting for the copiers; each release is sent
    (``send``) once every block before it has been copied out, in arrival
    order, as the gateway's ring expects."""

    def __init__(self, copier: Copier, limit: int, m: Mapping | None, send: Any,
                 depth: int = 0, done: Any = None) -> None:
        self.copier = copier
        self.limit = limit
        self.m = m
        self.send = send
        self.depth = depth or MAX_BATCHES
        self.on_done = done  # called with n instead of send(release_msg(n))
        self.items: list[tuple[np.ndarray, np.ndarray, tuple[int, int] | None]] = []
        self.bytes = 0
        self.queued: collections.deque[_Batch] = collections.deque()
        self.cond = threading.Condition(threading.Lock())
        self.err: BaseException | None = None

    def add(self, dst: np.ndarray, src: np.ndarray, shared: tuple[int, int] | None, n: int) -> None:
        self.items.append((dst, src, shared))
        self.bytes += n
        if self.bytes >= self.limit:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        b = _Batch(self, self.items)
        self.items, self.bytes = [], 0
        with self.cond:
            while len(self.queued) >= self.depth and self.err is None:
                self.cond.wait()
            self.queued.append(b)
        self.copier.submit(b)

    def finished(self, b: _Batch) -> None:
        with self.cond:
            b.done = True
            n = 0
            while self.queued and self.queued[0].done:
                head = self.queued.popleft()
                n += head.blocks
                if head.err is not None and self.err is None:
                    self.err = head.err
            if n and self.on_done is not None:
                self.on_done(n)
            elif n and self.send is not None:
                # Even after a failed copy: the read fails in done(), but
                # the gateway must not wait for ring space meanwhile.
                self.send(release_msg(n))
            self.cond.notify_all()

    def wait(self) -> None:
        """Wait until every batch handed over is copied; raise what a copy
        raised."""
        with self.cond:
            while self.queued:
                self.cond.wait()
        if self.err is not None:
            raise self.err


@dataclass
class Stats:
    """What a client's reads did: calls by path taken, and bytes of block
    data received through the socket (the gRPC stream), through shared
    memory and through bulk connections. A bulk read is a socket read too
    (a ReadSlab call) whose blocks came over a bulk connection;
    bulk_fallbacks counts the bulk connections that could not be opened
    (their reads were made again without bulk). A small read (under
    BULK_MIN_BYTES) made over a small-reads connection is a socket read
    too, counted in small_reads as well. A read into a SharedBuffer that
    the gateway wrote itself is a shared read whose bytes are counted in
    in_place_bytes (none through the segment)."""

    socket_reads: int = 0
    shared_reads: int = 0
    socket_bytes: int = 0
    shared_bytes: int = 0
    bulk_reads: int = 0
    bulk_bytes: int = 0
    bulk_fallbacks: int = 0
    small_reads: int = 0
    in_place_bytes: int = 0


class Reader:
    """One read's side of the ReadSlab / ReadSlabShared protocol, whatever
    carries the messages (the sync client's loop or the asyncio one): fed
    the stream's messages in order (:meth:`message`), it checks them,
    places the blocks into the sink (one copy each: out of the message, or
    out of the mapped segment) and says what to send back on a shared read
    (the attach, then releases). :meth:`done` checks the slab is complete;
    :meth:`close` (always) keeps or unmaps the segment.

    With a copier (a shared read of COPIER_MIN bytes or more), the copies
    out of the segment run on the copier's threads while this one takes
    the next messages, and the releases are sent from there (``send``,
    thread-safe) once their blocks are copied out. Socket blocks are
    copied here: handing them over cost more CPU than it saved (gRPC's
    messages are received on this thread anyway)."""

    def __init__(self, path: str, sink: Sink, stats: Stats, maps: Mappings | None,
                 copier: Copier | None = None, send: Any = None, dest: bool = False) -> None:
        self.path = path
        #: Whether the read named a destination (client memory the gateway
        #: may write the slab into: a SharedBuffer, whose view is the
        #: sink's out); the header's answer: accepted, or why not.
        self.dest = dest
        self.in_place = False
        self.refused = ""
        self.sink = sink
        self.stats = stats
        self.maps = maps  # None: a ReadSlab call (no shared memory offered)
        self.first = True
        self.m: Mapping | None = None
        self.sh: SharedIn | None = None
        big = not sink.variable and sink.plan.size * sink.item >= COPIER_MIN
        self.copier = copier if big else None
        self.send = send
        self.batches: Batches | None = None
        #: The header's bulk offer (ReadSlab only): the blocks come over
        #: a bulk connection (:meth:`bulk`), none through the stream.
        self.offer: gpb.BulkOffer | None = None
        if maps is None:
            stats.socket_reads += 1

    def message(self, raw: bytes) -> bytes | None:
        """Take one message; the request to send back, if one is due. A
        malformed message raises _wire.WireError or a DATA_LOSS error."""
        kind, v = _wire.parse(raw)
        if self.first:
            if kind != _wire.HEADER:
                raise data_loss(f"read {self.path!r}: first message is not a header")
            self.first = False
            return self._header(v)  # type: ignore[arg-type]
        if self.in_place:
            # The gateway writes the slab into the destination itself:
            # only the end follows, with the count it wrote.
            if kind != _wire.END or self.sink.got:
                raise data_loss(f"read {self.path!r}: a message other than one end after the "
                                "gateway took the destination")
            written = v.destination_elements  # type: ignore[union-attr]
            if written != self.sink.plan.size:
                raise data_loss(f"read {self.path!r}: the gateway wrote {written} of the slab's "
                                f"{self.sink.plan.size} elements into the destination")
            self.sink.got = written
            self.stats.in_place_bytes += written * self.sink.item
            return None
        if kind == _wire.END and self.sh is not None:
            self.sh.ended = True
            if self.batches is not None:
                self.batches.flush()  # its release follows the copies
                return None
            return self.sh.release()
        if kind != _wire.BLOCK:
            raise data_loss(f"read {self.path!r}: a message after the header is not a block")
        if self.offer is not None:
            raise data_loss(f"read {self.path!r}: a block in the stream after a bulk offer")
        b: _wire.Block = v  # type: ignore[assignment]
        if self.sink.variable:
            self.sink.place_strings(b)
        elif b.shared is not None:
            if self.sh is None:
                raise data_loss(f"read {self.path!r}: a shared block, but no segment is attached")
            off, n = b.shared
            m = self.sh.m
            if self.batches is not None:
                dst, src = self.sink.target(b, m.data(off, n))
                self.batches.add(dst, src, (off, n), n)
                self.stats.shared_bytes += n
                return None
            self.sink.place(b, m.data(off, n))
            m.drop(off, n)
            self.stats.shared_bytes += n
            return self.sh.done(n)
        else:
            self.sink.place(b, b.data)
            self.stats.socket_bytes += len(b.data)
        return None

    def _header(self, h: gpb.SlabHeader) -> bytes | None:
        self.sink.header(h)
        reply = None
        if self.dest:
            if not h.HasField("destination"):
                self.refused = "the gateway does not write into client memory"
            elif h.destination.accepted:
                if h.HasField("shared_segment") or h.HasField("bulk"):
                    raise data_loss(f"read {self.path!r}: the gateway took the destination "
                                    "and offered a segment or bulk connection too")
                self.in_place = True
                self.stats.shared_reads += 1
                return None
            else:
                self.refused = h.destination.reason or "refused, no reason given"
        if self.maps is None and h.HasField("bulk"):
            o = h.bulk
            if len(o.ticket) != BULK_TICKET_BYTES or not 0 < o.port < 65536:
                raise data_loss(f"read {self.path!r}: a bad bulk offer (port {o.port}, "
                                f"{len(o.ticket)}-byte ticket)")
            self.offer = o
            self.stats.bulk_reads += 1
        if self.maps is not None and h.HasField("shared_segment"):
            self.m = self.maps.attach(h.shared_segment)
            reply = attach_msg(self.m is not None)
            if self.m is not None:
                self.sh = SharedIn(self.m)
        if self.sh is not None:
            self.stats.shared_reads += 1
        elif self.maps is not None:
            self.stats.socket_reads += 1
        if self.copier is not None and self.sh is not None:
            self.batches = Batches(self.copier, self.sh.batch, self.sh.m, self.send)
        return reply

    def bulk(self, sock: socket.socket) -> None:
        """Read the offered blocks from a bulk connection (hello sent)
        until its end frame, placing each: a frame's length and then the
        message with the next frame's length after it, received in one go
        into a reused buffer, and its block placed before the next frame
        is received. With BULK_COPIER (and a read of COPIER_MIN bytes or
        more), the copier's threads copy the blocks into place instead (in
        batches of BULK_BATCH_BYTES) while the next frames come in, each
        buffer reused once its block is in place. Raises
        BulkEnded if the connection ends (or fails) before the end frame:
        the stream's status says why."""
        plain = not isinstance(sock, ssl.SSLSocket)
        head = bytearray(8)
        _recv(sock, memoryview(head), 8, plain, 0)
        n = int.from_bytes(head, "little")
        free: collections.deque[bytearray] = collections.deque()
        busy: collections.deque[bytearray] = collections.deque()
        if self.copier is not None and BULK_COPIER:
            def returned(k: int) -> None:  # copier threads, in arrival order
                for _ in range(k):
                    free.append(busy.popleft())

            self.batches = Batches(self.copier, BULK_BATCH_BYTES, None, None, MAX_BATCHES, returned)
        frames = 0
        while n:
            if n > MAX_MESSAGE:
                raise data_loss(f"read {self.path!r}: a {n}-byte bulk frame (the limit is "
                                f"{MAX_MESSAGE})")
            if free:
                buf = free.popleft()
            else:
                # All in the batches (bounded: Batches.add waits while
                # MAX_BATCHES wait for the copiers), or a copy failed and
                # the batches no longer wait: raise that.
                if self.batches is not None and self.batches.err is not None:
                    self.batches.wait()
                buf = bytearray()
            if len(buf) < n + 8:
                buf = bytearray(n + 8)
            view = memoryview(buf)
            _recv(sock, view, n + 8, plain, frames + 1)
            frames += 1
            kind, v = _wire.parse(view[:n])
            if kind != _wire.BLOCK:
                raise data_loss(f"read {self.path!r}: bulk frame {frames} is not a block")
            b: _wire.Block = v  # type: ignore[assignment]
            if b.shared is not None:
                raise data_loss(f"read {self.path!r}: a shared block in bulk frame {frames}")
            if self.sink.variable:
                self.sink.place_strings(b)
                free.append(buf)
            elif self.batches is not None:
                dst, src = self.sink.target(b, b.data)
                busy.append(buf)
                self.batches.add(dst, src, None, len(b.data))
            else:
                self.sink.place(b, b.data)
                free.append(buf)
            self.stats.bulk_bytes += len(b.data)
            n = int.from_bytes(view[n : n + 8], "little")
            del view, b, v
        if self.batches is not None:
            self.batches.flush()
            self.batches.wait()

    def done(self) -> np.ndarray:
        if self.first and self.maps is not None:
            raise data_loss(f"read {self.path!r}: stream ended before the header")
        if self.in_place and self.sink.got == 0 and self.sink.plan.size > 0:
            raise data_loss(f"read {self.path!r}: the stream ended before the gateway said "
                            "the slab was written")
        if self.batches is not None:
            self.batches.flush()
            self.batches.wait()
        return self.sink.done()

    def close(self) -> None:
        if self.batches is not None:
            # No copy may still read the segment or write the result.
            try:
                self.batches.wait()
            except BaseException:
                pass
        if self.maps is not None:
            self.maps.detach(self.m, self.sh is not None and self.sh.ended)
