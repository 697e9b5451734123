"""The client's side of a bulk connection's frames (gateway.proto's
BulkOffer), fed by a real socket pair: frames placed as the stream's blocks
would be, through the copier's threads or not; a frame over the message
cap refused before anything is allocated for it; a connection that ends
early; offers and frames that break the protocol. The gateway's side is
exercised in test_bulk.py."""

from __future__ import annotations

import socket
import threading

import grpc
import numpy as np
import pytest

from zarrgate import _slab, _wire
from zarrgate._conn import Conn
from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb
from zarrgate.errors import ZarrgateError

TICKET = bytes(range(16))


def frame(msg: bytes) -> bytes:
    return len(msg).to_bytes(8, "little") + msg


def block_frames(arr: np.ndarray, rows: int) -> list[bytes]:
    """Blocks of `rows` rows of a 2-d array, as the gateway frames them."""
    out = []
    for r in range(0, arr.shape[0], rows):
        part = np.ascontiguousarray(arr[r : r + rows])
        out.append(frame(gpb.ReadSlabResponse(block=gpb.Block(
            origin=[r, 0], shape=list(part.shape), data=part.tobytes())).SerializeToString()))
    return out


def string_frames(arr: np.ndarray) -> list[bytes]:
    out = []
    for r in range(arr.shape[0]):
        vals = [v.encode() for v in arr[r]]
        offs = [0]
        for v in vals:
            offs.append(offs[-1] + len(v))
        out.append(frame(gpb.ReadSlabResponse(block=gpb.Block(
            origin=[r, 0], shape=[1, arr.shape[1]], data=b"".join(vals),
            offsets=offs)).SerializeToString()))
    return out


def reader(arr_shape, dtype, data_type, copier=None):
    p = _slab.plan(..., arr_shape)
    sink = _slab.Sink("x", p, np.dtype(dtype), data_type)
    r = _slab.Reader("x", sink, _slab.Stats(), None, copier)
    esz = 0 if data_type == "string" else np.dtype(dtype).itemsize
    h = gpb.SlabHeader(shape=list(arr_shape), data_type=data_type, element_size=esz,
                       bulk=gpb.BulkOffer(port=1234, ticket=TICKET))
    r.message(gpb.ReadSlabResponse(header=h).SerializeToString())
    assert r.offer is not None and r.offer.ticket == TICKET
    return r


def serve(chunks: list[bytes], end: bool = True) -> socket.socket:
    """The client's end of a socket pair whose other end sends chunks (and
    the end frame), then closes."""
    a, b = socket.socketpair()

    def run() -> None:
        try:
            for c in chunks:
                b.sendall(c)
            if end:
                b.sendall(bytes(8))
        except OSError:
            pass
        finally:
            b.close()

    threading.Thread(target=run, daemon=True).start()
    return a


@pytest.mark.parametrize("copier", [False, True])
def test_frames_are_placed_as_the_streams_blocks(copier, monkeypatch) -> None:
    monkeypatch.setattr(_slab, "BULK_COPIER", copier)
    # 8 MiB (above COPIER_MIN: the copier's threads copy) or not.
    arr = np.random.default_rng(1).random((1024, 1024)) if copier else np.arange(
        300 * 70, dtype=np.int16).reshape(300, 70)
    cp = _slab.Copier(2) if copier else None
    try:
        r = reader(arr.shape, arr.dtype, arr.dtype.name, cp)
        sock = serve(block_frames(arr, 7))
        r.bulk(sock)
        assert (r.batches is not None) == copier
        out = r.done()
        r.close()
        sock.close()
        np.testing.assert_array_equal(out, arr)
        assert r.stats.bulk_bytes == arr.nbytes and r.stats.bulk_reads == 1
    finally:
        if cp is not None:
            cp.close()


def test_string_frames() -> None:
    arr = np.array([[f"{i}-{j}" * (j % 3) for j in range(5)] for i in range(9)], dtype=object)
    r = reader(arr.shape, object, "string")
    sock = serve(string_frames(arr))
    r.bulk(sock)
    out = r.done()
    sock.close()
    assert out.tolist() == arr.tolist()


