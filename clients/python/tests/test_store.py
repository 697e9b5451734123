"""zarr-python's own store conformance suite (zarr.testing.store.StoreTests)
run against ZarrgateStore talking to a real `zarrgate serve`.

The reference get/set helpers bypass the store, as the suite asks: they read
and write the files in the served directory directly (zarrgate's file backend
maps key "a/b/c" to the file a/b/c under its root).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import grpc
import pytest
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.testing.store import StoreTests

from zarrgate import ZarrgateError, ZarrgateStore


class TestZarrgateStore(StoreTests[ZarrgateStore, cpu.Buffer]):
    store_cls = ZarrgateStore
    buffer_cls = cpu.Buffer

    root: Path

    @pytest.fixture(autouse=True)
    def _served_root(self, zarrgate_server) -> None:
        self.root = zarrgate_server.root

    async def get(self, store: ZarrgateStore, key: str) -> Buffer:
        return self.buffer_cls.from_bytes((self.root / key).read_bytes())

    async def set(self, store: ZarrgateStore, key: str, value: Buffer) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value.to_bytes())

    @pytest.fixture
    def store_kwargs(self, zarrgate_server) -> dict[str, Any]:
        return {"addr": zarrgate_server.addr}

    def test_store_repr(self, store: ZarrgateStore) -> None:
        assert str(store) == f"zarrgate://{store.addr}"
        assert repr(store) == f"ZarrgateStore('zarrgate://{store.addr}')"

    def test_store_supports_writes(self, store: ZarrgateStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: ZarrgateStore) -> None:
        assert store.supports_listing

    def test_store_supports_deletes(self, store: ZarrgateStore) -> None:
        assert store.supports_deletes


# -- ZarrgateStore specifics beyond the generic suite --------------------------


async def test_open_reads_capabilities(zarrgate_server) -> None:
    store = await ZarrgateStore.open(zarrgate_server.addr)
    assert store.capabilities is not None
    assert store.capabilities.readable and store.capabilities.writable
    assert store.capabilities.listable and store.capabilities.conditional_writes


async def test_open_unreachable_server() -> None:
    # Port 1 on loopback: nothing listens there.
    with pytest.raises(ConnectionError):
        await ZarrgateStore.open("127.0.0.1:1", timeout=5)


async def test_ranges_past_the_end_are_cut_short(zarrgate_server) -> None:
    """The server answers OUT_OF_RANGE; zarr's stores cut such reads short
    (LocalStore reads a file, MemoryStore slices), and so does ZarrgateStore."""
    store = ZarrgateStore(zarrgate_server.addr)
    await store.set("k", cpu.Buffer.from_bytes(b"0123456789"))
    proto = default_buffer_prototype()
    cases = {
        RangeByteRequest(8, 13): b"89",
        RangeByteRequest(11, 12): b"",
        OffsetByteRequest(12): b"",
        SuffixByteRequest(20): b"0123456789",
    }
    for req, want in cases.items():
        assert (await store.get("k", proto, req)).to_bytes() == want, req
        assert store.get_sync("k", byte_range=req).to_bytes() == want, req
    got = await store.get_partial_values(proto, [("k", r) for r in cases] + [("nope", None)])
    assert [None if g is None else g.to_bytes() for g in got] == [*cases.values(), None]


async def test_get_partial_values_repeats_and_missing(zarrgate_server) -> None:
    store = ZarrgateStore(zarrgate_server.addr)
    big = bytes(range(256)) * (3 * 4096 + 7)  # > 3 MiB: results span responses
    await store.set("a/big", cpu.Buffer.from_bytes(big))
    await store.set("a/small", cpu.Buffer.from_bytes(b"xyz"))
    proto = default_buffer_prototype()
    got = await store.get_partial_values(
        proto,
        [
            ("a/big", None),
            ("missing", None),
            ("a/small", SuffixByteRequest(2)),
            ("a/big", RangeByteRequest(1 << 20, (1 << 20) + 5)),
            ("a/small", None),
        ],
    )
    assert got[0].to_bytes() == big
    assert got[1] is None
    assert got[2].to_bytes() == b"yz"
    assert got[3].to_bytes() == big[1 << 20 : (1 << 20) + 5]
    assert got[4].to_bytes() == b"xyz"
    assert await store.getsize("a/big") == len(big)
    assert (await store.get("a/big", proto)).to_bytes() == big


async def test_set_if_not_exists_is_atomic(zarrgate_server) -> None:
    """Many concurrent set_if_not_exists on one key: exactly one value wins
    and nobody fails (the server's if_absent condition, not exists+set)."""
    import asyncio

    store = ZarrgateStore(zarrgate_server.addr)
    values = [cpu.Buffer.from_bytes(f"v{i}".encode()) for i in range(16)]
    await asyncio.gather(*(store.set_if_not_exists("race", v) for v in values))
    got = (await store.get("race", default_buffer_prototype())).to_bytes()
    assert got in {v.to_bytes() for v in values}


async def test_invalid_key_is_value_error(zarrgate_server) -> None:
    store = ZarrgateStore(zarrgate_server.addr)
    for key in ["/a", "a/", "a//b", "a/../b", "a/./b", ""]:
        with pytest.raises(ValueError) as info:
            await store.set(key, cpu.Buffer.from_bytes(b"x"))
        assert isinstance(info.value, ZarrgateError)
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_list_prefix_is_a_string_prefix(zarrgate_server) -> None:
    store = ZarrgateStore(zarrgate_server.addr)
    for key in ["c/0", "c/1", "cx/0", "d/0"]:
        await store.set(key, cpu.Buffer.from_bytes(b""))
    assert sorted([k async for k in store.list_prefix("c")]) == ["c/0", "c/1", "cx/0"]
    assert sorted([k async for k in store.list_prefix("c/")]) == ["c/0", "c/1"]
    assert sorted([k async for k in store.list_dir("")]) == ["c", "cx", "d"]
    assert await store.getsize_prefix("d") == 0


async def test_read_only_server(zarrgate_bin, tmp_path) -> None:
    """A --read-only server refuses writes with FAILED_PRECONDITION, which
    surfaces as a ValueError (also from set_if_not_exists, not swallowed)."""
    from conftest import start_server, stop_server

    proc, addr = start_server(zarrgate_bin, tmp_path / "root", tmp_path / "log", "--read-only")
    try:
        store = ZarrgateStore(addr)
        for op in (
            store.set("k", cpu.Buffer.from_bytes(b"x")),
            store.set_if_not_exists("k", cpu.Buffer.from_bytes(b"x")),
        ):
            with pytest.raises(ValueError) as info:
                await op
            assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert await store.get("k", default_buffer_prototype()) is None
    finally:
        stop_server(proc)


def test_pickle_roundtrip_keeps_settings(zarrgate_server) -> None:
    store = ZarrgateStore(zarrgate_server.addr, read_only=True, timeout=7.5)
    clone = pickle.loads(pickle.dumps(store))
    assert clone == store and clone.read_only and clone.timeout == 7.5
    assert not clone._is_open
