"""The write benchmark's Python side: one whole-array write by tensorstore.

    python bench/write_bench.py TEMPLATE OUT SYNC

TEMPLATE is the zarr.json of an array zarrgate created (shape, chunks and
codecs are taken from it), OUT a directory to create the array in, SYNC
"true" or "false": tensorstore's file_io_sync (fsync each chunk and its
directory, the default) or not. The data is BenchmarkWriteDurability's
(e2e/write_bench_test.go). Prints one JSON object: library, sync,
mb_per_s, cpu_s (this process's CPU time during the write).
"""
import importlib.metadata
import json
import sys
import time

import numpy as np
import tensorstore as ts


def main():
    template, out, sync = sys.argv[1], sys.argv[2], sys.argv[3] == "true"
    meta = json.load(open(template))
    rows, cols = meta["shape"]
    i = np.arange(rows, dtype=np.int64)[:, None]
    j = np.arange(cols, dtype=np.int64)[None, :]
    data = (np.sin(i * 0.001) * 1000 + np.cos(j * 0.002) * 100 + ((i * 131 + j * 71) % 17)).astype(np.float32)
    a = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": out},
                 "metadata": {k: meta[k] for k in ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs")},
                 "context": {"file_io_sync": sync}},
                create=True).result()
    c0, t0 = time.process_time(), time.perf_counter()
    a.write(data).result()
    el, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"library": "tensorstore " + importlib.metadata.version("tensorstore"), "sync": sync,
                      "mb_per_s": round(data.nbytes / el / 1e6, 1), "cpu_s": round(cpu, 2)}), flush=True)


if __name__ == "__main__":
    main()
