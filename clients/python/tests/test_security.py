"""ZarrgateStore against servers with TLS, mTLS, bearer tokens and a policy.

The servers are the real `zarrgate serve` (conftest: secure_server has TLS,
a token file made by `zarrgate token new` and SECURE_POLICY); certificates
are made by the openssl CLI for each session.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import grpc
import numpy as np
import pytest
import zarr
from zarr.core.buffer import cpu, default_buffer_prototype

from zarrgate import (
    ZarrgatePermissionDenied,
    ZarrgateStore,
    ZarrgateUnauthenticated,
)

from conftest import make_tokens, start_server, stop_server


def _roundtrip(store: ZarrgateStore, name: str) -> np.ndarray:
    """zarr-python writes an array through store and reads it back through a
    fresh copy of it (new channels)."""
    data = np.arange(12 * 10, dtype="int32").reshape(12, 10)
    arr = zarr.create_array(store=store, name=name, shape=data.shape, chunks=(5, 4), dtype="int32")
    arr[:] = data
    again = pickle.loads(pickle.dumps(store))
    got = zarr.open_array(store=again, path=name, mode="r")[:]
    np.testing.assert_array_equal(got, data)
    return data


def test_zarr_roundtrip_tls_and_token(secure_server) -> None:
    s = secure_server
    store = ZarrgateStore(s.addr, tls_ca=s.certs.ca, token=s.tokens["alice"])
    assert store.tls
    _roundtrip(store, "proj/x")
    # It went through the server to its backend, as alice (the audit log
    # names the token's user; only an authenticated call has one).
    assert (s.root / "proj" / "x" / "zarr.json").is_file()
    assert (s.root / "proj" / "zarr.json").is_file()  # parent group made by zarr
    assert '"principal":"user:alice"' in s.audit.read_text()


def test_tls_material_as_bytes_and_grpc_scheme(secure_server) -> None:
    s = secure_server
    store = ZarrgateStore(f"grpc://{s.addr}", tls_ca=s.certs.ca.read_bytes(),
                          token=s.tokens["alice"])
    assert store.addr == s.addr and store.tls
    _roundtrip(store, "proj/y")


def test_token_from_environment(secure_server, monkeypatch) -> None:
    s = secure_server
    monkeypatch.setenv("ZARRGATE_TOKEN", s.tokens["alice"])
    _roundtrip(ZarrgateStore(s.addr, tls_ca=s.certs.ca), "proj/env")
    # token="" turns the variable off: the server then sees no token.
    with pytest.raises(PermissionError, match="no credentials"):
        ZarrgateStore(s.addr, tls_ca=s.certs.ca, token="").get_sync("proj/env/zarr.json")


def test_no_token_is_a_clear_permission_error(secure_server, monkeypatch) -> None:
    s = secure_server
    monkeypatch.delenv("ZARRGATE_TOKEN", raising=False)
    store = ZarrgateStore(s.addr, tls_ca=s.certs.ca)
    with pytest.raises(PermissionError) as info:
        zarr.open_array(store=store, path="proj/x", mode="r")
    err = info.value
    assert isinstance(err, ZarrgateUnauthenticated)
    assert err.code == grpc.StatusCode.UNAUTHENTICATED
    assert "no credentials" in str(err) and "ZARRGATE_TOKEN" in str(err)
    # The blocking API too.
    with pytest.raises(ZarrgateUnauthenticated):
        store.set_sync("proj/k", cpu.Buffer.from_bytes(b"x"))
    assert not (s.root / "proj").exists()


def test_bad_token_is_refused_without_quoting_it(secure_server) -> None:
    s = secure_server
    bad = "zg_" + "x" * 43
    store = ZarrgateStore(s.addr, tls_ca=s.certs.ca, token=bad)
    with pytest.raises(ZarrgateUnauthenticated) as info:
        zarr.create_array(store=store, name="proj/x", shape=(2,), dtype="i1")
    assert "unknown bearer token" in str(info.value)
    assert bad not in str(info.value) and bad not in repr(info.value)
    assert not (s.root / "proj").exists()


def test_policy_refusal_is_permission_denied(secure_server) -> None:
    s = secure_server
    alice = ZarrgateStore(s.addr, tls_ca=s.certs.ca, token=s.tokens["alice"])
    data = _roundtrip(alice, "proj/x")
    bob = ZarrgateStore(s.addr, tls_ca=s.certs.ca, token=s.tokens["bob"])
    # bob reads proj/ ...
    np.testing.assert_array_equal(zarr.open_array(store=bob, path="proj/x", mode="r")[:], data)
    # ... but may not write there, nor read elsewhere.
    arr = zarr.open_array(store=bob, path="proj/x", mode="r+")
    with pytest.raises(PermissionError) as info:
        arr[0, 0] = 99
    assert isinstance(info.value, ZarrgatePermissionDenied)
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert '"write"' in str(info.value) and "user:bob" in str(info.value)
    (s.root / "secret").write_bytes(b"s")
    with pytest.raises(ZarrgatePermissionDenied, match='"read"'):
        bob.get_sync("secret")
    assert zarr.open_array(store=alice, path="proj/x", mode="r")[0, 0] == data[0, 0]


def test_set_if_not_exists_on_an_existing_key_without_write(secure_server) -> None:
    """The policy refuses alice's write on the root group's metadata before
    the condition is looked at: set_if_not_exists of that existing key is a
    no-op for her (zarr's ensure_parents relies on it), and a refusal on a
    key that does not exist stays a refusal."""
    s = secure_server
    alice = ZarrgateStore(s.addr, tls_ca=s.certs.ca, token=s.tokens["alice"])
    import asyncio

    async def go() -> None:
        await alice.set_if_not_exists("zarr.json", cpu.Buffer.from_bytes(b"{}"))
        with pytest.raises(ZarrgatePermissionDenied):
            await alice.set_if_not_exists("other/zarr.json", cpu.Buffer.from_bytes(b"{}"))

    asyncio.run(go())
    assert (s.root / "zarr.json").read_bytes() != b"{}"
    assert not (s.root / "other").exists()


def test_wrong_ca_is_a_clear_connection_error(secure_server) -> None:
    s = secure_server
    store = ZarrgateStore(s.addr, tls_ca=s.certs.other_ca, token=s.tokens["alice"], timeout=10)
    with pytest.raises(ConnectionError) as info:
        zarr.open_array(store=store, path="proj/x", mode="r")
    msg = str(info.value)
    assert "CERTIFICATE_VERIFY_FAILED" in msg and "tls_ca" in msg, msg


def test_plaintext_to_a_tls_server_says_so(secure_server) -> None:
    s = secure_server
    with pytest.raises(ConnectionError, match="does the server want TLS"):
        ZarrgateStore(s.addr, timeout=10).get_sync("proj/x/zarr.json")


def test_grpcs_scheme_and_tls_true_use_the_system_roots(secure_server) -> None:
    s = secure_server
    for store in (ZarrgateStore(f"grpcs://{s.addr}", token=s.tokens["alice"], timeout=10),
                  ZarrgateStore(s.addr, tls=True, token=s.tokens["alice"], timeout=10)):
        assert store.tls and store.addr == s.addr
        # The test CA is not among the system's roots: TLS was tried, and
        # refused the server's certificate.
        with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            store.get_sync("proj/k")
    # With the test CA as gRPC's default roots (a fresh process: they are
    # read once), grpcs:// connects.
    code = (
        "from zarrgate import ZarrgateStore\n"
        "from zarr.core.buffer import cpu\n"
        f"s = ZarrgateStore('grpcs://{s.addr}', timeout=10)\n"
        "s.set_sync('proj/k', cpu.Buffer.from_bytes(b'v'))\n"
        "print(s.get_sync('proj/k').to_bytes().decode())\n"
    )
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(s.certs.ca),
           "ZARRGATE_TOKEN": s.tokens["alice"]}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "v", run.stderr


def test_mtls_client_certificate(zarrgate_bin, certs, tmp_path) -> None:
    """A server with --client-ca and a policy for user:alice, the name in the
    client certificate: the store presents it with tls_cert/tls_key."""
    (tmp_path / "policy.yaml").write_text(
        "rules:\n  - principals: [user:alice]\n    permissions: [read, write]\n"
        "    prefixes: [\"\"]\n"
    )
    proc, addr = start_server(
        zarrgate_bin, tmp_path / "root", tmp_path / "log",
        "--tls-cert", str(certs.server), "--tls-key", str(certs.server_key),
        "--client-ca", str(certs.ca), "--policy", str(tmp_path / "policy.yaml"),
    )
    try:
        store = ZarrgateStore(addr, tls_ca=certs.ca, tls_cert=certs.client,
                              tls_key=certs.client_key)
        assert "tls_cert=<set>" in repr(store) and "BEGIN" not in repr(store)
        _roundtrip(store, "m/x")
        # Without a certificate the server refuses the connection.
        with pytest.raises(ConnectionError, match="client certificate"):
            ZarrgateStore(addr, tls_ca=certs.ca, timeout=10).get_sync("m/x/zarr.json")
    finally:
        stop_server(proc)


def test_token_in_plaintext_to_loopback(zarrgate_bin, tmp_path, monkeypatch) -> None:
    """gRPC refuses call credentials on insecure channels: on a loopback
    address the store uses local channel credentials, plaintext that gRPC
    sends only to this host, and the token rides on them."""
    monkeypatch.delenv("ZARRGATE_TOKEN", raising=False)
    tokens = make_tokens(zarrgate_bin, tmp_path / "tokens", "carol")
    proc, addr = start_server(zarrgate_bin, tmp_path / "root", tmp_path / "log",
                              "--tokens", str(tmp_path / "tokens"))
    try:
        port = addr.rsplit(":", 1)[1]
        for target in (addr, f"localhost:{port}"):
            store = ZarrgateStore(target, token=tokens["carol"])
            assert not store.tls
            store.set_sync("k", cpu.Buffer.from_bytes(target.encode()))
            assert store.get_sync("k").to_bytes() == target.encode()
        with pytest.raises(ZarrgateUnauthenticated, match="no credentials"):
            ZarrgateStore(addr).get_sync("k")
    finally:
        stop_server(proc)


def test_token_never_in_plaintext_to_another_host() -> None:
    for addr in ["10.1.2.3:50051", "example.com:50051", "dns:///example.com:50051",
                 "127.0.0.1", "0.0.0.0:50051"]:
        with pytest.raises(ValueError, match="only over TLS"):
            ZarrgateStore(addr, token="zg_abc")
    for addr in ["127.0.0.1:1", "127.9.9.9:1", "localhost:1", "[::1]:1", "unix:///tmp/s.sock",
                 "passthrough:///127.0.0.1:1"]:
        ZarrgateStore(addr, token="zg_abc")
    ZarrgateStore("10.1.2.3:50051", token="zg_abc", tls=True)


def test_option_errors(certs) -> None:
    with pytest.raises(ValueError, match="together"):
        ZarrgateStore("127.0.0.1:1", tls_cert=certs.client)
    with pytest.raises(ValueError, match="contradicts"):
        ZarrgateStore("127.0.0.1:1", tls=False, tls_ca=certs.ca)
    with pytest.raises(ValueError, match="contradicts"):
        ZarrgateStore("grpcs://127.0.0.1:1", tls=False)
    with pytest.raises(FileNotFoundError):
        ZarrgateStore("127.0.0.1:1", tls_ca=certs.ca.parent / "nope.pem")
    with pytest.raises(ValueError, match="not PEM"):
        ZarrgateStore("127.0.0.1:1", tls_ca=b"secret bytes")
    for tok in ["Bearer zg_abc", "zg abc", "zg_\n", "zg_é"]:
        with pytest.raises(ValueError) as info:
            ZarrgateStore("127.0.0.1:1", token=tok)
        assert tok not in str(info.value)


def test_pickle_carries_credentials_but_repr_hides_the_token(secure_server, monkeypatch) -> None:
    s = secure_server
    token = s.tokens["alice"]
    monkeypatch.setenv("ZARRGATE_TOKEN", token)
    store = ZarrgateStore(s.addr, tls_ca=s.certs.ca, read_only=True)
    for text in (repr(store), str(store), repr(store.with_read_only(False))):
        assert token not in text
    assert "token=<hidden>" in repr(store) and "tls=True" in repr(store)
    assert store != ZarrgateStore(s.addr, tls_ca=s.certs.ca, token=s.tokens["bob"])
    writable = store.with_read_only(False)
    assert writable == store and not writable.read_only
    # A process that has neither the variable nor the CA file reads with
    # the pickled store alone.
    (s.root / "proj").mkdir()
    (s.root / "proj" / "k").write_bytes(b"pickled")
    code = (
        "import pickle, sys\n"
        "s = pickle.load(sys.stdin.buffer)\n"
        "print(s.get_sync('proj/k').to_bytes().decode())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ZARRGATE_TOKEN"}
    run = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(store), env=env,
                         capture_output=True, timeout=60)
    assert run.returncode == 0 and run.stdout.decode().strip() == "pickled", run.stderr


@pytest.mark.parametrize("how", ["flag", "env"])
def test_dask_example_tls_and_token(secure_server, how: str) -> None:
    """examples/dask_read.py against the TLS + token + policy server, with
    worker processes: each unpickles the array with its CA and token."""
    from test_dask_example import EXAMPLE

    s = secure_server
    data = np.arange(40 * 30, dtype="float64").reshape(40, 30)
    arr = zarr.create_array(
        store=ZarrgateStore(s.addr, tls_ca=s.certs.ca, token=s.tokens["alice"]),
        name="proj/d", shape=data.shape, chunks=(10, 15), dtype=data.dtype,
    )
    arr[:] = data
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRGATE_")}
    args = [sys.executable, str(EXAMPLE), "--path", "proj/d", "--scheduler", "processes",
            "--workers", "2"]
    if how == "flag":
        args += ["--addr", s.addr, "--tls-ca", str(s.certs.ca), "--token", s.tokens["bob"]]
    else:
        env.update(ZARRGATE_ADDR=s.addr, ZARRGATE_TLS_CA=str(s.certs.ca),
                   ZARRGATE_TOKEN=s.tokens["bob"])
    run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["sum"] == pytest.approx(float(data.sum())) and out["chunks"] == 8
    assert not out["read_in_main_process"], out

    # Without the token: one clear line and exit code 1, no traceback.
    bad = [a for a in args if a not in ("--token", s.tokens["bob"])]
    env.pop("ZARRGATE_TOKEN", None)
    run = subprocess.run(bad, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "UNAUTHENTICATED" in run.stderr and "Traceback" not in run.stderr, run.stderr


async def test_async_api_with_token(secure_server) -> None:
    """The grpc.aio channels (zarr's own loop, and this test's) carry the
    token as the blocking one does."""
    s = secure_server
    store = await ZarrgateStore.open(s.addr, tls_ca=s.certs.ca, token=s.tokens["alice"])
    await store.set("proj/a", cpu.Buffer.from_bytes(b"1"))
    assert (await store.get("proj/a", default_buffer_prototype())).to_bytes() == b"1"
    assert [k async for k in store.list_prefix("proj/")] == ["proj/a"]
    await store.delete("proj/a")
    assert not (s.root / "proj" / "a").exists()
