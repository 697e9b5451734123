"""numcodecs' Zstd and GZip at each level on the data of codecsvc's
BenchmarkLevels (4 MiB float32, x[i] = float32(sin(i*0.001)*1000 + i%7)):
encode MB/s per CPU second and ratio, one JSON object per line.

    python bench/numcodecs_levels.py
"""
import json
import time

import numcodecs
import numpy as np
from numcodecs import GZip, Zstd

i = np.arange(1 << 20, dtype=np.float64)
x = (np.sin(i * 0.001) * 1000 + (i.astype(np.int64) % 7)).astype("<f4")
raw = x.tobytes()


def cpu_rate(fn, seconds=0.5):
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds or n < 3:
        fn()
        n += 1
    return len(raw) * n / (time.process_time() - t0) / 1e6


for name, codec, levels in [("zstd", Zstd, [-1, 1, 2, 3, 4, 5, 6, 7, 9, 12, 15, 16, 19, 22]), ("gzip", GZip, range(1, 10))]:
    for level in levels:
        c = codec(level=level)
        print(json.dumps({"codec": name, "level": level, "encode_cpu_mb_per_s": round(cpu_rate(lambda: c.encode(raw)), 1),
                          "ratio": round(len(raw) / len(c.encode(raw)), 4), "numcodecs": numcodecs.__version__}), flush=True)
