"""What a full read costs in resident memory, beyond its result: each read
runs in a fresh process (sync and asyncio clients, socket and shared
memory), which resets its peak (VmHWM, through /proc/self/clear_refs) once
connected and reports how far the read took it above where it stood. Not a
timing: resident memory is deterministic enough to bound."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib

import numpy as np
import pytest

import zarrgate

MiB = 1 << 20

# The child: connect, a small read (channel up, segment offered), reset the
# peak, read the whole array, report the peak's rise and what was read.
_CHILD = r"""
import asyncio, dataclasses, json, sys, zlib
import zarrgate, zarrgate.aio

def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

def reset():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status("VmRSS")

addr, path, mode, shared = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "true"
# A fixed receive window: otherwise gRPC grows it with the bandwidth-delay
# product it measures, which on a loaded machine is anything.
OPTIONS = [("grpc.http2.bdp_probe", 0)]
if mode == "sync":
    with zarrgate.connect(addr, shared_memory=shared, channel_options=OPTIONS) as c:
        a = c.open_array(path)
        a[:1]
        before = dataclasses.replace(c.stats)
        base = reset()
        x = a[...]
        stats = c.stats
else:
    async def run():
        async with zarrgate.aio.connect(addr, shared_memory=shared, channel_options=OPTIONS) as c:
            a = await c.open_array(path)
            await a[:1]
            before = dataclasses.replace(c.stats)
            base = reset()
            return before, base, await a[...], c.stats
    before, base, x, stats = asyncio.run(run())
print(json.dumps({"rise": status("VmHWM") - base, "crc": zlib.crc32(x), "nbytes": x.nbytes,
                  "shared_bytes": stats.shared_bytes - before.shared_bytes,
                  "socket_bytes": stats.socket_bytes - before.socket_bytes}))
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
@pytest.mark.parametrize("shared", [True, False])
def test_full_read_peak_rss_is_the_result_and_little_more(big, mode, shared) -> None:
    """A full read's peak resident memory rises by the result's size and
    at most 16 MiB more, through shared memory (the segment's pages are
    unmapped as blocks are copied out: a populated 32 MiB segment would
    not fit) or through the socket (with gRPC's receive window fixed); a
    second copy of the result would not fit either."""
    slack = 16 * MiB
    addr, path, crc, nbytes = big
    out = subprocess.run([sys.executable, "-c", _CHILD, addr, path, mode, str(shared).lower()],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    assert r["crc"] == crc and r["nbytes"] == nbytes
    if shared:
        assert r["shared_bytes"] == nbytes and r["socket_bytes"] == 0
    else:
        assert r["socket_bytes"] == nbytes and r["shared_bytes"] == 0
    print(f"peak rose by {r['rise'] / MiB:.1f} MiB for a {nbytes / MiB:.0f} MiB read")
    assert nbytes <= r["rise"] <= nbytes + slack, f"peak rose by {r['rise'] / MiB:.1f} MiB"
