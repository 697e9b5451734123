"""Client memory the gateway on this host uses itself (as the Go client's
``SharedBuffer``): :meth:`Array.read_shared` has the gateway write a slab
straight into it, :meth:`Array.write_shared` has it read a slab from it.

A :class:`SharedBuffer` is a memory file of this process (``memfd``,
sealed so that it can neither shrink nor grow), mapped with its pages
allocated. The gateway is handed its process id, descriptor and a random
token it must find in the file's first page (gateway.proto's
``SharedDestination``); it checks all of that before it writes or reads a
byte. A gateway elsewhere, of another user, or refusing the memory for any
other reason gets or sends the data as usual, copied in or out here;
:attr:`SharedBuffer.in_place` says which way the last call went, and why.
Where memory files are not supported (not Linux) the buffer is ordinary
memory, always filled and read by copying."""

from __future__ import annotations

import math
import mmap
import os
import secrets
import threading
import weakref
from typing import Any

import grpc
import numpy as np

from zarrgate import _slab
from zarrgate._gen.zarrgate.gateway.v1 import gateway_pb2 as gpb

#: Where the data starts: the token has the first page (internal/shm
#: DestOffset), so that the data is page-aligned.
DATA_OFFSET = 4096

#: The token's length (internal/shm TokenBytes).
TOKEN_BYTES = 16

#: The largest buffer (1 TiB, the gateway's bound: internal/shm
#: MaxDestBytes).
MAX_BYTES = 1 << 40

#: Whether buffers are memory files the gateway can use.
SUPPORTED = all(hasattr(os, n) for n in ("memfd_create", "MFD_ALLOW_SEALING")) and hasattr(mmap, "MAP_POPULATE")

_F_ADD_SEALS = 1033  # fcntl.F_ADD_SEALS (Linux), named here for Pythons without it
_F_SEAL_SEAL, _F_SEAL_SHRINK, _F_SEAL_GROW = 1, 2, 4


