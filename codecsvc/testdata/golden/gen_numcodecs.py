#!/usr/bin/env python3
"""Golden cases for the numcodecs filters, checksums and LZMA, from numcodecs
itself (the reference implementation).

    gen_numcodecs.py gen [DIR]   write DIR/numcodecs.json (default: next to this
                               script) and the large cases' binary files
    gen_numcodecs.py verify FILE   check zarrgate's encodings listed in FILE
                               (written by TestNumcodecsDecodesOurs): numcodecs
                               decodes each to what zarrgate decodes it to, and
                               where numcodecs is deterministic, its encoding of
                               the input is zarrgate's byte for byte

Each case is a chain in its v3 form ("numcodecs.<id>" and numcodecs' own
configuration, as zarr-python 3 writes it and as zarrgate normalises v2
filters and compressors), encoded by numcodecs: an array codec's output array
serialised little-endian (the "bytes" codec), a bytes codec's output of the
array's little-endian bytes. "decoded" is numcodecs' decoding; for the lossy
codecs "input_hex" holds the elements numcodecs encoded, which zarrgate must
encode to the same bytes. See ../../golden_test.go for the format.

Run with the venv of scripts/test-python.sh (numcodecs 0.16.5, numpy 2.4.6 on
Python 3.11).
"""
import json
import sys
from pathlib import Path

import numcodecs
import numpy as np

LE = {"name": "bytes", "configuration": {"endian": "little"}}
V3 = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
      "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
      "float16": "float16", "float32": "float32", "float64": "float64", "object": "string"}
ARRAY = {"fixedscaleoffset", "quantize", "bitround", "astype", "packbits", "categorize"}
LOSSY = {"fixedscaleoffset", "quantize", "bitround", "astype", "categorize"}


def spec(cfg):
    c = dict(cfg)
    name = "numcodecs." + c.pop("id")
    return {"name": name, "configuration": c}


