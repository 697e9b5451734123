"""Small reads (under BULK_MIN_BYTES) over a small-reads connection
(gateway.proto's OpenSmallReads), against real servers: the same values as
numpy and as the gRPC stream, one connection kept for many reads; a failed
read raises what the stream's read raises; a connection the gateway closed
makes the read again through the stream; a gateway without a bulk listener
is read through the stream."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import zarrgate
from zarrgate import _slab
from zarrgate.errors import ZarrgateError

from conftest import start_server, stop_server


@pytest.fixture(scope="module")
def server(zarrgate_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("small")
    proc, addr = start_server(zarrgate_bin, base / "root", base / "serve.log", "--bulk-listen", "127.0.0.1:0")
    try:
        yield addr
    finally:
        stop_server(proc)


KEYS = [(slice(3, 67), slice(100, 164)), (5,), (slice(None), -1), (slice(10, 200, 7), slice(1, None, 9)),
        (slice(250, 260), slice(0, 300))]


@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8", "complex128"])
def test_small_reads_equal_numpy_and_the_stream(server, dtype) -> None:
    data = (np.random.default_rng(3).random((300, 301)) * 100).astype(dtype)
    with zarrgate.connect(server, shared_memory=False) as c, \
            zarrgate.connect(server, shared_memory=False, bulk=False) as g:
        c.create_array(f"s/{dtype}", data.shape, dtype, (64, 100))[...] = data
        a, b = c.open_array(f"s/{dtype}"), g.open_array(f"s/{dtype}")
        for _ in range(3):
            for key in KEYS:
                got = a[key]
                np.testing.assert_array_equal(got, data[key])
                np.testing.assert_array_equal(b[key], got)
            out = np.empty((64, 64), dtype=data.dtype)
            a.read(KEYS[0], out=out)
            np.testing.assert_array_equal(out, data[KEYS[0]])
        assert c.stats.small_reads == 3 * (len(KEYS) + 1) and c.stats.bulk_reads == 0
        assert g.stats.small_reads == 0
        assert len(c._small_idle) == 1, "one connection kept for reads one after another"


def test_small_read_errors_as_the_stream(server) -> None:
    with zarrgate.connect(server, shared_memory=False) as c, \
            zarrgate.connect(server, shared_memory=False, bulk=False) as g:
        c.create_array("gone", (10, 10), "int32", (5, 5))
        a, b = c.open_array("gone"), g.open_array("gone")
        assert a[:2, :2].shape == (2, 2)
        c.delete("gone")
        with pytest.raises(ZarrgateError) as via_conn:
            a[:2, :2]
        with pytest.raises(ZarrgateError) as via_stream:
            b[:2, :2]
        assert type(via_conn.value) is type(via_stream.value)
        assert via_conn.value.code == via_stream.value.code
        # The connection outlives the failed read.
        c.create_array("back", (4, 4), "int32", (2, 2))[...] = np.arange(16).reshape(4, 4)
        np.testing.assert_array_equal(c.open_array("back")[1:3, 1:3], [[5, 6], [9, 10]])
        assert c.stats.small_reads == 2 and len(c._small_idle) == 1


def test_a_closed_connection_reads_through_the_stream(server) -> None:
    with zarrgate.connect(server, shared_memory=False) as c:
        a = c.create_array("closed", (64, 64), "float32", (32, 32))
        a[...] = np.ones((64, 64), dtype=np.float32)
        assert a[:4, :4].sum() == 16 and c.stats.small_reads == 1
        # The gateway's end of it closed (as when it idled or drained).
        c._small_idle[0].sock.shutdown(socket.SHUT_RDWR)
        assert a[:4, :4].sum() == 16
        assert c.stats.small_reads == 1 and c.stats.socket_reads == 2
        # The next small read opens another connection.
        assert a[4:8, :4].sum() == 16 and c.stats.small_reads == 2


def test_no_bulk_listener_reads_through_the_stream(zarrgate_bin: Path, tmp_path: Path) -> None:
    proc, addr = start_server(zarrgate_bin, tmp_path / "root", tmp_path / "serve.log", "--bulk-listen", "off")
    try:
        with zarrgate.connect(addr, shared_memory=False) as c:
            a = c.create_array("n", (50, 50), "int16", (10, 10))
            a[...] = np.arange(2500, dtype=np.int16).reshape(50, 50)
            for i in range(5):
                np.testing.assert_array_equal(a[i:i + 3, 7], np.arange(2500, dtype=np.int16).reshape(50, 50)[i:i + 3, 7])
            assert c.stats.small_reads == 0 and c.stats.socket_reads == 5
            assert c._small_off, "a gateway without small-reads connections is not asked again"
    finally:
        stop_server(proc)


def test_threads_share_a_bounded_set_of_connections(server, monkeypatch) -> None:
    """Threads reading at once keep at most SMALL_MAX connections open
    (reads beyond them go through the stream) and reuse them: the
    connections opened stay at most SMALL_MAX over many rounds."""
    monkeypatch.setattr(_slab, "SMALL_MAX", 3)
    data = np.arange(200 * 200, dtype=np.float32).reshape(200, 200)
    with zarrgate.connect(server, shared_memory=False) as c:
        a = c.create_array("threads", data.shape, "float32", (50, 50))
        a[...] = data
        errs: list[BaseException] = []

        def reader(seed: int) -> None:
            rng = np.random.default_rng(seed)
            try:
                for _ in range(40):
                    y, x = (int(v) for v in rng.integers(0, 180, 2))
                    np.testing.assert_array_equal(a[y:y + 20, x:x + 20], data[y:y + 20, x:x + 20])
            except BaseException as e:  # noqa: BLE001 - reported below
                errs.append(e)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errs, errs[0]
        assert 1 <= c._small_most <= 3
        assert c.stats.small_reads > 0 and c.stats.socket_reads == 8 * 40
        assert len(c._small_idle) <= 3