def test_a_frame_over_the_cap_is_refused_before_it_is_read() -> None:
    r = reader((4, 4), np.uint8, "uint8")
    sent = (_slab.MAX_MESSAGE + 1).to_bytes(8, "little")
    sock = serve([sent, b"\0" * 64], end=False)
    with pytest.raises(ZarrgateError) as e:
        r.bulk(sock)
    assert e.value.code == grpc.StatusCode.DATA_LOSS
    assert "bulk frame" in str(e.value)
    # Nothing of the frame was read: its bytes are still there.
    assert sock.recv(64, socket.MSG_WAITALL) == b"\0" * 64
    sock.close()


@pytest.mark.parametrize("cut", ["inside a frame", "before the end frame"])
def test_a_connection_ending_early_is_bulk_ended(cut) -> None:
    """The stream's status then says why (or the read is DATA_LOSS)."""
    arr = np.arange(64, dtype=np.uint8).reshape(8, 8)
    frames = block_frames(arr, 4)
    chunks = {"inside a frame": [frames[0], frames[1][:20]],
              "before the end frame": frames}[cut]
    r = reader(arr.shape, arr.dtype, "uint8")
    sock = serve(chunks, end=False)
    with pytest.raises(_slab.BulkEnded) as e:
        r.bulk(sock)
    assert e.value.frames == 1
    sock.close()


@pytest.mark.parametrize("cut", [0, 5])
def test_a_connection_closed_before_its_first_frame_is_made_again(cut) -> None:
    """Closed by the gateway (its connection limit, a refused ticket, a read
    that failed before its first block): BulkUnavailable, the read made
    again through the stream, without switching bulk off."""
    r = reader((8, 8), np.uint8, "uint8")
    sock = serve([bytes(cut)], end=False)
    with pytest.raises(_slab.BulkUnavailable) as e:
        r.bulk(sock)
    assert not e.value.switch_off
    sock.close()


def test_a_frame_that_is_not_a_block_is_data_loss() -> None:
    r = reader((2, 2), np.uint8, "uint8")
    h = gpb.ReadSlabResponse(header=gpb.SlabHeader(shape=[2, 2])).SerializeToString()
    sock = serve([frame(h)])
    with pytest.raises(ZarrgateError) as e:
        r.bulk(sock)
    assert e.value.code == grpc.StatusCode.DATA_LOSS and "not a block" in str(e.value)
    sock.close()


def test_a_block_outside_the_slab_is_data_loss() -> None:
    arr = np.zeros((4, 4), np.uint8)
    bad = frame(gpb.ReadSlabResponse(block=gpb.Block(origin=[3, 0], shape=[2, 4],
                                                     data=bytes(8))).SerializeToString())
    r = reader(arr.shape, arr.dtype, "uint8")
    sock = serve([bad])
    with pytest.raises(ZarrgateError) as e:
        r.bulk(sock)
    assert e.value.code == grpc.StatusCode.DATA_LOSS
    sock.close()


def test_offers_and_stream_blocks_that_break_the_protocol() -> None:
    p = _slab.plan(..., (2, 2))
    for offer in (gpb.BulkOffer(port=0, ticket=TICKET), gpb.BulkOffer(port=70000, ticket=TICKET),
                  gpb.BulkOffer(port=5, ticket=b"short")):
        r = _slab.Reader("x", _slab.Sink("x", p, np.dtype(np.uint8), "uint8"), _slab.Stats(), None)
        h = gpb.SlabHeader(shape=[2, 2], data_type="uint8", element_size=1, bulk=offer)
        with pytest.raises(ZarrgateError) as e:
            r.message(gpb.ReadSlabResponse(header=h).SerializeToString())
        assert e.value.code == grpc.StatusCode.DATA_LOSS
    # After an offer, a block in the stream is not the protocol.
    r = reader((2, 2), np.uint8, "uint8")
    with pytest.raises(ZarrgateError) as e:
        r.message(gpb.ReadSlabResponse(block=gpb.Block(origin=[0, 0], shape=[2, 2],
                                                       data=bytes(4))).SerializeToString())
    assert e.value.code == grpc.StatusCode.DATA_LOSS


