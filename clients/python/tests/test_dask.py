"""zarrgate.to_dask / zarrgate.to_zarrgate against a real gateway: a
distributed.LocalCluster of two worker processes writes a 1 GiB array and
reduces it as numpy would, and writes disjoint blocks concurrently into
shared shards without losing any; pickled arrays share one client per
process."""

from __future__ import annotations

import pickle

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client as DaskClient
from distributed import LocalCluster

import zarrgate
from zarrgate import _pool


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes of one thread each: every task runs in a
    process that got the array pickled and reopened its own channel."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit="3GiB") as lc:
        with DaskClient(lc) as dc:
            yield dc


@pytest.fixture
def client(zarrgate_server):
    with zarrgate.connect(zarrgate_server.addr) as c:
        yield c


def test_pickled_arrays_share_a_process_client(client) -> None:
    a = client.create_array("pk/x", (6, 5), "int32", (2, 5))
    a[...] = np.arange(30).reshape(6, 5)
    b1 = pickle.loads(pickle.dumps(a))
    b2 = pickle.loads(pickle.dumps(client.open_array("pk/x")))
    # Unpickled: the metadata as pickled, the process's one client.
    assert (b1.shape, b1.dtype, b1.chunks, b1.path) == (a.shape, a.dtype, a.chunks, "pk/x")
    assert b1.client is b2.client and b1.client is not client
    assert b1.client is _pool.client(client._conn, client.timeout, client.shared_memory,
                                     client.channel_options)
    np.testing.assert_array_equal(b1[...], np.arange(30).reshape(6, 5))
    b2[1, :] = -1
    assert a[1, :].tolist() == [-1] * 5
    # Attributes updated since it was opened travel too.
    a.update_attributes({"units": "K"})
    assert pickle.loads(pickle.dumps(a)).attrs == {"units": "K"}
    # Other settings, another client.
    with zarrgate.connect(client.addr, timeout=30) as c30:
        b3 = pickle.loads(pickle.dumps(c30.open_array("pk/x")))
    assert b3.client is not b1.client and b3.client.timeout == 30


def test_pickled_array_carries_the_token(secure_server, monkeypatch) -> None:
    """A worker needs neither the CA file nor $ZARRGATE_TOKEN: both travel
    in the pickle (which is why a pickled array is a secret)."""
    monkeypatch.setenv("ZARRGATE_TOKEN", secure_server.tokens["alice"])
    c = zarrgate.connect(secure_server.addr, tls_ca=secure_server.certs.ca)
    a = c.create_array("proj/t", (4,), "int16", (2,))
    a[...] = [1, 2, 3, 4]
    monkeypatch.delenv("ZARRGATE_TOKEN")
    b = pickle.loads(pickle.dumps(a))
    assert b.client._conn.token == secure_server.tokens["alice"]
    assert b[...].tolist() == [1, 2, 3, 4]
    assert list(zarrgate.to_dask(b).compute(scheduler="threads")) == [1, 2, 3, 4]
    c.close()


def test_to_dask_chunks_and_names(client) -> None:
    data = np.arange(60 * 80, dtype="float32").reshape(60, 80)
    a = client.create_array("d/x", data.shape, "float32", (15, 20), shards=(30, 40))
    a[...] = data
    x = zarrgate.to_dask(a)
    assert x.chunks == ((15,) * 4, (20,) * 4) and x.dtype == np.float32
    assert zarrgate.to_dask(a, "shards").chunks == ((30, 30), (40, 40))
    # "auto": whole shards (here the whole array fits one block).
    assert all(c % 30 == 0 for c in zarrgate.to_dask(a, "auto").chunks[0][:-1])
    assert zarrgate.to_dask(a, (7, 33)).chunks[0] == (7,) * 8 + (4,)
    # The same array (opened again, on another client) gives the same
    # graph; other chunks, another array or another path do not.
    with zarrgate.connect(client.addr) as c2:
        assert zarrgate.to_dask(c2.open_array("d/x")).name == x.name
    assert zarrgate.to_dask(a, "shards").name != x.name
    b = client.create_array("d/y", data.shape, "float32", (15, 20), shards=(30, 40))
    assert zarrgate.to_dask(b).name != x.name
    assert zarrgate.to_dask(a, name="mine").name == "mine"
    for chunks in (None, "shards", (7, 33)):
        for sched in ("threads", "synchronous"):
            np.testing.assert_array_equal(
                zarrgate.to_dask(a, chunks).compute(scheduler=sched), data)
    np.testing.assert_array_equal(zarrgate.to_dask(a)[5:47:3, -9].compute(), data[5:47:3, -9])
    with pytest.raises(TypeError, match="zarrgate.Array"):
        zarrgate.to_dask(data)


