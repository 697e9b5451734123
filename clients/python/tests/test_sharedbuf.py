"""zarrgate.SharedBuffer against a real gateway in a process of its own:
reads the gateway writes into this process's memory and writes it reads
from there (Array.read_shared / write_shared, sync and asyncio), what
happens when it refuses the memory or shared memory is off, and the
buffer's own checks."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import zarrgate
import zarrgate.aio
from zarrgate import sharedbuf

pytestmark = pytest.mark.skipif(not sharedbuf.SUPPORTED, reason="memory files are Linux's")


def _data(shape: tuple[int, ...], seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def test_read_shared_is_written_in_place_by_the_gateway(zarrgate_server) -> None:
    data = _data((600, 700))
    with zarrgate.connect(zarrgate_server.addr) as c, zarrgate.SharedBuffer(data.nbytes) as buf:
        a = c.create_array("sb/r", data.shape, "float32", (128, 128))
        a[...] = data
        before = c.stats.in_place_bytes
        x = a.read_shared(..., buf)
        assert buf.in_place == (True, "")
        np.testing.assert_array_equal(x, data)
        # A view of the buffer, not a copy; nothing came through a segment
        # or the socket.
        assert np.shares_memory(x, buf.array(np.float32))
        assert c.stats.in_place_bytes - before == data.nbytes
        assert c.stats.shared_bytes == 0 and c.stats.socket_bytes == 0
        # Strided, with an integer index (a dimension dropped), and a
        # small one: all in place, each into the buffer's first bytes.
        for key in [(slice(3, 500, 7), slice(1, None, 3)), (5, slice(10, 690)), (slice(0, 2), 3)]:
            del x
            x = a.read_shared(key, buf)
            assert buf.in_place == (True, "")
            np.testing.assert_array_equal(x, data[key])
        del x


def test_write_shared_is_read_in_place_by_the_gateway(zarrgate_server) -> None:
    data = _data((512, 640), seed=8)
    with zarrgate.connect(zarrgate_server.addr) as c, \
            zarrgate.connect(zarrgate_server.addr, shared_memory=False) as other, \
            zarrgate.SharedBuffer(data.nbytes + 100) as buf:
        a = c.create_array("sb/w", data.shape, "float32", (128, 128))
        v = buf.array(np.float32, data.shape)
        v[...] = data
        got = a.write_shared(..., buf)
        assert buf.in_place == (True, "")
        assert got["chunks_written"] == 4 * 5 and got["bytes_written"] > 0
        np.testing.assert_array_equal(other.open_array("sb/w")[...], data)
        # A part, with an integer index: the slab's elements in the
        # buffer's first bytes, in C order.
        part = np.arange(300, dtype=np.float32) * -1
        buf.array(np.float32, (300,))[...] = part
        a.write_shared((slice(100, 400), 17), buf)
        assert buf.in_place == (True, "")
        data[100:400, 17] = part
        np.testing.assert_array_equal(other.open_array("sb/w")[...], data)
        del v


def test_refused_memory_is_copied_instead(zarrgate_server) -> None:
    """A buffer whose first page no longer holds its token (as a file of
    another process would not): the gateway refuses it and says why, and
    the data comes and goes through the usual paths, into and out of the
    same buffer."""
    data = _data((400, 300), seed=9)
    with zarrgate.connect(zarrgate_server.addr) as c, zarrgate.SharedBuffer(data.nbytes) as buf:
        a = c.create_array("sb/f", data.shape, "float32", (100, 100))
        buf._mm[0] ^= 0xFF  # the token the gateway must find
        buf.array(np.float32, data.shape)[...] = data
        a.write_shared(..., buf)
        ok, why = buf.in_place
        assert not ok and "token" in why, why
        buf.array(np.float32, data.shape)[...] = 0
        x = a.read_shared(..., buf)
        ok, why = buf.in_place
        assert not ok and "token" in why, why
        np.testing.assert_array_equal(x, data)
        assert c.stats.shared_bytes + c.stats.socket_bytes == data.nbytes
        del x


def test_shared_memory_off_copies(zarrgate_server) -> None:
    data = _data((300, 300), seed=10)
    with zarrgate.connect(zarrgate_server.addr, shared_memory=False) as c, \
            zarrgate.SharedBuffer(data.nbytes) as buf:
        a = c.create_array("sb/o", data.shape, "float32", (100, 100))
        buf.array(np.float32, data.shape)[...] = data
        a.write_shared(..., buf)
        assert buf.in_place == (False, "shared memory is off for this client (shared_memory=False)")
        buf.array(np.float32, data.shape)[...] = 0
        x = a.read_shared(..., buf)
        assert buf.in_place[0] is False
        np.testing.assert_array_equal(x, data)
        assert c.stats.socket_bytes == data.nbytes and c.stats.in_place_bytes == 0
        del x


def test_asyncio_read_and_write_shared(zarrgate_server) -> None:
    data = _data((256, 512), seed=11)

    async def run() -> None:
        async with zarrgate.aio.connect(zarrgate_server.addr) as c:
            a = await c.create_array("sb/aio", data.shape, "float32", (128, 128))
            with zarrgate.SharedBuffer(data.nbytes) as buf:
                buf.array(np.float32, data.shape)[...] = data
                await a.write_shared(..., buf)
                assert buf.in_place == (True, "")
                buf.array(np.float32, data.shape)[...] = 0
                np.testing.assert_array_equal(await a.read(...), data)
                x = await a.read_shared(..., buf)
                assert buf.in_place == (True, "")
                np.testing.assert_array_equal(x, data)
                # Two calls on one buffer wait for each other.
                r = await asyncio.gather(a.read_shared((slice(0, 10),), buf),
                                         a.read_shared((slice(0, 10),), buf))
                np.testing.assert_array_equal(r[0], data[:10])
                del x, r

    asyncio.run(run())


def test_buffer_checks(zarrgate_server) -> None:
    with pytest.raises(ValueError):
        zarrgate.SharedBuffer(-1)
    with pytest.raises(ValueError):
        zarrgate.SharedBuffer(sharedbuf.MAX_BYTES + 1)
    with zarrgate.connect(zarrgate_server.addr) as c:
        a = c.create_array("sb/c", (100, 100), "float64", (50, 50))
        s = c.create_array("sb/s", (10,), str)
        buf = zarrgate.SharedBuffer(100 * 100 * 8 - 1)
        with pytest.raises(ValueError, match="more than the"):
            a.read_shared(..., buf)
        with pytest.raises(ValueError, match="more than the"):
            a.write_shared(..., buf)
        with pytest.raises(TypeError, match="fixed-size"):
            s.read_shared(..., buf)
        with pytest.raises(ValueError):
            buf.array(">f8", (4,))
        a[...] = 2.5
        x = a.read_shared(slice(0, 10), buf)
        # A view alive keeps the memory: still readable after close.
        buf.close()
        assert buf.closed
        np.testing.assert_array_equal(x, np.full((10, 100), 2.5))
        with pytest.raises(ValueError, match="closed"):
            a.read_shared(slice(0, 10), buf)
        # The memory file's descriptor is closed with it.
        fd = buf._fd
        with pytest.raises(OSError):
            os.fstat(fd)


def test_reader_holds_the_gateway_to_its_answer() -> None:
    """What a gateway that took the destination may send: the end, with
    the slab's count, and nothing else (a block, a wrong count, no end at
    all are DATA_LOSS)."""
    from zarrgate import _slab
    from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb

    p = _slab.plan(..., (4, 5))
    header = gpb.ReadSlabSharedResponse(header=gpb.SlabHeader(
        shape=[4, 5], data_type="float32", element_size=4,
        destination=gpb.SharedDestinationAnswer(accepted=True))).SerializeToString()

    def reader() -> _slab.Reader:
        sink = _slab.Sink("x", p, np.dtype("float32"), "float32", np.zeros((4, 5), np.float32))
        r = _slab.Reader("x", sink, _slab.Stats(), _slab.Mappings(), dest=True)
        assert r.message(header) is None and r.in_place
        return r

    def end(n: int) -> bytes:
        return gpb.ReadSlabSharedResponse(end=gpb.SlabEnd(destination_elements=n)).SerializeToString()

    r = reader()
    r.message(end(20))
    assert r.done().shape == (4, 5) and r.stats.in_place_bytes == 80
    with pytest.raises(zarrgate.ZarrgateError, match="other than one end"):
        r.message(end(20))
    block = gpb.ReadSlabSharedResponse(block=gpb.Block(origin=[0, 0], shape=[1, 1], data=b"\0" * 4))
    with pytest.raises(zarrgate.ZarrgateError, match="other than one end"):
        reader().message(block.SerializeToString())
    with pytest.raises(zarrgate.ZarrgateError, match="wrote 19 of the slab's 20"):
        reader().message(end(19))
    with pytest.raises(zarrgate.ZarrgateError, match="ended before"):
        reader().done()
    # Refused: the reason is kept, and the read goes on as without it.
    refused = gpb.ReadSlabSharedResponse(header=gpb.SlabHeader(
        shape=[4, 5], data_type="float32", element_size=4,
        destination=gpb.SharedDestinationAnswer(reason="no"))).SerializeToString()
    sink = _slab.Sink("x", p, np.dtype("float32"), "float32")
    r = _slab.Reader("x", sink, _slab.Stats(), _slab.Mappings(), dest=True)
    r.message(refused)
    assert not r.in_place and r.refused == "no"


def test_write_shared_to_a_gateway_without_it_is_sent(zarrgate_server) -> None:
    """A gateway from before WriteSlabShared answers UNIMPLEMENTED (here the
    real gateway's answer to a method it does not have): the slab is sent
    through the socket, and the buffer says why."""
    from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb

    data = _data((200, 300), seed=12)
    with zarrgate.connect(zarrgate_server.addr) as c, zarrgate.SharedBuffer(data.nbytes) as buf:
        a = c.create_array("sb/old", data.shape, "float32", (100, 100))
        c._stub.WriteSlabShared = c._channel.unary_unary(
            "/zarrgate.gateway.v1.ArrayService/WriteSlabSharedV0",
            request_serializer=gpb.WriteSlabSharedRequest.SerializeToString,
            response_deserializer=gpb.WriteSlabSharedResponse.FromString)
        buf.array(np.float32, data.shape)[...] = data
        got = a.write_shared(..., buf)
        assert buf.in_place == (False, "the gateway does not read slabs from shared memory (an older version)")
        assert got["chunks_written"] == 6
        np.testing.assert_array_equal(a[...], data)


def test_a_malformed_end_or_header_is_a_wire_error() -> None:
    """Bytes that are not a SlabEnd (or SlabHeader) where one belongs raise
    the parser's WireError (DATA_LOSS for the reads), not protobuf's own."""
    from zarrgate import _wire

    bad = b"\x08\xff"  # field 1, a varint cut short
    for field in (1, 3):
        raw = bytes([field << 3 | 2, len(bad)]) + bad
        with pytest.raises(_wire.WireError):
            _wire.parse(raw)
