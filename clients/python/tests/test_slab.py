"""The slab client (zarrgate.connect, zarrgate.aio) against a real gateway:
numpy indexing compared with numpy, writes read back, strings, blocks(),
the shared-memory path, asyncio, errors."""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import zarr
import zarr.errors
from zarr.storage import LocalStore

import zarrgate
import zarrgate.aio
from zarrgate import _slab, _wire
from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb


@pytest.fixture
def client(zarrgate_server):
    with zarrgate.connect(zarrgate_server.addr) as c:
        yield c


def _random_key(rng: np.random.Generator, shape: tuple[int, ...]):
    """A random basic index: ints (negative too), slices with positive
    steps and any bounds (numpy clips them), '...', None."""
    items = []
    for n in shape:
        r = rng.integers(0, 5)
        if r == 0:
            items.append(int(rng.integers(-n, n)))
        elif r == 1:
            items.append(slice(None))
        else:
            lo = int(rng.integers(-n - 3, n + 3))
            hi = int(rng.integers(-n - 3, n + 3))
            step = None if rng.integers(0, 3) == 0 else int(rng.integers(1, 7))
            items.append(slice(None if rng.integers(0, 6) == 0 else lo,
                               None if rng.integers(0, 6) == 0 else hi, step))
    if rng.integers(0, 4) == 0:  # an ellipsis in place of some items
        i = int(rng.integers(0, len(items) + 1))
        j = int(rng.integers(i, len(items) + 1))
        items[i:j] = [Ellipsis]
    if rng.integers(0, 6) == 0:
        items.insert(int(rng.integers(0, len(items) + 1)), None)
    if len(items) == 1 and rng.integers(0, 2) == 0:
        return items[0]
    return tuple(items)


def test_indexing_matches_numpy(client) -> None:
    """400 random basic indices on a 3-d array with edge chunks: the
    client's result equals numpy's, in shape, dtype and values."""
    shape = (23, 17, 30)
    data = np.random.default_rng(0).standard_normal(shape).astype("float64")
    a = client.create_array("prop/x", shape, "float64", (5, 4, 7))
    a[...] = data
    rng = np.random.default_rng(42)
    for _ in range(400):
        key = _random_key(rng, shape)
        want = data[key]
        got = a[key]
        assert type(got) is type(want), key
        assert np.shape(got) == np.shape(want), key
        np.testing.assert_array_equal(got, want, err_msg=str(key))
    # A 0-d array: () gives a scalar, ... a 0-d array, as numpy.
    z = client.create_array("prop/z", (), "int32", ())
    z[...] = 7
    assert z[()] == 7 and isinstance(z[()], np.int32)
    assert z[...].shape == () and isinstance(z[...], np.ndarray)


def test_bad_indices_are_refused_as_numpy_would(client) -> None:
    a = client.create_array("bad/x", (10, 10), "int8", (5, 5))
    for key in [(slice(None, None, -1),), (slice(5, 0, -2), 0)]:
        with pytest.raises(zarr.errors.NegativeStepError, match="reads forward only"):
            a[key]
        with pytest.raises(IndexError):
            a[key] = 1
    with pytest.raises(IndexError, match="out of bounds"):
        a[10]
    with pytest.raises(zarr.errors.BoundsCheckError):
        a[0, -11]
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(IndexError, match="arrays of indices"):
        a[[1, 2]]
    with pytest.raises(ValueError, match="step cannot be zero"):
        a[::0]
    with pytest.raises(ValueError, match="broadcast"):
        a[0:2, 0:3] = np.zeros((3, 2))


