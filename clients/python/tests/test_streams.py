"""Streamed files and folders, against a small fake node here (no real node needed): bodies go
out chunked and are never read whole, answers are written out as they come, a folder is packed
on the fly with its links left out, and an archive that tries to leave its folder is refused."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import socket
import stat
import tarfile
import tempfile
import threading
import tracemalloc
import unittest
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, Optional
from unittest import mock

from chorus_client import (
    AsyncCluster,
    BadRequest,
    Cluster,
    ConnectError,
    NotFound,
    Refused,
)
from chorus_client import _stream

MiB = 1 << 20


@dataclass
class Req:
    """One request as the fake node took it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    size: int = 0
    sha256: str = ""
    largest_chunk: int = 0
    body: Optional[bytes] = None


@dataclass
class Answer:
    """What the fake node answers: JSON (with a length), or chunks sent chunked — broken off
    (no last chunk) when ``break_off``."""

    status: int = 200
    json: Any = None
    chunks: Optional[Callable[[], Iterator[bytes]]] = None
    kind: str = "application/octet-stream"
    break_off: bool = False


@dataclass
class FakeNode:
    """A node's HTTP API as far as these tests need it: records each request (its body hashed,
    kept when ``keep_body``) and answers what ``respond`` says."""

    respond: Callable[[Req], Answer] = lambda req: Answer(json={})
    keep_body: bool = True
    requests: list[Req] = field(default_factory=list)

    def __post_init__(self) -> None:
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_ANY(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                req = Req(self.command, url.path, dict(urllib.parse.parse_qsl(url.query)),
                          {k.lower(): v for k, v in self.headers.items()})
                try:
                    self._take_body(req)
                except (ConnectionError, ValueError):  # the client stopped sending
                    self.close_connection = True
                    return
                node.requests.append(req)
                self._answer(node.respond(req))
                self.close_connection = True

            do_GET = do_PUT = do_POST = do_DELETE = do_ANY

            def _take_body(self, req: Req) -> None:
                digest = hashlib.sha256()
                kept = bytearray() if node.keep_body else None

                def take(n: int) -> None:
                    while n > 0:
                        piece = self.rfile.read(min(n, MiB))
                        if not piece:
                            raise ConnectionError("the body broke off")
                        digest.update(piece)
                        if kept is not None:
                            kept.extend(piece)
                        req.size += len(piece)
                        n -= len(piece)

                if req.headers.get("transfer-encoding", "").lower() == "chunked":
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        req.largest_chunk = max(req.largest_chunk, size)
                        take(size)
                        self.rfile.readline()
                else:
                    take(int(req.headers.get("content-length", "0")))
                req.sha256 = digest.hexdigest()
                req.body = bytes(kept) if kept is not None else None

            def _answer(self, a: Answer) -> None:
                self.send_response(a.status)
                if a.chunks is None:
                    data = json.dumps(a.json).encode()
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_header("Content-Type", a.kind)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in a.chunks():
                    self.wfile.write(b"%X\r\n" % len(chunk) + chunk + b"\r\n")
                if a.break_off:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RefusingEarly:
    """A node that, as the real one past its stream bound, answers 413 after 1 MiB of the body
    and closes without reading the rest."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        body = b'{"error":"over 1048576 bytes: write a larger file in parts","reason":"file_size"}'
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rb") as f:
                while f.readline() not in (b"\r\n", b""):
                    pass
                got = 0
                while got < MiB:
                    piece = f.read(65536)
                    if not piece:
                        break
                    got += len(piece)
                conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json"
                             b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def close(self) -> None:
        self.sock.close()


def endless() -> Iterator[bytes]:
    while True:
        yield b"x" * MiB


class Recording(io.RawIOBase):
    """A binary file-like object of ``size`` bytes (made as they are read) that records the
    largest read asked of it."""

    def __init__(self, size: int, seed: bytes = b"x") -> None:
        self.left = size
        self.largest = 0
        self.reads = 0
        self.digest = hashlib.sha256()
        self.block = hashlib.sha256(seed).digest() * 2048  # 64 KiB

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        if n is None or n < 0:
            raise AssertionError("the whole body was asked for at once")
        self.largest = max(self.largest, n)
        self.reads += 1
        n = min(n, self.left)
        reps = n // len(self.block) + 1
        data = (self.block * reps)[:n]
        self.left -= n
        self.digest.update(data)
        return data


def tar_of(entries: list[tuple[tarfile.TarInfo, Optional[bytes]]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.linkname = link
    info.mtime = 1_700_000_000
    return info


def hostile_archive(outside: str) -> bytes:
    """Good entries among ones that try to leave the folder (``outside`` is an absolute path
    that must not be written)."""
    return tar_of([
        (entry("./", tarfile.DIRTYPE, 0o755), None),
        (entry("ok.txt", mode=0o640), b"fine"),
        (entry("sub", tarfile.DIRTYPE, 0o755), None),
        (entry("sub/run.sh", mode=0o755), b"#!/bin/sh\necho run\n"),
        (entry("again", tarfile.LNKTYPE, link="ok.txt"), None),
        (entry("../escape"), b"escaped"),
        (entry("sub/../../up"), b"up"),
        (entry(outside), b"absolute"),
        (entry("evil", tarfile.SYMTYPE, link="/etc/passwd"), None),
        (entry("evil2", tarfile.SYMTYPE, link="../../outside"), None),
        (entry("sub/inside", tarfile.SYMTYPE, link="run.sh"), None),
        (entry("hard", tarfile.LNKTYPE, link="/etc/passwd"), None),
        (entry("hard2", tarfile.LNKTYPE, link="../escape"), None),
        (entry("dev", tarfile.CHRTYPE), None),
        (entry("fifo", tarfile.FIFOTYPE), None),
        (entry("after.txt", mode=0o600), b"after"),
    ])


def files_under(root: str) -> dict[str, str]:
    """Every path under ``root`` (relative) and what it is."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(folder, name)
            st = os.lstat(p)
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
            found[os.path.relpath(p, root)] = kind
    return found


class Base(unittest.TestCase):
    def setUp(self) -> None:
        self.node = FakeNode()
        self.addCleanup(self.node.close)
        self.tmp = tempfile.mkdtemp(prefix="chorus-py-")
        self.addCleanup(lambda: __import__("shutil").rmtree(self.tmp, ignore_errors=True))
        self.sbx = Cluster(self.node.addr, "t0ken").sandbox("a-1")

    def last(self) -> Req:
        return self.node.requests[-1]


class StreamedUploads(Base):
    def test_a_file_like_archive_goes_chunked_and_is_read_a_piece_at_a_time(self) -> None:
        self.node.respond = lambda req: Answer(json={"path": "/w", "files": 3, "bytes": 9,
                                                     "skipped": {}, "skipped_more": 0})
        src = Recording(8 * MiB + 123)
        got = self.sbx.files.upload("/w", src)
        self.assertEqual(got["files"], 3)
        req = self.last()
        self.assertEqual((req.method, req.path, req.query), ("PUT", "/sandboxes/a-1/tree", {"path": "/w"}))
        self.assertEqual(req.headers.get("transfer-encoding"), "chunked")
        self.assertNotIn("content-length", req.headers)
        self.assertEqual(req.headers["content-type"], "application/x-tar")
        self.assertEqual(req.headers["authorization"], "Bearer t0ken")
        self.assertEqual((req.size, req.sha256), (8 * MiB + 123, src.digest.hexdigest()))
        self.assertLessEqual(src.largest, _stream.CHUNK, "a read asked for more than a chunk")
        self.assertGreaterEqual(src.reads, 32)
        self.assertLessEqual(req.largest_chunk, _stream.CHUNK)

    def test_bytes_still_go_whole_with_a_length(self) -> None:
        self.node.respond = lambda req: Answer(json={"files": 1})
        self.assertEqual(self.sbx.files.upload("/w", b"t" * 1024), {"files": 1})
        req = self.last()
        self.assertEqual(req.headers.get("content-length"), "1024")
        self.assertNotIn("transfer-encoding", req.headers)
        self.assertEqual(self.sbx.files.write("/w/a", "é"), 0)
        self.assertEqual((self.last().body, self.last().query), ("é".encode(), {"path": "/w/a"}))

    def test_64_mib_from_a_generator_is_never_held_whole(self) -> None:
        self.node.keep_body = False
        self.node.respond = lambda req: Answer(json={"path": "/w/big", "size": req.size})
        digest = hashlib.sha256()

        def pieces() -> Iterator[bytes]:
            for i in range(64):
                piece = bytes([i]) * MiB  # made as it is asked for
                digest.update(piece)
                yield piece

        tracemalloc.start()
        try:
            size = self.sbx.files.write("/w/big", pieces(), mode=0o600)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertEqual(size, 64 * MiB)
        req = self.last()
        self.assertEqual(req.query, {"path": "/w/big", "mode": "600"})
        self.assertEqual(req.headers.get("transfer-encoding"), "chunked")
        self.assertEqual(req.headers["content-type"], "application/octet-stream")
        self.assertEqual(req.sha256, digest.hexdigest())
        self.assertLess(peak, 12 * MiB, f"{peak / MiB:.1f} MiB held at once for 64 MiB sent")

    def test_a_source_that_fails_raises_its_own_error(self) -> None:
        class Failing(io.RawIOBase):
            def readable(self) -> bool:
                return True

            def read(self, n: int = -1) -> bytes:  # type: ignore[override]
                raise PermissionError("cannot read the source")

        with self.assertRaises(PermissionError):
            self.sbx.files.write("/w/x", Failing())
        with self.assertRaises(TypeError):
            self.sbx.files.write("/w/x", 42)  # type: ignore[arg-type]

    def test_refusals_are_raised_with_their_reason(self) -> None:
        self.node.respond = lambda req: Answer(413, {"error": "over 1073741824 bytes: send the "
                                                     "folder in parts", "reason": "file_size"})
        with self.assertRaises(Refused) as e:
            self.sbx.files.upload("/w", Recording(MiB))
        self.assertEqual((e.exception.status, e.exception.reason), (413, "file_size"))
        self.assertIn("in parts", e.exception.message)
        self.node.respond = lambda req: Answer(400, {"error": "not a tar archive: x",
                                                     "reason": "bad_tree"})
        with self.assertRaises(BadRequest) as bad:
            self.sbx.files.upload("/w", iter([b"not tar"]))
        self.assertEqual(bad.exception.reason, "bad_tree")

    def test_a_node_that_refuses_part_way_is_heard(self) -> None:
        node = RefusingEarly()
        self.addCleanup(node.close)
        with self.assertRaises(Refused) as e:
            Cluster(node.addr, "t0ken").sandbox("a-1").files.write("/w/x", endless())
        self.assertEqual((e.exception.status, e.exception.reason), (413, "file_size"))

    def test_a_folder_is_packed_on_the_fly_without_links_devices_or_fifos(self) -> None:
        self.node.respond = lambda req: Answer(json={"path": "/w", "files": 4, "bytes": 1,
                                                     "skipped": {}, "skipped_more": 0})
        src = os.path.join(self.tmp, "src")
        os.makedirs(os.path.join(src, "bin"))
        os.makedirs(os.path.join(src, "empty"))
        os.makedirs(os.path.join(src, "sub/deep"))
        with open(os.path.join(src, "a.txt"), "wb") as f:
            f.write(b"A")
        with open(os.path.join(src, "bin/run.sh"), "wb") as f:
            f.write(b"echo run\n")
        os.chmod(os.path.join(src, "bin/run.sh"), 0o4755)  # set-uid: dropped
        big = os.urandom(3 * MiB + 5)
        with open(os.path.join(src, "sub/deep/big.bin"), "wb") as f:
            f.write(big)
        os.chmod(os.path.join(src, "sub/deep/big.bin"), 0o600)
        os.symlink("/etc/passwd", os.path.join(src, "link"))
        os.symlink("bin", os.path.join(src, "dirlink"))
        os.mkfifo(os.path.join(src, "pipe"))
        sock = socket.socket(socket.AF_UNIX)
        self.addCleanup(sock.close)
        sock.bind(os.path.join(src, "sock"))
        os.close(os.open(os.path.join(os.fsencode(src), b"bad\xffname"), os.O_CREAT | os.O_WRONLY))

        got = self.sbx.files.upload_dir(src, "/w")

        self.assertEqual(got["files"], 4, got)
        self.assertEqual(got["left_out"], {
            "bad\ufffdname": "a name that is not UTF-8", "dirlink": "a symlink",
            "link": "a symlink", "pipe": "a fifo", "sock": "a socket"})
        self.assertEqual(got["left_out_more"], 0)
        req = self.last()
        self.assertEqual(req.headers.get("transfer-encoding"), "chunked")
        self.assertEqual(req.headers["content-type"], "application/x-tar")
        self.assertLessEqual(req.largest_chunk, _stream.CHUNK)
        assert req.body is not None
        with tarfile.open(fileobj=io.BytesIO(req.body)) as tar:
            members = {t.name.rstrip("/"): t for t in tar.getmembers()}
            self.assertEqual(sorted(members), ["a.txt", "bin", "bin/run.sh", "empty", "sub",
                                               "sub/deep", "sub/deep/big.bin"])
            self.assertTrue(members["empty"].isdir())
            self.assertEqual(members["bin/run.sh"].mode, 0o755)
            self.assertEqual(members["sub/deep/big.bin"].mode, 0o600)
            f = tar.extractfile(members["sub/deep/big.bin"])
            assert f is not None
            self.assertEqual(f.read(), big)

    def test_a_folder_that_is_not_there_is_said_before_any_call(self) -> None:
        with self.assertRaises(NotADirectoryError):
            self.sbx.files.upload_dir(os.path.join(self.tmp, "none"), "/w")
        self.assertEqual(self.node.requests, [])


class StreamedDownloads(Base):
    def serve(self, data: bytes, piece: int = 100_000, break_off: bool = False,
              kind: str = "application/x-tar") -> None:
        def chunks() -> Iterator[bytes]:
            for at in range(0, len(data), piece):
                yield data[at:at + piece]

        self.node.respond = lambda req: Answer(chunks=chunks, kind=kind, break_off=break_off)

    def test_a_file_is_written_out_as_it_comes(self) -> None:
        data = os.urandom(3 * MiB + 7)
        self.serve(data)
        out = io.BytesIO()
        self.assertEqual(self.sbx.files.read_to("/w/f.bin", out), len(data))
        self.assertEqual(out.getvalue(), data)
        self.assertEqual((self.last().path, self.last().query), ("/sandboxes/a-1/files", {"path": "/w/f.bin"}))
        out = io.BytesIO()
        self.assertEqual(self.sbx.files.download_to("/w", out), len(data))
        self.assertEqual(self.last().path, "/sandboxes/a-1/tree")

    def test_64_mib_are_never_held_whole(self) -> None:
        def chunks() -> Iterator[bytes]:
            for i in range(256):
                yield bytes([i]) * (256 * 1024)

        self.node.respond = lambda req: Answer(chunks=chunks)

        class Sink:
            n = 0

            def write(self, data: bytes) -> None:
                self.n += len(data)

        sink = Sink()
        tracemalloc.start()
        try:
            moved = self.sbx.files.download_to("/w", sink)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertEqual((moved, sink.n), (64 * MiB, 64 * MiB))
        self.assertLess(peak, 12 * MiB, f"{peak / MiB:.1f} MiB held at once for 64 MiB read")

    def test_an_answer_broken_off_is_an_error_not_a_short_file(self) -> None:
        self.serve(b"x" * 300_000, break_off=True)
        with self.assertRaises(ConnectError):
            self.sbx.files.read_to("/w/f", io.BytesIO())
        archive = tar_of([(entry("a.txt"), b"a" * 1000), (entry("b.txt"), b"b" * 200_000)])
        self.serve(archive[:150_000], break_off=True)
        with self.assertRaises(ConnectError):
            self.sbx.files.download_dir("/w", os.path.join(self.tmp, "cut"))
        self.serve(archive[:150_000])  # ended cleanly, but the archive is cut short
        with self.assertRaises(Exception) as e:
            self.sbx.files.download_dir("/w", os.path.join(self.tmp, "short"))
        self.assertEqual(getattr(e.exception, "reason", None), "bad_tree", e.exception)

    def test_a_refusal_before_the_first_byte_is_raised(self) -> None:
        self.node.respond = lambda req: Answer(404, {"error": "no such sandbox"})
        with self.assertRaises(NotFound):
            self.sbx.files.download_dir("/w", os.path.join(self.tmp, "d"))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "d")), "made before the answer")
        with self.assertRaises(NotFound):
            self.sbx.files.read_to("/w/x", io.BytesIO())

    def test_a_folder_is_unpacked_and_whatever_leaves_it_refused(self) -> None:
        variants = [("filter", _stream.HAS_DATA_FILTER), ("fallback", False)]
        for name, use_filter in variants:
            if name == "filter" and not use_filter:
                continue  # this Python has no extraction filters: the fallback is tested
            with self.subTest(name), mock.patch.object(_stream, "HAS_DATA_FILTER", use_filter):
                self._unpack_hostile(name)

    def _unpack_hostile(self, name: str) -> None:
        parent = os.path.join(self.tmp, name)
        dest = os.path.join(parent, "inner", "dest")
        outside = os.path.join(self.tmp, f"abs-{name}")
        self.serve(hostile_archive(outside), piece=777)
        got = self.sbx.files.download_dir("/w", dest)
        self.assertEqual(files_under(parent), {
            "inner": "dir", "inner/dest": "dir", "inner/dest/ok.txt": "file",
            "inner/dest/sub": "dir", "inner/dest/sub/run.sh": "file",
            "inner/dest/again": "file", "inner/dest/after.txt": "file"})
        self.assertFalse(os.path.lexists(outside))
        self.assertFalse(os.path.lexists(os.path.join(self.tmp, "escape")))
        self.assertEqual(got["skipped"], {
            "../escape": "a name that leaves the folder",
            "sub/../../up": "a name that leaves the folder",
            outside: "an absolute name",
            "evil": "a symlink", "evil2": "a symlink", "sub/inside": "a symlink",
            "hard": "a hard link to something not carried",
            "hard2": "a hard link to something not carried",
            "dev": "a device", "fifo": "a fifo"})
        self.assertEqual((got["files"], got["bytes"], got["skipped_more"]),
                         (4, len(b"fine") + len(b"#!/bin/sh\necho run\n") + len(b"after"), 0))
        at = lambda p: os.path.join(dest, p)  # noqa: E731
        with open(at("ok.txt"), "rb") as f:
            self.assertEqual(f.read(), b"fine")
        self.assertEqual(os.stat(at("again")).st_ino, os.stat(at("ok.txt")).st_ino)
        self.assertEqual(stat.S_IMODE(os.stat(at("sub/run.sh")).st_mode), 0o755)
        self.assertEqual(stat.S_IMODE(os.stat(at("ok.txt")).st_mode), 0o640)
        self.assertEqual(stat.S_IMODE(os.stat(at("after.txt")).st_mode), 0o600)
        self.assertEqual(int(os.stat(at("after.txt")).st_mtime), 1_700_000_000)

        # A link already in the folder that points out of it is not written through.
        os.makedirs(os.path.join(self.tmp, f"elsewhere-{name}"))
        os.symlink(os.path.join(self.tmp, f"elsewhere-{name}"), at("out"))
        self.serve(tar_of([(entry("out/planted"), b"x"), (entry("sub/run.sh", mode=0o700), b"new")]))
        got = self.sbx.files.download_dir("/w", dest)
        self.assertEqual(os.listdir(os.path.join(self.tmp, f"elsewhere-{name}")), [])
        self.assertEqual(list(got["skipped"]), ["out/planted"])
        with open(at("sub/run.sh"), "rb") as f:
            self.assertEqual(f.read(), b"new", "a file already there is replaced")


