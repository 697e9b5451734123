"""What a full read costs in resident memory, beyond its result: each read
runs in a fresh process (sync and asyncio clients, socket and shared
memory), which resets its peak (VmHWM, through /proc/self/clear_refs) once
connected and reports how far the read took it above where it stood, and
the peak itself (interpreter, numpy, grpcio and zarrgate included: issue
18's bound is the result + 64 MiB). Not a timing: resident memory is
deterministic enough to bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

import zarrgate

MiB = 1 << 20

# What both children measure with: the process's status fields (VmRSS,
# VmHWM), and a reset of its peak (VmHWM) to what it holds now.
_PEAK = r"""
def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

def reset():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status("VmRSS")
"""

# The child: connect, a small read (channel up, segment offered), reset the
# peak, read the whole array, report the peak's rise and what was read.
_CHILD = _PEAK + r"""
import asyncio, dataclasses, json, sys, zlib
import zarrgate, zarrgate.aio

addr, path, mode, shared = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "true"
bulk = sys.argv[5] == "true"
# The client's own channel options: to a local gateway, a fixed receive
# window (zarrgate.client.LOCAL_WINDOW).
if mode == "sync":
    with zarrgate.connect(addr, shared_memory=shared, bulk=bulk) as c:
        a = c.open_array(path)
        a[:1]
        before = dataclasses.replace(c.stats)
        base = reset()
        x = a[...]
        stats = c.stats
else:
    async def run():
        async with zarrgate.aio.connect(addr, shared_memory=shared, bulk=bulk) as c:
            a = await c.open_array(path)
            await a[:1]
            before = dataclasses.replace(c.stats)
            base = reset()
            return before, base, await a[...], c.stats
    before, base, x, stats = asyncio.run(run())
print(json.dumps({"rise": status("VmHWM") - base, "peak": status("VmHWM"),
                  "zarr": "zarr" in sys.modules, "crc": zlib.crc32(x), "nbytes": x.nbytes,
                  "shared_bytes": stats.shared_bytes - before.shared_bytes,
                  "socket_bytes": stats.socket_bytes - before.socket_bytes,
                  "bulk_bytes": stats.bulk_bytes - before.bulk_bytes}))
"""


@pytest.fixture(scope="module")
def big(_session_server):
    """A 128 MiB float32 array on the session's server (kept for the
    module's tests), and the CRC-32 of its bytes."""
    _session_server.clear()
    data = np.arange(4096 * 8192, dtype=np.float32).reshape(4096, 8192)
    with zarrgate.connect(_session_server.addr) as c:
        c.create_array("mem/x", data.shape, "float32", (256, 256))[...] = data
    return _session_server.addr, "mem/x", zlib.crc32(data), data.nbytes


@pytest.mark.parametrize("mode", ["sync", "aio"])
@pytest.mark.parametrize("path", ["shared", "bulk", "stream"])
def test_full_read_peak_rss_is_the_result_and_little_more(big, mode, path) -> None:
    """A full read's peak resident memory rises by the result's size and
    at most 12 MiB more, through shared memory (the segment's pages are
    unmapped as blocks are copied out: a populated 32 MiB segment would
    not fit) or through the socket (gRPC's receive window fixed to a local
    gateway, one malloc arena: with gRPC's BDP probe, or an arena per
    thread, the messages received ahead of the copies and the freed ones
    each take 20 to 50 MiB); a second copy of the result would not fit
    either; or over the gateway's bulk connection (a few frame buffers of
    about a block each, nothing held by gRPC). The whole process stays
    within the result + 64 MiB (issue 18's bound), zarr-python not
    imported."""
    shared, bulk = path == "shared", path == "bulk"
    # Over the bulk connection: the frame buffers (4, of a block each) and
    # the copier threads' stacks; about 1 MiB here.
    slack = 4 * MiB if bulk else 12 * MiB
    addr, array, crc, nbytes = big
    src = os.path.dirname(os.path.dirname(zarrgate.__file__))  # this checkout's
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", _CHILD, addr, array, mode, str(shared).lower(),
                          str(bulk).lower()],
                         check=True, capture_output=True, text=True,
                         env={**env, "PYTHONPATH": src}).stdout
    r = json.loads(out)
    assert r["crc"] == crc and r["nbytes"] == nbytes
    got = {"shared": r["shared_bytes"], "bulk": r["bulk_bytes"], "stream": r["socket_bytes"]}
    assert got == {k: nbytes if k == path else 0 for k in got}
    print(f"peak rose by {r['rise'] / MiB:.1f} MiB to {r['peak'] / MiB:.1f} MiB "
          f"for a {nbytes / MiB:.0f} MiB read")
    assert nbytes <= r["rise"] <= nbytes + slack, f"peak rose by {r['rise'] / MiB:.1f} MiB"
    assert r["peak"] <= nbytes + 64 * MiB, f"peak {r['peak'] / MiB:.1f} MiB"
    assert not r["zarr"]


# The child of the SharedBuffer case: its buffer made (and populated) before
# the peak is reset, then the whole array read into it and written from it.
_CHILD_BUF = _PEAK + r"""
import json, sys, zlib
import zarrgate

addr, path, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {}
with zarrgate.connect(addr) as c, zarrgate.SharedBuffer(nbytes) as buf:
    a = c.open_array(path)
    a[:1]
    base = reset()
    x = a.read_shared(..., buf)
    out["read_rise"], out["read_in_place"], out["crc"] = status("VmHWM") - base, buf.in_place[0], zlib.crc32(x)
    del x
    c.create_array(path + "-copy", a.shape, a.dtype, a.chunks)
    b = c.open_array(path + "-copy")
    base = reset()
    b.write_shared(..., buf)
    out["write_rise"], out["write_in_place"] = status("VmHWM") - base, buf.in_place[0]
    out["copy_crc"] = zlib.crc32(b.read_shared(..., buf))
print(json.dumps(out))
"""


def test_shared_buffer_reads_and_writes_add_no_resident_memory(big) -> None:
    """Through a SharedBuffer (made before the peak is reset) a full read
    and a full write raise the process's peak by under 4 MiB: the gateway
    writes the slab into the buffer, or reads it from there, and nothing
    of its size is allocated here."""
    addr, array, crc, nbytes = big
    src = os.path.dirname(os.path.dirname(zarrgate.__file__))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", _CHILD_BUF, addr, array, str(nbytes)],
                         check=True, capture_output=True, text=True,
                         env={**env, "PYTHONPATH": src}).stdout
    r = json.loads(out)
    assert r["read_in_place"] and r["write_in_place"], r
    assert r["crc"] == crc and r["copy_crc"] == crc
    print(f"peak rose by {r['read_rise'] / MiB:.1f} MiB reading, {r['write_rise'] / MiB:.1f} MiB writing "
          f"{nbytes / MiB:.0f} MiB through a SharedBuffer")
    assert r["read_rise"] <= 4 * MiB, f"read: peak rose by {r['read_rise'] / MiB:.1f} MiB"
    assert r["write_rise"] <= 4 * MiB, f"write: peak rose by {r['write_rise'] / MiB:.1f} MiB"
