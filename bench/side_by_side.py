"""The side-by-side benchmark of issue 20: zarrgate against tensorstore,
zarrs (zarr-python's Rust codec pipeline), zarr-python, numcodecs and a raw
2-thread read of the chunk files, on one array written by zarr-python with
libzstd level 3. Run it with scripts/bench-side-by-side.sh (make
bench-side-by-side), which makes the venv and builds the binaries.

    python bench/side_by_side.py --bin DIR

DIR holds zarrgate, sidebyside (bench/sidebyside) and codecsvc.test, and
zarrgate-cgo, codecsvc-cgo.test and sidebyside-cgo (built with -tags cgocodecs) if the
cgocodecs build is to be measured too, else perhaps cgocodecs-skipped (the
reason it is not, printed with the table). Every
measurement runs in a process of its own; each round runs every system of
every row once, the systems of a row in an order rotated from round to
round; the table gives each system's median over the rounds (of each
process's best timed read, or its p50/p99, or its one write). The page
cache is warm: the data is read before the first round and each process
reads once untimed before it times.

Env: ROUNDS (default 5), ROWS (comma-separated subset of ROW_NAMES; default
all), ZARRGATE_BENCH_DATA (the arrays, written once and kept; default
~/.cache/zarrgate/bench-side-by-side), OUT (raw results: rows.jsonl,
table.md, the server's log; default a new temporary directory).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKER = [sys.executable, os.path.join(HERE, "side_by_side_worker.py")]
ROW_NAMES = ["read-zstd", "read-sharded", "read-uncompressed", "random", "write", "decode", "python", "ratio"]
# Bump when the worker's gen changes what it writes.
DATA_VERSION = "1"
ZSTD = '[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3,"checksum":false}}]'
TIMEOUT = 600


def log(msg):
    print(f"side_by_side: {msg}", file=sys.stderr, flush=True)


def run(argv, env=None):
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=REPO)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p.stdout, time.perf_counter() - t0


def json_lines(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


class Server:
    """`zarrgate serve` on DATA at a free loopback port, with a bulk
    listener (ReadSlab's blocks beside gRPC), its log in OUT."""

    def __init__(self, binary, root, out, name="zarrgate-serve"):
        self.log = open(os.path.join(out, name + ".log"), "w+")
        self.proc = subprocess.Popen([binary, "serve", "--root", root, "--listen", "127.0.0.1:0",
                                      "--bulk-listen", "127.0.0.1:0"],
                                     stdout=self.log, stderr=self.log)
        addr_re = re.compile(r'addr=(\S+)|"addr":"([^"]+)"')
        deadline = time.time() + 30
        while time.time() < deadline:
            self.log.seek(0)
            for line in self.log:
                m = addr_re.search(line)
                if m and "serving" in line:
                    self.addr = m.group(1) or m.group(2)
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("zarrgate serve did not report its address: see " + self.log.name)

    def cpu_s(self):
        f = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def ensure_data(data):
    """The three arrays, written by zarr-python once and kept."""
    stamp = os.path.join(data, ".side-by-side-stamp")
    import zarr, numcodecs  # noqa: E401  (the versions that wrote it)

    want = f"{DATA_VERSION} zarr {zarr.__version__} numcodecs {numcodecs.__version__}"
    if os.path.exists(stamp) and open(stamp).read().startswith(want):
        if not os.path.exists(os.path.join(data, "values.f32")):
            run(WORKER + ["values", data])
        return open(stamp).read().strip()
    log(f"writing the benchmark arrays with zarr-python into {data} (once)")
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    out, secs = run(WORKER + ["gen", data])
    crc = json_lines(out)[-1]["crc32"]
    open(stamp, "w").write(f"{want} crc32 {crc}\n")
    log(f"wrote them in {secs:.0f} s")
    return open(stamp).read().strip()


def warm(data):
    """Reads every file of DATA once, into the page cache."""
    for d, _, names in os.walk(data):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                while f.read(1 << 20):
                    pass


def jobs(row, b, srv, data, out, rnd, cgo=None):
    """(system, argv, server) of one row, for round rnd: server is the
    zarrgate serve a zarrgate system runs against (its CPU time counted),
    else None. cgo, if set, is the cgocodecs build's server: its systems
    are the zarrgate ones again, named "… cgocodecs"."""
    js = _jobs(row, b, srv, data, out, rnd)
    if cgo is not None:
        js += [(cgo_name(s), [cgo_arg(a, srv, cgo) for a in argv], cgo) for s, argv, zg in
               _jobs(row, b, srv, data, out, rnd) if zg]
    return [(s, argv, srv if zg is True else zg) for s, argv, zg in js]


def cgo_name(system):
    """The cgocodecs build's name for a zarrgate system: zarrgate-shared
    is zarrgate-cgocodecs-shared."""
    return "zarrgate-cgocodecs" + system[len("zarrgate"):]


def cgo_arg(a, srv, cgo):
    """An argument of a zarrgate job, for the cgocodecs build's server: its
    address, and an array of its own to write (both serve one root)."""
    if a == srv.addr:
        return cgo.addr
    return a + "-cgocodecs" if a.startswith("side-by-side-write-") else a


def _jobs(row, b, srv, data, out, rnd):
    sbs, w = os.path.join(b, "sidebyside"), WORKER
    if row.startswith("read-"):
        layout = {"read-zstd": "zstd", "read-sharded": "sharded-zstd", "read-uncompressed": "uncompressed"}[row]
        js = [("zarrgate-shared", [sbs, "read", "-addr", srv.addr, "-path", layout, "-shared=true"], True),
              ("zarrgate-shared-slice", [sbs, "read", "-addr", srv.addr, "-path", layout, "-shared=true", "-buffer=false"], True),
              ("zarrgate-socket", [sbs, "read", "-addr", srv.addr, "-path", layout, "-shared=false"], True),
              ("zarrgate-socket-stream", [sbs, "read", "-addr", srv.addr, "-path", layout, "-shared=false", "-bulk=false"], True),
              ("tensorstore", w + ["read", "tensorstore", data, layout], False),
              ("zarrs", w + ["read", "zarrs", data, layout], False),
              ("zarr-python", w + ["read", "zarr-python", data, layout], False)]
        if layout == "uncompressed":
            js.append(("raw-2-thread", [sbs, "raw", "-dir", os.path.join(data, layout), "-threads", "2"], False))
        return js
    if row == "random":
        return [("zarrgate", [sbs, "random", "-addr", srv.addr, "-path", "zstd"], True)] + [
            (s, w + ["random", s, data, "zstd"], False) for s in ("tensorstore", "zarrs", "zarr-python")]
    if row == "write":
        # Every writer makes a new array beside the others in the data
        # directory (the gateway's root), and none is removed before the
        # run ends (cleanup_write): on ext4 without a journal, creating a
        # file checks, one by one, every inode of its block group removed
        # in the last few minutes (RECENTCY), so a writer that followed a
        # removal would pay for it (docs/benchmarks.md, "Seventh look: a
        # writer after a removal").
        name = f"side-by-side-write-{os.getpid()}-{rnd}"
        zg = [sbs, "write", "-addr", srv.addr, "-codecs", ZSTD, "-values", os.path.join(data, "values.f32")]
        return [("zarrgate-shared (fsync)", zg + ["-path", name + "-shared", "-shared=true"], True),
                ("zarrgate (fsync)", zg + ["-path", name, "-shared=false"], True)] + [
            (label, w + ["write", s, os.path.join(data, f"{name}-{s}"), data], False) for label, s in (
                ("tensorstore (fsync)", "tensorstore"), ("tensorstore (no fsync)", "tensorstore-nosync"),
                ("zarrs (no fsync)", "zarrs"), ("zarr-python (no fsync)", "zarr-python"))]
    if row == "python":
        return [("zarrgate-store", w + ["read", "zarrgate-store", srv.addr, "zstd"], True),
                ("zarr-python", w + ["read", "zarr-python", data, "zstd"], False)]
    raise ValueError(row)


# REMOVED names the file in the data directory whose modification time is
# when a run last removed written arrays there; RECENTCY is how long ext4
# without a journal keeps skipping the removed inodes (5 s, or 305 s while
# their inode table block is dirty: recently_deleted in fs/ext4/ialloc.c),
# with a margin.
REMOVED, RECENTCY = ".side-by-side-removed", 310


def cleanup_write(data, out, orphans=False):
    """Removes this run's written arrays: only its own (named by its pid),
    as other runs may be writing theirs into the same data directory; with
    orphans, also those of runs no longer running (killed)."""
    removed = False
    for n in os.listdir(data):
        if not n.startswith("side-by-side-write-"):
            continue
        pid = n[len("side-by-side-write-"):].split("-")[0]
        if pid == str(os.getpid()) or (orphans and pid.isdigit() and not alive(int(pid))):
            shutil.rmtree(os.path.join(data, n), ignore_errors=True)
            removed = True
    if removed:
        open(os.path.join(data, REMOVED), "w").close()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def await_removals(data):
    """Waits until arrays removed from the data directory (by this run or
    another) no longer cost a writer there (RECENTCY)."""
    try:
        age = time.time() - os.stat(os.path.join(data, REMOVED)).st_mtime
    except FileNotFoundError:
        return
    if 0 <= age < RECENTCY:
        log(f"writes: waiting {RECENTCY - age:.0f} s for the arrays removed {age:.0f} s ago to age "
            "(ext4 without a journal skips recently removed inodes)")
        time.sleep(RECENTCY - age)


def decode_round(b, out):
    """numcodecs (bench/numcodecs_bench.py) then zarrgate decoding the very
    frames numcodecs wrote (codecsvc's BenchmarkDecodeNumcodecsFrames), one
    core each; the cgocodecs build's too, if there is one. Each rate both
    per second (mb_per_s) and per CPU second of the process
    (cpu_mb_per_s: "per core", which time the VM's vCPU spends elsewhere
    does not lower; the table's)."""
    frames = os.path.join(out, "frames")
    res = []
    o, _ = run([sys.executable, os.path.join(HERE, "numcodecs_bench.py"), frames])
    for r in json_lines(o):
        if r["op"] == "decode":
            res.append((r["codec"], "numcodecs", {"mb_per_s": r["mb_per_s"], "cpu_mb_per_s": r["cpu_mb_per_s"]}))
    for test, system in (("codecsvc.test", "zarrgate"), ("codecsvc-cgo.test", "zarrgate-cgocodecs")):
        if not os.path.exists(os.path.join(b, test)):
            continue
        o, _ = run([os.path.join(b, test), "-test.run", "^$", "-test.bench", "DecodeNumcodecsFrames",
                    "-test.cpu", "1", "-test.benchtime", "1s"], env={**os.environ, "ZARRGATE_NUMCODECS_FRAMES": frames})
        for line in o.splitlines():
            m = re.match(r"BenchmarkDecodeNumcodecsFrames/(\S+?)\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) MB/s\s+([\d.]+) cpuMB/s", line)
            if m:
                res.append((m.group(1), system, {"mb_per_s": float(m.group(2)), "cpu_mb_per_s": float(m.group(3))}))
    return res


def decode_rate(r):
    """A decode row's rate per CPU second (per second in runs from before
    it was recorded)."""
    return r.get("cpu_mb_per_s", r["mb_per_s"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", help="the directory of zarrgate, sidebyside and codecsvc.test")
    ap.add_argument("--render", metavar="ROWS_JSONL", help="only print the table of an earlier run's rows.jsonl")
    args = ap.parse_args()
    if args.render:
        res = [json.loads(l) for l in open(args.render)]
        meta = next(r for r in res if r["row"] == "meta")
        end = next((r for r in res if r["row"] == "meta-end"), {"load_after": "?"})
        print(render([r for r in res if not r["row"].startswith("meta")], meta["rows"], meta["rounds"],
                     datetime.datetime.fromisoformat(meta["started"]), meta["load_before"], end["load_after"],
                     meta["data"], meta["command"], meta["commit"], meta.get("cgo_skipped"),
                     meta.get("writes_kept")), end="")
        return
    if not args.bin:
        raise SystemExit("--bin or --render is needed")
    rounds = int(os.environ.get("ROUNDS", "5"))
    rows = [r for r in os.environ.get("ROWS", ",".join(ROW_NAMES)).split(",") if r]
    for r in rows:
        if r not in ROW_NAMES:
            raise SystemExit(f"unknown row {r!r}: rows are {','.join(ROW_NAMES)}")
    data = os.path.expanduser(os.environ.get("ZARRGATE_BENCH_DATA", "~/.cache/zarrgate/bench-side-by-side"))
    out = os.environ.get("OUT") or tempfile.mkdtemp(prefix="side-by-side-")
    os.makedirs(out, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    stamp = ensure_data(data)
    log("warming the page cache")
    cleanup_write(data, out, orphans=True)
    warm(data)
    srv = Server(os.path.join(args.bin, "zarrgate"), data, out)
    cgo, cgo_skipped = None, None
    if os.path.exists(os.path.join(args.bin, "zarrgate-cgo")):
        cgo = Server(os.path.join(args.bin, "zarrgate-cgo"), data, out, "zarrgate-cgo-serve")
    else:
        f = os.path.join(args.bin, "cgocodecs-skipped")
        cgo_skipped = open(f).read().strip() if os.path.exists(f) else "no zarrgate-cgo in --bin"
        log(f"cgocodecs rows skipped: {cgo_skipped}")
    results = []  # dicts: row, system, round, + the measurement
    rec = open(os.path.join(out, "rows.jsonl"), "w")

    def record(**kw):
        results.append(kw)
        rec.write(json.dumps(kw) + "\n")
        rec.flush()

    cmd = "make bench-side-by-side"
    for k in ("ROWS", "ROUNDS"):
        if os.environ.get(k):
            cmd = f"{k}={os.environ[k]} {cmd}"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                      cwd=REPO).stdout.strip():
        commit += " (with uncommitted changes)"
    # The written arrays stay until the run ends (_jobs); without room for
    # them all (each at most the array's 512 MiB), each round's are
    # removed after it, as before, and the run's notes say so.
    need = rounds * (8 if cgo is not None else 6) * (512 << 20) + (2 << 30)
    keep_writes = "write" not in rows or shutil.disk_usage(data).free >= need
    if not keep_writes:
        log(f"less than {need >> 30} GiB free under {data}: the written arrays are removed after each round")
    rec.write(json.dumps(dict(row="meta", started=started.isoformat(), load_before=load_before, rounds=rounds, rows=rows,
                              data=stamp, command=cmd, commit=commit, cgo_skipped=cgo_skipped,
                              writes_kept=keep_writes)) + "\n")
    try:
        if "ratio" in rows:
            o, _ = run([os.path.join(args.bin, "sidebyside"), "ratio", "-dir", os.path.join(data, "uncompressed")])
            for r in json_lines(o):
                record(row="ratio", system="zarrgate", round=0, codec=r["codec"], ratio=r["ratio"])
            if cgo is not None:
                o, _ = run([os.path.join(args.bin, "sidebyside-cgo"), "ratio", "-dir", os.path.join(data, "uncompressed")])
                for r in json_lines(o):
                    record(row="ratio", system="zarrgate-cgocodecs", round=0, codec=r["codec"], ratio=r["ratio"])
            o, _ = run(WORKER + ["ratio", os.path.join(data, "uncompressed")])
            for r in json_lines(o):
                record(row="ratio", system="numcodecs", round=0, codec=r["codec"], ratio=r["ratio"])
        for rnd in range(1, rounds + 1):
            t_round = time.perf_counter()
            for row in rows:
                if row == "ratio":
                    continue
                if row == "decode":
                    try:
                        for codec, system, m in decode_round(args.bin, out):
                            record(row="decode", system=system, round=rnd, codec=codec, **m)
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        log(f"decode failed: {e}")
                        record(row="decode", system="decode", round=rnd, error=str(e)[-500:])
                    continue
                if row == "write" and rnd == 1:
                    await_removals(data)
                js = jobs(row, args.bin, srv, data, out, rnd, cgo)
                k = (rnd - 1) % len(js)
                for system, argv, zg in js[k:] + js[:k]:
                    c0 = zg.cpu_s() if zg else 0
                    try:
                        o, secs = run(argv)
                        m = json_lines(o)[-1]
                    except (RuntimeError, IndexError, subprocess.TimeoutExpired) as e:
                        # One system's failure is reported, not the run's end.
                        log(f"{row} {system} failed: {e}")
                        record(row=row, system=system, round=rnd, error=str(e)[-500:])
                        continue
                    if zg:  # per operation: reads are 1 warm-up + 2 timed, random ones 1 + 1000
                        ops = {"random": 1001, "write": 1}.get(row, 3)
                        m["server_cpu_ms"] = round((zg.cpu_s() - c0) * 1e3 / ops, 3)
                    record(row=row, system=system, round=rnd, wall_s=round(secs, 1), **m)
                    if row == "write":
                        # What a writer without fsyncs left dirty is written
                        # back now, not during the next writer's write.
                        os.sync()
                if row == "write" and not keep_writes:
                    cleanup_write(data, out)
            log(f"round {rnd} of {rounds} in {time.perf_counter() - t_round:.0f} s")
    finally:
        srv.stop()
        if cgo is not None:
            cgo.stop()
        cleanup_write(data, out)
    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    rec.write(json.dumps(dict(row="meta-end", load_after=load_after)) + "\n")
    rec.close()
    table = render(results, rows, rounds, started, load_before, load_after, stamp, cmd, commit, cgo_skipped, keep_writes)
    open(os.path.join(out, "table.md"), "w").write(table)
    print(table)
    log(f"raw results in {out}")


def med(xs):
    return statistics.median(xs) if xs else None


def collect(results, row, key):
    """system -> [values over the rounds]."""
    by = {}
    for r in results:
        if r["row"] == row and key in r:
            by.setdefault(r["system"], []).append(r[key])
    return by


def fmt(x, unit=""):
    if x is None:
        return "–"
    return f"{x:.0f}{unit}" if x >= 100 else f"{x:.2f}{unit}" if x < 10 else f"{x:.1f}{unit}"


def render(results, rows, rounds, started, load_before, load_after, stamp, cmd, commit, cgo_skipped=None,
           writes_kept=None):
    import importlib.metadata as md

    errors = [r for r in results if "error" in r]
    results = [r for r in results if "error" not in r]

    vers = ", ".join(f"{p} {md.version(p)}" for p in ("tensorstore", "zarrs", "zarr", "numcodecs", "numpy"))
    gover = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    L = [f"Run {started:%Y-%m-%d %H:%M} UTC, commit {commit}, `{cmd}`: "
         f"{rounds} interleaved rounds, medians over the rounds; {os.cpu_count()} cores ({cpu}), "
         f"Python {platform.python_version()}, {gover}, {vers}; data {stamp}.",
         "", f"- load before: `{load_before}`", f"- load after: `{load_after}`",
         f"- cgocodecs build (`-tags cgocodecs`, the container image's build: libzstd zstd encode and decode, "
         f"libdeflate gzip decode): "
         + (f"**rows skipped**: {cgo_skipped}" if cgo_skipped else "rows marked \"cgocodecs\""),
         *([] if "write" not in rows or writes_kept is None else
           ["- writes: each into a new array, none removed before the run's end" if writes_kept else
            "- writes: **each round's arrays removed after it** (not enough free space to keep them): "
            "later writers paid for the removals (docs/benchmarks.md, \"Seventh look: a writer after a removal\")"]), "",
         "| path | zarrgate | best anchor | ratio | cpu ms/op, zarrgate (client + server) / anchor |",
         "| --- | --- | --- | --- | --- |"]
    detail = []

    def cpu(row, system):
        """Median CPU ms of one operation: the process's, plus the server's."""
        rs = [r for r in results if r["row"] == row and r["system"] == system and "cpu_ms" in r]
        if not rs:
            return None
        return med([r["cpu_ms"] + r.get("server_cpu_ms", 0) for r in rs])

    def mbps_line(label, row, zg, anchors):
        by = collect(results, row, "mb_per_s")
        z = med(by.get(zg, []))
        cand = [(med(by[a]), a) for a in anchors if by.get(a)]
        if z is None or not cand:
            return
        best, who = max(cand)
        zc, ac = cpu(row, zg), cpu(row, who)
        c = f"{fmt(zc)} / {fmt(ac)}" if zc is not None and ac is not None else ""
        L.append(f"| {label} | {fmt(z)} MB/s | {who} {fmt(best)} | {z / best:.2f} | {c} |")

    def lat_line(label, row, zg, anchors, key):
        by = collect(results, row, key)
        z = med(by.get(zg, []))
        cand = [(med(by[a]), a) for a in anchors if by.get(a)]
        if z is None or not cand:
            return
        best, who = min(cand)
        r = z / best
        L.append(f"| {label} | {z / 1e3:.2f} ms | {who} {best / 1e3:.2f} ms | "
                 f"{f'{r:.2f}× slower' if r >= 1 else f'{1 / r:.2f}× faster'} | |")

    anchors = ["tensorstore", "zarrs", "zarr-python"]
    for row, name in (("read-zstd", "zstd"), ("read-sharded", "sharded zstd")):
        if row in rows:
            mbps_line(f"full read {name}, shared memory", row, "zarrgate-shared", anchors)
            mbps_line(f"full read {name}, shared memory, ReadInto a slice", row, "zarrgate-shared-slice", anchors)
            mbps_line(f"full read {name}, socket", row, "zarrgate-socket", anchors)
            mbps_line(f"full read {name}, shared memory, cgocodecs", row, "zarrgate-cgocodecs-shared", anchors)
            mbps_line(f"full read {name}, socket, cgocodecs", row, "zarrgate-cgocodecs-socket", anchors)
    if "read-uncompressed" in rows:
        mbps_line("uncompressed, shared memory", "read-uncompressed", "zarrgate-shared", ["raw-2-thread"])
        mbps_line("uncompressed, shared memory, ReadInto a slice", "read-uncompressed", "zarrgate-shared-slice", ["raw-2-thread"])
        mbps_line("uncompressed, shared memory (vs libraries)", "read-uncompressed", "zarrgate-shared", anchors)
    if "random" in rows:
        lat_line("random 64×64 read p50", "random", "zarrgate", anchors, "p50_us")
        lat_line("random 64×64 read p99", "random", "zarrgate", anchors, "p99_us")
        lat_line("random 64×64 read p50, cgocodecs", "random", "zarrgate-cgocodecs", anchors, "p50_us")
    if "write" in rows:
        mbps_line("full write zstd, shared memory (both fsync)", "write", "zarrgate-shared (fsync)", ["tensorstore (fsync)"])
        mbps_line("full write zstd, socket (both fsync)", "write", "zarrgate (fsync)", ["tensorstore (fsync)"])
        mbps_line("full write zstd, shared memory, cgocodecs (both fsync)", "write", "zarrgate-cgocodecs-shared (fsync)",
                  ["tensorstore (fsync)"])
        mbps_line("full write zstd, socket, cgocodecs (both fsync)", "write", "zarrgate-cgocodecs (fsync)", ["tensorstore (fsync)"])
        mbps_line("full write zstd, shared memory (zarrgate fsync, anchors not)", "write", "zarrgate-shared (fsync)",
                  ["tensorstore (no fsync)", "zarrs (no fsync)", "zarr-python (no fsync)"])
        # Writes vary more from round to round than reads (the disk): the
        # ratio within each round, whose writers ran one after another.
        per = {}
        for r in results:
            if r["row"] == "write" and "mb_per_s" in r:
                per.setdefault(r["round"], {})[r["system"]] = r["mb_per_s"]
        for zg, how in (("zarrgate-shared (fsync)", "shared memory"), ("zarrgate (fsync)", "socket"),
                        ("zarrgate-cgocodecs-shared (fsync)", "shared memory, cgocodecs"),
                        ("zarrgate-cgocodecs (fsync)", "socket, cgocodecs")):
            pairs = [(p[zg], p["tensorstore (fsync)"]) for _, p in sorted(per.items())
                     if p.get(zg) and p.get("tensorstore (fsync)")]
            if pairs:
                detail += ["", f"Full write zstd, {how} (both fsync), round by round, zarrgate / tensorstore: "
                           + ", ".join(f"{z:.0f} / {t:.0f} MB/s ({z / t:.2f})" for z, t in pairs) + "."]
    if "decode" in rows:
        dec = {}
        for r in results:
            if r["row"] == "decode":
                dec.setdefault((r["codec"], r["system"]), []).append(decode_rate(r))
        for codec in ("zstd", "gzip", "blosc-lz4", "chain"):
            z, n = med(dec.get((codec, "zarrgate"), [])), med(dec.get((codec, "numcodecs"), []))
            what = "bytes(big)+zstd+crc32c" if codec == "chain" else codec + (" + shuffle" if codec == "blosc-lz4" else "")
            if z and n:
                L.append(f"| decode 1 core: {what} (numcodecs' frames) | {fmt(z)} MB/s | numcodecs {fmt(n)} | {z / n:.2f} | |")
            zc = med(dec.get((codec, "zarrgate-cgocodecs"), []))
            if zc and n:
                L.append(f"| decode 1 core: {what}, cgocodecs | {fmt(zc)} MB/s | numcodecs {fmt(n)} | {zc / n:.2f} | |")
    if "python" in rows:
        mbps_line("Python: zarr-python over `ZarrgateStore` (zstd)", "python", "zarrgate-store", ["zarr-python"])
    if "ratio" in rows:
        zr = {r["codec"]: r["ratio"] for r in results if r["row"] == "ratio" and r["system"] == "zarrgate"}
        nr = {r["codec"]: r["ratio"] for r in results if r["row"] == "ratio" and r["system"] == "numcodecs"}
        zcr = {r["codec"]: r["ratio"] for r in results if r["row"] == "ratio" and r["system"] == "zarrgate-cgocodecs"}
        for c in zr:
            if c in nr:
                L.append(f"| compression ratio {c} | {zr[c]:.3f} | numcodecs {nr[c]:.3f} | {zr[c] / nr[c]:.2f} | |")
            if c in nr and c in zcr:
                L.append(f"| compression ratio {c}, cgocodecs | {zcr[c]:.3f} | numcodecs {nr[c]:.3f} | {zcr[c] / nr[c]:.2f} | |")
    if "random" in rows:
        # The random reads by the window's place: what each reader pays per
        # chunk decoded, and what is left (the call's own cost).
        classes = ["1 chunk, first block", "1 chunk, both blocks", "2 chunks", "4 chunks"]
        by = {}
        for r in results:
            if r["row"] == "random" and "classes" in r:
                for c, v in r["classes"].items():
                    by.setdefault(r["system"], {}).setdefault(c, []).append(v["p50_us"])
        if by:
            detail += ["", "Random 64 × 64 reads by the window's place (p50 µs, median over the rounds; a "
                       "window in one chunk whose rows end in its first 128 rows needs zstd's first block only):", "",
                       "| system | " + " | ".join(classes) + " |", "| --- |" + " --- |" * len(classes)]
            for s in sorted(by):
                detail.append(f"| {s} | " + " | ".join(fmt(med(by[s].get(c, []))) if by[s].get(c) else "" for c in classes) + " |")
    # Every system of every row: median (min–max) over the rounds.
    detail += ["", "Every measurement: median (min–max over the rounds); client cpu: the process's CPU time of "
               "its best timed read (or its write); server cpu: `zarrgate serve`'s CPU time over the whole "
               "process divided by its operations (3 full reads, 1001 random reads, 1 write).", "",
               "| row | system | median | min–max | client cpu ms | server cpu ms |", "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if row in ("ratio",):
            continue
        if row == "decode":
            dec = {}
            for r in results:
                if r["row"] == "decode":
                    dec.setdefault(f"{r['system']} {r['codec']}", []).append(decode_rate(r))
            for s, xs in dec.items():
                detail.append(f"| decode | {s} | {fmt(med(xs))} MB/s | {fmt(min(xs))}–{fmt(max(xs))} | | |")
            continue
        key = "p50_us" if row == "random" else "mb_per_s"
        by = collect(results, row, key)
        for s, xs in by.items():
            rs = [r for r in results if r["row"] == row and r["system"] == s]
            ccpu = med([r["cpu_ms"] for r in rs if "cpu_ms" in r])
            scpu = med([r["server_cpu_ms"] for r in rs if "server_cpu_ms" in r])
            if row == "random":
                p99 = med([r["p99_us"] for r in rs])
                val, rng = f"p50 {fmt(med(xs))} µs, p99 {fmt(p99)} µs", f"{fmt(min(xs))}–{fmt(max(xs))} µs"
            else:
                val, rng = f"{fmt(med(xs))} MB/s", f"{fmt(min(xs))}–{fmt(max(xs))}"
            detail.append(f"| {row} | {s} | {val} | {rng} | {fmt(ccpu)} | {fmt(scpu)} |")
    for r in errors:
        detail.append(f"\n**{r['row']} {r['system']} failed in round {r['round']}**: `{r['error'][-200:].replace(chr(10), ' ')}`")
    # Every system of a full-read row must have read the same bytes.
    for row in rows:
        crcs = {(r["system"], r["crc32"]) for r in results if r["row"] == row and "crc32" in r}
        if len({c for _, c in crcs}) > 1:
            detail.append(f"\n**{row}: the systems read different bytes** ({sorted(crcs)})")
    return "\n".join(L + detail) + "\n"


if __name__ == "__main__":
    main()
