"""One measurement of the side-by-side benchmark (bench/side_by_side.py) in a
process of its own, printed as one JSON object.

    python bench/side_by_side_worker.py gen DATA
    python bench/side_by_side_worker.py read SYSTEM TARGET ARRAY [READS]
    python bench/side_by_side_worker.py random SYSTEM TARGET ARRAY [N]
    python bench/side_by_side_worker.py write SYSTEM DIR DATA
    python bench/side_by_side_worker.py values DATA
    python bench/side_by_side_worker.py ratio DIR [CHUNKS]

gen: writes the benchmark array (16384×8192 float32, 256² chunks, the
content of e2e/slab_bench_test.go's benchValue) with zarr-python's default
pipeline into DATA as uncompressed, zstd (numcodecs' Zstd: libzstd level 3)
and sharded-zstd (4096² shards of those chunks), and the values themselves
as raw little-endian float32 in DATA/values.f32 (values: only that file),
which the writers load.

SYSTEM: tensorstore, zarrs (zarr-python with zarrs.ZarrsCodecPipeline),
zarr-python, zarrgate-store (zarr-python over zarrgate.ZarrgateStore; TARGET
is then the gateway's address, else the directory). Writes also take
tensorstore-nosync (file_io_sync false; tensorstore's default is true: every
file is fsynced). read: one untimed warm-up read, READS (default 2) timed,
the best, and the CRC-32 of the result (the driver checks every system read
the same bytes). random: N (default 1000) reads of a 64×64 window at
random places. write: one timed write of the whole array (DATA/values.f32),
zstd level 3, into a new array at DIR (which must not exist; left for the
caller to remove). ratio: numcodecs' compression ratio of CHUNKS chunk
files of the uncompressed array DIR, at the levels bench/sidebyside ratio
uses.
"""

import importlib.metadata
import json
import os
import random
import sys
import time
import zlib

import numpy as np

ROWS, COLS, CHUNK, SHARD = 16384, 8192, 256, 4096


def emit(**kw):
    print(json.dumps(kw), flush=True)


def bench_value():
    """benchValue of e2e/slab_bench_test.go, the same float64 operations in
    the same order, rounded to float32."""
    i = np.arange(ROWS, dtype=np.int64)[:, None]
    j = np.arange(COLS, dtype=np.int64)[None, :]
    v = np.sin(i * 0.001) * 1000 + np.cos(j * 0.002) * 100
    v = v + ((i * 131 + j * 71) % 17).astype(np.float64)
    return v.astype("<f4")


def zarr_module(system):
    import zarr

    if system == "zarrs":
        import zarrs  # noqa: F401  (the pipeline must be importable)

        zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    return zarr


def version(system):
    if system == "tensorstore" or system.startswith("tensorstore-"):
        return "tensorstore " + importlib.metadata.version("tensorstore")
    if system == "zarrs":
        return "zarrs " + importlib.metadata.version("zarrs")
    if system == "zarrgate-store":
        return "zarr-python " + importlib.metadata.version("zarr") + " over ZarrgateStore"
    return "zarr-python " + importlib.metadata.version("zarr")


def open_array(system, target, name):
    if system == "tensorstore":
        import tensorstore as ts

        return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(target, name)}},
                       open=True, read=True).result()
    zarr = zarr_module(system)
    if system == "zarrgate-store":
        from zarrgate import ZarrgateStore

        store = ZarrgateStore(target, read_only=True)
    else:
        from zarr.storage import LocalStore

        store = LocalStore(target, read_only=True)
    return zarr.open_array(store=store, path=name, mode="r")


def read_all(system, a):
    if system == "tensorstore":
        return a.read().result()
    return a[...]


def read_window(system, a, y, x):
    if system == "tensorstore":
        return a[y:y + 64, x:x + 64].read().result()
    return a[y:y + 64, x:x + 64]


def cmd_values(data):
    """The array's values as raw little-endian float32 (values.f32), which
    the writers load instead of computing them."""
    v = bench_value()
    v.tofile(os.path.join(data, "values.f32.tmp"))
    os.replace(os.path.join(data, "values.f32.tmp"), os.path.join(data, "values.f32"))
    return v


def load_values(data):
    return np.fromfile(os.path.join(data, "values.f32"), dtype="<f4").reshape(ROWS, COLS)


