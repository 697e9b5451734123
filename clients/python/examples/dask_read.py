"""Read a zarr array through a zarrgate server from several dask workers.

    python examples/dask_read.py --addr 127.0.0.1:50051 --path group/x \
        --scheduler processes --workers 2

Against a server with TLS and tokens (`zarrgate serve --tls-cert ... --tokens ...`):

    ZARRGATE_TOKEN=$(cat alice.token) python examples/dask_read.py \
        --addr zarrgate.example:50051 --tls-ca ca.pem --path group/x

--tls, --tls-ca, --tls-cert, --tls-key and --token are the Go CLI's flags and,
as there, default to $ZARRGATE_TLS, $ZARRGATE_TLS_CA, ...; --token to
$ZARRGATE_TOKEN (better than the command line, which other users can see).

Each task reads its block with one ReadSlab (zarrgate.to_dask). Workers get
the array pickled (its client's settings, TLS material and token included,
and its metadata); each worker process opens one channel on first use,
shared by its tasks. Prints one JSON line: the array's shape and dtype, the
sum and mean of all values, the number of chunks read and the distinct
worker processes / threads that read them, and whether any chunk was read in
this (the parent) process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading

import dask
import numpy as np

import zarrgate
from zarrgate import ZarrgateError


def _who(block: np.ndarray) -> np.ndarray:
    """One cell per chunk: which process and thread read it."""
    return np.full((1,) * block.ndim, f"{os.getpid()}:{threading.get_ident()}", dtype=object)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    env = os.environ.get
    ap.add_argument("--addr", default=env("ZARRGATE_ADDR"), required=not env("ZARRGATE_ADDR"),
                    help="host:port of `zarrgate serve` (grpcs://host:port: with TLS)")
    ap.add_argument("--tls", action="store_true", default=env("ZARRGATE_TLS", "").lower() in ("1", "t", "true"),
                    help="connect with TLS, verifying the server against the system's roots")
    ap.add_argument("--tls-ca", default=env("ZARRGATE_TLS_CA") or None,
                    help="PEM CA bundle to verify the server against (implies --tls)")
    ap.add_argument("--tls-cert", default=env("ZARRGATE_TLS_CERT") or None,
                    help="PEM client certificate, for servers with --client-ca (with --tls-key)")
    ap.add_argument("--tls-key", default=env("ZARRGATE_TLS_KEY") or None, help="its private key")
    ap.add_argument("--token", default=None,
                    help="bearer token (default: $ZARRGATE_TOKEN; prefer that to this flag)")
    ap.add_argument("--path", required=True, help="array path inside the store")
    ap.add_argument("--scheduler", choices=["threads", "processes", "synchronous"], default="threads")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)

    client = zarrgate.connect(
        args.addr, tls=args.tls or None, tls_ca=args.tls_ca,
        tls_cert=args.tls_cert, tls_key=args.tls_key, token=args.token,
    )
    arr = client.open_array(args.path)
    # One dask chunk per zarr chunk (the inner chunks when sharded).
    x = zarrgate.to_dask(arr)
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
    try:
        main()
    except (ZarrgateError, ValueError, OSError) as e:
        # A refused token, a TLS failure, a missing file: one line, no
        # traceback (ZarrgateError derives from PermissionError,
        # ConnectionError... as the status says).
        print(f"dask_read: {e}", file=sys.stderr)
        sys.exit(1)