def data_type(a):
    if a.dtype.kind == "U":
        return "U%d" % (a.dtype.itemsize // 4)
    return V3[a.dtype.name]


def case(name, cfg, a, out_dir):
    """One golden case: cfg (numcodecs config with id) applied to array a."""
    codec = numcodecs.get_codec(dict(cfg))
    cid = cfg["id"]
    if cid in ARRAY:
        enc = np.asarray(codec.encode(a))
        encoded = np.ascontiguousarray(enc).tobytes()
        dec = np.asarray(codec.decode(np.frombuffer(encoded, dtype=enc.dtype))).reshape(a.shape)
        codecs = [spec(cfg), LE]
    else:
        encoded = bytes(codec.encode(a.tobytes()))
        dec = np.frombuffer(bytes(codec.decode(encoded)), dtype=a.dtype).reshape(a.shape)
        codecs = [LE, spec(cfg)]
    c = dict(name=name, codecs=codecs, data_type=data_type(a), shape=list(a.shape),
             fill_value="" if a.dtype == object else "00" * a.dtype.itemsize,
             exact=cid != "lzma")
    if len(encoded) > 4096:
        (out_dir / f"numcodecs-{name}.enc").write_bytes(encoded)
        (out_dir / f"numcodecs-{name}.dec").write_bytes(dec.tobytes())
        c["encoded"], c["decoded"] = f"numcodecs-{name}.enc", f"numcodecs-{name}.dec"
        return c
    c["encoded_hex"] = encoded.hex()
    if a.dtype == object:
        c["strings"] = [str(s) for s in dec.ravel()]
    else:
        c["decoded_hex"] = np.ascontiguousarray(dec).tobytes().hex()
        if cid in LOSSY and not np.array_equal(dec, a, equal_nan=a.dtype.kind == "f"):
            c["input_hex"] = a.tobytes().hex()
    return c


def gen(out_dir):
    out_dir = Path(out_dir)
    rng = np.random.default_rng(13)
    smooth = np.linspace(1000, 1001, 10)
    noisy32 = (rng.standard_normal(40) * 100).astype("<f4")
    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.4999, 7.5000001, -2.5], dtype="<f8")
    cases = []
    add = lambda name, cfg, a: cases.append(case(name, cfg, a, out_dir))

    # fixedscaleoffset: float data in its own precision, integer data in
    # integers while offset and scale are ints, float64 otherwise.
    add("fso-f8-u1", {"id": "fixedscaleoffset", "offset": 1000, "scale": 10, "dtype": "<f8", "astype": "|u1"}, smooth)
    add("fso-f8-u2-scale1000", {"id": "fixedscaleoffset", "offset": 1000, "scale": 1000, "dtype": "<f8", "astype": "<u2"}, smooth)
    add("fso-f4-i2", {"id": "fixedscaleoffset", "offset": 0.5, "scale": 100, "dtype": "<f4", "astype": "<i2"}, noisy32)
    add("fso-f8-ties", {"id": "fixedscaleoffset", "offset": 0, "scale": 1, "dtype": "<f8", "astype": "<f8"}, ties)
    add("fso-f4-f8", {"id": "fixedscaleoffset", "offset": 0.1, "scale": 3.3, "dtype": "<f4", "astype": "<f8"}, noisy32)
    add("fso-f8-f4", {"id": "fixedscaleoffset", "offset": -3, "scale": 0.37, "dtype": "<f8", "astype": "<f4"}, noisy32.astype("<f8"))
    add("fso-i4-int", {"id": "fixedscaleoffset", "offset": 100, "scale": 3, "dtype": "<i4", "astype": "|i1"},
        np.array([100, 101, 140, 99, 60, 2**30, -7], dtype="<i4"))
    add("fso-i2-float-scale", {"id": "fixedscaleoffset", "offset": 7, "scale": 0.5, "dtype": "<i2", "astype": "<i2"},
        np.array([7, 8, 9, 10, -32768, 32767, 11], dtype="<i2"))
    add("fso-u2-float-offset", {"id": "fixedscaleoffset", "offset": 1.5, "scale": 2, "dtype": "<u2", "astype": "<f4"},
        np.array([0, 1, 2, 65535, 300], dtype="<u2"))
    add("fso-u8-int", {"id": "fixedscaleoffset", "offset": 5, "scale": 2, "dtype": "<u8", "astype": "<f8"},
        np.array([5, 2**63 + 11, 2**64 - 1], dtype="<u8"))
    # quantize
    for d in (0, 1, 2, 3, -1):
        add(f"quantize-f8-{d}", {"id": "quantize", "digits": d, "dtype": "<f8"}, np.linspace(-2, 3, 13))
    add("quantize-f4", {"id": "quantize", "digits": 2, "dtype": "<f4", "astype": "<f4"}, noisy32)
    add("quantize-f8-astype-f4", {"id": "quantize", "digits": 3, "dtype": "<f8", "astype": "<f4"}, noisy32.astype("<f8") / 7)
    # bitround (configuration: keepbits only; the array's type decides)
    add("bitround-f4-3", {"id": "bitround", "keepbits": 3}, noisy32)
    add("bitround-f4-0", {"id": "bitround", "keepbits": 0}, noisy32)
    add("bitround-f8-10", {"id": "bitround", "keepbits": 10}, noisy32.astype("<f8") / 3)
    add("bitround-f2-4", {"id": "bitround", "keepbits": 4}, (noisy32 / 10).astype("<f2"))
    add("bitround-f4-23", {"id": "bitround", "keepbits": 23}, noisy32)
    # astype
    add("astype-f8-f4", {"id": "astype", "encode_dtype": "<f4", "decode_dtype": "<f8"}, noisy32.astype("<f8") / 3)
    add("astype-i4-i1", {"id": "astype", "encode_dtype": "|i1", "decode_dtype": "<i4"},
        np.array([1, -1, 127, 128, 255, 256, -129, 2**31 - 1], dtype="<i4"))
    add("astype-f4-i2", {"id": "astype", "encode_dtype": "<i2", "decode_dtype": "<f4"},
        np.array([1.9, -1.9, 0.5, -0.5, 300.7, -32768.2], dtype="<f4"))
    # float64 -> float16 rounds once: 1 + 2**-11 + 2**-40 is just above a
    # tie, which rounding through float32 loses.
    add("astype-f8-f2", {"id": "astype", "encode_dtype": "<f2", "decode_dtype": "<f8"},
        np.array([1 + 2**-11 + 2**-40, 1 + 2**-11, 65519.99, 70000, 1e-8, -3.14159, 6.1e-5], dtype="<f8"))
    add("astype-u8-f8", {"id": "astype", "encode_dtype": "<f8", "decode_dtype": "<u8"},
        np.array([0, 1, 2**53 + 1, 2**63 + 2**11, 2**64 - 2**11], dtype="<u8"))  # (2**64 - 1 -> 2.0**64 is out of range back)
    add("astype-i8-f4", {"id": "astype", "encode_dtype": "<f4", "decode_dtype": "<i8"},
        np.array([2**24 + 1, -(2**40) - 3, 2**62 + 2**38 + 1], dtype="<i8"))
    add("astype-b1-u1", {"id": "astype", "encode_dtype": "|u1", "decode_dtype": "|b1"}, np.array([True, False, True]))
    # packbits
    bits = rng.integers(0, 2, 16).astype(bool)
    add("packbits-13", {"id": "packbits"}, bits[:13])
    add("packbits-16", {"id": "packbits"}, bits[:16].reshape(4, 4))
    add("packbits-1", {"id": "packbits"}, bits[:1])
    # categorize: fixed-width unicode and object (zarr "string") arrays
    add("categorize-U6", {"id": "categorize", "labels": ["female", "male"], "dtype": "<U6", "astype": "|u1"},
        np.array(["male", "female", "female", "male", "unexp", ""], dtype="<U6"))
    add("categorize-U3-cut", {"id": "categorize", "labels": ["a", "bcdef", "é"], "dtype": "<U3", "astype": "<i2"},
        np.array(["a", "é", "bcd", "x"], dtype="<U3"))
    add("categorize-object", {"id": "categorize", "labels": ["ü", "male", "female"], "dtype": "|O", "astype": "<u2"},
        np.array(["male", "ü", "female", "unexpected", ""], dtype=object))
    # checksums
    body = np.arange(0, 1000, 3, dtype="<u2")
    for cfg in ({"id": "crc32"}, {"id": "crc32", "location": "end"}, {"id": "crc32c"},
                {"id": "crc32c", "location": "start"}, {"id": "adler32"}, {"id": "adler32", "location": "end"},
                {"id": "fletcher32"}, {"id": "jenkins_lookup3"}, {"id": "jenkins_lookup3", "initval": 12345, "prefix": None}):
        tag = "-".join(str(v) for v in cfg.values() if v is not None)
        add(tag, cfg, body)
        for n in (1, 5, 12, 13, 24):
            add(f"{tag}-u1-{n}", cfg, np.arange(n, dtype="u1") * 37)
    add("fletcher32-long", {"id": "fletcher32"}, (np.arange(5001) * 7919 % 65536).astype("<u2"))
    # lzma
    smooth_big = (np.sin(np.arange(20_000) / 300) * 1000).astype("<i2")
    add("lzma-default", {"id": "lzma"}, body)
    add("lzma-big", {"id": "lzma", "preset": 1}, smooth_big)
    for check in (0, 1, 10):
        add(f"lzma-check{check}", {"id": "lzma", "check": check}, body)
    add("lzma-preset9e", {"id": "lzma", "preset": 9 | 0x80000000}, body)
    add("lzma-empty", {"id": "lzma"}, np.zeros(0, dtype="u1"))
    add("lzma-alone", {"id": "lzma", "format": 2}, body)
    add("lzma-alone-big", {"id": "lzma", "format": 2, "preset": 0}, smooth_big)
    # (numcodecs cannot decode xz or alone data when filters are given.)
    add("lzma-raw2", {"id": "lzma", "format": 3, "filters": [{"id": 33, "preset": 2, "lc": 2, "pb": 0}]}, body)
    add("lzma-raw1", {"id": "lzma", "format": 3, "filters": [{"id": 0x4000000000000001, "dict_size": 1 << 20, "lc": 1, "lp": 1, "pb": 1}]}, body)
    add("lzma-raw2-big", {"id": "lzma", "format": 3, "filters": [{"id": 33, "dict_size": 1 << 20}]}, smooth_big)

    producer = f"numcodecs {numcodecs.__version__} / numpy {np.__version__} (gen_numcodecs.py)"
    (out_dir / "numcodecs.json").write_text(json.dumps({"producer": producer, "cases": cases}, indent=1) + "\n")


