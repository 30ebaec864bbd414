"""The asyncio client: :class:`AsyncCluster`, :class:`AsyncSandbox`, :class:`AsyncFiles`,
:class:`AsyncTasks` — the blocking client's API with ``await``, over asyncio's own streams (a
small HTTP/1.1 client here, one request per connection, no thread), so a streaming command's
output reaches its callback as the node sends it without blocking the event loop. Only the
local side of a streamed file or folder (a blocking file read, a folder packed or unpacked)
runs on a worker thread, for the same reason."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import queue
import time
from types import TracebackType
from typing import (
    Any,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Union,
    overload,
)

from . import _model as m
from ._conn import DEFAULT_ADDR, Endpoint, TlsSettings, check_pin, choose_token, trust_for
from ._stream import CHUNK, BodySource, DirPacker, Stream, is_bytes, unpack
from ._model import (
    BackgroundProcess,
    Command,
    CommandResult,
    FileEntry,
    LogChunk,
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

AsyncOutputCallback = Callable[[str], Union[Any, Awaitable[Any]]]
"""Called with each piece of output as it comes; a coroutine function is awaited."""

_UNSET: Any = object()

_MAX_HEAD = 64 * 1024


async def _call_back(cb: Optional[AsyncOutputCallback], text: str) -> None:
    if cb is not None:
        r = cb(text)
        if inspect.isawaitable(r):
            await r


class _AsyncAnswer:
    """An answer whose body is still to be read; closes its connection."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        status: int,
        headers: dict[str, str],
        wait: float,
        where: str,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.status = status
        self.headers = headers
        self.wait = wait
        self.where = where

    async def _io(self, coro: Awaitable[bytes]) -> bytes:
        try:
            return await asyncio.wait_for(coro, self.wait)
        except asyncio.IncompleteReadError as e:
            raise ConnectError(f"{self.where}: the answer broke off") from e
        except (OSError, asyncio.TimeoutError, asyncio.LimitOverrunError) as e:
            raise ConnectError(f"{self.where}: the answer broke off: {e!r}") from e

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's pieces as they come (chunked, a length, or up to the close)."""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                line = await self._io(self.reader.readuntil(b"\r\n"))
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError as e:
                    raise ProtocolError(self.status, None, f"{self.where}: a bad chunk") from e
                if size == 0:
                    return
                while size > 0:  # a large chunk in pieces, never whole
                    piece = await self._io(self.reader.readexactly(min(size, CHUNK)))
                    size -= len(piece)
                    yield piece
                if await self._io(self.reader.readexactly(2)) != b"\r\n":
                    raise ProtocolError(self.status, None, f"{self.where}: a bad chunk")
        elif "content-length" in self.headers:
            n = int(self.headers["content-length"])
            while n > 0:
                piece = await self._io(self.reader.readexactly(min(n, CHUNK)))
                n -= len(piece)
                yield piece
        else:
            while True:
                data = await self._io(self.reader.read(65536))
                if not data:
                    return
                yield data

    async def read(self) -> bytes:
        try:
            return b"".join([c async for c in self.chunks()])
        finally:
            await self.close()

    async def lines(self) -> AsyncIterator[bytes]:
        held = b""
        async for chunk in self.chunks():
            held += chunk
            *whole, held = held.split(b"\n")
            for line in whole:
                yield line + b"\n"
        if held:
            yield held

    async def close(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 5)
        except Exception:
            pass  # a peer that closed first, or without close_notify


def _received(reader: asyncio.StreamReader) -> Optional[asyncio.StreamReader]:
    """A reader of what ``reader`` received before its connection broke, if anything: asyncio
    keeps those bytes but raises the broken pipe before them. (Its buffer is not public; where
    it is not there, nothing.)"""
    held = getattr(reader, "_buffer", None)
    if not isinstance(held, (bytes, bytearray)) or not held:
        return None
    early = asyncio.StreamReader(limit=_MAX_HEAD)
    early.feed_data(bytes(held))
    early.feed_eof()
    return early


