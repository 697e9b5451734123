"""Read zarrgate-served fixtures over HTTP with unmodified Python readers.

    python read_python.py CLIENT BASE_URL FIXTURES_DIR

CLIENT is "zarr" (zarr-python through fsspec's HTTPFileSystem, aiohttp) or
"tensorstore" (tensorstore's http kvstore). BASE_URL is the store's URL
(http://host:port/zarr/). Every array of FIXTURES_DIR/manifest.json that the
client reads is compared with its expected values; it prints one JSON line
{"client", "read": [paths], "mismatch": [...]} and exits 1 on a mismatch.
"""
import base64
import json
import os
import sys

import numpy as np

client, base, fixtures = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3]
manifest = json.load(open(os.path.join(fixtures, "manifest.json")))


def expected(a):
    p = os.path.join(fixtures, "expected", a["expected"])
    if a["kind"] == "fixed":
        dt = np.dtype(a["dtype"]).newbyteorder("<")
        return np.frombuffer(open(p, "rb").read(), dtype=dt).reshape(a["shape"])
    vals = json.load(open(p))
    if a["kind"] == "bytes":
        vals = [base64.b64decode(v) for v in vals]
    return vals


def same(got, a):
    want = expected(a)
    if a["kind"] == "fixed":
        got = np.asarray(got)
        if got.dtype.kind in "fc":
            return got.shape == want.shape and np.array_equal(got, want, equal_nan=True)
        return got.shape == want.shape and np.array_equal(got, want)
    return np.asarray(got, dtype=object).ravel().tolist() == want


def corner(a):
    """The first element's selection: a read of one inner chunk of a shard,
    which readers fetch with byte ranges (the shard index, then the chunk)."""
    return tuple(slice(0, 1) for _ in a["shape"])


def same_corner(got, a):
    want = expected(a)
    if a["kind"] != "fixed":
        return np.asarray(got, dtype=object).ravel().tolist()[0] == want[0]
    return np.array_equal(np.asarray(got), want[corner(a)], equal_nan=want.dtype.kind in "fc")


read, mismatch = [], []
if client == "zarr":
    import zarr
    from zarr.storage import FsspecStore

    for a in manifest["arrays"]:
        if a["zarr_format"] != 3:
            continue
        store = FsspecStore.from_url(base + "/" + a["path"], read_only=True)
        arr = zarr.open_array(store=store, mode="r", zarr_format=3)
        read.append(a["path"])
        if not same(arr[...], a):
            mismatch.append(a["path"])
        if "/shard/" in a["path"]:
            read.append(a["path"] + "[corner]")
            if not same_corner(arr[corner(a)], a):
                mismatch.append(a["path"] + "[corner]")
    # A group's members, which HTTP cannot list, from the consolidated
    # metadata the server puts in the group's zarr.json (--http-consolidate).
    g = zarr.open_group(store=FsspecStore.from_url(base + "/v3/shard", read_only=True), mode="r", use_consolidated=True)
    members = sorted(g.array_keys())
    read.append("v3/shard members:" + ",".join(members))
    if not same(g["partial"][...], next(a for a in manifest["arrays"] if a["path"] == "v3/shard/partial")):
        mismatch.append("v3/shard/partial via the group")
elif client == "tensorstore":
    import tensorstore as ts

    for a in manifest["arrays"]:
        # tensorstore reads numeric v3 arrays (no variable-length strings).
        # Fixed-size v3 arrays; not raw bits (r16): tensorstore reads them as
        # its "byte" type, which it hands to numpy as itemless |V0 values.
        if a["zarr_format"] != 3 or a["kind"] != "fixed" or a["dtype"].startswith("|V"):
            continue
        spec = {"driver": "zarr3", "kvstore": {"driver": "http", "base_url": base + "/" + a["path"] + "/"}}
        arr = ts.open(spec, read=True).result()
        read.append(a["path"])
        if not same(arr.read().result(), a):
            mismatch.append(a["path"])
        if "/shard/" in a["path"]:
            read.append(a["path"] + "[corner]")
            if not same_corner(arr[corner(a)].read().result(), a):
                mismatch.append(a["path"] + "[corner]")
else:
    sys.exit("unknown client " + client)

print(json.dumps({"client": client, "read": read, "mismatch": mismatch}))
sys.exit(1 if mismatch else 0)