async def test_to_dask_of_an_asyncio_array(zarrgate_server) -> None:
    # An array opened with zarrgate.aio: its tasks read through this
    # process's synchronous client with the same settings.
    import zarrgate.aio

    data = np.arange(40 * 30, dtype="int16").reshape(40, 30)
    async with zarrgate.aio.connect(zarrgate_server.addr) as c:
        a = await c.create_array("aio-dask/x", data.shape, "int16", (16, 16))
        await a.write(..., data)
        x = zarrgate.to_dask(a)
        assert x.chunks == ((16, 16, 8), (16, 14))
        np.testing.assert_array_equal(x.compute(scheduler="threads"), data)
        with zarrgate.connect(zarrgate_server.addr) as s:
            assert x.name == zarrgate.to_dask(s.open_array("aio-dask/x")).name


def test_to_dask_edge_arrays(client) -> None:
    z = client.create_array("e/z", (), "float64")
    z[()] = 3.5
    assert zarrgate.to_dask(z).compute(scheduler="threads") == 3.5
    e = client.create_array("e/e", (0, 4), "int8", (2, 2))
    assert zarrgate.to_dask(e).compute(scheduler="threads").shape == (0, 4)
    s = client.create_array("e/s", (5,), str, (2,))
    s[...] = np.array(["a", "bb", "", "dd", "é"], dtype=object)
    assert zarrgate.to_dask(s).compute(scheduler="threads").tolist() == ["a", "bb", "", "dd", "é"]
    zarrgate.to_zarrgate(da.from_array(np.array(["x", "yy", "z", "", "w"], dtype=object), chunks=2), s)
    assert s[...].tolist() == ["x", "yy", "z", "", "w"]


def test_to_zarrgate_checks(client) -> None:
    a = client.create_array("w/x", (10, 12), "int32", (5, 4))
    with pytest.raises(ValueError, match=r"shape \(10, 11\)"):
        zarrgate.to_zarrgate(da.zeros((10, 11), dtype="int32"), a)
    with pytest.raises(ValueError, match="region"):
        zarrgate.to_zarrgate(da.zeros((3, 3), dtype="int32"), a, (slice(0, 3), slice(0, 4)))
    with pytest.raises(TypeError, match="tuple of slices"):
        zarrgate.to_zarrgate(da.zeros((12,), dtype="int32"), a, (0, slice(None)))
    with pytest.raises(ValueError, match="step 1"):
        zarrgate.to_zarrgate(da.zeros((5, 12), dtype="int32"), a, (slice(0, 10, 2), slice(None)))
    with pytest.raises(TypeError, match="into a int32 array"):
        zarrgate.to_zarrgate(da.from_array(np.full((10, 12), "x")), a)
    with pytest.raises(TypeError, match="dask array"):
        zarrgate.to_zarrgate(np.zeros((10, 12), "int32"), a)
    # A region, negative bounds counting from the end; compute=False
    # writes nothing until computed.
    d = zarrgate.to_zarrgate(da.ones((3, 4), dtype="int32", chunks=2), a,
                             (slice(-4, -1), slice(2, 6)), compute=False)
    assert not a[...].any()
    dask.compute(d, scheduler="threads")
    want = np.zeros((10, 12), "int32")
    want[6:9, 2:6] = 1
    np.testing.assert_array_equal(a[...], want)


