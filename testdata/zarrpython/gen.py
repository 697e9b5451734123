"""Interop fixtures written by the real zarr-python 3 and numcodecs.

    python testdata/zarrpython/gen.py OUT       # write fixtures + manifest.json
    python testdata/zarrpython/gen.py --check DIR MANIFEST
                                                # read DIR with zarr-python and
                                                # compare with MANIFEST's values

Every array is listed in manifest.json with its path, zarr format, numpy
dtype, shape and the file holding its expected values: <name>.bin (C-order,
little-endian raw bytes, for fixed-size types) or <name>.json (a flat list,
for strings; bytes base64). The Go tests (e2e/interop_test.go) read every
fixture through the gateway and compare; they also write every fixture's
values through the gateway into a new store, which --check then reads back
with zarr-python.
"""
import base64
import json
import os
import shutil
import sys

import numcodecs
import numpy as np
import zarr
from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec,
                         ShardingCodec, TransposeCodec, ZstdCodec)
from zarr.core.dtype import VariableLengthBytes
from zarr.storage import LocalStore

rng = np.random.default_rng(42)


def values(dtype, shape):
    dt = np.dtype(object if dtype == "vbytes" else dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dt.kind == "b":
        v = rng.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        v = rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True).astype(dt)
    elif dt.kind == "f":
        v = (np.sin(np.arange(n) * 0.37) * 100).astype(dt)
    elif dt.kind == "c":
        v = (np.sin(np.arange(n) * 0.37) * 100 + 1j * np.cos(np.arange(n) * 0.11)).astype(dt)
    elif dt.kind == "S":
        v = np.array([("s%d" % (i * 7))[: dt.itemsize].encode() for i in range(n)], dtype=dt)
    elif dt.kind == "U":
        v = np.array([("ü%d" % (i * 3))[: dt.itemsize // 4] for i in range(n)], dtype=dt)
    elif dt.kind == "V":
        v = np.array([bytes([i % 256, (i * 7) % 256]) for i in range(n)], dtype=dt)
    elif dtype == "vbytes":
        v = np.array([b"" if i % 4 == 0 else bytes(range(i % 5, i % 5 + i % 4)) + b"\xff" for i in range(n)], dtype=object)
    elif dt.kind == "O" or dt.kind == "T":
        v = np.array(["" if i % 5 == 0 else "é" * (i % 3) + str(i) for i in range(n)], dtype=object)
    else:
        raise ValueError(dtype)
    return v.reshape(shape)


manifest = []


def record(out, path, arr, expected, fmt, kind="fixed"):
    name = path.replace("/", "__")
    entry = {"path": path, "zarr_format": fmt, "dtype": str(arr.dtype), "shape": list(arr.shape), "kind": kind}
    if kind == "fixed":
        dt = expected.dtype.newbyteorder("<") if expected.dtype.byteorder in "<>" else expected.dtype
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(np.ascontiguousarray(expected.astype(dt)).tobytes())
        entry["expected"] = name + ".bin"
    else:
        flat = [x.decode("latin1") if isinstance(x, bytes) else x for x in expected.reshape(-1).tolist()]
        if kind == "bytes":
            flat = [base64.b64encode(x).decode() for x in expected.reshape(-1).tolist()]
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(flat, f)
        entry["expected"] = name + ".json"
    manifest.append(entry)


def v3(out, store, path, dtype, shape, chunks, partial=False, kind=None, **kw):
    data = values(dtype, shape)
    zdtype = VariableLengthBytes() if dtype == "vbytes" else dtype
    a = zarr.create_array(store=store, name=path, shape=shape, chunks=chunks, dtype=zdtype, zarr_format=3, **kw)
    expected = np.full(shape, a.fill_value, dtype=a.dtype) if partial else data
    if partial and len(shape) >= 1 and shape[0] > chunks[0]:
        # Only the first chunk row: the rest reads as the fill value.
        a[: chunks[0]] = data[: chunks[0]]
        expected[: chunks[0]] = data[: chunks[0]]
    else:
        a[...] = data
        expected = data
    kind = kind or ("strings" if a.dtype.kind in "OT" else "fixed")
    record(out, path, a, expected, 3, kind)


def v2(out, store, path, dtype, shape, chunks, **kw):
    data = values(dtype, shape)
    a = zarr.create_array(store=store, name=path, shape=shape, chunks=chunks, dtype=dtype, zarr_format=2, **kw)
    a[...] = data
    kind = "strings" if a.dtype.kind in "OT" else "fixed"
    record(out, path, a, data, 2, kind)


def generate(out):
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    store = LocalStore(os.path.join(out, "data"))
    zarr.create_group(store=store, zarr_format=3, attributes={"title": "zarrgate interop", "nested": {"a": [1, 2.5, None]}})
    exp = os.path.join(out, "expected")
    os.makedirs(exp)
    # Every data type, partial edge chunks, default codecs (bytes + zstd).
    for dt in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64", "complex64", "complex128"]:
        v3(exp, store, "v3/dtypes/" + dt, dt, (7, 5), (4, 3))
    v3(exp, store, "v3/dtypes/string", str, (6, 5), (4, 3))
    v3(exp, store, "v3/dtypes/bytes", "vbytes", (6, 5), (4, 3), kind="bytes")
    v3(exp, store, "v3/dtypes/raw", "V2", (7, 5), (4, 3))
    # Fill values: unwritten chunks read as the fill value.
    v3(exp, store, "v3/fill/nan", "float32", (8, 4), (3, 4), partial=True, fill_value=np.nan)
    v3(exp, store, "v3/fill/inf", "float64", (8, 4), (3, 4), partial=True, fill_value=np.inf)
    v3(exp, store, "v3/fill/neginf", "float32", (8, 4), (3, 4), partial=True, fill_value=-np.inf)
    v3(exp, store, "v3/fill/int", "int16", (8, 4), (3, 4), partial=True, fill_value=-7)
    v3(exp, store, "v3/fill/complex", "complex64", (8, 4), (3, 4), partial=True, fill_value=1 + 2j)
    v3(exp, store, "v3/fill/string", str, (8, 4), (3, 4), partial=True, fill_value="none")
    # 0-d.
    v3(exp, store, "v3/scalar", "float64", (), ())
    # Codecs.
    f32 = "float32"
    v3(exp, store, "v3/codecs/bytes-big", f32, (9, 10), (4, 4), serializer=BytesCodec(endian="big"), compressors=None)
    v3(exp, store, "v3/codecs/transpose", "int32", (5, 6, 7), (2, 3, 4), filters=[TransposeCodec(order=(2, 0, 1))], compressors=None)
    v3(exp, store, "v3/codecs/gzip", f32, (9, 10), (4, 4), compressors=GzipCodec(level=5))
    v3(exp, store, "v3/codecs/zstd-checksum", f32, (9, 10), (4, 4), compressors=ZstdCodec(level=5, checksum=True))
    v3(exp, store, "v3/codecs/crc32c", "int64", (9, 10), (4, 4), compressors=Crc32cCodec())
    v3(exp, store, "v3/codecs/gzip-crc32c", "uint16", (9, 10), (4, 4), compressors=[GzipCodec(level=1), Crc32cCodec()])
    for cname in ["lz4", "lz4hc", "zstd", "zlib", "blosclz"]:
        for shuffle in ["noshuffle", "shuffle", "bitshuffle"]:
            v3(exp, store, f"v3/codecs/blosc-{cname}-{shuffle}", "float64" if cname == "zlib" else f32, (40, 50), (16, 32),
               compressors=BloscCodec(cname=cname, clevel=5, shuffle=shuffle))
    # Sharding: index at the end and the start, index checksums, empty inner
    # chunks, nested sharding, a partial edge shard.
    v3(exp, store, "v3/shard/end", f32, (20, 30), (5, 5), shards=(10, 15))
    v3(exp, store, "v3/shard/partial", "int32", (20, 30), (5, 5), shards=(10, 15), partial=True, fill_value=3)
    v3(exp, store, "v3/shard/strings", str, (8, 6), (2, 3), shards=(4, 6))
    sharded = ShardingCodec(chunk_shape=(5, 5), codecs=[BytesCodec(endian="little"), ZstdCodec(level=1)],
                            index_codecs=[BytesCodec(endian="little"), Crc32cCodec()], index_location="start")
    v3(exp, store, "v3/shard/start", "uint8", (20, 30), (10, 15), serializer=sharded, compressors=None)
    nested = ShardingCodec(chunk_shape=(10, 15), codecs=[ShardingCodec(chunk_shape=(5, 5), codecs=[BytesCodec(endian="big")])])
    v3(exp, store, "v3/shard/nested", "int16", (20, 30), (20, 30), serializer=nested, compressors=None)
    # Zarr v2: compressors, filters, order F, strings, fixed strings, big-endian.
    v2(exp, store, "v2/blosc", "<f4", (40, 50), (16, 32), compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1))
    v2(exp, store, "v2/blosc-zstd-bit", "<i8", (40, 50), (16, 32), compressors=numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2))
    v2(exp, store, "v2/zlib", "<i4", (20, 30), (8, 8), compressors=numcodecs.Zlib(level=1))
    v2(exp, store, "v2/gzip", "<u2", (20, 30), (8, 8), compressors=numcodecs.GZip(level=5))
    v2(exp, store, "v2/zstd", "<f8", (20, 30), (8, 8), compressors=numcodecs.Zstd(level=3))
    v2(exp, store, "v2/lz4", "<f4", (20, 30), (8, 8), compressors=numcodecs.LZ4())
    v2(exp, store, "v2/bz2", "<i2", (20, 30), (8, 8), compressors=numcodecs.BZ2(level=9))
    v2(exp, store, "v2/delta", "<i4", (20, 30), (8, 8), filters=[numcodecs.Delta(dtype="<i4")], compressors=numcodecs.Zlib(level=1))
    v2(exp, store, "v2/shuffle", "<f8", (20, 30), (8, 8), filters=[numcodecs.Shuffle(elementsize=8)], compressors=numcodecs.Zlib(level=1))
    v2(exp, store, "v2/order-F", "<f4", (9, 10, 11), (4, 5, 6), order="F", compressors=numcodecs.Zstd(level=1))
    v2(exp, store, "v2/big-endian", ">f8", (9, 10), (4, 4), compressors=None)
    v2(exp, store, "v2/strings", str, (6, 5), (4, 3))
    v2(exp, store, "v2/fixed-bytes", "|S5", (6, 5), (4, 3), compressors=numcodecs.Zlib(level=1))
    v2(exp, store, "v2/fixed-unicode", "<U4", (6, 5), (4, 3), compressors=None)
    v2(exp, store, "v2/scalar", "<i8", (), ())
    v2(exp, store, "v2/nested-separator", "<i4", (10, 10), (4, 4), chunk_key_encoding={"name": "v2", "separator": "/"})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"zarr": zarr.__version__, "numcodecs": numcodecs.__version__, "arrays": manifest}, f, indent=1)


