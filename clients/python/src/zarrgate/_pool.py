"""One slab client per process and connection settings, for what is
unpickled in workers (zarrgate.dask, pickled arrays).

A pickled :class:`zarrgate.Array` carries its client's settings (address,
TLS material, token, options) and its metadata. Unpickled, it takes its
client from here: every array and dask task of a worker process that names
the same settings shares one channel, opened on first use and closed when
the process exits. A forked child forgets the parent's clients (a gRPC
channel does not survive a fork) and opens its own.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from typing import Any

from zarrgate._conn import Conn
from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb

_lock = threading.Lock()
_clients: dict[tuple[Any, ...], Any] = {}


def client(conn: Conn, timeout: float | None, shared_memory: bool,
           channel_options: tuple[tuple[str, Any], ...], bulk: bool = True) -> Any:
    """This process's client with these settings (made on first use)."""
    from zarrgate.client import Client

    key = (conn, timeout, shared_memory, channel_options, bulk)
    with _lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = Client(conn, timeout=timeout, shared_memory=shared_memory,
                                       bulk=bulk, channel_options=channel_options)
        return c


def reopen_array(conn: Conn, timeout: float | None, shared_memory: bool,
                 channel_options: tuple[tuple[str, Any], ...], node: bytes,
                 bulk: bool = True) -> Any:
    """A pickled Array, unpickled: its metadata as it was when pickled (no
    call), on this process's client with its settings."""
    from zarrgate.client import Array

    return Array(client(conn, timeout, shared_memory, channel_options, bulk),
                 gpb.Node.FromString(node))


def array_reduce(a: Any) -> tuple[Any, tuple[Any, ...]]:
    """What an Array pickles as (see reopen_array). The settings include
    the token and any client key: a pickled array is a secret."""
    c = a.client
    node = a._node
    if json.loads(node.attributes_json or "{}") != a.attrs:  # update_attributes since
        node = gpb.Node()
        node.CopyFrom(a._node)
        node.attributes_json = json.dumps(a.attrs)
    return reopen_array, (c._conn, c.timeout, c.shared_memory, c.channel_options,
                          node.SerializeToString(deterministic=True), c.bulk)


def size() -> int:
    """How many clients this process holds (for tests)."""
    with _lock:
        return len(_clients)


def close_all() -> None:
    """Close this process's clients (at exit)."""
    with _lock:
        cs = list(_clients.values())
        _clients.clear()
    for c in cs:
        try:
            c.close()
        except Exception:  # noqa: BLE001 - at exit, a failed close changes nothing
            pass


def _forget() -> None:
    # In a forked child: the parent's channels are not ours to close.
    global _lock
    _lock = threading.Lock()
    _clients.clear()


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget)