class SharedBuffer:
    """``nbytes`` of memory for large reads and writes through a gateway on
    this host. One call at a time uses it (others wait). The arrays
    :meth:`array` and :meth:`Array.read_shared` return are views of it,
    valid as long as they are alive (:meth:`close` included): a later call
    on the buffer changes what they see."""

    def __init__(self, nbytes: int) -> None:
        nbytes = int(nbytes)
        if not 0 <= nbytes <= MAX_BYTES:
            raise ValueError(f"shared buffer of {nbytes} bytes: out of range (0 to {MAX_BYTES})")
        self.nbytes = nbytes
        self._lock = threading.Lock()
        self._in_place = False
        self._refused = ""
        self._fd = -1
        self.token = b""
        if SUPPORTED:
            import fcntl

            fd = os.memfd_create("zarrgate-dest", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            try:
                os.ftruncate(fd, DATA_OFFSET + nbytes)
                fcntl.fcntl(fd, getattr(fcntl, "F_ADD_SEALS", _F_ADD_SEALS),
                            _F_SEAL_SHRINK | _F_SEAL_GROW | _F_SEAL_SEAL)
                # Populated: the gateway takes only memory whose every page
                # is there (it must not fault pages in on the client's
                # behalf), and the client's copies go faster into it.
                self._mm: mmap.mmap | None = mmap.mmap(
                    fd, DATA_OFFSET + nbytes, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE,
                    prot=mmap.PROT_READ | mmap.PROT_WRITE)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            self._close_fd = weakref.finalize(self, os.close, fd)
            self.token = secrets.token_bytes(TOKEN_BYTES)
            self._mm[:TOKEN_BYTES] = self.token
            self._offset = DATA_OFFSET
        else:
            self._mm = None
            self._heap: bytearray | None = bytearray(nbytes)
            self._offset = 0

    def _memory(self) -> Any:
        m = self._mm if self._fd >= 0 else self._heap
        if m is None:
            raise ValueError("the shared buffer is closed")
        return m

    @property
    def closed(self) -> bool:
        return (self._mm if self._fd >= 0 else self._heap) is None

    @property
    def in_place(self) -> tuple[bool, str]:
        """Whether the gateway itself wrote (read_shared) or read
        (write_shared) the last call's slab in this buffer and, if not,
        why (empty if the call did not get as far as asking)."""
        return self._in_place, self._refused

    def array(self, dtype: Any, shape: Any = None) -> np.ndarray:
        """A view of the buffer's first bytes as a C-order array of dtype
        (little-endian, as the gateway lays slabs out) and shape (default:
        as many elements as fit, one dimension): the layout
        :meth:`Array.write_shared` reads and :meth:`Array.read_shared`
        leaves."""
        dt = np.dtype(dtype)
        if dt.byteorder == ">" or dt.hasobject or dt.itemsize == 0:
            raise ValueError(f"shared buffer: dtype {dt} is not a little-endian fixed-size type")
        if shape is None:
            shape = (self.nbytes // dt.itemsize,)
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if any(s < 0 for s in shape):
            raise ValueError(f"shared buffer: negative shape {shape}")
        n = math.prod(shape)
        if n * dt.itemsize > self.nbytes:
            raise ValueError(f"shared buffer: {shape} of {dt} is {n * dt.itemsize} bytes, "
                             f"more than the buffer's {self.nbytes}")
        return np.frombuffer(self._memory(), dtype=dt, count=n, offset=self._offset).reshape(shape)

    def destination(self) -> gpb.SharedDestination | None:
        """The buffer as gateway.proto names it (None: ordinary memory)."""
        if self._fd < 0:
            return None
        self._memory()
        return gpb.SharedDestination(pid=os.getpid(), fd=self._fd, size=self.nbytes, token=self.token)

    def close(self) -> None:
        """Close the buffer's memory file and unmap it; arrays that still
        view it keep its memory (and stay valid) until they are gone. A
        gateway's mapping of it ends with its call."""
        with self._lock:
            if self._fd >= 0:
                if self._mm is not None:
                    try:
                        self._mm.close()
                    except BufferError:
                        pass  # views alive: unmapped with the last of them
                    self._mm = None
                self._close_fd()
            else:
                self._heap = None

    def __enter__(self) -> SharedBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "memory file" if self._fd >= 0 else "heap"
        return f"<zarrgate.SharedBuffer {self.nbytes} bytes, {kind}{', closed' if self.closed else ''}>"


def begin(buf: SharedBuffer, what: str, a: Any, p: _slab.Plan,
          shared_memory: bool) -> tuple[np.ndarray, gpb.SharedDestination | None]:
    """Start a call of what ("read" or "write") on the slab p of array a
    with buf (its lock held): clear the last call's answer, and return the
    slab's place in buf (the first bytes, as an array of the slab's shape
    and the array's little-endian dtype) and the destination to name to
    the gateway (None, with buf's reason set, if the call goes without)."""
    buf._in_place, buf._refused = False, ""
    if a.dtype.kind in "OT":
        raise TypeError(f"{what} {a.path!r}: a shared buffer holds fixed-size elements, not {a.dtype}")
    need = p.size * a.dtype.itemsize
    if need > buf.nbytes:
        raise ValueError(f"{what} {a.path!r}: the slab {p.slab_shape} of {a.dtype} is {need} bytes, "
                         f"more than the {buf.nbytes}-byte shared buffer")
    view = buf.array(_slab.wire_dtype(a.dtype), p.slab_shape)
    dest = buf.destination()
    if dest is None:
        buf._refused = "shared buffers are ordinary memory on this platform"
    elif not shared_memory:
        buf._refused = "shared memory is off for this client (shared_memory=False)"
        dest = None
    return view, dest


def write_request(a: Any, p: _slab.Plan, dest: gpb.SharedDestination) -> gpb.WriteSlabSharedRequest:
    return gpb.WriteSlabSharedRequest(path=a.path, selection=p.proto(), source=dest)


def write_refused_by_old_gateway(buf: SharedBuffer, e: grpc.RpcError) -> bool:
    """Whether e is a gateway's answer that it has no WriteSlabShared (an
    older version; buf's reason set): the write then goes through the
    socket. Any other error is the call's."""
    if e.code() != grpc.StatusCode.UNIMPLEMENTED or "WriteSlabShared" not in (e.details() or ""):  # type: ignore[attr-defined]
        return False
    buf._refused = "the gateway does not read slabs from shared memory (an older version)"
    return True


def write_answer(buf: SharedBuffer, resp: gpb.WriteSlabSharedResponse) -> gpb.WriteSlabResponse | None:
    """What WriteSlabShared's answer wrote, or None (buf's reason set) if
    the gateway refused the buffer and wrote nothing."""
    if not resp.source.accepted:
        buf._refused = resp.source.reason or "refused, no reason given"
        return None
    buf._in_place = True
    return gpb.WriteSlabResponse(chunks_written=resp.chunks_written, bytes_written=resp.bytes_written)