def cmd_gen(data):
    import zarr
    from zarr.storage import LocalStore

    v = cmd_values(data)
    for name, compressors, shards in [
        ("uncompressed", None, None),
        ("zstd", zarr.codecs.ZstdCodec(level=3, checksum=False), None),
        ("sharded-zstd", zarr.codecs.ZstdCodec(level=3, checksum=False), (SHARD, SHARD)),
    ]:
        t0 = time.perf_counter()
        a = zarr.create_array(store=LocalStore(data), name=name, shape=v.shape, chunks=(CHUNK, CHUNK), shards=shards,
                              dtype="<f4", fill_value=0, compressors=compressors, overwrite=True)
        a[...] = v
        print(f"side_by_side_worker: wrote {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    emit(zarr=zarr.__version__, numcodecs=importlib.metadata.version("numcodecs"), crc32=zlib.crc32(v))


def cmd_read(system, target, name, reads=2):
    a = open_array(system, target, name)
    x = read_all(system, a)  # warm-up
    best = cpu = float("inf")
    for _ in range(reads):
        del x
        t0, c0 = time.perf_counter(), time.process_time()
        x = read_all(system, a)
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    x = np.ascontiguousarray(x, dtype="<f4")
    emit(version=version(system), mb_per_s=round(x.nbytes / best / 1e6, 1), cpu_ms=round(cpu * 1e3, 1),
         crc32=zlib.crc32(x))


def cmd_random(system, target, name, n=1000):
    a = open_array(system, target, name)
    read_window(system, a, 0, 0)  # warm-up
    rng = random.Random(1)
    lat, by_class = [], {}
    for _ in range(n):
        y, x = rng.randrange(ROWS - 64), rng.randrange(COLS - 64)
        t0 = time.perf_counter()
        read_window(system, a, y, x)
        d = time.perf_counter() - t0
        lat.append(d)
        by_class.setdefault(window_class(y, x), []).append(d)
    lat.sort()
    classes = {k: {"n": len(v), "p50_us": round(sorted(v)[len(v) // 2] * 1e6)} for k, v in by_class.items()}
    emit(version=version(system), p50_us=round(lat[len(lat) // 2] * 1e6), p99_us=round(lat[len(lat) * 99 // 100] * 1e6),
         classes=classes)


def window_class(y, x):
    """What a 64 × 64 window at (y, x) costs a reader of 256 × 256 chunks
    (as bench/sidebyside's windowClass): the chunks it touches and, for one
    chunk, whether its rows end in the chunk's first 128 (a float32 chunk's
    first zstd block)."""
    n = (2 if y % CHUNK > CHUNK - 64 else 1) * (2 if x % CHUNK > CHUNK - 64 else 1)
    if n == 1:
        return "1 chunk, first block" if y % CHUNK <= 64 else "1 chunk, both blocks"
    return f"{n} chunks"


def cmd_write(system, path, data):
    v = load_values(data)
    os.makedirs(path)  # new: no writer follows a removal of its own
    write_to(system, path, v)


def write_to(system, path, v):
    if system.startswith("tensorstore"):
        import tensorstore as ts

        sync = system != "tensorstore-nosync"
        a = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path},
                     "metadata": {"shape": list(v.shape), "data_type": "float32",
                                  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK, CHUNK]}},
                                  "fill_value": 0,
                                  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                             {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]}},
                    create=True, context=ts.Context({"file_io_sync": sync})).result()
        t0, c0 = time.perf_counter(), time.process_time()
        a.write(v).result()
    else:
        zarr = zarr_module(system)
        from zarr.storage import LocalStore

        a = zarr.create_array(store=LocalStore(path), shape=v.shape, chunks=(CHUNK, CHUNK), dtype="<f4", fill_value=0,
                              compressors=zarr.codecs.ZstdCodec(level=3, checksum=False))
        t0, c0 = time.perf_counter(), time.process_time()
        a[...] = v
    emit(version=version(system.removesuffix("-nosync")), mb_per_s=round(v.nbytes / (time.perf_counter() - t0) / 1e6, 1),
         cpu_ms=round((time.process_time() - c0) * 1e3, 1))


def cmd_ratio(data, k=64):
    from numcodecs import GZip, Zstd
    from numcodecs.blosc import Blosc

    codecs = {
        "zstd-1": Zstd(level=1), "zstd-3": Zstd(level=3), "zstd-5": Zstd(level=5), "zstd-9": Zstd(level=9),
        "gzip-1": GZip(level=1), "gzip-5": GZip(level=5), "gzip-9": GZip(level=9),
        "blosc-lz4-5-shuffle": Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE),
        "blosc-zstd-5-shuffle": Blosc(cname="zstd", clevel=5, shuffle=Blosc.SHUFFLE),
    }
    # The same files as bench/sidebyside ratio: Go's sort.Strings order is
    # Python's sorted() on str (both by bytes for ASCII names).
    files = []
    for d, _, names in os.walk(os.path.join(data, "c")):
        files += [os.path.join(d, n) for n in names]
    files.sort()
    chunks = [np.frombuffer(open(files[i * len(files) // k], "rb").read(), dtype="<f4") for i in range(k)]
    for name, c in codecs.items():
        raw = sum(x.nbytes for x in chunks)
        enc = sum(len(c.encode(x)) for x in chunks)
        emit(codec=name, ratio=round(raw / enc, 3), numcodecs=importlib.metadata.version("numcodecs"))


def main():
    op, args = sys.argv[1], sys.argv[2:]
    if op == "gen":
        cmd_gen(args[0])
    elif op == "read":
        cmd_read(args[0], args[1], args[2], *map(int, args[3:]))
    elif op == "random":
        cmd_random(args[0], args[1], args[2], *map(int, args[3:]))
    elif op == "values":
        cmd_values(args[0])
    elif op == "write":
        cmd_write(args[0], args[1], args[2])
    elif op == "ratio":
        cmd_ratio(args[0], *map(int, args[1:]))
    else:
        raise SystemExit(f"unknown op {op!r}")


if __name__ == "__main__":
    main()
