"""Random 64 × 64 reads through the Python client: p50 and p99 of 2000
windows of a 2-D float32 array (the side-by-side benchmark's), and the
client's read counters. Small reads go over a small-reads connection by
default; --no-bulk reads them through the gRPC stream.

    python bench/py_random.py 127.0.0.1:50051 zstd [--no-bulk]
"""

import argparse
import random
import time

import numpy as np

import zarrgate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("path")
    ap.add_argument("--no-bulk", action="store_true")
    ap.add_argument("-n", type=int, default=2000)
    args = ap.parse_args()
    with zarrgate.connect(args.addr, shared_memory=False, bulk=not args.no_bulk) as c:
        a = c.open_array(args.path)
        h, w = a.shape
        r = random.Random(1)
        out = np.empty((64, 64), dtype=np.float32)
        lat = []
        for _ in range(args.n):
            y, x = r.randrange(h - 64), r.randrange(w - 64)
            t0 = time.perf_counter()
            a.read((slice(y, y + 64), slice(x, x + 64)), out=out)
            lat.append(time.perf_counter() - t0)
        lat.sort()
        print(f"{args.path}{' --no-bulk' if args.no_bulk else ''}: p50 {lat[len(lat) // 2] * 1e6:.0f} µs, "
              f"p99 {lat[len(lat) * 99 // 100] * 1e6:.0f} µs; small_reads {c.stats.small_reads}, "
              f"socket_reads {c.stats.socket_reads}")


if __name__ == "__main__":
    main()
