"""numcodecs on the data and chains of codecsvc's BenchmarkCodecs, at one
thread, for the side-by-side table in docs/benchmarks.md.

    python bench/numcodecs_bench.py [FRAMES_DIR]

Prints one JSON object per line: codec, op, mb_per_s (wall time) and
cpu_mb_per_s (per CPU second). With FRAMES_DIR, also
saves each codec's encoded output there as <codec>.bin, for
BenchmarkDecodeNumcodecsFrames to decode the very same bytes in Go.
"""
import json
import os
import sys
import time

import numcodecs
import numpy as np
from numcodecs import GZip, Zstd
from numcodecs.blosc import Blosc
from numcodecs.checksum32 import CRC32C

numcodecs.blosc.set_nthreads(1)
i = np.arange(1 << 20, dtype=np.float64)
x = (np.sin(i * 0.001) * 1000 + (i.astype(np.int64) % 7)).astype("<f4")
raw = x.tobytes()

zstd, gzip, blosc, crc = Zstd(level=3), GZip(level=5), Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE), CRC32C()
chains = {
    "zstd": (lambda b: zstd.encode(b), lambda e: zstd.decode(e)),
    "gzip": (lambda b: gzip.encode(b), lambda e: gzip.decode(e)),
    "blosc-lz4": (lambda b: blosc.encode(np.frombuffer(b, dtype="<f4")), lambda e: blosc.decode(e)),
    # bytes (big endian) + zstd + crc32c, as zarr-python runs that chain
    "chain": (lambda b: crc.encode(zstd.encode(np.frombuffer(b, dtype="<f4").astype(">f4").tobytes())),
              lambda e: np.frombuffer(zstd.decode(crc.decode(e)), dtype=">f4").astype("<f4")),
}


def rate(fn, arg, seconds=1.0, clock=time.perf_counter):
    n, t0 = 0, clock()
    while clock() - t0 < seconds:
        fn(arg)
        n += 1
    return len(raw) * n / (clock() - t0) / 1e6


def cpu_rate(fn, arg):
    """MB/s per CPU second of this process (one thread), which a shared
    machine disturbs less than wall time: BenchmarkCodecs' cpuMB/s."""
    return rate(fn, arg, clock=time.process_time)


frames = sys.argv[1] if len(sys.argv) > 1 else None
for name, (enc, dec) in chains.items():
    e = enc(raw)
    if frames:
        os.makedirs(frames, exist_ok=True)
        with open(os.path.join(frames, name + ".bin"), "wb") as f:
            f.write(bytes(e))
    print(json.dumps({"codec": name, "op": "encode", "mb_per_s": round(rate(enc, raw), 1),
                      "cpu_mb_per_s": round(cpu_rate(enc, raw), 1), "numcodecs": numcodecs.__version__}))
    print(json.dumps({"codec": name, "op": "decode", "mb_per_s": round(rate(dec, e), 1),
                      "cpu_mb_per_s": round(cpu_rate(dec, e), 1), "ratio": round(len(raw) / len(e), 2)}))
