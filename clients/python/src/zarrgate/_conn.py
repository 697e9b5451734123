"""How to reach a server: address, TLS material, token, channel options.

Shared by :class:`zarrgate.ZarrgateStore` and the slab client
(:func:`zarrgate.connect`): one place that parses ``grpc://`` / ``grpcs://``
addresses, reads PEM files once, checks the token and where it may go,
builds the channel credentials, and turns a refused call into an exception
with a hint at its likely cause (never quoting the token).
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from zarrgate.errors import ZarrgateError, status_error

#: Where the token comes from when ``token`` is not given (the Go CLI's too).
TOKEN_ENV = "ZARRGATE_TOKEN"


def pem(value: str | os.PathLike[str] | bytes | None, what: str) -> bytes | None:
    """PEM bytes from a file name or the PEM itself. Read once, here: the
    bytes (not the name) travel with a pickled store or client, so workers
    on other hosts need no copy of the files."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        data, name = bytes(value), "the bytes given"
    elif isinstance(value, (str, os.PathLike)):
        with open(value, "rb") as f:
            data, name = f.read(), repr(os.fspath(value))
    else:
        raise TypeError(f"{what} must be a file name or PEM bytes, got {type(value).__name__}")
    # Never quote the content: it may be a private key.
    if b"-----BEGIN " not in data:
        raise ValueError(f"{what}: {name} is not PEM (no '-----BEGIN' line)")
    return data


def check_token(token: str) -> str:
    """The same rule as the Go client's WithToken. The message never quotes
    the token."""
    if not isinstance(token, str):
        raise TypeError(f"token must be a str, got {type(token).__name__}")
    if token.lower().startswith("bearer "):
        raise ValueError("token: give the token alone, without 'Bearer '")
    if any(c <= " " or c >= "\x7f" for c in token):
        raise ValueError("token: with spaces or control characters (is it the whole token?)")
    return token


