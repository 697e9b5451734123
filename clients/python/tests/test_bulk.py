"""Reads whose blocks come over the gateway's bulk connection
(`zarrgate serve --bulk-listen`; gateway.proto's BulkOffer), against real
servers: the same results as the gRPC stream and numpy (several dtypes,
strided selections, strings, blocks(), asyncio); the blocks really came
over the bulk connection (the client's counters, and the server's
zarrgate_bulk_connections_total); a bulk connection that cannot be opened
(a closed port) makes the read again through the stream; a read that fails
on the server midway raises what the stream's read raises; TLS and mTLS.
Frame-level cases are in test_bulk_frames.py."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr.errors

import zarrgate
import zarrgate.aio
from zarrgate import _slab
from zarrgate.errors import ZarrgateError

from conftest import start_server, stop_server


@dataclass(frozen=True)
class BulkServer:
    addr: str
    root: Path
    log: Path
    admin: str  # host:port of /metrics


def _start(binary: Path, base: Path, *extra: str) -> tuple[object, BulkServer]:
    proc, addr = start_server(binary, base / "root", base / "serve.log",
                              "--bulk-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                              *extra)
    m = re.search(rb"admin_url=http://(127\.0\.0\.1:\d+)", (base / "serve.log").read_bytes())
    admin = m.group(1).decode() if m else ""
    return proc, BulkServer(addr, base / "root", base / "serve.log", admin)


@pytest.fixture(scope="module")
def server(zarrgate_bin, tmp_path_factory) -> Iterator[BulkServer]:
    proc, s = _start(zarrgate_bin, tmp_path_factory.mktemp("bulk"))
    try:
        yield s
    finally:
        stop_server(proc)


def bulk_connections(s: BulkServer) -> float:
    """The server's zarrgate_bulk_connections_total{result="accepted"}."""
    assert s.admin, f"no admin address in the log:\n{s.log.read_text()}"
    text = urllib.request.urlopen(f"http://{s.admin}/metrics", timeout=10).read().decode()
    vals = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith('zarrgate_bulk_connections_total{result="accepted"}')]
    assert len(vals) == 1, "no zarrgate_bulk_connections_total in /metrics"
    return vals[0]


CASES = [
    # dtype, shape, chunks, keys
    ("float32", (1024, 768), (256, 128), [..., (slice(3, 1000, 7), slice(None, None, 3)), (5,),
                                          (slice(None), -1), (slice(100, 900, 2), slice(7, 700))]),
    ("int16", (40, 50, 60), (16, 16, 16), [..., (slice(None), 3, slice(None, None, 5)),
                                           (Ellipsis, slice(1, None, 4))]),
    ("complex128", (300, 301), (64, 100), [..., (slice(1, None, 3),)]),
    ("bool", (999, 1001), (100, 100), [..., (slice(None, None, 2), slice(None, None, 2))]),
    ("uint8", (5000, 300), (1000, 64), [..., (slice(17, 4003, 13),)]),
]


@pytest.mark.parametrize("dtype,shape,chunks,keys", CASES, ids=[c[0] for c in CASES])
def test_bulk_reads_equal_the_stream_and_numpy(server, monkeypatch, dtype, shape, chunks, keys) -> None:
    """Every read asks for bulk here (BULK_MIN_BYTES 0), small and strided
    ones too."""
    monkeypatch.setattr(_slab, "BULK_MIN_BYTES", 0)
    rng = np.random.default_rng(11)
    data = (rng.random(shape) * 1000).astype(dtype) if dtype != "bool" else rng.random(shape) > 0.5
    path = f"eq/{dtype}"
    with zarrgate.connect(server.addr, shared_memory=False) as b, \
            zarrgate.connect(server.addr, shared_memory=False, bulk=False) as g:
        assert b.bulk and not g.bulk
        b.create_array(path, shape, dtype, chunks)[...] = data
        ab, ag = b.open_array(path), g.open_array(path)
        for key in keys:
            want = data[key]
            got = ab[key]
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(ag[key], got)
            assert got.dtype == want.dtype and got.shape == want.shape
        assert b.stats.bulk_reads == len(keys) and b.stats.socket_bytes == 0
        assert b.stats.bulk_bytes == sum(data[k].nbytes for k in keys)
        assert g.stats.bulk_reads == 0 and g.stats.socket_bytes == b.stats.bulk_bytes
        # Negative steps are refused before any call, as without bulk.
        with pytest.raises(zarr.errors.NegativeStepError):
            ab[::-1]


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "aio"])
async def test_bulk_blocks_copied_by_the_copier_threads(server, monkeypatch, sync) -> None:
    """With BULK_COPIER (off by default), the blocks of reads of COPIER_MIN
    bytes and more are copied into place on the copier's threads."""
    monkeypatch.setattr(_slab, "BULK_COPIER", True)
    monkeypatch.setattr(_slab, "BULK_BATCH_BYTES", 300 << 10)
    data = np.random.default_rng(13).random((1500, 1400)).astype(np.float32)  # 8 MiB
    runs = []
    real = _slab.Batches.add

    def counted(self, *args):
        runs.append(1)
        return real(self, *args)

    monkeypatch.setattr(_slab.Batches, "add", counted)
    with zarrgate.connect(server.addr, shared_memory=False) as c:
        c.create_array(f"cp/{sync}", data.shape, "float32", (100, 300))[...] = data
        if sync:
            got, got2 = c.open_array(f"cp/{sync}")[...], c.open_array(f"cp/{sync}")[7::3, 5:]
            stats = c.stats
    if not sync:
        async with zarrgate.aio.connect(server.addr, shared_memory=False) as ac:
            a = await ac.open_array(f"cp/{sync}")
            got, got2 = await a[...], await a[7::3, 5:]
            stats = ac.stats
    np.testing.assert_array_equal(got, data)
    np.testing.assert_array_equal(got2, data[7::3, 5:])
    assert stats.bulk_reads == 2 and stats.bulk_bytes == data.nbytes + data[7::3, 5:].nbytes
    assert len(runs) == 15 * 5  # the full read's blocks (the strided one is under COPIER_MIN)