@pytest.mark.parametrize(
    ("dtype", "extra"),
    [
        ("float32", {}),
        (">i4", {}),  # big-endian input: written and read back by value
        ("uint16", {"shards": (20, 24)}),
        ("complex128", {"compressor": None}),
        ("bool", {"compressor": "gzip"}),
        ("float16", {}),
        ("int64", {"zarr_format": 2}),
    ],
)
def test_write_read_roundtrip(client, zarrgate_server, dtype: str, extra: dict) -> None:
    rng = np.random.default_rng(1)
    shape = (40, 48)
    data = (rng.standard_normal(shape) * 100).astype(dtype)
    a = client.create_array("rt/x", shape, dtype, (10, 12), fill_value=0,
                            attributes={"units": "m"}, dimension_names=["y", "x"], **extra)
    assert a.dtype == np.dtype(dtype).newbyteorder("=")
    assert a.shards == extra.get("shards")
    a[...] = data
    np.testing.assert_array_equal(a[...], data)
    # A partial write (read-modify-write of chunks), a broadcast scalar, a
    # broadcast row, a strided one; then the same through zarr-python's
    # own reader of the served directory.
    a[3:17:2, 5:30] = data[0, 0]
    data[3:17:2, 5:30] = data[0, 0]
    a[20:25, :] = data[39]
    data[20:25, :] = data[39]
    a[-1, ::5] = data[0, ::5]
    data[-1, ::5] = data[0, ::5]
    again = client.open_array("rt/x")
    np.testing.assert_array_equal(again[...], data)
    assert again.attrs == {"units": "m"}
    if extra.get("zarr_format") != 2:
        assert again.dims == ("y", "x")
    local = zarr.open_array(store=LocalStore(zarrgate_server.root, read_only=True), path="rt/x")
    np.testing.assert_array_equal(local[...], data)


def test_writes_are_streamed_in_blocks(client) -> None:
    """A 24 MiB write goes as ~1 MiB messages (the gateway's message limit
    is 64 MiB, so one message would pass: count them)."""
    a = client.create_array("big/x", (3, 1024, 2048), "float32", (1, 512, 512))
    msgs = list(_slab.write_messages("big/x", _slab.plan(..., a.shape), np.float32(2), a.dtype))
    assert len(msgs) == 1 + 24
    assert max(len(m) for m in msgs) <= _slab.WRITE_BLOCK_BYTES + 64
    a[...] = 2
    assert (a[...] == 2).all()


def test_strings(client, zarrgate_server) -> None:
    vals = np.array([[f"{i}-{j}-é" * (i % 3) for j in range(9)] for i in range(11)], dtype=object)
    s = client.create_array("str/s", vals.shape, str, (4, 4))
    assert s.dtype.kind in "OT"
    s[...] = vals
    got = s[...]
    assert got.dtype == s.dtype
    assert got.tolist() == vals.tolist()
    assert s[3, 2] == vals[3, 2]
    assert s[1:9:3, -2:].tolist() == vals[1:9:3, -2:].tolist()
    s[0, :] = "x"
    vals[0, :] = "x"
    assert s[...].tolist() == vals.tolist()
    local = zarr.open_array(store=LocalStore(zarrgate_server.root, read_only=True), path="str/s")
    assert local[...].tolist() == vals.tolist()
    b = client.create_array("str/b", (5,), "bytes", (2,))
    b[...] = np.array([b"a", b"", b"\x00\xff", b"dd", b"e"], dtype=object)
    assert b[...].tolist() == [b"a", b"", b"\x00\xff", b"dd", b"e"]


