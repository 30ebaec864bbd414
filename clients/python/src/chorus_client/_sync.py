"""The blocking client: :class:`Cluster`, :class:`Sandbox`, :class:`Files`, :class:`Tasks`.

One request per connection (``Connection: close``), as the CLI sends them: nothing is kept
open between calls, so a :class:`Cluster` may be shared by threads."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from types import TracebackType
from typing import Any, Literal, Mapping, Optional, Sequence, Union, overload

from . import _model as m
from ._conn import DEFAULT_ADDR, Endpoint, TlsSettings, check_pin, choose_token, trust_for
from ._stream import CHUNK, AnswerReader, BodySource, DirPacker, Stream, Writable, is_bytes, unpack
from ._model import (
    BackgroundProcess,
    Command,
    CommandResult,
    FileEntry,
    LogChunk,
    OutputCallback,
    ProcessInfo,
    SandboxInfo,
    SyncResult,
)
from .errors import (
    ChorusError,
    CommandFailed,
    ConnectError,
    NotFound,
    ProtocolError,
    Refused,
    SandboxGone,
)

_UNSET: Any = object()


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS whose certificate is checked against a pinned SHA-256 right after the handshake,
    before any byte of the request is written (``connect`` runs before the first send)."""

    def __init__(self, host: str, port: int, *, pin: str, host_port: str, **kw: Any) -> None:
        super().__init__(host, port, **kw)
        self._pin = pin
        self._host_port = host_port

    def connect(self) -> None:
        super().connect()  # TCP, then the TLS handshake (do_handshake_on_connect)
        der = self.sock.getpeercert(binary_form=True)
        try:
            check_pin(der, self._pin, self._host_port)
        except Exception:
            self.sock.close()
            self.sock = None
            raise


