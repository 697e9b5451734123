"""The slab messages' bytes, read and written by hand where it saves copies.

A block's data is most of every ReadSlab message. Parsed by the generated
classes, it would be copied out of gRPC's bytes into the message and again
into a ``bytes`` object before numpy could copy it into the result; read
here, it is a ``memoryview`` of gRPC's bytes that numpy copies once into
place. Writes likewise: a block message is its small header and the data,
joined once. Everything else (headers, strings' offsets) goes through the
generated classes. The field numbers are those of
proto/zarrgate/gateway/v1/gateway.proto; tests/test_slab.py checks these
functions against the generated classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb

_LEN = 2  # wire type of length-delimited fields
_VARINT = 0


class WireError(ValueError):
    """A message that is not what the protocol says (DATA_LOSS)."""


def _uvarint(buf: memoryview, i: int, end: int) -> tuple[int, int]:
    x = shift = 0
    while True:
        if i >= end:
            raise WireError("truncated varint")
        b = buf[i]
        i += 1
        x |= (b & 0x7F) << shift
        if b < 0x80:
            return x, i
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def _skip(buf: memoryview, i: int, end: int, wt: int) -> int:
    if wt == _VARINT:
        return _uvarint(buf, i, end)[1]
    if wt == _LEN:
        n, i = _uvarint(buf, i, end)
        return i + n
    if wt == 1:
        return i + 8
    if wt == 5:
        return i + 4
    raise WireError(f"wire type {wt}")


def _ints(buf: memoryview, i: int, end: int, wt: int, out: list[int]) -> int:
    """A repeated uint64 field, packed or not."""
    if wt == _VARINT:
        v, i = _uvarint(buf, i, end)
        out.append(v)
        return i
    n, i = _uvarint(buf, i, end)
    stop = i + n
    if stop > end:
        raise WireError("truncated packed field")
    while i < stop:
        v, i = _uvarint(buf, i, stop)
        out.append(v)
    return i


@dataclass
class Block:
    """A received block: origin and shape in slab coordinates; data (a view
    of the message) for socket blocks, or shared = (offset, length) in the
    shared segment; offsets for variable-length types."""

    origin: list[int]
    shape: list[int]
    data: memoryview | bytes
    offsets: list[int] | None = None
    shared: tuple[int, int] | None = None


def _block(buf: memoryview, i: int, end: int) -> Block:
    origin: list[int] = []
    shape: list[int] = []
    data: memoryview | bytes = b""
    shared = None
    while i < end:
        key, i = _uvarint(buf, i, end)
        f, wt = key >> 3, key & 7
        if f == 1:
            i = _ints(buf, i, end, wt, origin)
        elif f == 2:
            i = _ints(buf, i, end, wt, shape)
        elif f == 3 and wt == _LEN:
            n, i = _uvarint(buf, i, end)
            if i + n > end:
                raise WireError("truncated block data")
            data = buf[i : i + n]
            i += n
        elif f == 4:
            # Strings: n+1 offsets, parsed by the generated class (C code)
            # rather than varint by varint here.
            raise _Offsets
        elif f == 5 and wt == _LEN:
            n, i = _uvarint(buf, i, end)
            sub_end = i + n
            off = length = 0
            while i < sub_end:
                k, i = _uvarint(buf, i, sub_end)
                if k == (1 << 3):
                    off, i = _uvarint(buf, i, sub_end)
                elif k == (2 << 3):
                    length, i = _uvarint(buf, i, sub_end)
                else:
                    i = _skip(buf, i, sub_end, k & 7)
            shared = (off, length)
        else:
            i = _skip(buf, i, end, wt)
    if i != end:
        raise WireError("block overruns its message")
    return Block(origin, shape, data, None, shared)


class _Offsets(Exception):
    """A block with offsets: parse it with the generated class."""


HEADER, BLOCK, END = 1, 2, 3


def _message(cls: Any, b: memoryview) -> Any:
    """A message of the generated class cls, or WireError if b is not one."""
    try:
        return cls.FromString(b.tobytes())
    except DecodeError as e:
        raise WireError(f"a malformed {cls.__name__}: {e}") from None


def parse(raw: bytes) -> tuple[int, object]:
    """One ReadSlabResponse or ReadSlabSharedResponse (same field numbers):
    (HEADER, gpb.SlabHeader) | (BLOCK, Block) | (END, gpb.SlabEnd)."""
    buf = memoryview(raw)
    end = len(buf)
    i = 0
    kind, value = 0, None
    while i < end:
        key, i = _uvarint(buf, i, end)
        f, wt = key >> 3, key & 7
        if wt != _LEN:
            i = _skip(buf, i, end, wt)
            continue
        n, i = _uvarint(buf, i, end)
        if i + n > end:
            raise WireError("truncated message")
        if f == 1:
            kind, value = HEADER, _message(gpb.SlabHeader, buf[i : i + n])
        elif f == 2:
            try:
                kind, value = BLOCK, _block(buf, i, i + n)
            except _Offsets:
                pb = gpb.Block.FromString(buf[i : i + n].tobytes())
                kind, value = BLOCK, Block(
                    list(pb.origin), list(pb.shape), pb.data, list(pb.offsets), None
                )
        elif f == 3:
            kind, value = END, _message(gpb.SlabEnd, buf[i : i + n])
        i += n
    if kind == 0:
        raise WireError("an empty message (neither header, block nor end)")
    return kind, value


# -- encoding ----------------------------------------------------------------


def _varint(x: int) -> bytes:
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def _packed(field: int, values: list[int] | tuple[int, ...]) -> bytes:
    body = b"".join(_varint(v) for v in values)
    return _varint(field << 3 | _LEN) + _varint(len(body)) + body


def write_block(origin: tuple[int, ...], shape: tuple[int, ...], data: memoryview) -> bytes:
    """A WriteSlabRequest holding a fixed-size block: built around data with
    one copy."""
    inner = _packed(1, origin) + _packed(2, shape) + _varint(3 << 3 | _LEN) + _varint(len(data))
    n = len(inner) + len(data)
    return b"".join((_varint(2 << 3 | _LEN), _varint(n), inner, data))


def write_string_block(
    origin: tuple[int, ...], shape: tuple[int, ...], data: bytes, offsets: list[int]
) -> bytes:
    """A WriteSlabRequest holding a variable-length block."""
    return gpb.WriteSlabRequest(
        block=gpb.Block(origin=origin, shape=shape, data=data, offsets=offsets)
    ).SerializeToString()


def identity(b: bytes) -> bytes:
    """Serializer of requests already encoded."""
    return b


# -- StoreService.GetPartialValues responses (proto/zarrgate/store/v1/store.proto)


@dataclass(slots=True)
class Part:
    """One PartialValuePart: a piece of the value (or range) asked for by
    request ``index``; ``data`` is a memoryview of the response's bytes."""

    index: int
    missing: bool
    data: memoryview
    last: bool
    #: (offset, length) of the value in the shared segment
    #: (GetPartialValuesShared's SharedValuePart), None when inline.
    shared: tuple[int, int] | None = None


