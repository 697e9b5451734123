"""Compression ratios of the reference libraries (libzstd, zlib, c-blosc,
through numcodecs) for codecsvc's TestCompressionParity.

    python ratios.py DIR

DIR holds the inputs as <name>.f32 (little-endian float32), a cases.json
list of [input, codec, level] and zarrgate's frames of each case as
<input>_<codec>_<level>.bin; prints {"input codec level": ratio} and
fails unless numcodecs decodes each of zarrgate's frames to the input.
"""
import json
import os
import sys

import numpy as np
from numcodecs import GZip, Zlib, Zstd
from numcodecs.blosc import Blosc

d = sys.argv[1]
out = {}
for name, codec, level in json.load(open(os.path.join(d, "cases.json"))):
    x = np.fromfile(os.path.join(d, name + ".f32"), dtype="<f4")
    if codec == "zstd":
        c = Zstd(level=level)
    elif codec == "gzip":
        c = GZip(level=level)
    elif codec == "zlib":
        c = Zlib(level=level)
    else:  # blosc-<cname>, byte shuffle
        c = Blosc(cname=codec.split("-", 1)[1], clevel=level, shuffle=Blosc.SHUFFLE, blocksize=0)
    out[f"{name} {codec} {level}"] = x.nbytes / len(c.encode(x))
    with open(os.path.join(d, f"{name}_{codec}_{level}.bin"), "rb") as f:
        ours = f.read()
    if bytes(c.decode(ours)) != x.tobytes():
        sys.exit(f"{name} {codec} {level}: numcodecs decodes zarrgate's frame to other bytes")
print(json.dumps(out))