def test_the_server_counts_the_bulk_connections(server) -> None:
    """A 4 MiB read at the defaults (bulk for 1 MiB and more) takes one
    bulk connection; a 64 KiB one goes over a small-reads connection (one
    more, kept for the next small reads); a bulk=False client takes none."""
    data = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
    with zarrgate.connect(server.addr, shared_memory=False) as c, \
            zarrgate.connect(server.addr, shared_memory=False, bulk=False) as g:
        a = c.create_array("count/x", data.shape, "float32", (256, 256))
        a[...] = data
        before = bulk_connections(server)
        np.testing.assert_array_equal(a[...], data)
        assert bulk_connections(server) == before + 1
        assert c.stats.bulk_bytes == data.nbytes and c.stats.socket_bytes == 0
        np.testing.assert_array_equal(a[:128, :128], data[:128, :128])
        np.testing.assert_array_equal(a[128:256, :128], data[128:256, :128])
        np.testing.assert_array_equal(g.open_array("count/x")[...], data)
        np.testing.assert_array_equal(g.open_array("count/x")[:128, :128], data[:128, :128])
        # The listener counts a connection after handing it over, which
        # may come after the reads on it.
        deadline = time.monotonic() + 10
        while bulk_connections(server) < before + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bulk_connections(server) == before + 2
        assert c.stats.bulk_reads == 1 and c.stats.small_reads == 2
        assert c.stats.socket_bytes == 2 * 128 * 128 * 4
        assert g.stats.small_reads == 0 and g.stats.bulk_reads == 0


def test_strings_and_blocks_through_bulk(server, monkeypatch) -> None:
    monkeypatch.setattr(_slab, "BULK_MIN_BYTES", 0)
    words = np.array([f"w{i}-" + "é" * (i % 5) for i in range(3000)], dtype=object).reshape(60, 50)
    data = np.random.default_rng(2).random((600, 500))
    with zarrgate.connect(server.addr, shared_memory=False) as c:
        s = c.create_array("str/s", words.shape, str, (16, 16))
        s[...] = words
        got = s[...]
        assert got.tolist() == words.tolist()
        assert s[3:50:4, ::7].tolist() == words[3:50:4, ::7].tolist()
        raw = np.array([bytes([i % 256]) * (i % 7) for i in range(2000)], dtype=object)
        r = c.create_array("str/b", raw.shape, bytes, (300,))
        r[...] = raw
        assert r[...].tolist() == raw.tolist()
        assert c.stats.bulk_reads == 3
        a = c.create_array("str/a", data.shape, "float64", (100, 100))
        a[...] = data
        seen = 0
        for k, piece in a.blocks(max_bytes=1 << 19):
            np.testing.assert_array_equal(piece, data[k])
            seen += piece.size
        assert seen == data.size
        assert c.stats.bulk_bytes >= data.nbytes and c.stats.socket_bytes == 0


