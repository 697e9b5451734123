"""zarr-python side of the zip store's interoperability tests.

    python interop.py write OUT.zip   # zarr-python writes a known hierarchy
    python interop.py check IN.zip    # zarr-python reads what zarrgate wrote

The hierarchy, on both sides: a Zarr v3 group with attribute
{"title": "interop"}, holding array "a" of int32, shape (4, 6), chunks
(2, 3), values arange(24), no compressor (chunks are raw little-endian
bytes, so the Go side can check them without codecs), and attribute
{"written_by": <writer>}.

Run with a venv made from requirements.txt next to this file (zarr 3).
TestPythonInterop runs it when ZARRGATE_PYTHON names that venv's python.
"""

import sys

import numpy as np
import zarr
from zarr.storage import ZipStore

EXPECTED = np.arange(24, dtype="<i4").reshape(4, 6)


def write(path):
    store = ZipStore(path, mode="w")
    root = zarr.create_group(store=store, zarr_format=3, attributes={"title": "interop"})
    a = root.create_array(
        "a", shape=(4, 6), chunks=(2, 3), dtype="int32", compressors=None, fill_value=0,
        attributes={"written_by": "zarr-python " + zarr.__version__},
    )
    a[:] = EXPECTED
    store.close()


def check(path):
    store = ZipStore(path, mode="r")
    root = zarr.open_group(store=store, mode="r")
    assert root.attrs["title"] == "interop", dict(root.attrs)
    a = root["a"]
    assert a.attrs["written_by"] == "zarrgate", dict(a.attrs)
    np.testing.assert_array_equal(a[:], EXPECTED)
    # Each name once in the central directory, even for overwritten keys.
    names = store._zf.namelist()
    assert len(names) == len(set(names)), names
    store.close()
    print("ok", len(names), "members")


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
