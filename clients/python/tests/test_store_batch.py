"""ZarrgateStore's batched gets: concurrent ``get`` calls go out together as
GetPartialValues calls (at most ``max_batch`` gets each, at most
``max_inflight`` calls at once), each answered from its own parts, against
a real `zarrgate serve` (and, for policies, the TLS + token server of
test_security)."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import cpu, default_buffer_prototype

import zarrgate.store
from zarrgate import ZarrgateStore, _slab, _wire
from zarrgate._gen.zarrgate.store.v1 import store_pb2 as pb
from zarrgate.errors import ZarrgateError, ZarrgatePermissionDenied, ZarrgateUnavailable

from conftest import start_server, stop_server

PROTO = default_buffer_prototype()


@pytest.fixture(autouse=True, params=["shared", "socket"])
def path(request, monkeypatch) -> str:
    """Every test runs twice: batches through the server's shared memory
    (GetPartialValuesShared, the default on its host) and through the
    socket (GetPartialValues)."""
    monkeypatch.setattr(zarrgate.store, "SHARED_MEMORY", request.param == "shared")
    return request.param


def _check_path(lc, path: str) -> None:
    """The batches went the way the test's path says."""
    if path == "shared":
        assert lc.shared_batches == lc.batches and lc.shared_values > 0
    else:
        assert lc.shared_batches == 0 and lc.shared_values == 0


