"""One system's full read of an array, in a process of its own, for
BenchmarkPythonClient (e2e/pyclient_bench_test.go), which runs this once per
system per round, interleaved with the Go client's runs.

    python bench/python_client_bench.py SYSTEM TARGET PATH [READS]

SYSTEM: zarrgate-socket, zarrgate-shared (the slab client, sync, with
shared memory off / on; through the socket, its blocks over the gateway's
bulk connection: the server runs with --bulk-listen), zarrgate-socket-stream
(the socket with ``bulk=False``: every block through the gRPC stream),
zarrgate-socket-copier (bulk, its blocks copied into place by the client's
copier threads: ``zarrgate._slab.BULK_COPIER = True``),
zarrgate-aio-socket, zarrgate-aio-shared, zarrgate-aio-socket-stream (the
asyncio client), zarrgate-socket-fixed-window (the sync client through the
gRPC stream with gRPC's BDP probe off: a receive window that does not grow;
to a loopback gateway the client's default since its 2 MiB LOCAL_WINDOW),
zarr-python (zarr.open_array on the directory), zarr-python-store
(zarr-python over ``zarrgate.ZarrgateStore``: the store service, its chunk
gets batched, through the server's shared memory on its host),
zarr-python-store-socket (the same through the socket only) or
zarr-python-store-unbatched (one Get per chunk).
TARGET: the gateway's address, or for zarr-python the directory (the
gateway's --root). PATH: the array.

The zarrgate systems read the whole array once with ``a[...]`` (a fresh
result, as a user's first read), then READS times into that result
(``a.read(out=...)``, as the Go client's ReadInto into one slice); zarr-python
reads ``a[...]`` READS + 1 times, dropping each result before the next.
Prints one JSON object: the best timed read in MB/s, the first read's MB/s,
the least CPU time of a timed read (the whole process: all its threads),
the process's peak resident memory (VmHWM) in MiB, and the CRC-32 of the
result's bytes (the driver checks that every system read the same bytes).
"""

import asyncio
import json
import sys
import time
import zlib


def peak_rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def crc(x) -> int:
    return zlib.crc32(memoryview(x).cast("B"))


def check_stats(stats, reads, shared, bulk):
    want = "shared_reads" if shared else "bulk_reads" if bulk else "socket_reads"
    if getattr(stats, want) != reads + 1 or (not bulk and stats.bulk_reads):
        raise SystemExit(f"expected {reads + 1} {want}, stats say {stats}")


def zarrgate_sync(addr, path, reads, shared, bulk, options=()):
    import zarrgate

    with zarrgate.connect(addr, shared_memory=shared, bulk=bulk, channel_options=options) as c:
        a = c.open_array(path)
        t0 = time.perf_counter()
        x = a[...]
        first = time.perf_counter() - t0
        best = cpu = float("inf")
        for _ in range(reads):
            t0, c0 = time.perf_counter(), time.process_time()
            a.read(out=x)
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        check_stats(c.stats, reads, shared, bulk)
        return x, first, best, cpu


def zarrgate_aio(addr, path, reads, shared, bulk):
    import zarrgate.aio

    async def run():
        async with zarrgate.aio.connect(addr, shared_memory=shared, bulk=bulk) as c:
            a = await c.open_array(path)
            t0 = time.perf_counter()
            x = await a[...]
            first = time.perf_counter() - t0
            best = cpu = float("inf")
            for _ in range(reads):
                t0, c0 = time.perf_counter(), time.process_time()
                await a.read(out=x)
                best = min(best, time.perf_counter() - t0)
                cpu = min(cpu, time.process_time() - c0)
            check_stats(c.stats, reads, shared, bulk)
            return x, first, best, cpu

    return asyncio.run(run())


def zarr_python(root, path, reads, store=None):
    import zarr
    from zarr.storage import LocalStore

    if store is None:
        store = LocalStore(root, read_only=True)
    a = zarr.open_array(store=store, path=path, mode="r")
    t0 = time.perf_counter()
    x = a[...]
    first = time.perf_counter() - t0
    best = cpu = float("inf")
    for _ in range(reads):
        del x
        t0, c0 = time.perf_counter(), time.process_time()
        x = a[...]
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return x, first, best, cpu


def main():
    system, target, path = sys.argv[1:4]
    reads = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    if system == "zarr-python":
        x, first, best, cpu = zarr_python(target, path, reads)
    elif system.startswith("zarr-python-store"):
        from zarrgate import ZarrgateStore

        batch = 1 if system.endswith("-unbatched") else 64
        # zarr-python-store: shared memory where the server offers it (the
        # default); -socket: batches through the socket only.
        shared = not system.endswith("-socket")
        store = ZarrgateStore(target, read_only=True, max_batch=batch, shared_memory=shared)
        x, first, best, cpu = zarr_python(None, path, reads, store)
    elif system == "zarrgate-socket-fixed-window":
        x, first, best, cpu = zarrgate_sync(target, path, reads, False, False,
                                            [("grpc.http2.bdp_probe", 0)])
    elif system in ("zarrgate-aio-socket", "zarrgate-aio-shared", "zarrgate-aio-socket-stream"):
        shared = system.endswith("-shared")
        x, first, best, cpu = zarrgate_aio(target, path, reads, shared,
                                           not shared and not system.endswith("-stream"))
    elif system == "zarrgate-socket-copier":
        from zarrgate import _slab

        _slab.BULK_COPIER = True
        x, first, best, cpu = zarrgate_sync(target, path, reads, False, True)
    elif system in ("zarrgate-socket", "zarrgate-shared", "zarrgate-socket-stream"):
        shared = system.endswith("-shared")
        x, first, best, cpu = zarrgate_sync(target, path, reads, shared,
                                            not shared and not system.endswith("-stream"))
    else:
        raise SystemExit(f"unknown system {system!r}")
    print(json.dumps({
        "system": system,
        "mb_per_s": round(x.nbytes / best / 1e6, 1),
        "first_mb_per_s": round(x.nbytes / first / 1e6, 1),
        "cpu_ms": round(cpu * 1e3, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "nbytes": x.nbytes,
        "crc32": crc(x),
    }), flush=True)


if __name__ == "__main__":
    main()