#: The 1 GiB array: float64, 64 MiB shards of 16 MiB chunks, uncompressed.
BIG = (8192, 16384)
BIG_SHARDS = (1024, 8192)
BIG_CHUNKS = (512, 4096)


def _big_parts() -> tuple[np.ndarray, np.ndarray]:
    """The big array is r[i] + c[j]: integers in float64, so that every
    partial sum is exact whatever the order of the additions; no two bands
    of rows or blocks of columns have the same sums."""
    return (np.arange(BIG[0]) % 97).astype(np.float64), (np.arange(BIG[1]) % 89).astype(np.float64)


def test_reduction_over_1gib_equals_numpy(zarrgate_server, cluster) -> None:
    r, c = _big_parts()
    # numpy's answers, from the two vectors (the test never holds 1 GiB).
    rows = BIG[1] * r + c.sum()
    cols = BIG[0] * c + r.sum()
    total = float(BIG[1] * r.sum() + BIG[0] * c.sum())
    with zarrgate.connect(zarrgate_server.addr) as zc:
        a = zc.create_array("big/x", BIG, "float64", BIG_CHUNKS, shards=BIG_SHARDS,
                            compressor=None)
        assert a.nbytes == 1 << 30
        # Written by the workers, a shard per task (no read-modify-write),
        # each block made where it is written.
        dr = (da.arange(BIG[0], chunks=BIG_SHARDS[0]) % 97).astype(np.float64)
        dcol = (da.arange(BIG[1], chunks=BIG_SHARDS[1]) % 89).astype(np.float64)
        cluster.compute(zarrgate.to_zarrgate(dr[:, None] + dcol[None, :], a, compute=False),
                        sync=True)
        np.testing.assert_array_equal(a[4000:4003, 9000:9400], np.add.outer(r[4000:4003], c[9000:9400]))
        x = zarrgate.to_dask(a, "shards")
        assert x.numblocks == (8, 2)
        got_total, got_mean, top, by_row, by_col = cluster.compute(
            [x.sum(), x.mean(), x.max(), x.sum(axis=1), x.sum(axis=0)], sync=True)
    # 16 tasks, each with the array pickled in it: one client (channel)
    # per worker process that ran any.
    clients = cluster.run(_pool.size)
    assert set(clients.values()) <= {0, 1} and sum(clients.values()) >= 1, clients
    assert got_total == total == rows.sum() == cols.sum()
    assert got_mean == total / a.size
    assert top == 96 + 88
    # Per row and per column: a block read from the wrong place would show.
    np.testing.assert_array_equal(by_row, rows)
    np.testing.assert_array_equal(by_col, cols)


def _pattern(shape: tuple[int, ...]) -> np.ndarray:
    # Never the fill value (0): a lost block reads back as zeros or as
    # another run's values.
    return np.arange(1, 1 + np.prod(shape), dtype="int32").reshape(shape)


@pytest.mark.parametrize(
    "blocks",
    [
        pytest.param((32, 384), id="shard-aligned"),
        pytest.param((8, 96), id="chunk-aligned-in-shared-shards"),
        pytest.param((7, 100), id="unaligned"),
    ],
)
def test_concurrent_disjoint_writes_lose_nothing(zarrgate_server, cluster, blocks) -> None:
    """Two worker processes write disjoint blocks of one array, many into
    the same shard (and, unaligned, into the same chunk) at once: every
    element is there afterwards. Each partly covered shard is a
    read-modify-write that only the gateway's conditional write keeps
    from overwriting a concurrent one's."""
    shape, shards, chunks = (64, 768), (32, 384), (8, 96)
    with zarrgate.connect(zarrgate_server.addr) as c:
        a = c.create_array("w/x", shape, "int32", chunks, shards=shards, compressor=None)
        for run in range(2):
            # The second run overwrites the first's values: a lost update
            # there leaves an old value, not a zero.
            want = _pattern(shape) * (1 if run == 0 else -1)
            x = da.from_array(want, chunks=blocks)
            cluster.compute(zarrgate.to_zarrgate(x, a, compute=False), sync=True)
            np.testing.assert_array_equal(a[...], want)