def test_a_bulk_connection_that_cannot_be_opened_falls_back(server, monkeypatch) -> None:
    """The offer's port is closed: the read is made again through the
    stream, and for BULK_RETRY_AFTER seconds no read asks for bulk."""
    import socket

    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    monkeypatch.setattr(_slab, "bulk_address", lambda offer, dialled: ("127.0.0.1", port))
    data = np.random.default_rng(4).random((512, 512))
    with zarrgate.connect(server.addr, shared_memory=False) as c:
        a = c.create_array("fb/x", data.shape, "float64", (128, 128))
        a[...] = data
        np.testing.assert_array_equal(a[...], data)
        assert c.stats.bulk_fallbacks == 1 and c.stats.bulk_reads == 0
        assert c.stats.socket_reads == 2 and c.stats.socket_bytes == data.nbytes
        np.testing.assert_array_equal(a[...], data)  # not asked again
        assert c.stats.bulk_fallbacks == 1 and c.stats.socket_reads == 3
        c._bulk.off_until = 0.0  # as BULK_RETRY_AFTER seconds later
        monkeypatch.undo()
        np.testing.assert_array_equal(a[...], data)  # asked again, and it works
        assert c.stats.bulk_reads == 1 and c.stats.bulk_bytes == data.nbytes


def test_a_server_advertising_an_unreachable_bulk_address(zarrgate_bin, tmp_path) -> None:
    """--bulk-advertise naming a host where nothing listens (127.0.0.2: the
    listener is on 127.0.0.1): the read still succeeds, through the
    stream."""
    proc, s = _start(zarrgate_bin, tmp_path, "--bulk-advertise", "127.0.0.2")
    try:
        data = np.arange(300 * 1000, dtype=np.int32).reshape(300, 1000)
        with zarrgate.connect(s.addr, shared_memory=False) as c:
            a = c.create_array("adv/x", data.shape, "int32", (100, 100))
            a[...] = data
            np.testing.assert_array_equal(a[...], data)
            assert c.stats.bulk_fallbacks == 1 and c.stats.bulk_reads == 0
    finally:
        stop_server(proc)