async def _send_chunked(writer: asyncio.StreamWriter, stream: Stream, wait: float) -> None:
    """``stream``'s chunks as a chunked body, each written once the last has drained."""
    chunks = stream.achunks()
    try:
        async for chunk in chunks:
            writer.writelines([b"%X\r\n" % len(chunk), chunk, b"\r\n"])
            await asyncio.wait_for(writer.drain(), wait)
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    writer.write(b"0\r\n\r\n")
    await asyncio.wait_for(writer.drain(), wait)


class _Handed:
    """A blocking reader, for ``tarfile`` on a worker thread, of the chunks the event loop hands
    over (``q``): at most a few wait (``room``), so the archive is never held whole."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.q: "queue.Queue[Any]" = queue.Queue()
        self.room = asyncio.Semaphore(4)
        self.buf = b""
        self.at = 0
        self.ended = False

    def read(self, n: int = CHUNK) -> bytes:
        while self.at >= len(self.buf):
            if self.ended:
                return b""
            item = self.q.get()
            try:
                self.loop.call_soon_threadsafe(self.room.release)
            except RuntimeError:
                pass  # the loop is closed: nobody hands anything more
            if item is None:
                self.ended = True
            elif isinstance(item, BaseException):
                self.ended = True
                raise item
            else:
                self.buf, self.at = item, 0
        out = self.buf[self.at : self.at + n]
        self.at += len(out)
        return out


async def _room(room: asyncio.Semaphore, job: "asyncio.Future[Any]") -> bool:
    """Waits for room to hand one more chunk over; ``False`` when the job ended meanwhile."""
    if not room.locked():
        await room.acquire()
        return True
    acquire = asyncio.ensure_future(room.acquire())
    done, _ = await asyncio.wait({acquire, job}, return_when=asyncio.FIRST_COMPLETED)
    if acquire in done:
        return True
    acquire.cancel()
    return False


class _AsyncTransport:
    """As the blocking client's: the caller's token to ``addr``, delegated tokens to peers."""

    def __init__(self, addr: str, token: Optional[str], tls: TlsSettings, timeout: float):
        self.addr = addr
        self.endpoint = Endpoint.parse(addr)
        self.token = token
        self.tls = tls
        self.timeout = timeout
        if self.endpoint.tls:
            trust_for(self.endpoint, tls)
        self._delegated: dict[str, tuple[str, int]] = {}

    async def open(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        addr: Optional[str] = None,
        token: Any = _UNSET,
        timeout: Optional[float] = None,
    ) -> _AsyncAnswer:
        ep = self.endpoint if addr is None else Endpoint.parse(addr)
        wait = timeout if timeout is not None else self.timeout
        trust = trust_for(ep, self.tls) if ep.tls else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    ep.host,
                    ep.port,
                    ssl=trust.context if trust else None,
                    server_hostname=ep.host if trust else None,
                    limit=_MAX_HEAD,
                ),
                self.timeout,
            )
        except (OSError, asyncio.TimeoutError) as e:
            raise ConnectError(f"cannot reach a chorus node at {ep.host_port}: {e!r}") from e
        if trust is not None and trust.pin is not None:
            # The handshake is done; nothing has been written yet.
            ssl_object = writer.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
            try:
                check_pin(der, trust.pin, ep.host_port)
            except ChorusError:
                writer.close()
                raise
        stream = body if isinstance(body, Stream) else None
        encoded = None if stream is not None else m.encode_body(body)
        data = b"" if encoded is None else encoded[0]
        head = f"{method} {path} HTTP/1.1\r\nHost: {ep.host_port}\r\nConnection: close\r\n"
        bearer = self.token if token is _UNSET else token
        if bearer:
            head += f"Authorization: Bearer {bearer}\r\n"
        if encoded is not None:
            head += f"Content-Type: {encoded[1]}\r\nContent-Length: {len(data)}\r\n"
        if stream is not None:
            # Sent as it is read, in chunks: never held whole.
            head += f"Content-Type: {stream.kind}\r\nTransfer-Encoding: chunked\r\n"
        try:
            writer.write(head.encode("latin-1") + b"\r\n" + data)
            await asyncio.wait_for(writer.drain(), wait)
            if stream is not None:
                try:
                    await _send_chunked(writer, stream, wait)
                except asyncio.TimeoutError:
                    raise
                except OSError:
                    if stream.failed is not None or stream.sent == 0:
                        raise
                    # The node answered before taking the whole body (a refusal), and closed:
                    # its answer, when it came, says why better than the broken pipe.
                    early = _received(reader)
                    if early is None:
                        raise
                    reader = early
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError) as e:
            writer.close()
            if stream is not None and stream.failed is e:
                raise  # the body's own source failed (a file that could not be read)
            raise ConnectError(f"{ep.host_port} did not answer: {e!r}") from e
        except BaseException:
            writer.close()  # the body's source raised something else: as it is
            raise
        lines = raw.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError) as e:
            writer.close()
            raise ProtocolError(None, None, f"{ep.host_port}: not an HTTP answer") from e
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        return _AsyncAnswer(reader, writer, status, headers, wait, ep.host_port)

    async def call(
        self, method: str, path: str, body: Any = None, **kw: Any
    ) -> tuple[int, dict[str, str], bytes]:
        a = await self.open(method, path, body, **kw)
        data = await a.read()
        return a.status, a.headers, data

    async def json(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, _, data = await self.call(method, path, body, **kw)
        return m.json_of(status, data, kw.get("addr") or self.addr)

    async def delegated(self, node: str) -> Optional[str]:
        if not self.token:
            return None
        held = self._delegated.get(node)
        if held is not None and held[1] > time.time() + 30:
            return held[0]
        v = await self.json("POST", "/acl/delegate", {"audience": node})
        token, expiry = v.get("token"), v.get("expires_unix")
        if not isinstance(token, str) or not isinstance(expiry, int):
            raise ProtocolError(200, None, f"{self.addr} delegated no token for {node}")
        self._delegated[node] = (token, expiry)
        return token

    async def peer_call(
        self, node: str, http_addr: str, method: str, path: str, timeout: Optional[float] = None
    ) -> tuple[int, dict[str, str], bytes]:
        if http_addr == self.addr:
            return await self.call(method, path, timeout=timeout)
        token = await self.delegated(node)
        return await self.call(method, path, addr=http_addr, token=token, timeout=timeout)

    async def http_of(self, node: str) -> Optional[str]:
        v = await self.json("GET", "/cluster")
        for member in v.get("members", []):
            if member.get("node_id") == node:
                if node == v.get("node_id"):
                    return self.addr
                http_addr = member.get("http")
                return str(http_addr) if http_addr else None
        return None


class AsyncCluster:
    """:class:`chorus_client.Cluster` for asyncio (same arguments and defaults)."""

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
        self._t = _AsyncTransport(
            addr,
            choose_token(token, token_file),
            TlsSettings.choose(tls_fingerprint, ca_cert),
            timeout,
        )
        self.tasks = AsyncTasks(self)

    @property
    def addr(self) -> str:
        return self._t.addr

    def __repr__(self) -> str:
        return f"AsyncCluster({self.addr!r})"

    async def request(
        self, method: str, path: str, body: Any = None, timeout: Optional[float] = None
    ) -> Any:
        return await self._t.json(method, path, body, timeout=timeout)

    async def status(self) -> dict[str, Any]:
        return dict(await self.request("GET", "/status"))

    async def sandboxes(self) -> list[SandboxInfo]:
        v = await self.request("GET", "/sandboxes")
        return [SandboxInfo.of(s) for s in v.get("sandboxes", [])]

    def sandbox(self, id: str) -> "AsyncSandbox":
        m.sandbox_path(id)
        return AsyncSandbox(self, SandboxInfo(id, "", "", 0, 0))

    async def create_sandbox(self, **kw: Any) -> "AsyncSandbox":
        return await AsyncSandbox.create(self, **kw)


class AsyncSandbox:
    """:class:`chorus_client.Sandbox` for asyncio; ``async with`` closes it."""

    def __init__(self, cluster: AsyncCluster, info: SandboxInfo) -> None:
        self.cluster = cluster
        self.id = info.id
        self.worker = info.worker
        self.created = info
        self.files = AsyncFiles(self)
        self._closed = False
        self._path = m.sandbox_path(info.id)

    @classmethod
    async def create(
        cls,
        cluster: Optional[AsyncCluster] = None,
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
    ) -> "AsyncSandbox":
        cluster = cluster if cluster is not None else AsyncCluster()
        body = m.create_body(
            image, env, memory_mb, cpu_millis, pids, idle_timeout, lifetime, key,
            network, requires, repo,
        )
        v = await cluster.request("POST", "/sandboxes", body)
        return cls(cluster, SandboxInfo.of(v))

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.id!r})"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            await self.close()
        except SandboxGone:
            pass

    async def info(self) -> SandboxInfo:
        return SandboxInfo.of(await self.cluster.request("GET", self._path))

    @overload
    async def run(
        self,
        cmd: Command,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        stdin: Optional[str] = ...,
        timeout: Optional[float] = ...,
        background: Literal[False] = ...,
        on_stdout: Optional[AsyncOutputCallback] = ...,
        on_stderr: Optional[AsyncOutputCallback] = ...,
    ) -> CommandResult: ...

    @overload
    async def run(
        self,
        cmd: Command,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        stdin: Optional[str] = ...,
        timeout: Optional[float] = ...,
        background: Literal[True],
    ) -> BackgroundProcess: ...

    async def run(
        self,
        cmd: Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        timeout: Optional[float] = None,
        background: bool = False,
        on_stdout: Optional[AsyncOutputCallback] = None,
        on_stderr: Optional[AsyncOutputCallback] = None,
    ) -> Union[CommandResult, BackgroundProcess]:
        """As :meth:`chorus_client.Sandbox.run`; callbacks may be coroutine functions."""
        stream = on_stdout is not None or on_stderr is not None
        body = m.exec_body(cmd, cwd, env, stdin, timeout, background, stream)
        path = f"{self._path}/exec"
        wait = m.exec_wait(timeout)
        where = self.cluster.addr
        if background:
            v = await self.cluster.request("POST", path, body, timeout=wait)
            return BackgroundProcess(int(v["pid"]), str(v["log"]))
        if not stream:
            return CommandResult.of(await self.cluster.request("POST", path, body, timeout=wait))
        a = await self.cluster._t.open("POST", path, body, timeout=wait)
        try:
            if not 200 <= a.status < 300:
                m.json_of(a.status, await a.read(), where)
            out: list[str] = []
            err: list[str] = []
            async for line in a.lines():
                parsed = m.parse_stream_line(line, where)
                if parsed is None:
                    continue
                kind, value = parsed
                if kind == "exit":
                    return CommandResult.of(value, "".join(out), "".join(err))
                # Each piece reaches its callback (awaited) before the next is read.
                (out if kind == "stdout" else err).append(value)
                await _call_back(on_stdout if kind == "stdout" else on_stderr, value)
            raise ProtocolError(200, None, f"{where}: the stream ended without the command's exit")
        finally:
            await a.close()

    async def set_env(self, env: Mapping[str, str]) -> None:
        await self.cluster.request("POST", f"{self._path}/env", {"env": dict(env)})

    async def processes(self) -> list[ProcessInfo]:
        return m.parse_processes(await self.cluster.request("GET", f"{self._path}/processes"))

    async def kill(self, pid: int) -> None:
        await self.cluster.request("DELETE", f"{self._path}/processes/{int(pid)}")

    async def keep_alive(self) -> SandboxInfo:
        return SandboxInfo.of(await self.cluster.request("POST", f"{self._path}/keepalive", {}))

    async def sync(self) -> SyncResult:
        return SyncResult.of(await self.cluster.request("POST", f"{self._path}/sync", {}))

    async def close(self) -> Optional[SyncResult]:
        if self._closed:
            return None
        v = await self.cluster.request("DELETE", self._path)
        self._closed = True
        return m.closed_sync(v)


class AsyncFiles:
    """:class:`chorus_client.Files` for asyncio. A streamed body may also be an async iterable
    of bytes (or an object whose ``read`` is a coroutine function); a blocking file-like object
    or iterable is read, and a folder packed or unpacked, on a worker thread, so the event loop
    runs on; a ``fileobj`` whose ``write`` returns an awaitable is awaited."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._s = sandbox

    async def read(self, path: str) -> bytes:
        return await self._bytes("files", path)

    async def _bytes(self, route: str, path: str) -> bytes:
        c = self._s.cluster
        status, _, data = await c._t.call("GET", f"{self._s._path}/{route}?path={m.quote(path)}")
        if not 200 <= status < 300:
            m.json_of(status, data, c.addr)
        return data

    async def _open(self, route: str, path: str) -> _AsyncAnswer:
        c = self._s.cluster
        a = await c._t.open("GET", f"{self._s._path}/{route}?path={m.quote(path)}")
        if not 200 <= a.status < 300:
            m.json_of(a.status, await a.read(), c.addr)
        return a

    async def _copy_to(self, route: str, path: str, fileobj: Any) -> int:
        a = await self._open(route, path)
        moved = 0
        try:
            async for data in a.chunks():
                r = fileobj.write(data)
                if inspect.isawaitable(r):
                    await r
                moved += len(data)
            return moved
        finally:
            await a.close()

    async def read_to(self, path: str, fileobj: Any) -> int:
        """As :meth:`chorus_client.Files.read_to`."""
        return await self._copy_to("files", path, fileobj)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def write(
        self, path: str, data: Union[bytes, str, BodySource, AsyncIterable[bytes]],
        mode: Optional[int] = None,
    ) -> int:
        """As :meth:`chorus_client.Files.write` (an async iterable streams too)."""
        if isinstance(data, str) or is_bytes(data):
            query, raw = m.file_write(path, data, mode)  # type: ignore[arg-type]
            v = await self._s.cluster.request("PUT", f"{self._s._path}/files{query}", raw)
        else:
            query = m.file_query(path, mode)
            v = await self._s.cluster.request(
                "PUT", f"{self._s._path}/files{query}", Stream(data)
            )
        return int(v.get("size", 0))

    async def list(self, path: str = "/workspace") -> list[FileEntry]:
        try:
            v = await self._s.cluster.request("GET", f"{self._s._path}/ls?path={m.quote(path)}")
        except Refused as e:
            if e.status != 422:
                raise
            raise CommandFailed(None, "list_failed", f"cannot list {path}: {e.message}") from e
        return m.listing_of(path, v)

    async def remove(self, path: str) -> None:
        await self._s.cluster.request("DELETE", f"{self._s._path}/files?path={m.quote(path)}")

    async def download(self, path: str) -> bytes:
        return await self._bytes("tree", path)

    async def download_to(self, path: str, fileobj: Any) -> int:
        """As :meth:`chorus_client.Files.download_to`."""
        return await self._copy_to("tree", path, fileobj)

    async def download_dir(
        self, path: str, local_dir: Union[str, "os.PathLike[str]"]
    ) -> dict[str, Any]:
        """As :meth:`chorus_client.Files.download_dir`: unpacked on a worker thread as the
        chunks come, a few of them held at most."""
        a = await self._open("tree", path)
        where = self._s.cluster.addr
        loop = asyncio.get_running_loop()
        handed = _Handed(loop)
        job = loop.run_in_executor(None, unpack, handed, local_dir, where)
        try:
            try:
                async for chunk in a.chunks():
                    if not await _room(handed.room, job):
                        break  # the unpacking ended (and says why below)
                    handed.q.put_nowait(chunk)
                handed.q.put_nowait(None)
            except Exception as e:  # the answer broke off: raised there, at its next read
                handed.q.put_nowait(e)
            return await job
        finally:
            if not job.done():  # cancelled: the thread ends at its next read
                handed.q.put_nowait(ConnectError("the download was cancelled"))
            await a.close()

    async def upload(
        self, path: str, archive: Union[bytes, BodySource, AsyncIterable[bytes]]
    ) -> dict[str, Any]:
        """As :meth:`chorus_client.Files.upload` (an async iterable streams too)."""
        body: Any
        if is_bytes(archive):
            body = m.Raw(bytes(archive), "application/x-tar")  # type: ignore[arg-type]
        else:
            body = Stream(archive, "application/x-tar")
        path_q = f"{self._s._path}/tree?path={m.quote(path)}"
        return dict(await self._s.cluster.request("PUT", path_q, body))

    async def upload_dir(
        self, local_dir: Union[str, "os.PathLike[str]"], path: str
    ) -> dict[str, Any]:
        """As :meth:`chorus_client.Files.upload_dir` (packed on a worker thread)."""
        packer = DirPacker(local_dir)
        path_q = f"{self._s._path}/tree?path={m.quote(path)}"
        body = Stream(packer.chunks(), "application/x-tar", owned=True)
        v = dict(await self._s.cluster.request("PUT", path_q, body))
        v["left_out"] = dict(packer.left_out)
        v["left_out_more"] = packer.left_out_more
        return v


