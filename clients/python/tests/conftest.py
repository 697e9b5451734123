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
    # Stores of earlier tests may keep a GetPartialValuesShared call (and its
    # segment) for up to 2 s after their loop has gone: segments enough for
    # every test to be offered one.
    proc, addr = start_server(zarrgate_bin, base / "root", base / "serve.log", "--max-shared-reads=16")
    try:
        yield Server(addr=addr, root=base / "root", log=base / "serve.log")
    finally:
        stop_server(proc)


@pytest.fixture
def zarrgate_server(_session_server: Server) -> Server:
    """The session's server, with its directory emptied for this test."""
    _session_server.clear()
    return _session_server


# -- security: certificates, tokens, a TLS + token + policy server -------------


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA that signed server and client
    server: Path  # for 127.0.0.1 and localhost
    server_key: Path
    client: Path  # a client certificate for "alice" (mTLS)
    client_key: Path
    other_ca: Path  # a CA that signed nothing here


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _leaf(d: Path, ca: str, name: str, cn: str, ext: str) -> None:
    """An ECDSA P-256 certificate NAME.pem (key NAME-key.pem) signed by CA."""
    (d / f"{name}.ext").write_text(ext)
    _openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}-key.pem", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
    _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}-key.pem",
             "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext")


def _ca(d: Path, name: str) -> None:
    _openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}-key.pem", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN=zarrgate {name}")


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A test CA, a server and a client certificate, and an unrelated CA,
    made with the openssl CLI the way docs/security.md shows (the venv has
    no `cryptography`, and zarrgate has no certificate command)."""
    if shutil.which("openssl") is None:
        # A failure, not a skip: the TLS tests must not vanish quietly.
        pytest.fail("no openssl CLI to make test certificates (scripts/deps.sh installs it)")
    d = tmp_path_factory.mktemp("certs")
    _ca(d, "ca")
    _ca(d, "other-ca")
    _leaf(d, "ca", "server", "zarrgate",
          "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _leaf(d, "ca", "client", "alice", "subjectAltName=DNS:alice\nextendedKeyUsage=clientAuth\n")
    return Certs(ca=d / "ca.pem", server=d / "server.pem", server_key=d / "server-key.pem",
                 client=d / "client.pem", client_key=d / "client-key.pem",
                 other_ca=d / "other-ca.pem")


#: The policy of the secure server: alice reads everything and writes and
#: deletes under proj/; bob only reads proj/.
SECURE_POLICY = """\
rules:
  - principals: [user:alice]
    permissions: [read]
    prefixes: [""]
  - principals: [user:alice]
    permissions: [write, delete]
    prefixes: [proj]
  - principals: [user:bob]
    permissions: [read]
    prefixes: [proj]
"""

#: The root group's metadata, as an administrator would have made it: alice
#: may not write it (zarr-python's ensure_parents tries set_if_not_exists).
ROOT_GROUP = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'


@dataclass(frozen=True)
class SecureServer(Server):
    certs: Certs
    tokens: dict[str, str]  # user -> token
    audit: Path

    def clear(self) -> None:
        super().clear()
        (self.root / "zarr.json").write_bytes(ROOT_GROUP)


def make_tokens(binary: Path, tokens_file: Path, *users: str) -> dict[str, str]:
    """Tokens made by `zarrgate token new --append`, as an operator would."""
    return {
        u: subprocess.run(
            [str(binary), "token", "new", "--user", u, "--append", str(tokens_file)],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        for u in users
    }


@pytest.fixture(scope="session")
def _session_secure_server(
    zarrgate_bin: Path, certs: Certs, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureServer]:
    base = tmp_path_factory.mktemp("secure")
    tokens = make_tokens(zarrgate_bin, base / "tokens", "alice", "bob")
    (base / "policy.yaml").write_text(SECURE_POLICY)
    proc, addr = start_server(
        zarrgate_bin, base / "root", base / "serve.log",
        "--tls-cert", str(certs.server), "--tls-key", str(certs.server_key),
        "--tokens", str(base / "tokens"), "--policy", str(base / "policy.yaml"),
        "--audit-log", str(base / "audit.log"),
    )
    try:
        yield SecureServer(addr=addr, root=base / "root", log=base / "serve.log",
                           certs=certs, tokens=tokens, audit=base / "audit.log")
    finally:
        stop_server(proc)


@pytest.fixture
def secure_server(_session_secure_server: SecureServer) -> SecureServer:
    """`zarrgate serve` with TLS, a token file (alice, bob) and SECURE_POLICY,
    its directory holding only the root group's metadata."""
    _session_secure_server.clear()
    return _session_secure_server