def bulk_refusals(s: BulkServer, result: str) -> float:
    text = urllib.request.urlopen(f"http://{s.admin}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(f'zarrgate_bulk_connections_total{{result="{result}"}}'))


@pytest.mark.parametrize("mode", ["sync", "aio"])
async def test_a_bulk_connection_the_gateway_closes_before_any_frame(server, monkeypatch, mode) -> None:
    """A ticket the gateway does not know (here: changed on its way) is
    refused, the connection closed before any frame: the read is made
    again through the stream at once (not after the gateway's ticket
    timeout), and the next read asks for bulk again."""
    real = _slab.bulk_connect

    def wrong_ticket(host, port, ticket, *args):
        return real(host, port, bytes(b ^ 0xFF for b in ticket), *args)

    data = np.random.default_rng(12).random((512, 512))
    with zarrgate.connect(server.addr) as w:
        w.create_array(f"tk/{mode}", data.shape, "float64", (128, 128))[...] = data
    before = bulk_refusals(server, "unknown_ticket")
    monkeypatch.setattr(_slab, "bulk_connect", wrong_ticket)
    if mode == "sync":
        c = zarrgate.connect(server.addr, shared_memory=False)
        a = c.open_array(f"tk/{mode}")
        read = lambda: a[...]  # noqa: E731
    else:
        c = zarrgate.aio.connect(server.addr, shared_memory=False)
        a = await c.open_array(f"tk/{mode}")
        read = a.read
    try:
        got = read() if mode == "sync" else await read()
        np.testing.assert_array_equal(got, data)
        assert c.stats.bulk_fallbacks == 1 and c.stats.bulk_reads == 0
        assert c.stats.socket_bytes == data.nbytes
        assert bulk_refusals(server, "unknown_ticket") == before + 1
        monkeypatch.undo()
        got = read() if mode == "sync" else await read()
        np.testing.assert_array_equal(got, data)
        assert c.stats.bulk_reads == 1 and c.stats.bulk_bytes == data.nbytes
    finally:
        if mode == "sync":
            c.close()
        else:
            await c.close()


def _corrupt(root: Path, path: str, key: str) -> None:
    f = root / path / "c" / key
    assert f.is_file(), f
    f.write_bytes(b"\x28\xb5\x2f\xfd" + b"not zstd at all" * 10)


def test_a_read_failing_midway_raises_what_the_stream_raises(server) -> None:
    """A chunk that does not decode, after several blocks were sent: the
    bulk read's exception is the stream's (type, code, message)."""
    data = np.random.default_rng(6).random((2048, 1024)).astype(np.float32)
    with zarrgate.connect(server.addr, shared_memory=False) as c, \
            zarrgate.connect(server.addr, shared_memory=False, bulk=False) as g:
        c.create_array("bad/x", data.shape, "float32", (128, 128), compressor="zstd")[...] = data
        _corrupt(server.root, "bad/x", "15/7")  # the last chunk
        with pytest.raises(ZarrgateError) as viabulk:
            c.open_array("bad/x")[...]
        with pytest.raises(ZarrgateError) as viagrpc:
            g.open_array("bad/x")[...]
        assert c.stats.bulk_reads == 1 and c.stats.bulk_bytes > 0  # blocks came before
        assert type(viabulk.value) is type(viagrpc.value)
        assert viabulk.value.code == viagrpc.value.code
        assert str(viabulk.value) == str(viagrpc.value)
        # The client goes on: a good read through bulk after it.
        np.testing.assert_array_equal(c.open_array("bad/x")[:1024], data[:1024])
        assert c.stats.bulk_reads == 2


async def test_asyncio_reads_through_bulk(server, monkeypatch) -> None:
    data = np.random.default_rng(8).random((900, 700))
    async with zarrgate.aio.connect(server.addr, shared_memory=False) as c:
        a = await c.create_array("aio/x", data.shape, "float64", (128, 100))
        await a.write(..., data)
        np.testing.assert_array_equal(await a[...], data)
        np.testing.assert_array_equal(await a[1:800:3, 5:], data[1:800:3, 5:])
        assert c.stats.bulk_reads == 2 and c.stats.socket_bytes == 0
        import asyncio

        parts = await asyncio.gather(*(a.read(slice(i, i + 300)) for i in range(0, 900, 300)))
        np.testing.assert_array_equal(np.concatenate(parts), data)
        assert c.stats.bulk_reads == 5
        with zarrgate.connect(server.addr, shared_memory=False, bulk=False) as g:
            g.create_array("aio/bad", (1024, 1024), "float32", (128, 128),
                           compressor="zstd")[...] = 1.5
            _corrupt(server.root, "aio/bad", "5/5")
            with pytest.raises(ZarrgateError) as viagrpc:
                g.open_array("aio/bad")[...]
        bad = await c.open_array("aio/bad")
        with pytest.raises(ZarrgateError) as viabulk:
            await bad[...]
        assert (type(viabulk.value), viabulk.value.code, str(viabulk.value)) == (
            type(viagrpc.value), viagrpc.value.code, str(viagrpc.value))
        # A closed port: through the stream again.
        import socket

        closed = socket.create_server(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        closed.close()
        monkeypatch.setattr(_slab, "bulk_address", lambda offer, dialled: ("127.0.0.1", port))
        np.testing.assert_array_equal(await a[...], data)
        assert c.stats.bulk_fallbacks == 1 and c.stats.socket_bytes == data.nbytes


@pytest.mark.parametrize("mtls", [False, True], ids=["tls", "mtls"])
def test_bulk_over_tls(zarrgate_bin, certs, tmp_path, mtls) -> None:
    """The bulk connection is TLS with the channel's settings (its CA, the
    client certificate under mTLS): blocks come over it; a client
    without the right CA cannot even open the channel."""
    extra = ["--tls-cert", str(certs.server), "--tls-key", str(certs.server_key)]
    if mtls:
        extra += ["--client-ca", str(certs.ca)]
    proc, s = _start(zarrgate_bin, tmp_path, *extra)
    try:
        kw = dict(tls_ca=certs.ca)
        if mtls:
            kw.update(tls_cert=certs.client, tls_key=certs.client_key)
        data = np.random.default_rng(9).random((700, 800)).astype(np.float32)
        with zarrgate.connect(s.addr, shared_memory=False, **kw) as c:
            a = c.create_array("tls/x", data.shape, "float32", (128, 128))
            a[...] = data
            np.testing.assert_array_equal(a[...], data)
            np.testing.assert_array_equal(a[::3, 1::2], data[::3, 1::2])
            assert c.stats.bulk_reads == 1 and c.stats.bulk_fallbacks == 0
            assert c.stats.bulk_bytes == data.nbytes
        # "localhost" is in the certificate too: the name checked is the
        # one dialled.
        port = s.addr.rsplit(":", 1)[1]
        with zarrgate.connect(f"localhost:{port}", shared_memory=False, **kw) as c:
            np.testing.assert_array_equal(c.open_array("tls/x")[...], data)
            assert c.stats.bulk_reads == 1 and c.stats.bulk_fallbacks == 0
    finally:
        stop_server(proc)


def test_bulk_setting_pickles_with_the_client(server) -> None:
    import pickle

    with zarrgate.connect(server.addr, bulk=False) as c:
        c.create_array("pk/x", (4,), "int16", (2,))[...] = [1, 2, 3, 4]
        c2 = pickle.loads(pickle.dumps(c))
        assert not c2.bulk
        a = pickle.loads(pickle.dumps(c.open_array("pk/x")))
        assert not a.client.bulk and a[...].tolist() == [1, 2, 3, 4]
        c2.close()
    with zarrgate.connect(server.addr) as c:
        c2 = pickle.loads(pickle.dumps(c))
        assert c2.bulk
        c2.close()
