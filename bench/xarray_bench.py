"""xarray: ``ds.mean()`` through the zarrgate engine vs ``xr.open_zarr`` on
the directory the gateway serves.

    python bench/xarray_bench.py write ROOT                  # the dataset, once
    python bench/xarray_bench.py run ROOT --zarrgate BINARY  # serves ROOT itself
    python bench/xarray_bench.py run ROOT --addr HOST:PORT [--server-pid PID]

The dataset (``ROOT/bench.zarr``, written by xarray, zarr v3): one float32
variable ``v`` (y, x) of 16384 × 8192 (512 MiB) in 256 × 256 zstd chunks,
a smooth field plus noise, with coordinates ``y`` and ``x`` — the layout of
the gateway's slab benchmark (docs/benchmarks.md). Each way is run once
untimed, then REPEATS times, the ways interleaved; printed per run: wall
seconds, this process's CPU seconds (all threads) and, with
``--server-pid``, the gateway's. One JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import tempfile
import time
import warnings

import numpy as np
import xarray as xr

SHAPE = (16384, 8192)
CHUNKS = (256, 256)
REPEATS = 3


def write(root: str) -> None:
    y = np.arange(SHAPE[0], dtype="float64")
    x = np.arange(SHAPE[1], dtype="float64")
    rng = np.random.default_rng(0)
    v = np.empty(SHAPE, dtype="float32")
    for i in range(0, SHAPE[0], 1024):  # in bands: no float64 copy of the whole
        yy = y[i : i + 1024, None]
        v[i : i + 1024] = (np.sin(yy / 500) * np.cos(x / 300) * 10
                           + rng.standard_normal((len(yy), SHAPE[1])).astype("float32"))
    ds = xr.Dataset({"v": (("y", "x"), v, {"units": "K"})}, coords={"y": y, "x": x})
    ds.to_zarr(os.path.join(root, "bench.zarr"), zarr_format=3, consolidated=False,
               encoding={"v": {"chunks": CHUNKS}})


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_pid(pid: int | None) -> float:
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(root: str, addr: str, server_pid: int | None) -> None:
    path = os.path.join(root, "bench.zarr")
    url = f"grpc://{addr}/bench.zarr"
    warnings.simplefilter("ignore", RuntimeWarning)  # no consolidated metadata
    ways = {
        # One ReadSlab of the whole variable (through shared memory here).
        "zarrgate": lambda: xr.open_dataset(url, engine="zarrgate"),
        # Dask, one task (one ReadSlab) per 2048 x 2048 (16 MiB).
        "zarrgate, dask 2048x2048": lambda: xr.open_dataset(
            url, engine="zarrgate", chunks={"y": 2048, "x": 2048}),
        # xr.open_zarr's default: dask, one task per zarr chunk.
        "open_zarr (dask, chunks={})": lambda: xr.open_zarr(path, consolidated=False),
        "open_zarr, dask 2048x2048": lambda: xr.open_zarr(
            path, consolidated=False, chunks={"y": 2048, "x": 2048}),
        # No dask: zarr-python reads the whole variable at once.
        "open_zarr (chunks=None)": lambda: xr.open_zarr(path, consolidated=False, chunks=None),
    }
    want = None
    for rep in range(REPEATS + 1):
        for name, open_ in ways.items():
            t0, c0, s0 = time.perf_counter(), cpu_self(), cpu_pid(server_pid)
            ds = open_()
            m = float(ds.mean()["v"].values)
            t1, c1, s1 = time.perf_counter(), cpu_self(), cpu_pid(server_pid)
            ds.close()
            if want is None:
                want = m
            assert abs(m - want) <= 1e-6 * max(1.0, abs(want)), (name, m, want)
            if rep:  # the first round is the warm-up
                print(json.dumps({"way": name, "run": rep, "wall_s": round(t1 - t0, 3),
                                  "client_cpu_s": round(c1 - c0, 3),
                                  "server_cpu_s": round(s1 - s0, 3), "mean": m}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("root")
    r = sub.add_parser("run")
    r.add_argument("root")
    r.add_argument("--zarrgate", help="a zarrgate binary: serve ROOT with it")
    r.add_argument("--addr", help="a gateway already serving ROOT")
    r.add_argument("--server-pid", type=int, help="with --addr: its pid, to read its CPU time")
    a = p.parse_args()
    if a.cmd == "write":
        write(a.root)
    elif a.zarrgate:
        serve(a.root, a.zarrgate)
    elif a.addr:
        run(a.root, a.addr, a.server_pid)
    else:
        p.error("run: give --zarrgate BINARY or --addr HOST:PORT")


def serve(root: str, binary: str) -> None:
    """Run the benchmark against a `zarrgate serve` of ROOT started here
    (the default options), stopped afterwards."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([binary, "serve", "--root", root, "--listen", "127.0.0.1:0"],
                                stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while True:
                log.seek(0)
                if m := re.search(rb"addr=(127\.0\.0\.1:\d+)", log.read()):
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("zarrgate serve did not start")
                time.sleep(0.05)
            run(root, m.group(1).decode(), proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=15)


if __name__ == "__main__":
    main()