def _value(i: int) -> bytes:
    # Distinct values, some over 1 MiB (so their parts span responses).
    n = (1 << 20) + 4099 * i if i % 7 == 3 else 100 + 37 * i
    return (bytes([i % 251]) + i.to_bytes(4, "little")) * (n // 5)


async def _fill(store: ZarrgateStore, n: int) -> dict[str, bytes]:
    want = {f"b/{i}": _value(i) for i in range(n)}
    for k, v in want.items():
        await store.set(k, cpu.Buffer.from_bytes(v))
    return want


async def _gets(store: ZarrgateStore, requests):
    return await asyncio.gather(*(store.get(k, PROTO, r) for k, r in requests))


def _bytes(got):
    return [None if g is None else g.to_bytes() for g in got]


async def test_concurrent_gets_are_batched_and_right(zarrgate_server, path) -> None:
    store = ZarrgateStore(zarrgate_server.addr)
    want = await _fill(store, 40)
    requests = [(k, None) for k in want] + [
        ("b/missing", None),
        ("b/3", RangeByteRequest(1 << 20, (1 << 20) + 11)),
        ("b/5", SuffixByteRequest(7)),
        ("b/6", OffsetByteRequest(3)),
        ("nope/x", SuffixByteRequest(3)),
    ]
    got = _bytes(await _gets(store, requests))
    assert got[:40] == list(want.values())
    assert got[40:] == [
        None,
        want["b/3"][1 << 20 : (1 << 20) + 11],
        want["b/5"][-7:],
        want["b/6"][3:],
        None,
    ]
    lc = store._loop_channel()
    # Every get went through a batched call, fewer calls than gets.
    assert lc.batched_gets == len(requests)
    assert 1 <= lc.batches < len(requests) // 4
    assert lc.peak_inflight <= store.max_inflight
    _check_path(lc, path)


async def test_batches_and_calls_in_flight_are_bounded(zarrgate_server) -> None:
    store = ZarrgateStore(zarrgate_server.addr, max_batch=4, max_inflight=1)
    want = await _fill(store, 30)
    got = _bytes(await _gets(store, [(k, None) for k in want]))
    assert got == list(want.values())
    lc = store._loop_channel()
    assert lc.largest_batch == 4
    assert lc.peak_inflight == 1
    assert lc.batches >= 30 // 4 and lc.batched_gets == 30


async def test_unbatched_store(zarrgate_server) -> None:
    """max_batch=1: one Get call per get, no batched call."""
    store = ZarrgateStore(zarrgate_server.addr, max_batch=1)
    want = await _fill(store, 10)
    got = _bytes(await _gets(store, [(k, None) for k in want] + [("b/none", None)]))
    assert got == [*want.values(), None]
    assert store._loop_channel().batches == 0


async def test_a_range_past_the_end_in_a_batch(zarrgate_server) -> None:
    """The server fails the whole call with OUT_OF_RANGE; each get is then
    asked on its own and cut short as zarr's stores do, the rest unchanged."""
    store = ZarrgateStore(zarrgate_server.addr)
    want = await _fill(store, 8)
    n = len(want["b/1"])
    requests = [(k, None) for k in want] + [
        ("b/1", RangeByteRequest(n - 2, n + 10)),
        ("b/1", OffsetByteRequest(n + 5)),
        ("b/missing", None),
    ]
    got = _bytes(await _gets(store, requests))
    assert got == [*want.values(), want["b/1"][-2:], b"", None]
    assert store._loop_channel().largest_batch == len(requests)


async def test_a_bad_key_fails_only_its_own_get(zarrgate_server) -> None:
    store = ZarrgateStore(zarrgate_server.addr)
    want = await _fill(store, 6)
    requests = [(k, None) for k in want] + [("a//b", None)]
    got = await asyncio.gather(
        *(store.get(k, PROTO, r) for k, r in requests), return_exceptions=True
    )
    assert _bytes(got[:6]) == list(want.values())
    assert isinstance(got[6], ValueError) and isinstance(got[6], ZarrgateError)
    assert got[6].code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(ValueError, match="byte_range"):
        await store.get("b/1", PROTO, RangeByteRequest(5, 2))


async def test_a_refused_key_fails_only_its_own_get(secure_server, path) -> None:
    """bob may read proj/ but not secret: in one batch, his gets of proj/
    keys are answered and the other raises PermissionError."""
    s = secure_server
    alice = ZarrgateStore(s.addr, tls_ca=s.certs.ca, token=s.tokens["alice"])
    want = {f"proj/batch/{i}": _value(i) for i in range(5)}
    for k, v in want.items():
        await alice.set(k, cpu.Buffer.from_bytes(v))
    (s.root / "secret").write_bytes(b"s")
    bob = await ZarrgateStore.open(s.addr, tls_ca=s.certs.ca, token=s.tokens["bob"])
    keys = [*want, "secret", "proj/batch/none"]
    got = await asyncio.gather(*(bob.get(k, PROTO) for k in keys), return_exceptions=True)
    assert _bytes(got[:5]) == list(want.values())
    assert isinstance(got[5], PermissionError) and isinstance(got[5], ZarrgatePermissionDenied)
    assert got[6] is None
    assert bob._loop_channel().largest_batch == len(keys)
    # A second batch on the same loop (the shared call refused was dropped).
    got = await asyncio.gather(*(bob.get(k, PROTO) for k in want), return_exceptions=True)
    assert _bytes(got) == list(want.values())
    lc = bob._loop_channel()
    if path == "shared":
        assert lc.shared_values >= 5
    else:
        assert lc.shared_batches == 0


async def test_server_gone_fails_every_get(zarrgate_bin, tmp_path) -> None:
    proc, addr = start_server(zarrgate_bin, tmp_path / "root", tmp_path / "log")
    try:
        store = ZarrgateStore(addr, timeout=10)
        await store.set("k", cpu.Buffer.from_bytes(b"v"))
    finally:
        stop_server(proc)
    got = await asyncio.gather(*(store.get("k", PROTO) for _ in range(5)), return_exceptions=True)
    for g in got:
        assert isinstance(g, ConnectionError) and isinstance(g, ZarrgateUnavailable), g
    assert store._loop_channel().batches >= 1


async def test_a_cancelled_get_leaves_its_batch_alone(zarrgate_server) -> None:
    store = ZarrgateStore(zarrgate_server.addr, max_inflight=1)
    want = await _fill(store, 12)
    tasks = [asyncio.ensure_future(store.get(k, PROTO)) for k in want]
    await asyncio.sleep(0)
    tasks[4].cancel()
    tasks[10].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    for i, (g, v) in enumerate(zip(done, want.values(), strict=True)):
        if i in (4, 10):
            assert isinstance(g, asyncio.CancelledError)
        else:
            assert g.to_bytes() == v
    # The store still works afterwards.
    assert (await store.get("b/4", PROTO)).to_bytes() == want["b/4"]


async def test_zarr_reads_through_batches(zarrgate_server, path) -> None:
    """zarr-python reading an array: its concurrent chunk gets are batched."""
    store = ZarrgateStore(zarrgate_server.addr)
    data = np.arange(64 * 48, dtype="float32").reshape(64, 48)
    arr = zarr.create_array(store=store, name="a", shape=data.shape, chunks=(8, 8), dtype="float32")
    arr[:] = data
    fresh = ZarrgateStore(zarrgate_server.addr, read_only=True)
    np.testing.assert_array_equal(zarr.open_array(store=fresh, path="a", mode="r")[:], data)
    (lc,) = fresh._aio.values()
    assert lc.batched_gets >= 48 and lc.batches < lc.batched_gets
    _check_path(lc, path)


def test_options_are_checked_and_pickled(zarrgate_server) -> None:
    import pickle

    for bad in ({"max_batch": 0}, {"max_inflight": 0}):
        with pytest.raises(ValueError):
            ZarrgateStore(zarrgate_server.addr, **bad)
    store = ZarrgateStore(zarrgate_server.addr, max_batch=3, max_inflight=5)
    clone = pickle.loads(pickle.dumps(store))
    assert (clone.max_batch, clone.max_inflight) == (3, 5)
    assert (store.with_read_only(True).max_batch, store.with_read_only(True).max_inflight) == (3, 5)


def test_parse_partial_values_matches_the_generated_classes() -> None:
    resp = pb.GetPartialValuesResponse(
        parts=[
            pb.PartialValuePart(index=0, data=b"abc", last=False, generation="g1"),
            pb.PartialValuePart(index=0, data=b"def", last=True),
            pb.PartialValuePart(index=3, missing=True, last=True),
            pb.PartialValuePart(index=300, data=b"", last=True, generation="g2"),
            pb.PartialValuePart(index=2, data=bytes(range(256)) * 600, last=True),
        ]
    )
    raw = resp.SerializeToString()
    parts = _wire.parse_partial_values(raw)
    assert [(p.index, p.missing, bytes(p.data), p.last) for p in parts] == [
        (q.index, q.missing, q.data, q.last) for q in resp.parts
    ]
    # The data are views of the response's bytes, not copies.
    assert parts[4].data.obj is raw
    assert _wire.parse_partial_values(b"") == []
    for bad in (raw[:-1], raw[:7], b"\x0a\x05\x08\x01", b"\x0a\x03\x1a\x05ab", b"\x0a\x80"):
        with pytest.raises(_wire.WireError):
            _wire.parse_partial_values(bad)


# -- same host: GetPartialValuesShared's fallbacks ------------------------------


async def test_shared_falls_back_without_server_segments(zarrgate_bin, tmp_path) -> None:
    """A server with shared memory off offers no segment: the first batch is
    answered inline on its shared call, the next ones by GetPartialValues."""
    proc, addr = start_server(zarrgate_bin, tmp_path / "root", tmp_path / "log", "--shared-memory=false")
    try:
        store = ZarrgateStore(addr, shared_memory=True, max_batch=4)
        want = await _fill(store, 12)
        got = _bytes(await _gets(store, [(k, None) for k in want] + [("b/none", None)]))
        assert got == [*want.values(), None]
        lc = store._loop_channel()
        assert lc.shared_values == 0
        assert 1 <= lc.shared_batches <= store.max_inflight < lc.batches
        assert not lc.shared_idle
    finally:
        stop_server(proc)


async def test_shared_falls_back_when_the_segment_cannot_be_mapped(zarrgate_server, monkeypatch) -> None:
    """A segment this process cannot map (the server on another host, of
    another user): the batch comes inline, and the store gives shared
    memory up for the socket."""

    def refuse(self, path, size, token):
        raise _slab.SharedAttachError(f"segment {path}: not here")

    monkeypatch.setattr(_slab.Mapping, "__init__", refuse)
    store = ZarrgateStore(zarrgate_server.addr, shared_memory=True, max_batch=4)
    want = await _fill(store, 12)
    got = _bytes(await _gets(store, [(k, SuffixByteRequest(9)) for k in want]))
    assert got == [v[-9:] for v in want.values()]
    lc = store._loop_channel()
    assert lc.shared_off and lc.shared_values == 0
    assert 1 <= lc.shared_batches <= store.max_inflight < lc.batches


async def test_shared_calls_the_server_ended_are_replaced(zarrgate_bin, tmp_path, monkeypatch) -> None:
    """The server ends a shared call idle for 2 s; a client that reuses it
    later (here: told to keep calls for a minute) asks again on a new call.
    One told to keep them 0.2 s ends them itself."""
    proc, addr = start_server(zarrgate_bin, tmp_path / "root", tmp_path / "log")
    try:
        monkeypatch.setattr(zarrgate.store, "SHARED_IDLE", 60.0)
        store = ZarrgateStore(addr, shared_memory=True)
        want = await _fill(store, 6)
        assert _bytes(await _gets(store, [(k, None) for k in want])) == list(want.values())
        lc = store._loop_channel()
        assert lc.shared_idle
        await asyncio.sleep(2.5)  # the server's idle limit, and some
        assert _bytes(await _gets(store, [(k, None) for k in want])) == list(want.values())
        assert lc.shared_values == 12

        monkeypatch.setattr(zarrgate.store, "SHARED_IDLE", 0.2)
        store = ZarrgateStore(addr, shared_memory=True)
        assert _bytes(await _gets(store, [(k, None) for k in want])) == list(want.values())
        lc = store._loop_channel()
        assert lc.shared_idle and lc.shared_values == 6
        await asyncio.sleep(0.5)
        assert not lc.shared_idle
    finally:
        stop_server(proc)


def test_parse_shared_values_matches_the_generated_classes() -> None:
    resp = pb.GetPartialValuesSharedResponse(
        parts=[
            pb.SharedValuePart(index=2, last=True, generation="g", shared=pb.SharedValue(offset=4096, length=77)),
            pb.SharedValuePart(index=0, data=b"inline", last=True),
            pb.SharedValuePart(index=1, missing=True, last=True),
        ]
    )
    parts = _wire.parse_partial_values(resp.SerializeToString())
    assert [(p.index, p.missing, bytes(p.data), p.last, p.shared) for p in parts] == [
        (2, False, b"", True, (4096, 77)),
        (0, False, b"inline", True, None),
        (1, True, b"", True, None),
    ]