def check(root, manifest_path):
    """Reads every array of the manifest under root with zarr-python and
    compares with the expected values; prints one line per array and a
    closing 'N passed, N failed' line."""
    m = json.load(open(manifest_path))
    exp_dir = os.path.join(os.path.dirname(manifest_path), "expected")
    store = LocalStore(root, read_only=True)
    passed = failed = 0
    for e in m["arrays"]:
        try:
            a = zarr.open_array(store=store, path=e["path"], mode="r")
            got = a[...]
            if e["kind"] == "fixed":
                dt = np.dtype(e["dtype"])
                dt = dt.newbyteorder("<") if dt.byteorder in "<>" else dt
                want = np.frombuffer(open(os.path.join(exp_dir, e["expected"]), "rb").read(), dtype=dt).reshape(e["shape"])
                ok = got.shape == want.shape and (np.array_equal(got, want, equal_nan=True) if dt.kind in "fc" else np.array_equal(got, want))
            else:
                want = json.load(open(os.path.join(exp_dir, e["expected"])))
                items = np.asarray(got).reshape(-1).tolist()
                if e["kind"] == "bytes":
                    flat = [base64.b64encode(bytes(x)).decode() for x in items]
                else:
                    flat = [x.decode("latin1") if isinstance(x, bytes) else str(x) for x in items]
                ok = flat == want
        except Exception as ex:  # noqa: BLE001 - report every failure
            ok = False
            print(f"FAIL {e['path']}: {type(ex).__name__}: {ex}")
        if ok:
            passed += 1
            print(f"ok   {e['path']}")
        else:
            failed += 1
            print(f"FAIL {e['path']}: values differ")
    print(f"{passed} passed, {failed} failed")
    return failed == 0


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        sys.exit(0 if check(sys.argv[2], sys.argv[3]) else 1)
    generate(sys.argv[1])