def is_local(target: str) -> bool:
    """The target is on this host (a loopback address or a unix socket):
    the only place a token may go in plaintext (as the Go client's isLocal),
    and where the gateway's shared memory can be mapped."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    t = target.removeprefix("passthrough:///")
    if t.startswith("["):
        end = t.find("]")
        if end < 0 or not t[end + 1 :].startswith(":"):
            return False
        host = t[1:end]
    else:
        host, sep, _ = t.rpartition(":")
        if not sep or ":" in host:
            return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Conn:
    """Validated connection settings. Built by :meth:`make` from what a user
    passes; rebuilt from its fields (no validation, no file or environment
    read) when unpickled."""

    addr: str
    tls: bool = False
    tls_ca: bytes | None = None
    tls_cert: bytes | None = None
    tls_key: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    @classmethod
    def make(
        cls,
        addr: str,
        *,
        tls: bool | None = None,
        tls_ca: str | os.PathLike[str] | bytes | None = None,
        tls_cert: str | os.PathLike[str] | bytes | None = None,
        tls_key: str | os.PathLike[str] | bytes | None = None,
        token: str | None = None,
    ) -> Conn:
        if not isinstance(addr, str) or not addr:
            raise TypeError(f"addr must be a non-empty 'host:port' string, got {addr!r}")
        scheme_tls = None
        if addr.startswith("grpcs://"):
            addr, scheme_tls = addr.removeprefix("grpcs://"), True
        elif addr.startswith("grpc://"):
            addr = addr.removeprefix("grpc://")
        if not addr:
            raise TypeError("addr: no host:port after the scheme")
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        wants_tls = scheme_tls or tls_ca is not None or tls_cert is not None
        if tls is False and wants_tls:
            raise ValueError("tls=False contradicts grpcs://, tls_ca or tls_cert")
        use_tls = bool(tls or wants_tls)
        if token is None:
            token = os.environ.get(TOKEN_ENV) or None
        elif token == "":
            token = None
        token = None if token is None else check_token(token)
        if token is not None and not use_tls and not is_local(addr):
            raise ValueError(
                f"a token is sent only over TLS (tls=True or tls_ca=...), or in plaintext "
                f"to a loopback address or unix socket; {addr} is neither"
            )
        return cls(
            addr=addr,
            tls=use_tls,
            tls_ca=pem(tls_ca, "tls_ca"),
            tls_cert=pem(tls_cert, "tls_cert"),
            tls_key=pem(tls_key, "tls_key"),
            token=token,
        )

    @property
    def local(self) -> bool:
        return is_local(self.addr)

    def describe(self) -> str:
        """The settings for a repr: never the token or the key, only whether
        there is one."""
        extra = ""
        if self.tls:
            extra += ", tls=True"
        if self.tls_cert is not None:
            extra += ", tls_cert=<set>"
        if self.token is not None:
            extra += ", token=<hidden>"
        return extra

    def credentials(self) -> grpc.ChannelCredentials | None:
        """The channel's credentials; None: a plain insecure channel."""
        if self.tls:
            creds = grpc.ssl_channel_credentials(
                root_certificates=self.tls_ca,
                private_key=self.tls_key,
                certificate_chain=self.tls_cert,
            )
        elif self.token is not None:
            # gRPC refuses call credentials on an insecure channel. Local
            # credentials are plaintext too, but only to a loopback address
            # or a unix socket (gRPC checks the connection), so the token can
            # ride on them; make() refused any other address.
            kind = (
                grpc.LocalConnectionType.UDS
                if self.addr.startswith(("unix:", "unix-abstract:"))
                else grpc.LocalConnectionType.LOCAL_TCP
            )
            creds = grpc.local_channel_credentials(kind)
        else:
            return None
        if self.token is not None:
            creds = grpc.composite_channel_credentials(
                creds, grpc.access_token_call_credentials(self.token)
            )
        return creds

    def host(self) -> str:
        """The host the address dials ("localhost" for a unix socket: the
        gateway is on this host), without brackets around an IPv6 one."""
        t = self.addr
        if t.startswith(("unix:", "unix-abstract:")):
            return "localhost"
        for prefix in ("passthrough:///", "dns:///", "ipv4:", "ipv6:"):
            t = t.removeprefix(prefix)
        if t.startswith("["):
            return t[1 : t.find("]")] if "]" in t else t[1:]
        host, sep, _ = t.rpartition(":")
        return host if sep and ":" not in host else t

    def ssl_context(self) -> ssl.SSLContext | None:
        """A TLS client context with the channel's settings (its CA, or the
        system's; its client certificate and key), for connections made
        beside the channel (the slab client's bulk connections); None
        without TLS. Certificate names are checked (the server name is the
        caller's: see :meth:`server_name`)."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if self.tls_ca is not None:
            ctx.load_verify_locations(cadata=self.tls_ca.decode("ascii", "replace"))
        if self.tls_cert is not None and self.tls_key is not None:
            # ssl loads a certificate chain from files only: written to a
            # private directory (0700) for the moment it is read.
            with tempfile.TemporaryDirectory(prefix="zarrgate-tls-") as d:
                cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
                for name, data in ((cert, self.tls_cert), (key, self.tls_key)):
                    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                ctx.load_cert_chain(cert, key)
        return ctx

    def server_name(self, options: Any = ()) -> str:
        """The name the channel checks the server's certificate against:
        ``grpc.ssl_target_name_override`` among the channel options, else
        the address's host."""
        for k, v in options:
            if k == "grpc.ssl_target_name_override":
                return str(v)
        return self.host()

    def channel(self, options: list[tuple[str, Any]]) -> grpc.Channel:
        creds = self.credentials()
        if creds is None:
            return grpc.insecure_channel(self.addr, options=options)
        return grpc.secure_channel(self.addr, creds, options=options)

    def aio_channel(self, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
        creds = self.credentials()
        if creds is None:
            return grpc.aio.insecure_channel(self.addr, options=options)
        return grpc.aio.secure_channel(self.addr, creds, options=options)

    def hint(self, code: grpc.StatusCode, details: str) -> str:
        """A hint at the likely cause of a refused connection or call, from
        these settings (never quoting the token)."""
        details = details.lower()
        if code == grpc.StatusCode.UNAUTHENTICATED and self.token is None:
            return f" (no token is sent: pass token=... or set ${TOKEN_ENV})"
        if (
            code == grpc.StatusCode.UNAVAILABLE
            and self.tls
            and self.tls_cert is None
            and ("certificate_required" in details or "tsi_data_corrupted" in details)
        ):
            # TLS 1.3: a server's refusal of a client without certificate
            # arrives after the handshake, as an alert gRPC reports as
            # "Unwrap failed (TSI_DATA_CORRUPTED)".
            return " (does the server want a client certificate? pass tls_cert and tls_key)"
        if code == grpc.StatusCode.UNAVAILABLE and "handshake" in details:
            return (
                " (the TLS handshake failed: is tls_ca the CA that signed the server's "
                "certificate, and does that certificate name the host dialled?)"
            )
        if code == grpc.StatusCode.UNAVAILABLE and not self.tls and "socket closed" in details:
            return " (does the server want TLS? pass tls=True or tls_ca=...)"
        return ""

    def error(self, err: grpc.RpcError, what: str, node: str = "") -> ZarrgateError:
        """The exception for a failed call, with a hint at its cause."""
        code: grpc.StatusCode = err.code()  # type: ignore[attr-defined]
        details: str = err.details() or ""  # type: ignore[attr-defined]
        return status_error(code, details, what, self.hint(code, details), node)
