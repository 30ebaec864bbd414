"""Where a node is and how to trust it: addresses as the CLI takes them (``node/src/http1.rs``),
the token as the CLI finds it (``node/src/cli/http.rs``), and TLS checked against a pinned
certificate fingerprint or a CA — never the system's roots, never not at all."""

from __future__ import annotations

import hashlib
import hmac
import os
import ssl
from dataclasses import dataclass
from typing import Optional

from .errors import PinMismatch

DEFAULT_ADDR = "127.0.0.1:7070"
"""The CLI's default ``--addr``."""

DEFAULT_TOKEN_FILE = "chorus-data/management.token"
"""Where the CLI looks for a token when none is given (the local demo's node)."""


def normalize_fingerprint(fp: str) -> str:
    """64 hex digits, lowercase; colons (as ``openssl x509 -fingerprint -sha256`` prints)
    dropped. ``ValueError`` for anything else."""
    hexed = "".join(c for c in fp.strip() if c != ":")
    if len(hexed) != 64 or any(c not in "0123456789abcdefABCDEF" for c in hexed):
        raise ValueError(
            f"{fp!r} is not a SHA-256 certificate fingerprint (64 hex digits, colons allowed)"
        )
    return hexed.lower()


@dataclass(frozen=True)
class Endpoint:
    """A node's API: ``HOST:PORT`` or ``http://HOST:PORT`` (plain), ``https://HOST:PORT``
    (TLS), with an optional ``#sha256=FINGERPRINT`` naming the certificate to pin (how nodes
    advertise a TLS API to each other; ``/cluster`` shows it)."""

    tls: bool
    host_port: str
    host: str
    port: int
    pin: Optional[str]

    @staticmethod
    def parse(addr: str) -> "Endpoint":
        def bad(why: str) -> ValueError:
            return ValueError(
                f"{addr!r} is not a node address ({why}): give HOST:PORT, http://HOST:PORT "
                "or https://HOST:PORT"
            )

        rest, pin = addr, None
        if "#" in addr:
            rest, fragment = addr.split("#", 1)
            if not fragment.startswith("sha256="):
                raise bad("the part after # is not sha256=FINGERPRINT")
            pin = normalize_fingerprint(fragment[len("sha256="):])
        if rest.startswith("https://"):
            tls, host_port = True, rest[len("https://"):]
        elif rest.startswith("http://"):
            tls, host_port = False, rest[len("http://"):]
        elif "://" in rest:
            raise bad("only http and https")
        else:
            tls, host_port = False, rest
        if host_port.endswith("/"):
            host_port = host_port[:-1]
        if "/" in host_port:
            raise bad("no path")
        if ":" not in host_port:
            raise bad("no port")
        host, port_text = host_port.rsplit(":", 1)
        if not port_text.isdigit() or int(port_text) > 65535:
            raise bad("the port is not a number up to 65535")
        host = host.lstrip("[").rstrip("]")
        if not host or any(ord(c) < 32 or c in " \x7f" for c in host):
            raise bad("no host")
        return Endpoint(tls, host_port, host, int(port_text), pin)


def choose_token(token: Optional[str], token_file: Optional[str]) -> Optional[str]:
    """The token to send, as the CLI chooses it: ``token`` (else ``CHORUS_TOKEN``), else the
    file ``token_file`` (else ``CHORUS_TOKEN_FILE``), else ``chorus-data/management.token``
    when it exists, else none (the public routes still answer)."""
    if token is None or not token.strip():
        token = os.environ.get("CHORUS_TOKEN")
    if token is not None and not token.strip():
        token = None
    if token is None:
        path = token_file or os.environ.get("CHORUS_TOKEN_FILE") or None
        if path:
            with open(path, encoding="utf-8") as f:
                token = f.read()
        elif os.path.exists(DEFAULT_TOKEN_FILE):
            with open(DEFAULT_TOKEN_FILE, encoding="utf-8") as f:
                token = f.read()
    if token is None:
        return None
    token = token.strip()
    if not token:
        return None
    # It goes into a header line: a newline would end the header.
    if any(ord(c) < 33 or ord(c) == 127 for c in token):
        raise ValueError("the token holds spaces or control characters")
    return token


@dataclass(frozen=True)
class TlsSettings:
    """How TLS certificates are checked: a fingerprint (``CHORUS_TLS_FINGERPRINT``) or a CA
    file (``CHORUS_CA_CERT``), for addresses that pin none themselves."""

    fingerprint: Optional[str] = None
    ca_cert: Optional[str] = None

    @staticmethod
    def choose(fingerprint: Optional[str], ca_cert: Optional[str]) -> "TlsSettings":
        fp = fingerprint if fingerprint is not None else os.environ.get("CHORUS_TLS_FINGERPRINT")
        ca = ca_cert if ca_cert is not None else os.environ.get("CHORUS_CA_CERT")
        return TlsSettings(
            normalize_fingerprint(fp) if fp and fp.strip() else None,
            ca if ca and ca.strip() else None,
        )


@dataclass(frozen=True)
class Trust:
    """How one connection's certificate is checked: exactly ``pin`` (the SHA-256 of the
    certificate, checked by this client right after the handshake), or the CA in
    ``context``."""

    context: ssl.SSLContext
    pin: Optional[str]


def trust_for(endpoint: Endpoint, settings: TlsSettings) -> Trust:
    """The TLS settings for ``endpoint``: a pinned fingerprint (the address's own, else the
    settings'), else the settings' CA; else an error saying how to get a fingerprint."""
    pin = endpoint.pin or settings.fingerprint
    if pin is not None:
        # The pin is the identity: the chain and names are not checked (a node's certificate
        # is self-signed); the fingerprint is, before anything is sent.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif settings.ca_cert is not None:
        # Only that CA (given a cafile, the system's roots are not loaded); names checked.
        ctx = ssl.create_default_context(cafile=settings.ca_cert)
    else:
        raise ValueError(
            f"{endpoint.host_port} speaks TLS: give tls_fingerprint= (or "
            "CHORUS_TLS_FINGERPRINT, or an address ending #sha256=FP; the node prints it at "
            "its first start and in its log) or ca_cert="
        )
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    return Trust(ctx, pin)


def check_pin(der: Optional[bytes], pin: str, host_port: str) -> None:
    """Raises :class:`PinMismatch` unless the SHA-256 of the certificate ``der`` is ``pin``."""
    got = hashlib.sha256(der).hexdigest() if der else ""
    if not hmac.compare_digest(got.encode(), pin.encode()):
        raise PinMismatch(
            f"{host_port}: the node's certificate has fingerprint {got or '(none)'}, not the "
            f"pinned {pin}; nothing was sent",
            got,
            pin,
        )
