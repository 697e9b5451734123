"""Fixtures: one real `zarrgate serve` for the test session, on a temp dir.

The binary is built once per session with `go build` from the repo root (or
taken from $ZARRGATE_BIN). Function-scoped fixtures empty the served
directory first, so every test starts from an empty store.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Server:
    addr: str  # host:port
    root: Path  # the directory it serves
    log: Path

    def clear(self) -> None:
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()


@pytest.fixture(scope="session")
def zarrgate_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if env := os.environ.get("ZARRGATE_BIN"):
        return Path(env)
    out = tmp_path_factory.mktemp("bin") / "zarrgate"
    subprocess.run(
        [os.environ.get("GO", "go"), "build", "-o", str(out), "./cmd/zarrgate"],
        cwd=REPO_ROOT,
        check=True,
    )
    return out


def start_server(binary: Path, root: Path, log: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """Start `zarrgate serve` on 127.0.0.1, port 0; wait for its addr= line."""
    root.mkdir(parents=True, exist_ok=True)
    logf = log.open("wb")
    proc = subprocess.Popen(
        [str(binary), "serve", "--root", str(root), "--listen", "127.0.0.1:0", *extra],
        stdout=subprocess.DEVNULL,
        stderr=logf,
    )
    logf.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(rb"addr=(127\.0\.0\.1:\d+)", log.read_bytes())
        if m:
            return proc, m.group(1).decode()
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"zarrgate serve did not start:\n{log.read_text(errors='replace')}")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def _session_server(
    zarrgate_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("server")
    proc, addr = start_server(zarrgate_bin, base / "root", base / "serve.log")
    try:
        yield Server(addr=addr, root=base / "root", log=base / "serve.log")
    finally:
        stop_server(proc)


@pytest.fixture
def zarrgate_server(_session_server: Server) -> Server:
    """The session's server, with its directory emptied for this test."""
    _session_server.clear()
    return _session_server
