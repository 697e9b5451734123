#!/usr/bin/env python3
"""Writes the hand-built golden cases of handbuilt.json from the
specifications alone (no zarr, no numcodecs, no zarrgate), so that they
check the Go codecs against an independent derivation.

Golden cases from zarr-python/numcodecs go in other manifests (*.json here)
with the same fields; see ../../golden_test.go for the format.
"""
import json
import struct
import sys
from pathlib import Path


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # RFC 3720 check value

LE = {"name": "bytes", "configuration": {"endian": "little"}}
BE = {"name": "bytes", "configuration": {"endian": "big"}}
EMPTY = 2**64 - 1
cases = []

# 1. transpose [1,0] + bytes big + crc32c on a 2x3 uint16 matrix.
m = [[1, 2, 3], [0x100, 0x200, 0x300]]
t = [m[r][c] for c in range(3) for r in range(2)]  # B[c][r] = A[r][c]
body = b"".join(struct.pack(">H", v) for v in t)
cases.append(dict(
    name="transpose-bytes-big-crc32c",
    codecs=[{"name": "transpose", "configuration": {"order": [1, 0]}}, BE, {"name": "crc32c"}],
    data_type="uint16", shape=[2, 3], fill_value="0000",
    encoded_hex=(body + struct.pack("<I", crc32c(body))).hex(),
    decoded_hex=b"".join(struct.pack("<H", v) for row in m for v in row).hex(),
    exact=True))

# 2. A shard of 4 uint16 in inner chunks of 2, index (bytes little,
# crc32c) at the end; inner chunk 1 holds only the fill value 7.
inner0 = struct.pack(">HH", 0x0201, 0x0403)
index = struct.pack("<4Q", 0, len(inner0), EMPTY, EMPTY)
cases.append(dict(
    name="sharding-end-crc32c-empty-inner",
    codecs=[{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2], "codecs": [BE],
        "index_codecs": [LE, {"name": "crc32c"}], "index_location": "end"}}],
    data_type="uint16", shape=[4], fill_value="0700",
    encoded_hex=(inner0 + index + struct.pack("<I", crc32c(index))).hex(),
    decoded_hex=struct.pack("<4H", 0x0201, 0x0403, 7, 7).hex(),
    exact=True))

# 3. The same with the index at the start: offsets count the index.
index = struct.pack("<4Q", 36, len(inner0), EMPTY, EMPTY)
cases.append(dict(
    name="sharding-start-crc32c-empty-inner",
    codecs=[{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2], "codecs": [BE],
        "index_codecs": [LE, {"name": "crc32c"}], "index_location": "start"}}],
    data_type="uint16", shape=[4], fill_value="0700",
    encoded_hex=(index + struct.pack("<I", crc32c(index)) + inner0).hex(),
    decoded_hex=struct.pack("<4H", 0x0201, 0x0403, 7, 7).hex(),
    exact=True))

# 4. vlen-utf8: uint32 count, then uint32 length + bytes per item.
items = ["a", "", "bé"]
enc = struct.pack("<I", len(items)) + b"".join(
    struct.pack("<I", len(s.encode())) + s.encode() for s in items)
cases.append(dict(
    name="vlen-utf8", codecs=[{"name": "vlen-utf8"}],
    data_type="string", shape=[3], fill_value="",
    encoded_hex=enc.hex(), strings=items, exact=True))

# 5. numcodecs.shuffle (elementsize 4) of two float32 after bytes little.
a = struct.pack("<ff", 1.0, -2.5)
shuf = bytes(a[i * 4 + k] for k in range(4) for i in range(2))
cases.append(dict(
    name="numcodecs-shuffle", codecs=[LE, {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}],
    data_type="float32", shape=[2], fill_value="00000000",
    encoded_hex=shuf.hex(), decoded_hex=a.hex(), exact=True))

# 6. numcodecs.delta (dtype <i4, astype <i2): first element, then
# differences.
vals = [100, 101, 103, 90]
cases.append(dict(
    name="numcodecs-delta",
    codecs=[{"name": "numcodecs.delta", "configuration": {"dtype": "<i4", "astype": "<i2"}}, LE],
    data_type="int32", shape=[4], fill_value="00000000",
    encoded_hex=struct.pack("<4h", 100, 1, 2, -13).hex(),
    decoded_hex=struct.pack("<4i", *vals).hex(), exact=True))

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent) / "handbuilt.json"
out.write_text(json.dumps({"producer": "handbuilt.py (from the specifications)", "cases": cases}, indent=1) + "\n")