def verify(path):
    cases = json.loads(Path(path).read_text())
    bad = 0
    for c in cases:
        codec = numcodecs.get_codec(dict(c["config"]))
        enc = bytes.fromhex(c["encoded_hex"])
        try:
            # An array codec decodes an array of its encoded type.
            out = codec.decode(np.frombuffer(enc, dtype=c["encoded_dtype"]) if c.get("encoded_dtype") else enc)
            if "strings" in c:
                got = [str(s) for s in np.asarray(out).ravel()]
                ok = got == c["strings"]
            else:
                got = np.ascontiguousarray(out).tobytes() if isinstance(out, np.ndarray) else bytes(out)
                ok = got == bytes.fromhex(c["decoded_hex"])
            if ok and c.get("input_hex") is not None:
                a = np.frombuffer(bytes.fromhex(c["input_hex"]), dtype=c["input_dtype"])
                if c["config"]["id"] in ARRAY:
                    mine = np.ascontiguousarray(codec.encode(a)).tobytes()
                else:
                    mine = bytes(codec.encode(a.tobytes()))
                if mine != enc:
                    print(f"{c['name']}: numcodecs encodes to {mine.hex()[:200]}, zarrgate to {enc.hex()[:200]}")
                    bad += 1
                    continue
        except Exception as e:  # noqa: BLE001
            print(f"{c['name']}: numcodecs cannot decode zarrgate's encoding: {e!r}")
            bad += 1
            continue
        if not ok:
            print(f"{c['name']}: numcodecs decodes zarrgate's encoding differently")
            bad += 1
    print(f"{len(cases) - bad} of {len(cases)} zarrgate encodings check out with numcodecs {numcodecs.__version__}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "gen":
        gen(sys.argv[2] if len(sys.argv) > 2 else Path(__file__).parent)
    elif len(sys.argv) == 3 and sys.argv[1] == "verify":
        verify(sys.argv[2])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
