"""Whole-array reads and writes through the Python client, with and
without a SharedBuffer: ``a[...]`` (shared memory: copied out of the
gateway's segment), ``a.read_shared(..., buf)`` (the gateway writes into
the buffer), ``a[...] = v`` (the socket) and ``a.write_shared(..., buf)``
(the gateway reads the buffer). Interleaved rounds on one array of the
given gateway (created by the first round, zstd, 256² chunks); MB/s, the
client's CPU and the gateway's (by its pid, from /proc) per operation.

    zarrgate serve --root DIR --listen 127.0.0.1:0 &      # note addr= and its pid
    python bench/py_sharedbuf.py 127.0.0.1:PORT PID [--mib 512] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import zarrgate

TICK = os.sysconf("SC_CLK_TCK")


def server_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("pid", type=int)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--path", default="py-sharedbuf/x")
    args = ap.parse_args()
    rows = args.mib * (1 << 20) // 4 // 8192
    shape = (rows, 8192)
    # Uniform random float32: zstd stores it at about 1.1, as the exponent
    # bytes repeat and the mantissas do not (decoding costs what real
    # measurements' does, not what a run of repeated values' would).
    data = np.random.default_rng(1).random(shape, dtype=np.float32)
    with zarrgate.connect(args.addr) as c, zarrgate.SharedBuffer(data.nbytes) as buf:
        try:
            c.delete(args.path)
        except zarrgate.ZarrgateNotFound:
            pass
        a = c.create_array(args.path, shape, "float32", (256, 256))
        a[...] = data
        view = buf.array(np.float32, shape)
        view[...] = data

        def read() -> None:
            x = a[...]
            del x

        def read_shared() -> None:
            x = a.read_shared(..., buf)
            assert buf.in_place[0], buf.in_place
            del x

        def write() -> None:
            a[...] = data

        def write_shared() -> None:
            a.write_shared(..., buf)
            assert buf.in_place[0], buf.in_place

        ops = {"read": read, "read_shared": read_shared, "write": write, "write_shared": write_shared}
        got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in ops}
        names = list(ops)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                s0, c0, t0 = server_cpu(args.pid), time.process_time(), time.perf_counter()
                ops[name]()
                t = time.perf_counter() - t0
                got[name].append((data.nbytes / t / 1e6, (time.process_time() - c0) * 1e3,
                                  (server_cpu(args.pid) - s0) * 1e3))
        print(f"{args.mib} MiB float32, zstd, 256² chunks; {args.rounds} interleaved rounds, medians (min–max MB/s)")
        print("| op | MB/s | client CPU ms | gateway CPU ms |")
        print("| --- | --- | --- | --- |")
        for name in names:
            mb = [g[0] for g in got[name]]
            print(f"| {name} | {statistics.median(mb):.0f} ({min(mb):.0f}–{max(mb):.0f}) | "
                  f"{statistics.median(g[1] for g in got[name]):.0f} | "
                  f"{statistics.median(g[2] for g in got[name]):.0f} |")
        del view
        c.delete(args.path)


if __name__ == "__main__":
    main()