def test_the_hello_and_the_ticket_are_sent() -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    sock = _slab.bulk_connect("127.0.0.1", port, TICKET, None, "127.0.0.1")
    conn, _ = srv.accept()
    assert conn.recv(24, socket.MSG_WAITALL) == b"ZGBULK1\n" + TICKET
    assert sock.gettimeout() is None  # blocking once connected
    for s in (sock, conn, srv):
        s.close()
    # A closed port: BulkUnavailable (the read is made again without bulk).
    with pytest.raises(_slab.BulkUnavailable):
        _slab.bulk_connect("127.0.0.1", port, TICKET, None, "127.0.0.1")


def test_the_bulk_host_defaults_to_the_host_dialled() -> None:
    for addr, host in [("127.0.0.1:5", "127.0.0.1"), ("[::1]:5", "::1"),
                       ("dns:///gw.example:443", "gw.example"), ("unix:///tmp/s", "localhost"),
                       ("grpcs://gw:1", "gw")]:
        c = Conn.make(addr)
        assert c.host() == host, addr
        assert _slab.bulk_address(gpb.BulkOffer(port=9), c.host()) == (host, 9)
        assert _slab.bulk_address(gpb.BulkOffer(host="h", port=9), c.host()) == ("h", 9)
    assert Conn.make("gw:1").server_name([("grpc.ssl_target_name_override", "n")]) == "n"


def test_bulk_is_asked_for_reads_of_a_mebibyte_and_more(monkeypatch) -> None:
    sw = _slab.BulkSwitch(True)
    small = _slab.Sink("x", _slab.plan(..., (1024, 255)), np.dtype(np.float32), "float32")
    big = _slab.Sink("x", _slab.plan(..., (1024, 256)), np.dtype(np.float32), "float32")
    strings = _slab.Sink("x", _slab.plan(..., (1 << 16,)), _slab.string_dtype(), "string")
    assert not sw.ask(small) and sw.ask(big) and sw.ask(strings)
    sw.failed()
    assert not sw.ask(big)
    monkeypatch.setattr(_slab.time, "monotonic", lambda: 1e12)
    assert sw.ask(big)
    assert not _slab.BulkSwitch(False).ask(big)
    assert _wire.parse(gpb.ReadSlabResponse(header=gpb.SlabHeader(
        bulk=gpb.BulkOffer(port=1))).SerializeToString())[1].bulk.port == 1


def test_a_frame_buffer_is_reused_only_once_its_block_is_copied(monkeypatch) -> None:
    """Copies that lag a batch (two frames) behind: a copier that runs a
    batch only once the next one is handed over. No buffer is received
    into before its block is in place."""

    class Lagging:
        def __init__(self) -> None:
            self.pending: list = []

        def submit(self, b) -> None:
            self.pending.append(b)
            if len(self.pending) > 1:
                self.pending.pop(0).run()

        def drain(self) -> None:
            while self.pending:
                self.pending.pop(0).run()

    lag = Lagging()
    wait = _slab.Batches.wait

    def drained_wait(self) -> None:
        lag.drain()
        wait(self)

    monkeypatch.setattr(_slab.Batches, "wait", drained_wait)
    monkeypatch.setattr(_slab, "COPIER_MIN", 0)
    monkeypatch.setattr(_slab, "BULK_COPIER", True)
    monkeypatch.setattr(_slab, "BULK_BATCH_BYTES", 1000)  # a batch every two frames
    arr = np.arange(64 * 50, dtype=np.int32).reshape(64, 50)
    r = reader(arr.shape, arr.dtype, "int32", lag)
    sock = serve(block_frames(arr, 3))
    r.bulk(sock)
    np.testing.assert_array_equal(r.done(), arr)
    sock.close()
