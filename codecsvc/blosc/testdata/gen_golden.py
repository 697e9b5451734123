#!/usr/bin/env python3
"""Golden Blosc frames from real c-blosc (through numcodecs), and the reverse check.

    gen_golden.py gen [DIR]     write frames + raw inputs + manifest.json into DIR
                                (default: the golden/ directory next to this script)
    gen_golden.py verify DIR    decode every frame listed in DIR/manifest.json with
                                numcodecs and compare with its raw input; exit 1 on
                                any mismatch. The Go test TestNumcodecsDecodesOurFrames
                                writes such a directory with frames made by our encoder.

Needs numcodecs and numpy, e.g.:
    python3 -m venv /tmp/bloscvenv && /tmp/bloscvenv/bin/pip install numcodecs numpy
"""
import json
import os
import sys

import numpy as np
import numcodecs
from numcodecs import blosc as nblosc

# numcodecs bundles c-blosc without snappy, so there are no snappy golden frames.
CNAMES = ["blosclz", "lz4", "lz4hc", "zstd", "zlib"]
SHUFFLES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}
TYPESIZES = [1, 2, 4, 8, 3]


def smooth(nbytes, typesize, seed):
    """A smooth, compressible signal of nbytes bytes (not always whole elements)."""
    rng = np.random.default_rng(seed)
    n = nbytes // typesize + 1
    t = np.arange(n, dtype=np.float64)
    if typesize == 1:
        v = (np.sin(t / 40.0) * 100 + 128).astype(np.uint8)
    elif typesize == 2:
        v = (np.sin(t / 50.0) * 3000 + rng.integers(0, 4, n)).astype("<i2")
    elif typesize == 4:
        v = (np.sin(t / 100.0) * 10 + t / 1000.0).astype("<f4")
    elif typesize == 8:
        v = (t * 3 + rng.integers(0, 3, n)).astype("<i8")
    else:  # 3-byte records: a slowly varying 24-bit integer
        x = (np.sin(t / 70.0) * 50000 + 100000).astype("<u4")
        v = np.frombuffer(x.tobytes(), dtype=np.uint8).reshape(-1, 4)[:, :3].copy()
    return v.tobytes()[:nbytes]


def ramp(nbytes):
    """Large, very compressible input that the Go tests regenerate instead of
    reading from disk: little-endian uint32 k>>3 for k = 0, 1, ..., cut to nbytes."""
    n = nbytes // 4 + 1
    return (np.arange(n, dtype=np.uint32) >> 3).astype("<u4").tobytes()[:nbytes]


RAMP = "ramp:150001"  # manifest "input" naming a generated input


def cases():
    """(name, input file, input bytes, cname, clevel, shuffle, typesize, blocksize)."""
    out = []
    for ts in TYPESIZES:
        # A partial element at the end for ts > 1. Forced 1024-byte blocks give
        # zstd (never split) several blocks and a leftover; the splitting codecs
        # enlarge the blocksize past the input, like c-blosc does, and store one
        # block split into ts streams.
        data = smooth(3000 + ts - 1, ts, ts)
        for cname in CNAMES:
            for sh in SHUFFLES:
                out.append((f"{cname}_{SHUFFLES[sh]}_ts{ts}", f"input_ts{ts}.bin",
                            data, cname, 5, sh, ts, 1024))
    # Several split blocks plus a leftover block (automatic blocksize).
    big = ramp(150001)
    out.append(("lz4_shuffle_ts4_ramp", RAMP, big, "lz4", 1, 1, 4, 0))
    out.append(("blosclz_bitshuffle_ts4_ramp", RAMP, big, "blosclz", 1, 2, 4, 0))
    out.append(("lz4hc_shuffle_ts4_ramp", RAMP, big, "lz4hc", 5, 1, 4, 0))
    out.append(("zlib_noshuffle_ts4_ramp", RAMP, big, "zlib", 1, 0, 4, 0))
    out.append(("zstd_bitshuffle_ts8_ramp", RAMP, big, "zstd", 3, 2, 8, 0))
    out.append(("blosclz_shuffle_ts8_ramp", RAMP, big, "blosclz", 9, 1, 8, 0))
    # Fewer than 128 bytes: stored memcpyed.
    out.append(("lz4_shuffle_ts4_small", "input_small.bin", smooth(100, 4, 7), "lz4", 5, 1, 4, 0))
    # clevel 0: memcpyed.
    out.append(("lz4_shuffle_ts4_clevel0", "input_ts4.bin", smooth(3003, 4, 4), "lz4", 0, 1, 4, 0))
    # Incompressible: c-blosc falls back to memcpyed.
    rnd = np.random.default_rng(1).integers(0, 256, 3000, dtype=np.uint8).tobytes()
    out.append(("zstd_noshuffle_ts1_random", "input_random.bin", rnd, "zstd", 5, 0, 1, 1024))
    out.append(("blosclz_shuffle_ts4_empty", "input_empty.bin", b"", "blosclz", 5, 1, 4, 0))
    # Bitshuffle of a block whose element count is not a multiple of 8.
    out.append(("lz4_bitshuffle_ts2_odd", "input_odd.bin", smooth(1234, 2, 5), "lz4", 5, 2, 2, 0))
    return out


def read_input(d, name):
    if name.startswith("ramp:"):
        return ramp(int(name[5:]))
    with open(os.path.join(d, name), "rb") as f:
        return f.read()


def gen(d):
    os.makedirs(d, exist_ok=True)
    nblosc.use_threads = False
    manifest = []
    for name, inname, data, cname, clevel, sh, ts, bs in cases():
        if not inname.startswith("ramp:"):
            with open(os.path.join(d, inname), "wb") as f:
                f.write(data)
        codec = numcodecs.Blosc(cname=cname, clevel=clevel, shuffle=sh, blocksize=bs, typesize=ts)
        frame = codec.encode(np.frombuffer(data, dtype=np.uint8))
        with open(os.path.join(d, name + ".blosc"), "wb") as f:
            f.write(bytes(frame))
        manifest.append({"frame": name + ".blosc", "input": inname, "cname": cname,
                         "clevel": clevel, "shuffle": sh, "typesize": ts, "blocksize": bs})
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump({"numcodecs": numcodecs.__version__,
                   "cblosc": nblosc.VERSION_STRING if hasattr(nblosc, "VERSION_STRING") else "",
                   "frames": manifest}, f, indent=1)


def verify(d):
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    bad = skipped = 0
    for e in m["frames"]:
        with open(os.path.join(d, e["frame"]), "rb") as f:
            frame = f.read()
        want = read_input(d, e["input"])
        if not want:
            # numcodecs reports c-blosc's 0-byte result as an error.
            print(f"skip {e['frame']}: numcodecs cannot decode empty frames")
            skipped += 1
            continue
        try:
            got = bytes(numcodecs.Blosc().decode(frame))
        except Exception as exc:  # noqa: BLE001
            print(f"FAIL {e['frame']}: {exc}")
            bad += 1
            continue
        if got != want:
            print(f"FAIL {e['frame']}: decoded {len(got)} bytes differ from the {len(want)}-byte input")
            bad += 1
    n = len(m["frames"]) - skipped
    print(f"{n - bad}/{n} frames decoded by numcodecs {numcodecs.__version__} ({skipped} skipped)")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "gen":
        gen(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))
    elif len(sys.argv) == 3 and sys.argv[1] == "verify":
        sys.exit(verify(sys.argv[2]))
    else:
        print(__doc__)
        sys.exit(2)