class AsyncStreams(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.node = FakeNode()
        self.addCleanup(self.node.close)
        self.tmp = tempfile.mkdtemp(prefix="chorus-py-async-")
        self.addCleanup(lambda: __import__("shutil").rmtree(self.tmp, ignore_errors=True))
        self.sbx = AsyncCluster(self.node.addr, "t0ken").sandbox("a-1")

    async def test_uploads_stream_from_files_and_async_iterables(self) -> None:
        self.node.respond = lambda req: Answer(json={"size": req.size, "files": 1})
        src = Recording(5 * MiB + 1)
        self.assertEqual(await self.sbx.files.write("/w/f", src, mode=0o755), 5 * MiB + 1)
        req = self.node.requests[-1]
        self.assertEqual(req.headers.get("transfer-encoding"), "chunked")
        self.assertEqual((req.query, req.sha256), ({"path": "/w/f", "mode": "755"}, src.digest.hexdigest()))
        self.assertLessEqual(src.largest, _stream.CHUNK)

        async def pieces() -> Any:
            for i in range(8):
                await asyncio.sleep(0)
                yield bytes([i]) * MiB

        got = await self.sbx.files.upload("/w", pieces())
        self.assertEqual(got["files"], 1)
        req = self.node.requests[-1]
        self.assertEqual((req.size, req.headers["content-type"]), (8 * MiB, "application/x-tar"))
        self.assertEqual(req.sha256, hashlib.sha256(b"".join(bytes([i]) * MiB for i in range(8))).hexdigest())
        # Bytes as before: whole, with a length.
        await self.sbx.files.upload("/w", b"t" * 10)
        self.assertEqual(self.node.requests[-1].headers.get("content-length"), "10")

    async def test_a_node_that_refuses_part_way_ends_the_upload(self) -> None:
        node = RefusingEarly()
        self.addCleanup(node.close)
        files = AsyncCluster(node.addr, "t0ken").sandbox("a-1").files

        async def pieces() -> Any:
            while True:
                yield b"x" * MiB

        # Its answer when asyncio kept what came before the reset (most often), else the reset.
        with self.assertRaises((Refused, ConnectError)) as e:
            await asyncio.wait_for(files.write("/w/x", pieces()), 30)
        if isinstance(e.exception, Refused):
            self.assertEqual(e.exception.reason, "file_size")

    async def test_a_folder_goes_up_and_comes_down(self) -> None:
        src = os.path.join(self.tmp, "src")
        os.makedirs(os.path.join(src, "d"))
        with open(os.path.join(src, "d/x.bin"), "wb") as f:
            f.write(os.urandom(MiB))
        os.symlink("d", os.path.join(src, "ln"))
        self.node.respond = lambda req: Answer(json={"path": "/w", "files": 1})
        got = await self.sbx.files.upload_dir(src, "/w")
        self.assertEqual((got["files"], got["left_out"]), (1, {"ln": "a symlink"}))
        sent = self.node.requests[-1].body
        assert sent is not None

        def chunks() -> Iterator[bytes]:
            for at in range(0, len(sent), 4096):
                yield sent[at:at + 4096]

        self.node.respond = lambda req: Answer(chunks=chunks, kind="application/x-tar")
        down = os.path.join(self.tmp, "down")
        got = await self.sbx.files.download_dir("/w", down)
        self.assertEqual((got["files"], got["bytes"], got["skipped"]), (1, MiB, {}))
        with open(os.path.join(src, "d/x.bin"), "rb") as a, open(os.path.join(down, "d/x.bin"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        out = io.BytesIO()
        self.assertEqual(await self.sbx.files.download_to("/w", out), len(sent))
        self.assertEqual(out.getvalue(), sent)

    async def test_hostile_archives_and_broken_answers(self) -> None:
        outside = os.path.join(self.tmp, "abs")
        archive = hostile_archive(outside)
        self.node.respond = lambda req: Answer(chunks=lambda: iter([archive]), kind="application/x-tar")
        dest = os.path.join(self.tmp, "dest")
        got = await self.sbx.files.download_dir("/w", dest)
        self.assertEqual(sorted(files_under(dest)), ["after.txt", "again", "ok.txt", "sub", "sub/run.sh"])
        self.assertIn("../escape", got["skipped"])
        self.assertFalse(os.path.lexists(outside))
        self.node.respond = lambda req: Answer(chunks=lambda: iter([archive[:5000]]), break_off=True)
        with self.assertRaises(ConnectError):
            await self.sbx.files.download_dir("/w", os.path.join(self.tmp, "cut"))
        with self.assertRaises(ConnectError):
            await self.sbx.files.read_to("/w/f", io.BytesIO())
        self.node.respond = lambda req: Answer(413, {"error": "too large", "reason": "file_size"})
        with self.assertRaises(Refused) as e:
            await self.sbx.files.upload_dir(os.path.join(self.tmp, "dest"), "/w")
        self.assertEqual(e.exception.reason, "file_size")


if __name__ == "__main__":
    unittest.main()