class AsyncTasks:
    """:class:`chorus_client.Tasks` for asyncio."""

    def __init__(self, cluster: AsyncCluster) -> None:
        self._c = cluster

    async def submit(
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
        body = m.submit_body(
            command, image, env, secret_env, workdir, timeout, memory_mb, cpu_millis, pids,
            network, requires, repo, key,
        )
        return str((await self._c.request("POST", "/tasks", body))["task"])

    async def _at_owner(self, method: str, path: str) -> tuple[int, bytes, str]:
        t = self._c._t
        status, _, data = await t.call(method, path)
        if status == 404:
            try:
                v = json.loads(data)
            except ValueError:
                v = {}
            owner_http = v.get("owner_http") if isinstance(v, dict) else None
            if owner_http and owner_http != t.addr:
                status, _, data = await t.peer_call(
                    str(v.get("owner", "")), owner_http, method, path
                )
                return status, data, owner_http
        return status, data, t.addr

    async def get(self, id: str) -> dict[str, Any]:
        status, data, where = await self._at_owner("GET", m.task_path(id))
        return dict(m.json_of(status, data, where))

    async def list(self, state: Optional[str] = None) -> list[dict[str, Any]]:
        path = "/tasks" + (f"?state={m.quote(state)}" if state else "")
        return list((await self._c.request("GET", path)).get("tasks", []))

    async def cancel(self, id: str) -> dict[str, Any]:
        status, data, where = await self._at_owner("DELETE", m.task_path(id))
        return dict(m.json_of(status, data, where))

    async def wait(self, id: str, timeout: Optional[float] = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.02
        while True:
            view = await self.get(id)
            if view.get("result") is not None:
                return dict(view["result"])
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"task {id} has no result after {timeout} s ({view['phase']})")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def read_log(
        self, id: str, stream: str = "stdout", offset: int = 0, follow: bool = False
    ) -> LogChunk:
        view = await self.get(id)
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
        http_addr = await self._c._t.http_of(worker)
        if http_addr is None:
            raise ConnectError(
                f"the output of task {id} is on worker {worker}, which {self._c.addr} does not "
                "reach now"
            )
        path = m.log_query(id, stream, attempt, offset, follow)
        wait = m.LOG_FOLLOW_WAIT_S + m.MARGIN_S
        status, headers, data = await self._c._t.peer_call(worker, http_addr, "GET", path, wait)
        if status != 200:
            m.json_of(status, data, http_addr)
        return m.log_chunk(headers, data)

    async def logs(
        self,
        id: str,
        *,
        stream: str = "stdout",
        follow: bool = False,
        on_output: Optional[AsyncOutputCallback] = None,
        timeout: Optional[float] = None,
    ) -> bytes:
        deadline = None if timeout is None else time.monotonic() + timeout
        got = bytearray()
        failures = 0
        while True:
            try:
                chunk = await self.read_log(id, stream, len(got), follow)
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
                await asyncio.sleep(0.2)
                continue
            failures = 0
            if chunk.data:
                got += chunk.data
                await _call_back(on_output, chunk.data.decode("utf-8", "replace"))
            if chunk.finished and len(got) >= chunk.size:
                return bytes(got)
            if not follow and not chunk.data:
                return bytes(got)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"task {id}'s output did not end within {timeout} s")