class _Answer:
    """An answer whose body is still to be read (a stream); closes its connection."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.conn = conn
        self.resp = resp
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}

    def read(self) -> bytes:
        try:
            return self.resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise ConnectError(f"the answer broke off: {e}") from e
        finally:
            self.close()

    def read_some(self, n: int) -> bytes:
        """At most ``n`` bytes of the body, ``b""`` at its end; one that breaks off (a chunked
        answer without its last chunk) raises :class:`ConnectError`."""
        try:
            return self.resp.read(n)
        except (OSError, http.client.HTTPException) as e:
            raise ConnectError(f"the answer broke off: {e!r}") from e

    def close(self) -> None:
        self.conn.close()


class _Transport:
    """Requests to the node at ``addr`` with the caller's token, and to its peers (addresses
    they advertised) with a token delegated to that peer alone — never the caller's."""

    def __init__(self, addr: str, token: Optional[str], tls: TlsSettings, timeout: float):
        self.addr = addr
        self.endpoint = Endpoint.parse(addr)
        self.token = token
        self.tls = tls
        self.timeout = timeout
        if self.endpoint.tls:
            trust_for(self.endpoint, tls)  # fails now, saying how, when TLS has no check
        self._delegated: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def open(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        addr: Optional[str] = None,
        token: Any = _UNSET,
        timeout: Optional[float] = None,
    ) -> _Answer:
        ep = self.endpoint if addr is None else Endpoint.parse(addr)
        wait = timeout if timeout is not None else self.timeout
        conn: http.client.HTTPConnection
        if ep.tls:
            trust = trust_for(ep, self.tls)
            if trust.pin is not None:
                conn = _PinnedHTTPSConnection(
                    ep.host,
                    ep.port,
                    pin=trust.pin,
                    host_port=ep.host_port,
                    context=trust.context,
                    timeout=wait,
                )
            else:
                conn = http.client.HTTPSConnection(
                    ep.host, ep.port, context=trust.context, timeout=wait
                )
        else:
            conn = http.client.HTTPConnection(ep.host, ep.port, timeout=wait)
        headers = {"Host": ep.host_port, "Connection": "close"}
        bearer = self.token if token is _UNSET else token
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        data: Any = None
        stream = body if isinstance(body, Stream) else None
        if stream is not None:
            # Sent as it is read, in chunks: never held whole.
            data = stream.chunks()
            headers["Content-Type"] = stream.kind
            headers["Transfer-Encoding"] = "chunked"
        else:
            encoded = m.encode_body(body)
            if encoded is not None:
                data, headers["Content-Type"] = encoded
        try:
            conn.connect()  # the pin is checked here, before the request below
            try:
                try:
                    conn.request(
                        method, path, body=data, headers=headers, encode_chunked=stream is not None
                    )
                finally:
                    if stream is not None:
                        data.close()  # a folder's packing stops here too
            except (OSError, http.client.HTTPException) as e:
                if stream is None or stream.failed is not None or stream.sent == 0:
                    raise
                # The node answered before taking the whole body (a refusal), and closed: its
                # answer, when it came whole, says why better than the broken pipe.
                try:
                    resp = conn.getresponse()
                except (OSError, http.client.HTTPException):
                    raise e from None
            else:
                resp = conn.getresponse()
        except ChorusError:
            conn.close()
            raise
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            if stream is not None and stream.failed is e:
                raise  # the body's own source failed (a file that could not be read)
            raise ConnectError(f"cannot reach a chorus node at {ep.host_port}: {e}") from e
        except BaseException:
            conn.close()  # the body's source raised something else: as it is
            raise
        return _Answer(conn, resp)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        addr: Optional[str] = None,
        token: Any = _UNSET,
        timeout: Optional[float] = None,
    ) -> tuple[int, dict[str, str], bytes]:
        a = self.open(method, path, body, addr=addr, token=token, timeout=timeout)
        data = a.read()
        return a.status, a.headers, data

    def json(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, _, data = self.call(method, path, body, **kw)
        return m.json_of(status, data, kw.get("addr") or self.addr)

    def delegated(self, node: str) -> Optional[str]:
        """A token for node ``node`` alone, delegated by the node at ``addr``."""
        if not self.token:
            return None
        with self._lock:
            held = self._delegated.get(node)
        if held is not None and held[1] > time.time() + 30:
            return held[0]
        v = self.json("POST", "/acl/delegate", {"audience": node})
        token, expiry = v.get("token"), v.get("expires_unix")
        if not isinstance(token, str) or not isinstance(expiry, int):
            raise ProtocolError(200, None, f"{self.addr} delegated no token for {node}")
        with self._lock:
            self._delegated[node] = (token, expiry)
        return token

    def peer_call(
        self, node: str, http_addr: str, method: str, path: str, timeout: Optional[float] = None
    ) -> tuple[int, dict[str, str], bytes]:
        if http_addr == self.addr:
            return self.call(method, path, timeout=timeout)
        token = self.delegated(node)
        return self.call(method, path, addr=http_addr, token=token, timeout=timeout)

    def http_of(self, node: str) -> Optional[str]:
        """Where node ``node``'s API is, as the node at ``addr`` knows it."""
        v = self.json("GET", "/cluster")
        for member in v.get("members", []):
            if member.get("node_id") == node:
                if node == v.get("node_id"):
                    return self.addr
                http_addr = member.get("http")
                return str(http_addr) if http_addr else None
        return None


class Cluster:
    """A CHORUS cluster, reached through the HTTP API of one of its nodes.

    ``addr``: ``HOST:PORT``, ``http://HOST:PORT`` or ``https://HOST:PORT[#sha256=FP]``
    (default ``CHORUS_ADDR``, else ``127.0.0.1:7070``). ``token``: default ``CHORUS_TOKEN``,
    else the file ``token_file`` / ``CHORUS_TOKEN_FILE``, else
    ``chorus-data/management.token`` if it exists. TLS: the address's own pin, else
    ``tls_fingerprint`` / ``CHORUS_TLS_FINGERPRINT``, else the CA ``ca_cert`` /
    ``CHORUS_CA_CERT``. ``timeout``: seconds a call may take (a command's own timeout is
    added for :meth:`Sandbox.run`)."""

    def __init__(
        self,
        addr: Optional[str] = None,
        token: Optional[str] = None,
        *,
        token_file: Optional[str] = None,
        tls_fingerprint: Optional[str] = None,
        ca_cert: Optional[str] = None,
        timeout: float = 30.0,
    ) -> None:
        addr = addr or os.environ.get("CHORUS_ADDR") or DEFAULT_ADDR
        self._t = _Transport(
            addr,
            choose_token(token, token_file),
            TlsSettings.choose(tls_fingerprint, ca_cert),
            timeout,
        )
        self.tasks = Tasks(self)

    @property
    def addr(self) -> str:
        return self._t.addr

    def __repr__(self) -> str:
        return f"Cluster({self.addr!r})"

    def request(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None) -> Any:
        """Any route: its JSON answer, or the node's error as an exception."""
        return self._t.json(method, path, body, timeout=timeout)

    def status(self) -> dict[str, Any]:
        """``GET /status`` of the node at ``addr``."""
        return dict(self.request("GET", "/status"))

    def sandboxes(self) -> list[SandboxInfo]:
        """The caller's live sandboxes at the node at ``addr`` (an ``operate`` token: all)."""
        v = self.request("GET", "/sandboxes")
        return [SandboxInfo.of(s) for s in v.get("sandboxes", [])]

    def sandbox(self, id: str) -> "Sandbox":
        """An existing sandbox by id (no call is made; a gone one raises on first use)."""
        m.sandbox_path(id)
        return Sandbox(self, SandboxInfo(id, "", "", 0, 0))

    def create_sandbox(self, **kw: Any) -> "Sandbox":
        """:meth:`Sandbox.create` on this cluster."""
        return Sandbox.create(self, **kw)


class Sandbox:
    """A live sandbox: a container kept across calls until it is closed, idles out or reaches
    its lifetime. Use it as a context manager to close it at the end."""

    def __init__(self, cluster: Cluster, info: SandboxInfo) -> None:
        self.cluster = cluster
        self.id = info.id
        self.worker = info.worker
        self.created = info
        self.files = Files(self)
        self._closed = False
        self._path = m.sandbox_path(info.id)

    @classmethod
    def create(
        cls,
        cluster: Optional[Cluster] = None,
        *,
        image: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        memory_mb: int = 0,
        cpu_millis: int = 0,
        pids: int = 0,
        idle_timeout: Optional[float] = None,
        lifetime: Optional[float] = None,
        key: Optional[str] = None,
        network: bool = False,
        requires: Optional[Sequence[str]] = None,
        repo: Optional[str] = None,
    ) -> "Sandbox":
        """Makes a sandbox (at the node asked, or a connected worker when it runs none).
        ``env`` is kept for every command; ``idle_timeout`` and ``lifetime`` are seconds
        (default: the node's); ``key`` makes a retried create name the same sandbox. Without a
        ``cluster``, ``Cluster()`` from the environment."""
        cluster = cluster if cluster is not None else Cluster()
        body = m.create_body(
            image, env, memory_mb, cpu_millis, pids, idle_timeout, lifetime, key,
            network, requires, repo,
        )
        v = cluster.request("POST", "/sandboxes", body)
        return cls(cluster, SandboxInfo.of(v))

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r})"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.close()
        except SandboxGone:
            pass  # it ended already (idle, expired, lost): nothing to close

    def info(self) -> SandboxInfo:
        """The sandbox now, with the time it has left."""
        return SandboxInfo.of(self.cluster.request("GET", self._path))

    @overload
    def run(
        self,
        cmd: Command,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        stdin: Optional[str] = ...,
        timeout: Optional[float] = ...,
        background: Literal[False] = ...,
        on_stdout: Optional[OutputCallback] = ...,
        on_stderr: Optional[OutputCallback] = ...,
    ) -> CommandResult: ...

    @overload
    def run(
        self,
        cmd: Command,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        stdin: Optional[str] = ...,
        timeout: Optional[float] = ...,
        background: Literal[True],
    ) -> BackgroundProcess: ...

    def run(
        self,
        cmd: Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        timeout: Optional[float] = None,
        background: bool = False,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> Union[CommandResult, BackgroundProcess]:
        """Runs ``cmd`` (a string: ``sh -c``; a list: argv) and returns how it ended — a
        non-zero exit, a timeout or an OOM kill is a result, not an exception. With
        ``on_stdout``/``on_stderr`` the output is streamed to them as it comes (the result
        still holds all of it). ``timeout`` in seconds (default: the node's, 10 minutes).
        ``background=True`` starts it in its own session, output to a log file in the sandbox,
        and returns its pid at once."""
        stream = on_stdout is not None or on_stderr is not None
        body = m.exec_body(cmd, cwd, env, stdin, timeout, background, stream)
        path = f"{self._path}/exec"
        wait = m.exec_wait(timeout)
        where = self.cluster.addr
        if background:
            v = self.cluster.request("POST", path, body, timeout=wait)
            return BackgroundProcess(int(v["pid"]), str(v["log"]))
        if not stream:
            return CommandResult.of(self.cluster.request("POST", path, body, timeout=wait))
        a = self.cluster._t.open("POST", path, body, timeout=wait)
        try:
            if not 200 <= a.status < 300 or "ndjson" not in a.headers.get("content-type", ""):
                data = a.read()
                if 200 <= a.status < 300:
                    return m.whole_stream(data.splitlines(), on_stdout, on_stderr, where)
                m.json_of(a.status, data, where)
            out: list[str] = []
            err: list[str] = []
            while True:
                try:
                    line = a.resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    raise ConnectError(f"the output stream of {self.id} broke off: {e}") from e
                if not line:
                    raise ProtocolError(
                        200, None, f"{where}: the stream ended without the command's exit"
                    )
                done = m.stream_line(line, on_stdout, on_stderr, out, err, where)
                if done is not None:
                    return done
        finally:
            a.close()

    def set_env(self, env: Mapping[str, str]) -> None:
        """Variables kept for every later command."""
        self.cluster.request("POST", f"{self._path}/env", {"env": dict(env)})

    def processes(self) -> list[ProcessInfo]:
        """What runs in the sandbox now."""
        return m.parse_processes(self.cluster.request("GET", f"{self._path}/processes"))

    def kill(self, pid: int) -> None:
        """SIGKILL to ``pid``'s process group (a background command leads its own)."""
        self.cluster.request("DELETE", f"{self._path}/processes/{int(pid)}")

    def keep_alive(self) -> SandboxInfo:
        """Starts its idle clock again (its lifetime stays); the sandbox with the time left."""
        return SandboxInfo.of(self.cluster.request("POST", f"{self._path}/keepalive", {}))

    def sync(self) -> SyncResult:
        """Carries the sandbox's read-write repository (``repo="NAME:rw"`` at create) back to
        its worker's copy now: changed and new files written, deleted ones deleted, nothing
        under ``.git``. Raises :class:`Conflict` for a sandbox without one."""
        return SyncResult.of(self.cluster.request("POST", f"{self._path}/sync", {}))

    def close(self) -> Optional[SyncResult]:
        """Closes the sandbox (its container goes); later calls raise :class:`SandboxGone`
        with reason ``closed``. Closing twice from this object is one close. A sandbox with a
        read-write repository is synced back first: what came back (``None`` for any other)."""
        if self._closed:
            return None
        v = self.cluster.request("DELETE", self._path)
        self._closed = True
        return m.closed_sync(v)


class Files:
    """Files in a sandbox (absolute paths; ``..`` is refused).

    What streams: a file's raw bytes both ways (:meth:`write` given a file-like object or an
    iterable of chunks, :meth:`read_to`) and a folder's tar archive both ways (:meth:`upload`
    given one, :meth:`upload_dir`, :meth:`download_to`, :meth:`download_dir`) move as they come,
    in chunks of 256 KiB — through the node asked, on to the sandbox's worker — never held whole
    here nor at a node: at most the worker's stream bound per call (``[sandbox]
    live_file_max_mb``, 1 GiB by default) of file bytes; past it the node refuses with 413,
    raised as :class:`Refused` with ``reason == "file_size"``."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._s = sandbox

    def read(self, path: str) -> bytes:
        """The file's bytes (held whole here: :meth:`read_to` streams them instead)."""
        return self._bytes("files", path)

    def _bytes(self, route: str, path: str) -> bytes:
        """``GET /sandboxes/{id}/ROUTE?path=``'s body as it came (an error raised as any)."""
        c = self._s.cluster
        status, _, data = c._t.call("GET", f"{self._s._path}/{route}?path={m.quote(path)}")
        if not 200 <= status < 300:
            m.json_of(status, data, c.addr)
        return data

    def _open(self, route: str, path: str) -> _Answer:
        """``GET /sandboxes/{id}/ROUTE?path=`` whose 2xx body is still to be read (an error
        raised as any)."""
        c = self._s.cluster
        a = c._t.open("GET", f"{self._s._path}/{route}?path={m.quote(path)}")
        if not 200 <= a.status < 300:
            m.json_of(a.status, a.read(), c.addr)
        return a

    def _copy_to(self, route: str, path: str, fileobj: Writable) -> int:
        a = self._open(route, path)
        moved = 0
        try:
            while True:
                data = a.read_some(CHUNK)
                if not data:
                    return moved
                fileobj.write(data)
                moved += len(data)
        finally:
            a.close()

    def read_to(self, path: str, fileobj: Writable) -> int:
        """Streams file ``path`` into ``fileobj`` (a writable binary file-like object) in
        chunks as it comes, never whole; returns the bytes written. At most the worker's stream
        bound (1 GiB by default): a larger file, or a read that fails part way, breaks the
        answer off and raises :class:`ConnectError` — ``fileobj`` then holds a part, which is
        never the whole."""
        return self._copy_to("files", path, fileobj)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(
        self, path: str, data: Union[bytes, str, BodySource], mode: Optional[int] = None
    ) -> int:
        """Writes the file whole, making its directories; returns its size. ``data``: bytes or
        text (UTF-8; sent as they are, no base64), or a binary file-like object (anything with
        ``read(n)``) or an iterable of bytes chunks, streamed (``Transfer-Encoding: chunked``)
        as it is read, never held whole — at most the worker's stream bound (1 GiB by default;
        413 past it, raised as :class:`Refused` with ``reason == "file_size"``). An upload that
        breaks off leaves no file at ``path``."""
        if isinstance(data, str) or is_bytes(data):
            query, raw = m.file_write(path, data, mode)  # type: ignore[arg-type]
            v = self._s.cluster.request("PUT", f"{self._s._path}/files{query}", raw)
        else:
            query = m.file_query(path, mode)
            v = self._s.cluster.request("PUT", f"{self._s._path}/files{query}", Stream(data))
        return int(v.get("size", 0))

    def list(self, path: str = "/workspace") -> list[FileEntry]:
        """The entries of directory ``path``, by name (none for a file). A path that is not
        there raises :class:`CommandFailed`."""
        try:
            v = self._s.cluster.request("GET", f"{self._s._path}/ls?path={m.quote(path)}")
        except Refused as e:
            if e.status != 422:
                raise
            raise CommandFailed(None, "list_failed", f"cannot list {path}: {e.message}") from e
        return m.listing_of(path, v)

    def remove(self, path: str) -> None:
        """Removes a file, or a directory with everything under it (``/`` is refused)."""
        self._s.cluster.request("DELETE", f"{self._s._path}/files?path={m.quote(path)}")

    def download(self, path: str) -> bytes:
        """Directory ``path`` as a tar archive (names relative to it): its folders, regular
        files and hard links among them; symbolic links, devices and the like left out. Up to
        the worker's stream bound (1 GiB of file bytes by default). Held whole here:
        :meth:`download_to` and :meth:`download_dir` stream it instead."""
        return self._bytes("tree", path)

    def download_to(self, path: str, fileobj: Writable) -> int:
        """Streams directory ``path`` as a tar archive (as :meth:`download` makes it) into
        ``fileobj`` (a writable binary file-like object) in chunks as it comes, never whole;
        returns the bytes written. A folder over the worker's stream bound (1 GiB of file bytes
        by default), or a read that fails part way, breaks the answer off and raises
        :class:`ConnectError` (``fileobj`` holds a part, which is never the whole)."""
        return self._copy_to("tree", path, fileobj)

    def download_dir(
        self, path: str, local_dir: Union[str, "os.PathLike[str]"]
    ) -> dict[str, Any]:
        """Unpacks directory ``path`` of the sandbox into local folder ``local_dir`` (made if
        missing) as its tar archive comes (``tarfile`` stream mode ``r|``), never holding it
        whole. Kept: folders, regular files — their permission bits as ``tarfile``'s ``data``
        filter leaves them (no group/other write, no set-id bits, read-write for their owner)
        — and hard links to a file unpacked earlier from the same archive; files already there
        are replaced, others kept. Refused, never written, and listed in the answer's
        ``skipped`` (name → why; at most 1000, ``skipped_more`` counts the rest): absolute
        names, names with ``..``, names that would reach out of ``local_dir`` through a link
        already in it, symbolic links (wherever they point), hard links to anything else,
        devices, fifos. Uses the ``data`` extraction filter where this Python has it, the same
        checks otherwise. At most the worker's stream bound (1 GiB of file bytes by default):
        a larger folder, or a read that fails part way, raises :class:`ConnectError`, leaving
        the files unpacked before the break. Returns ``{path, files, bytes, skipped,
        skipped_more}``."""
        a = self._open("tree", path)
        try:
            return unpack(AnswerReader(a.read_some, self._s.cluster.addr), local_dir,
                          self._s.cluster.addr)
        finally:
            a.close()

    def upload(self, path: str, archive: Union[bytes, BodySource]) -> dict[str, Any]:
        """Unpacks a tar archive's folders, regular files and hard links under directory
        ``path`` (made if missing; files already there replaced, others kept), streamed by the
        node as it arrives, up to the worker's stream bound (1 GiB of file bytes by default;
        413 past it, raised as :class:`Refused` with ``reason == "file_size"``: what came
        before it is written). ``archive``: bytes, or a binary file-like object (anything with
        ``read(n)``) or an iterable of bytes chunks, sent as it is read
        (``Transfer-Encoding: chunked``), never held whole. The answer says how many
        (``files``, ``bytes``) and what was ``skipped`` (symbolic links, devices, names with
        ``..``; ``skipped_more`` past the 1000 listed). An archive that is not tar, or one
        broken off, raises :class:`BadRequest` (``bad_tree``)."""
        url = f"{self._s._path}/tree?path={m.quote(path)}"
        body: Any
        if is_bytes(archive):
            body = m.Raw(bytes(archive), "application/x-tar")  # type: ignore[arg-type]
        else:
            body = Stream(archive, "application/x-tar")
        return dict(self._s.cluster.request("PUT", url, body))

    def upload_dir(
        self, local_dir: Union[str, "os.PathLike[str]"], path: str
    ) -> dict[str, Any]:
        """Sends local folder ``local_dir`` into directory ``path`` of the sandbox, packed as a
        tar archive while it is walked and sent (``tarfile`` stream mode ``w|``, on a thread,
        a few chunks of 256 KiB held at most; no temporary file), as ``chorus sandbox cp DIR
        ID:/dir`` does: its folders and regular files, names relative to it, with their
        permission bits (set-id bits dropped). Symbolic links are not followed: they, devices,
        fifos, sockets and names that are not UTF-8 are left out here and listed in the
        answer's ``left_out`` (name → what it is; at most 1000, ``left_out_more`` counts the
        rest). At most the worker's stream bound (1 GiB of file bytes by default; 413 past it,
        raised as :class:`Refused` with ``reason == "file_size"``: what came before it is
        written). A folder or file here that cannot be read raises its own ``OSError`` (the
        node then keeps what it unpacked before the break). Returns the node's answer
        (``path``, ``files``, ``bytes``, ``skipped``, ``skipped_more``) with ``left_out`` and
        ``left_out_more``."""
        packer = DirPacker(local_dir)
        url = f"{self._s._path}/tree?path={m.quote(path)}"
        body = Stream(packer.chunks(), "application/x-tar", owned=True)
        v = dict(self._s.cluster.request("PUT", url, body))
        v["left_out"] = dict(packer.left_out)
        v["left_out_more"] = packer.left_out_more
        return v


class Tasks:
    """Tasks: one-shot commands the cluster places on a worker and runs once to a result."""

    def __init__(self, cluster: Cluster) -> None:
        self._c = cluster

    def submit(
        self,
        command: Command,
        *,
        image: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        secret_env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        timeout: Optional[float] = None,
        memory_mb: int = 0,
        cpu_millis: int = 0,
        pids: int = 0,
        network: bool = False,
        requires: Optional[Sequence[str]] = None,
        repo: Optional[str] = None,
        key: Optional[str] = None,
    ) -> str:
        """Submits a task; returns its id. A string command runs as ``sh -c``. ``image``
        defaults to ``chorus/sandbox:latest``; ``timeout`` in seconds; ``secret_env`` values
        are sealed by the node; ``key`` makes a retried submit name the same task."""
        body = m.submit_body(
            command, image, env, secret_env, workdir, timeout, memory_mb, cpu_millis, pids,
            network, requires, repo, key,
        )
        return str(self._c.request("POST", "/tasks", body)["task"])

    def _at_owner(self, method: str, path: str) -> tuple[int, bytes, str]:
        t = self._c._t
        status, _, data = t.call(method, path)
        if status == 404:
            try:
                v = json.loads(data)
            except ValueError:
                v = {}
            owner_http = v.get("owner_http") if isinstance(v, dict) else None
            if owner_http and owner_http != t.addr:
                status, _, data = t.peer_call(str(v.get("owner", "")), owner_http, method, path)
                return status, data, owner_http
        return status, data, t.addr

    def get(self, id: str) -> dict[str, Any]:
        """The task as its node knows it (asked there when another node holds it): ``phase``,
        ``worker``, ``result`` (``status``, ``exit_code``, ``stdout``/``stderr`` tails)…"""
        status, data, where = self._at_owner("GET", m.task_path(id))
        return dict(m.json_of(status, data, where))

    def list(self, state: Optional[str] = None) -> list[dict[str, Any]]:
        """The tasks the node at ``addr`` owns (``state``: ``unfinished``, a phase or a
        status)."""
        path = "/tasks" + (f"?state={m.quote(state)}" if state else "")
        return list(self._c.request("GET", path).get("tasks", []))

    def cancel(self, id: str) -> dict[str, Any]:
        """Asks for the task to be cancelled."""
        status, data, where = self._at_owner("DELETE", m.task_path(id))
        return dict(m.json_of(status, data, where))

    def wait(self, id: str, timeout: Optional[float] = None) -> dict[str, Any]:
        """Polls until the task has a result and returns it; ``TimeoutError`` after
        ``timeout`` seconds (the task goes on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.02
        while True:
            view = self.get(id)
            if view.get("result") is not None:
                return dict(view["result"])
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"task {id} has no result after {timeout} s ({view['phase']})")
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def read_log(
        self, id: str, stream: str = "stdout", offset: int = 0, follow: bool = False
    ) -> LogChunk:
        """One read of a stream of the task's output at the worker that runs or ran it (at
        most 1 MiB; ``follow``: a long poll that answers when there is more, or after 20 s)."""
        view = self.get(id)
        run = m.run_of(view)
        if run is None:
            # Not yet (waiting for a worker), or never (cancelled before it ran, or no worker
            # could run it): the reason says which.
            never = view.get("result") is not None
            raise NotFound(
                404,
                "never_ran" if never else "not_run",
                f"task {id} {'never ran' if never else 'has not run yet'} (it is "
                f"{view.get('phase')})",
            )
        worker, attempt = run
        http_addr = self._c._t.http_of(worker)
        if http_addr is None:
            raise ConnectError(
                f"the output of task {id} is on worker {worker}, which {self._c.addr} does not "
                "reach now"
            )
        path = m.log_query(id, stream, attempt, offset, follow)
        wait = m.LOG_FOLLOW_WAIT_S + m.MARGIN_S
        status, headers, data = self._c._t.peer_call(worker, http_addr, "GET", path, wait)
        if status != 200:
            m.json_of(status, data, http_addr)
        return m.log_chunk(headers, data)

    def logs(
        self,
        id: str,
        *,
        stream: str = "stdout",
        follow: bool = False,
        on_output: Optional[OutputCallback] = None,
        timeout: Optional[float] = None,
    ) -> bytes:
        """One stream of the task's output (``stdout`` or ``stderr``) as the command wrote it,
        from its worker: what is kept now, or with ``follow`` all of it until the run ends
        (``on_output`` gets each piece as it comes, decoded; ``timeout`` seconds bounds the
        wait). A run that had not started is waited for when following."""
        deadline = None if timeout is None else time.monotonic() + timeout
        got = bytearray()
        failures = 0
        while True:
            try:
                chunk = self.read_log(id, stream, len(got), follow)
            except (NotFound, ConnectError) as e:
                if e.reason == "never_ran":
                    return bytes(got)
                if not follow or (deadline is not None and time.monotonic() >= deadline):
                    raise
                # Waiting for a worker is waited out; a log not there yet (the run starting) or
                # a worker out of reach, a bounded number of times in a row.
                if e.reason != "not_run":
                    failures += 1
                    if failures > 30:
                        raise
                time.sleep(0.2)
                continue
            failures = 0
            if chunk.data:
                got += chunk.data
                if on_output is not None:
                    on_output(chunk.data.decode("utf-8", "replace"))
            if chunk.finished and len(got) >= chunk.size:
                return bytes(got)
            if not follow and not chunk.data:
                return bytes(got)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"task {id}'s output did not end within {timeout} s")

