"""The gateway benchmark's Python side: the same operations on the same
directory with zarr-python and tensorstore, for comparison.

    python bench/zarr_bench.py ROOT

ROOT holds the arrays BenchmarkGatewaySlabs wrote (uncompressed, zstd,
sharded-zstd). Prints one JSON object per line: library, layout, op,
mb_per_s or p50_us/p99_us.
"""
import json
import random
import shutil
import sys
import tempfile
import time

import importlib.metadata

import numpy as np
import zarr
from zarr.storage import LocalStore

try:
    import tensorstore as ts
except ImportError:  # pragma: no cover
    ts = None

LAYOUTS = ["uncompressed", "zstd", "sharded-zstd"]
RANDOM_READS = 1000
READS = 3  # full reads timed after a warm-up; the best is reported


def emit(**kw):
    print(json.dumps(kw), flush=True)


def percentiles(lat):
    lat = sorted(lat)
    return lat[len(lat) // 2] * 1e6, lat[len(lat) * 99 // 100] * 1e6


def bench_zarr(root, name):
    a = zarr.open_array(store=LocalStore(root, read_only=True), path=name, mode="r")
    size = a.nbytes
    data = a[:]  # warm-up, as on the Go side
    best = float("inf")
    for _ in range(READS):
        t0 = time.perf_counter()
        data = a[:]
        best = min(best, time.perf_counter() - t0)
    emit(library="zarr-python " + zarr.__version__, layout=name, op="read", mb_per_s=round(size / best / 1e6, 1))
    rng = random.Random(1)
    lat = []
    for _ in range(RANDOM_READS):
        y, x = rng.randrange(a.shape[0] - 64), rng.randrange(a.shape[1] - 64)
        t0 = time.perf_counter()
        a[y:y + 64, x:x + 64]
        lat.append(time.perf_counter() - t0)
    p50, p99 = percentiles(lat)
    emit(library="zarr-python " + zarr.__version__, layout=name, op="random64", p50_us=round(p50), p99_us=round(p99))
    tmp = tempfile.mkdtemp()
    try:
        kw = dict(shape=a.shape, chunks=(256, 256), dtype=a.dtype, fill_value=0)
        if name != "uncompressed":
            kw["compressors"] = zarr.codecs.ZstdCodec(level=3)
        else:
            kw["compressors"] = None
        if name.startswith("sharded"):
            kw["shards"] = (4096, 4096)
        b = zarr.create_array(store=LocalStore(tmp), name=name, **kw)
        t0 = time.perf_counter()
        b[:] = data
        emit(library="zarr-python " + zarr.__version__, layout=name, op="write", mb_per_s=round(size / (time.perf_counter() - t0) / 1e6, 1))
    finally:
        shutil.rmtree(tmp)
    return data


def bench_tensorstore(root, name, data):
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{root}/{name}"}}
    a = ts.open(spec, open=True, read=True).result()
    size = data.nbytes
    got = a.read().result()  # warm-up, as on the Go side
    best = float("inf")
    for _ in range(READS):
        t0 = time.perf_counter()
        got = a.read().result()
        best = min(best, time.perf_counter() - t0)
    emit(library="tensorstore " + importlib.metadata.version("tensorstore"), layout=name, op="read", mb_per_s=round(size / best / 1e6, 1))
    assert np.array_equal(got, data)
    rng = random.Random(1)
    lat = []
    for _ in range(RANDOM_READS):
        y, x = rng.randrange(a.shape[0] - 64), rng.randrange(a.shape[1] - 64)
        t0 = time.perf_counter()
        a[y:y + 64, x:x + 64].read().result()
        lat.append(time.perf_counter() - t0)
    p50, p99 = percentiles(lat)
    emit(library="tensorstore " + importlib.metadata.version("tensorstore"), layout=name, op="random64", p50_us=round(p50), p99_us=round(p99))
    tmp = tempfile.mkdtemp()
    try:
        meta = json.load(open(f"{root}/{name}/zarr.json"))
        out = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": tmp},
                       "metadata": {k: meta[k] for k in ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs")}},
                      create=True).result()
        t0 = time.perf_counter()
        out.write(data).result()
        emit(library="tensorstore " + importlib.metadata.version("tensorstore"), layout=name, op="write", mb_per_s=round(size / (time.perf_counter() - t0) / 1e6, 1))
    finally:
        shutil.rmtree(tmp)


def main():
    root = sys.argv[1]
    for name in LAYOUTS:
        data = bench_zarr(root, name)
        if ts is not None:
            bench_tensorstore(root, name, data)


if __name__ == "__main__":
    main()
