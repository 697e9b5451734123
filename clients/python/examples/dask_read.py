"""Read a zarr array through a zarrgate server from several dask workers.

    python examples/dask_read.py --addr 127.0.0.1:50051 --path group/x \
        --scheduler processes --workers 2

Each worker gets the array pickled (ZarrgateStore pickles as its address) and
opens its own gRPC channel on first use. Prints one JSON line: the array's
shape and dtype, the sum and mean of all values, the number of chunks read and
the distinct worker processes / threads that read them, and whether any chunk
was read in this (the parent) process.
"""

from __future__ import annotations

import argparse
import json
import os
import threading

import dask
import dask.array as da
import numpy as np
import zarr

from zarrgate import ZarrgateStore


def _who(block: np.ndarray) -> np.ndarray:
    """One cell per chunk: which process and thread read it."""
    return np.full((1,) * block.ndim, f"{os.getpid()}:{threading.get_ident()}", dtype=object)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", required=True, help="host:port of `zarrgate serve`")
    ap.add_argument("--path", required=True, help="array path inside the store")
    ap.add_argument("--scheduler", choices=["threads", "processes", "synchronous"], default="threads")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)

    arr = zarr.open_array(store=ZarrgateStore(args.addr, read_only=True), path=args.path, mode="r")
    # One dask chunk per zarr chunk (or per shard's inner chunk grid).
    x = da.from_zarr(arr, chunks=arr.chunks)
    who = x.map_blocks(_who, chunks=tuple((1,) * len(c) for c in x.chunks), dtype=object)
    # chunksize=1: the processes scheduler hands tasks out one by one instead
    # of in batches of 6, so that small arrays are spread over the workers too.
    with dask.config.set(scheduler=args.scheduler, num_workers=args.workers, chunksize=1):
        total, mean, readers = dask.compute(x.sum(), x.mean(), who)
    workers = sorted(set(readers.ravel().tolist()))
    out = {
        "shape": list(arr.shape),
        "dtype": str(arr.dtype),
        "sum": float(total),
        "mean": float(mean),
        "chunks": int(np.prod(x.numblocks)),
        "processes": len({w.split(":")[0] for w in workers}),
        "workers": len(workers),
        "read_in_main_process": any(w.split(":")[0] == str(os.getpid()) for w in workers),
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