_EMPTY = memoryview(b"")


def parse_partial_values(raw: bytes) -> list[Part]:
    """The parts of one GetPartialValuesResponse (or
    GetPartialValuesSharedResponse, whose parts are numbered alike and may
    carry a shared range), their data not copied."""
    buf = memoryview(raw)
    end = len(buf)
    out: list[Part] = []
    i = 0
    while i < end:
        tag, i = _uvarint(buf, i, end)
        field, wt = tag >> 3, tag & 7
        if field != 1 or wt != _LEN:
            i = _skip(buf, i, end, wt)
            continue
        n, i = _uvarint(buf, i, end)
        stop = i + n
        if stop > end:
            raise WireError("part past the end of the message")
        index, missing, data, last = 0, False, _EMPTY, False
        shared: tuple[int, int] | None = None
        while i < stop:
            tag, i = _uvarint(buf, i, stop)
            f, w = tag >> 3, tag & 7
            if f == 6 and w == _LEN:
                m, i = _uvarint(buf, i, stop)
                if i + m > stop:
                    raise WireError("shared range past the end of its part")
                shared, i = _shared_range(buf, i, i + m), i + m
            elif f == 3 and w == _LEN:
                m, i = _uvarint(buf, i, stop)
                if i + m > stop:
                    raise WireError("data past the end of its part")
                data = buf[i : i + m]
                i += m
            elif f in (1, 2, 4) and w == _VARINT:
                v, i = _uvarint(buf, i, stop)
                if f == 1:
                    index = v
                elif f == 2:
                    missing = v != 0
                else:
                    last = v != 0
            else:
                i = _skip(buf, i, stop, w)
        if i != stop:
            raise WireError("field past the end of its part")
        out.append(Part(index, missing, data, last, shared))
    if i != end:
        raise WireError("field past the end of the message")
    return out


def _shared_range(buf: memoryview, i: int, stop: int) -> tuple[int, int]:
    """A SharedValue: (offset, length)."""
    off = n = 0
    while i < stop:
        tag, i = _uvarint(buf, i, stop)
        f, w = tag >> 3, tag & 7
        if f in (1, 2) and w == _VARINT:
            v, i = _uvarint(buf, i, stop)
            if f == 1:
                off = v
            else:
                n = v
        else:
            i = _skip(buf, i, stop, w)
    if i != stop:
        raise WireError("field past the end of a shared range")
    return off, n