def test_blocks_tile_the_selection(client) -> None:
    data = np.arange(50 * 70, dtype="int32").reshape(50, 70)
    a = client.create_array("blk/x", data.shape, "int32", (8, 16), shards=(16, 32))
    a[...] = data
    for key, limit in [(..., 4096), ((slice(3, 47, 3), slice(5, None)), 2048), ((7, slice(None)), 100)]:
        seen = np.zeros(data.shape, dtype=int)
        touched: set[tuple[int, ...]] = set()
        n = 0
        for k, piece in a.blocks(key, max_bytes=limit):
            np.testing.assert_array_equal(piece, data[k])
            seen[k] += 1
            n += 1
            # Shard-aligned: no shard is touched by two pieces.
            cells = [
                {i // a.shards[d] for i in (range(it.start, it.stop, it.step) if isinstance(it, slice) else [it])}
                for d, it in enumerate(k)
            ]
            for cell in itertools.product(*cells):
                assert cell not in touched, (k, cell)
                touched.add(cell)
        # Together they cover the selection exactly once.
        mask = np.zeros(data.shape, dtype=int)
        mask[key] = 1
        np.testing.assert_array_equal(seen, mask)
        assert n > 1
    # Each piece stays within the bytes asked for (one grid cell at least).
    for k, piece in a.blocks(max_bytes=16 * 32 * 4):
        assert piece.nbytes <= 16 * 32 * 4


def test_shared_memory_path_is_used_and_equals_the_socket(zarrgate_server) -> None:
    shape = (1024, 1024)  # 1 Mi elements: over the shared-memory threshold
    data = np.random.default_rng(3).random(shape, dtype=np.float32)
    with zarrgate.connect(zarrgate_server.addr) as c, \
            zarrgate.connect(zarrgate_server.addr, shared_memory=False, bulk=False) as s:
        assert c.shared_memory and not s.shared_memory
        a = c.create_array("shm/x", shape, "float32", (256, 256))
        a[...] = data
        got = a[...]
        assert c.stats.shared_reads == 1 and c.stats.shared_bytes == data.nbytes
        assert c.stats.socket_bytes == 0
        # Again: the mapping of the gateway's idle segment is reused.
        np.testing.assert_array_equal(a[...], got)
        assert c.stats.shared_reads == 2
        sock = s.open_array("shm/x")[...]
        assert s.stats.shared_bytes == 0 and s.stats.socket_bytes == data.nbytes
        np.testing.assert_array_equal(got, data)
        np.testing.assert_array_equal(sock, got)
        # Strided: through shared memory too.
        np.testing.assert_array_equal(a[::2, 1::3], data[::2, 1::3])


def test_shared_memory_falls_back_to_the_socket(zarrgate_server, monkeypatch) -> None:
    """A segment the client cannot map (here: a token that differs, as for
    a namesake file on another host) is declined: blocks come inline."""
    real = _slab.Mapping.__init__

    def wrong_token(self, path, size, token):
        real(self, path, size, bytes(b ^ 1 for b in token))

    monkeypatch.setattr(_slab.Mapping, "__init__", wrong_token)
    data = np.arange(600 * 500, dtype="float64").reshape(600, 500)
    with zarrgate.connect(zarrgate_server.addr) as c:
        a = c.create_array("fb/x", data.shape, "float64", (100, 100))
        a[...] = data
        np.testing.assert_array_equal(a[...], data)
        assert c.stats.shared_reads == 0 and c.stats.socket_bytes == data.nbytes


def test_not_found_and_node_type_errors(client) -> None:
    client.create_group("grp", {"a": 1})
    client.create_array("grp/arr", (3,), "int8", (3,))
    with pytest.raises(zarr.errors.ArrayNotFoundError, match="NOT_FOUND"):
        client.open_array("grp/missing")
    with pytest.raises(zarr.errors.GroupNotFoundError):
        client.open_group("nothing")
    with pytest.raises(FileNotFoundError):
        client.open_array("nothing/here")
    with pytest.raises(zarr.errors.NodeTypeValidationError):
        client.open_array("grp")
    with pytest.raises(zarr.errors.NodeTypeValidationError):
        client.open_group("grp/arr")
    with pytest.raises(zarr.errors.ContainsArrayError):
        client.create_array("grp/arr", (3,), "int8", (3,))
    with pytest.raises(zarr.errors.ContainsGroupError):
        client.create_group("grp")
    g = client.open_group("grp")
    assert g.attrs == {"a": 1}
    assert [m.path for m in g.members()] == ["grp/arr"]
    # An array deleted behind the client's back: the read says so.
    a = client.open_array("grp/arr")
    client.delete("grp/arr")
    with pytest.raises(zarr.errors.ArrayNotFoundError):
        a[...]


# In a fresh process: the slab client reads and fails without importing
# zarr, and what it raised is zarr's exception once the caller has zarr.
_NO_ZARR_CHILD = r"""
import pickle, sys
import zarrgate, zarrgate.aio
addr = sys.argv[1]
with zarrgate.connect(addr) as c:
    a = c.create_array("nz/x", (4,), "int16", (2,))
    a[...] = [1, 2, 3, 4]
    assert a[1:3].tolist() == [2, 3]
    assert "zarr" not in sys.modules, "reading imported zarr"
    caught = []
    for f in (lambda: c.open_array("nz/none"), lambda: c.open_group("nz/x"),
              lambda: a[::-1], lambda: a[9]):
        try:
            f()
        except Exception as e:
            caught.append(e)
import zarr.errors
want = (zarr.errors.ArrayNotFoundError, zarr.errors.NodeTypeValidationError,
        zarr.errors.NegativeStepError, zarr.errors.BoundsCheckError)
assert len(caught) == len(want), caught
for e, cls in zip(caught, want):
    assert isinstance(e, cls), (type(e).__mro__, cls)
    assert type(pickle.loads(pickle.dumps(e))) is type(e)
assert isinstance(caught[0], zarrgate.ZarrgateNotFound) and isinstance(caught[0], FileNotFoundError)
assert zarrgate.errors.ZarrgateArrayNotFound is type(caught[0])
assert issubclass(zarrgate.ZarrgateStore, zarr.abc.store.Store)
print("ok")
"""


def test_slab_client_does_without_zarr_until_an_error_needs_it(zarrgate_server) -> None:
    """Importing zarrgate and reading through the slab client do not
    import zarr-python (about 13 MiB of resident memory: the issue's RSS
    bound counts it); errors raised meanwhile are still zarr's exceptions
    (zarr is imported to make them), and ZarrgateStore imports it on use."""
    src = os.path.dirname(os.path.dirname(zarrgate.__file__))  # this checkout's
    r = subprocess.run([sys.executable, "-c", _NO_ZARR_CHILD, zarrgate_server.addr],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": src})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_client_pickles_as_its_settings(zarrgate_server) -> None:
    c = zarrgate.connect(zarrgate_server.addr, timeout=30)
    c.create_array("pk/x", (4,), "int16", (2,))[...] = [1, 2, 3, 4]
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.timeout == 30 and c2.addr == c.addr
    assert c2.open_array("pk/x")[...].tolist() == [1, 2, 3, 4]
    c.close()
    c2.close()


async def test_asyncio_client(zarrgate_server) -> None:
    data = np.random.default_rng(5).random((700, 600))
    async with zarrgate.aio.connect(zarrgate_server.addr) as c:
        a = await c.create_array("aio/x", data.shape, "float64", (128, 100))
        await a.write(..., data)
        np.testing.assert_array_equal(await a[...], data)  # shared memory
        assert c.stats.shared_reads == 1
        np.testing.assert_array_equal(await a[5:9, -3], data[5:9, -3])  # socket
        with pytest.raises(zarr.errors.NegativeStepError):
            await a[::-1]
        with pytest.raises(zarr.errors.ArrayNotFoundError):
            await c.open_array("aio/none")
        seen = 0
        async for k, piece in a.blocks(max_bytes=1 << 20):
            np.testing.assert_array_equal(piece, data[k])
            seen += piece.size
        assert seen == data.size
        s = await c.create_array("aio/s", (3,), str, (2,))
        await s.write(slice(None), ["a", "bé", ""])
        assert (await s[...]).tolist() == ["a", "bé", ""]
        # Concurrent reads on one client.
        parts = await asyncio.gather(*(a.read(slice(i, i + 100)) for i in range(0, 700, 100)))
        np.testing.assert_array_equal(np.concatenate(parts), data)
    async with zarrgate.aio.connect(zarrgate_server.addr, shared_memory=False, bulk=False) as c:
        a = await c.open_array("aio/x")
        np.testing.assert_array_equal(await a[...], data)
        assert c.stats.shared_reads == 0 and c.stats.socket_bytes == data.nbytes


def test_wire_parser_agrees_with_the_generated_classes() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        nd = int(rng.integers(0, 4))
        origin = [int(x) for x in rng.integers(0, 1 << 40, nd)]
        shape = [int(x) for x in rng.integers(0, 300, nd)]
        data = rng.bytes(int(rng.integers(0, 5000)))
        kind = rng.integers(0, 3)
        if kind == 0:
            blk = gpb.Block(origin=origin, shape=shape, data=data)
        elif kind == 1:
            blk = gpb.Block(origin=origin, shape=shape,
                            shared=gpb.SharedRange(offset=int(rng.integers(0, 1 << 33)),
                                                   length=int(rng.integers(0, 1 << 20))))
        else:
            blk = gpb.Block(origin=origin, shape=shape, data=data, offsets=[0, 1, len(data)])
        k, b = _wire.parse(gpb.ReadSlabSharedResponse(block=blk).SerializeToString())
        assert k == _wire.BLOCK
        assert b.origin == origin and b.shape == shape and bytes(b.data) == blk.data
        assert b.shared == ((blk.shared.offset, blk.shared.length) if kind == 1 else None)
        assert b.offsets == (list(blk.offsets) if kind == 2 else None)
        # And the write encoder, read back by the generated class.
        if kind == 0:
            msg = gpb.WriteSlabRequest.FromString(
                _wire.write_block(tuple(origin), tuple(shape), memoryview(data)))
            assert list(msg.block.origin) == origin and list(msg.block.shape) == shape
            assert msg.block.data == data
    h = gpb.SlabHeader(shape=[3, 4], data_type="int8", element_size=1)
    assert _wire.parse(gpb.ReadSlabResponse(header=h).SerializeToString()) == (_wire.HEADER, h)
    assert _wire.parse(gpb.ReadSlabSharedResponse(end=gpb.SlabEnd()).SerializeToString())[0] == _wire.END
    with pytest.raises(_wire.WireError):
        _wire.parse(gpb.ReadSlabResponse(block=gpb.Block(data=b"abc")).SerializeToString()[:-1])


def test_copier_releases_blocks_in_arrival_order_once_copied(monkeypatch) -> None:
    """Batches copied out of order (two copier threads) release nothing
    until every block before theirs is copied: the gateway's ring reuses
    released ranges in arrival order."""
    monkeypatch.setattr(_slab, "MAX_BATCHES", 10)

    class Held:  # a copier that runs batches when the test says
        def __init__(self) -> None:
            self.batches: list = []

        def submit(self, b) -> None:
            self.batches.append(b)

    held, sent = Held(), []
    bs = _slab.Batches(held, 8, None, sent.append)  # batches of 8 bytes
    out = np.zeros(12, np.uint8)
    src = np.arange(12, dtype=np.uint8)
    for k in range(6):
        bs.add(out[2 * k : 2 * k + 2], src[2 * k : 2 * k + 2], (64 + 2 * k, 2), 2)
    bs.flush()
    assert [b.blocks for b in held.batches] == [4, 2]
    held.batches[1].run()
    assert out[8:].tolist() == [8, 9, 10, 11] and sent == []
    held.batches[0].run()
    assert [gpb.ReadSlabSharedRequest.FromString(m).release.blocks for m in sent] == [6]
    bs.wait()
    np.testing.assert_array_equal(out, src)


def test_tune_malloc_sets_glibc_malloc_unless_the_user_did() -> None:
    """Once per process, and never over MALLOC_MMAP_THRESHOLD_,
    MALLOC_TRIM_THRESHOLD_, MALLOC_ARENA_MAX or a malloc tunable from the
    environment."""
    import os
    import subprocess
    import sys

    code = "from zarrgate import _slab; print(_slab.tune_malloc(), _slab.tune_malloc())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    glibc = (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(glibc), "False"]
    for var, value in [("MALLOC_MMAP_THRESHOLD_", "131072"), ("MALLOC_TRIM_THRESHOLD_", "131072"),
                       ("MALLOC_ARENA_MAX", "4"), ("GLIBC_TUNABLES", "glibc.malloc.arena_max=4")]:
        out = subprocess.run([sys.executable, "-c", code], env={**env, var: value},
                             capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["False", "False"], var
