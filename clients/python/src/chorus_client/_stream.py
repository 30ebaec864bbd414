"""What moves as it comes, shared by the blocking and the asyncio client: request bodies sent as
they are read (a file-like object, an iterable of chunks, a local folder packed as a tar
archive while it is walked) and tar archives unpacked as they arrive — never held whole, no
temporary file. Local I/O only; the network is the transports' (``_sync``, ``_async``).

The rules are the node's own (``io/src/sandbox/tree_stream.rs``) and the CLI's
(``chorus sandbox cp``, ``node/src/cli/live.rs``): a folder moves as its folders, regular files
(their permission bits) and hard links among them; symbolic links, devices, fifos, sockets,
names that are not UTF-8 and names that leave the folder are left out and said by name."""

from __future__ import annotations

import asyncio
import inspect
import os
import queue
import stat
import tarfile
import threading
from typing import Any, AsyncIterator, Generator, Iterable, Optional, Protocol, Union, cast

from .errors import ConnectError, ProtocolError

CHUNK = 256 * 1024
"""The size of the pieces a body is read and sent in (as the CLI's), and an answer read in."""

MAX_LISTED = 1000
"""Names listed as left out at most (the rest counted), as the node lists what it skipped."""

MAX_TRAILER = 1 << 20
"""What is read of an answer past its archive's end, at most (a writer pads to a record)."""

HAS_DATA_FILTER = hasattr(tarfile, "data_filter")
"""Whether this Python's ``tarfile`` has extraction filters (3.12, and 3.9.17 / 3.10.12 /
3.11.4 on); without them an equivalent check here does the same."""


class Readable(Protocol):
    """A binary file-like object: ``read(n)`` returns at most ``n`` bytes, ``b""`` at its end."""

    def read(self, n: int = ..., /) -> bytes: ...


class Writable(Protocol):
    """A binary file-like object one writes to."""

    def write(self, data: bytes, /) -> Any: ...


BodySource = Union[Readable, Iterable[bytes]]
"""What a streamed body is read from: a binary file-like object, or an iterable of bytes."""


def is_bytes(data: Any) -> bool:
    return isinstance(data, (bytes, bytearray, memoryview))


def _piece(data: Any) -> bytes:
    if isinstance(data, (bytes, bytearray)):
        return data  # type: ignore[return-value]
    if isinstance(data, str):
        raise TypeError("a streamed body is bytes: open the file in binary mode ('rb')")
    return bytes(memoryview(data))


class Stream:
    """A request body sent as it is read, in chunks (``Transfer-Encoding: chunked``), never
    held whole. ``source``: an object with ``read(n)`` (binary; read :data:`CHUNK` bytes at a
    time), or an iterable of bytes-like chunks (the asyncio client also takes an async
    iterable). What the source raised is kept in ``failed``: the transport raises it as it is
    (the caller's own error), not as a broken connection. ``owned``: the source is a generator
    of this client's (a folder's packing), closed when the body ends, sent whole or not."""

    def __init__(
        self, source: Any, kind: str = "application/octet-stream", owned: bool = False
    ) -> None:
        if isinstance(source, str):
            raise TypeError("a streamed body is bytes or a binary file-like object, not str")
        if not hasattr(source, "read") and not hasattr(source, "__iter__") and not hasattr(
            source, "__aiter__"
        ):
            raise TypeError(
                f"{type(source).__name__}: give bytes, a binary file-like object (read(n)) or "
                "an iterable of bytes chunks"
            )
        self.source = source
        self.kind = kind
        self.owned = owned
        self.failed: Optional[BaseException] = None
        self.sent = 0

    def chunks(self) -> Generator[bytes, None, None]:
        """The body's chunks, read one at a time (empty ones dropped)."""
        src = self.source
        try:
            if hasattr(src, "read"):
                while True:
                    data = src.read(CHUNK)
                    if not data:
                        return
                    data = _piece(data)
                    self.sent += len(data)
                    yield data
            else:
                for data in src:
                    data = _piece(data)
                    if data:
                        self.sent += len(data)
                        yield data
        except Exception as e:
            self.failed = e
            raise
        finally:
            if self.owned:
                src.close()

    async def achunks(self) -> AsyncIterator[bytes]:
        """The body's chunks for the asyncio client: an async iterable's (or an object whose
        ``read`` is a coroutine function) as they come; a blocking source's (a file, an
        iterable, a folder being packed) read on a worker thread, so the event loop runs on."""
        src = self.source
        try:
            if hasattr(src, "__aiter__"):
                async for data in src:
                    data = _piece(data)
                    if data:
                        self.sent += len(data)
                        yield data
                return
            if inspect.iscoroutinefunction(getattr(src, "read", None)):
                while True:
                    data = await src.read(CHUNK)
                    if not data:
                        return
                    data = _piece(data)
                    self.sent += len(data)
                    yield data
        except Exception as e:
            self.failed = e
            raise
        loop = asyncio.get_running_loop()
        it = self.chunks()  # records its own failure
        try:
            while True:
                data = await loop.run_in_executor(None, next, it, None)
                if data is None:
                    return
                yield data
        finally:
            try:
                await loop.run_in_executor(None, it.close)  # a packer's thread ends
            except ValueError:
                pass  # still running on its thread (cancelled): it ends when it sees why


def bounded_insert(listed: dict[str, str], counts: dict[str, int], name: str, why: str) -> None:
    """Lists ``name`` as left out (``why``), within :data:`MAX_LISTED`; past it, counted."""
    if len(listed) >= MAX_LISTED:
        counts["more"] = counts.get("more", 0) + 1
    else:
        listed[name] = why


def _kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "an entry of another kind"


class _Stopped(Exception):
    """The body's reader went away (the node answered, or the connection broke)."""


class _Pipe:
    """Where ``tarfile`` (stream mode ``w|``) writes: chunks of :data:`CHUNK` bytes handed to
    the sender through a queue of a few, so at most a few chunks are ever held."""

    def __init__(self) -> None:
        self.q: "queue.Queue[Any]" = queue.Queue(maxsize=4)
        self.buf = bytearray()
        self.stopped = threading.Event()

    def put(self, item: Any) -> None:
        while True:
            if self.stopped.is_set():
                raise _Stopped("the node stopped taking the folder")
            try:
                self.q.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def write(self, data: bytes) -> int:
        self.buf += data
        while len(self.buf) >= CHUNK:
            self.put(bytes(self.buf[:CHUNK]))
            del self.buf[:CHUNK]
        return len(data)

    def flush(self) -> None:
        pass


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class DirPacker:
    """A local folder as a tar archive made while it is walked and sent: :meth:`chunks` is the
    body. Kept: folders and regular files (names relative to the folder, their permission
    bits, set-id bits dropped, their modification times); not followed and left out, listed
    in ``left_out`` (name → what it is, at most :data:`MAX_LISTED`; ``left_out_more`` counts
    the rest): symbolic links, devices, fifos, sockets, names that are not UTF-8. A folder or
    file that cannot be read fails the upload with its own ``OSError``."""

    def __init__(self, local_dir: Union[str, "os.PathLike[str]"]) -> None:
        self.root = os.fspath(local_dir)
        if not os.path.isdir(self.root):
            raise NotADirectoryError(f"{self.root} is not a folder")
        self.left_out: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    @property
    def left_out_more(self) -> int:
        return self._counts.get("more", 0)

    def chunks(self) -> Generator[bytes, None, None]:
        """The archive's chunks, packed on a thread of its own as they are taken."""
        pipe = _Pipe()

        def run() -> None:
            try:
                self._pack(pipe)
                if pipe.buf:
                    pipe.put(bytes(pipe.buf))
                pipe.put(None)
            except _Stopped:
                pass
            except BaseException as e:  # handed to the sender, raised there
                try:
                    pipe.put(_Failed(e))
                except _Stopped:
                    pass

        packer = threading.Thread(target=run, name="chorus-pack", daemon=True)
        packer.start()
        try:
            while True:
                item = pipe.q.get()
                if item is None:
                    return
                if isinstance(item, _Failed):
                    raise item.error
                yield item
        finally:
            pipe.stopped.set()
            packer.join(5)

    def _pack(self, pipe: _Pipe) -> None:
        with tarfile.open(
            fileobj=cast(Any, pipe), mode="w|", format=tarfile.GNU_FORMAT, encoding="utf-8"
        ) as tar:
            todo = [(self.root, "")]
            while todo:
                folder, rel = todo.pop()
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
                for entry in entries:
                    name = f"{rel}/{entry.name}" if rel else entry.name
                    try:
                        name.encode("utf-8")
                    except UnicodeEncodeError:
                        shown = os.fsencode(name).decode("utf-8", "replace")
                        bounded_insert(self.left_out, self._counts, shown,
                                       "a name that is not UTF-8")
                        continue
                    st = entry.stat(follow_symlinks=False)  # a link is not followed
                    info = tarfile.TarInfo(name)
                    info.mode = stat.S_IMODE(st.st_mode) & 0o777
                    info.mtime = max(0, int(st.st_mtime))
                    if stat.S_ISDIR(st.st_mode):
                        info.type = tarfile.DIRTYPE
                        tar.addfile(info)
                        todo.append((entry.path, name))
                    elif stat.S_ISREG(st.st_mode):
                        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                        flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
                        fd = os.open(entry.path, flags)
                        with os.fdopen(fd, "rb") as f:
                            # The size when opened; a file that shrinks meanwhile fails the
                            # upload ("unexpected end of data"), one that grows is cut there.
                            info.size = os.fstat(f.fileno()).st_size
                            info.type = tarfile.REGTYPE
                            tar.addfile(info, f)
                    else:
                        bounded_insert(self.left_out, self._counts, name, _kind_of(st.st_mode))


def clean_name(name: str) -> Optional[str]:
    """A name inside the folder, as the node makes it (``./`` and empty parts dropped), or
    ``None`` for one that leaves it: absolute, with ``..``, or with a separator of this
    system's other than ``/``."""
    if name.startswith("/") or (os.sep != "/" and name.startswith(os.sep)):
        return None
    parts = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == ".." or os.sep in part or (os.altsep and os.altsep in part):
            return None
        if os.path.splitdrive(part)[0]:
            return None
        parts.append(part)
    return "/".join(parts)


class AnswerReader:
    """An answer's body as a blocking reader for ``tarfile``: a read that breaks off raises
    :class:`ConnectError` (a part is never taken for the whole)."""

    def __init__(self, read: Any, where: str) -> None:
        self._read = read
        self.where = where

    def read(self, n: int = CHUNK) -> bytes:
        try:
            return bytes(self._read(n))
        except ConnectError:
            raise
        except Exception as e:
            raise ConnectError(f"the answer of {self.where} broke off: {e!r}") from e


def _inside(dest: str, target: str) -> bool:
    real = os.path.realpath(target)
    try:
        return os.path.commonpath([real, dest]) == dest
    except ValueError:
        return False


def unpack(
    reader: Readable, local_dir: Union[str, "os.PathLike[str]"], where: str
) -> dict[str, Any]:
    """Unpacks the tar archive ``reader`` yields under ``local_dir`` (made if missing) as it
    comes (``tarfile`` stream mode ``r|``): folders, regular files (their permission bits as
    ``tarfile``'s ``data`` filter leaves them: no group/other write, no set-id bits, readable
    and writable by their owner) and hard links to a file unpacked earlier from the same
    archive. Left out, listed in ``skipped`` (name → why; at most :data:`MAX_LISTED`,
    ``skipped_more`` counts the rest): absolute names, names with ``..``, names that reach out
    of ``local_dir`` through a link already there, symbolic links (wherever they point),
    hard links to anything else, devices, fifos, names that are not UTF-8. Files already there
    are replaced, others kept. Uses the ``data`` extraction filter where this Python has it
    (:data:`HAS_DATA_FILTER`), the same checks here otherwise."""
    root = os.fspath(local_dir)
    os.makedirs(root, exist_ok=True)
    dest = os.path.realpath(root)
    skipped: dict[str, str] = {}
    counts: dict[str, int] = {}
    done: dict[str, Any] = {"path": root, "files": 0, "bytes": 0}
    kept: set[str] = set()

    def skip(name: str, why: str) -> None:
        shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        bounded_insert(skipped, counts, shown, why)

    try:
        tar = tarfile.open(
            fileobj=cast(Any, reader), mode="r|", encoding="utf-8", errors="surrogateescape"
        )
    except tarfile.ReadError as e:
        raise ProtocolError(
            200, "bad_tree", f"{where}: the answer is not a tar archive: {e}"
        ) from e
    with tar:
        try:
            _unpack_members(tar, dest, kept, done, skip)
        except tarfile.ReadError as e:
            raise ProtocolError(
                200, "bad_tree", f"{where}: the archive is damaged or cut short: {e}"
            ) from e
    # The rest of the answer (a record's padding) read to its end: an answer broken off after
    # the archive's last entry is not taken for a whole one either.
    trailer = 0
    while trailer <= MAX_TRAILER:
        got = reader.read(CHUNK)
        if not got:
            break
        trailer += len(got)
    done["skipped"] = skipped
    done["skipped_more"] = counts.get("more", 0)
    return done


def _unpack_members(
    tar: tarfile.TarFile,
    dest: str,
    kept: set[str],
    done: dict[str, Any],
    skip: Any,
) -> None:
    """The archive's members, one at a time, as :func:`unpack` says."""
    while True:
        member = tar.next()
        if member is None:
            break
        cast(Any, tar).members.clear()  # stream mode keeps every member seen: not here
        raw = member.name
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:
            skip(raw, "a name that is not UTF-8")
            continue
        name = clean_name(raw)
        if name is None:
            skip(raw, "an absolute name" if raw.startswith("/") else
                 "a name that leaves the folder")
            continue
        if not name:
            continue  # `.`: the folder itself
        target = os.path.join(dest, *name.split("/"))
        if not _inside(dest, target) or not _inside(dest, os.path.dirname(target)):
            skip(name, "a name that leaves the folder (through a link there)")
            continue
        if member.isdir():
            os.makedirs(target, exist_ok=True)
        elif member.isreg():
            if HAS_DATA_FILTER:
                member.name = name
                try:
                    tar.extract(member, dest, set_attrs=True, filter="data")
                except tarfile.FilterError as e:  # checked above; the filter's word too
                    skip(name, str(e))
                    continue
            else:
                _write_file(tar, member, target)
            kept.add(name)
            done["files"] += 1
            done["bytes"] += member.size
        elif member.islnk():
            to = clean_name(member.linkname)
            if not to or to not in kept:
                skip(name, "a hard link to something not carried")
                continue
            source = os.path.join(dest, *to.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.lexists(target) and not os.path.isdir(target):
                os.unlink(target)
            os.link(source, target)
            kept.add(name)
            done["files"] += 1
        elif member.issym():
            skip(name, "a symlink")
        elif member.ischr() or member.isblk():
            skip(name, "a device")
        elif member.isfifo():
            skip(name, "a fifo")
        else:
            skip(name, "an entry of another kind")


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, target: str) -> None:
    """A regular file written as the ``data`` filter would have ``tarfile`` write it: not
    through a link at its place, its mode without group/other write or set-id bits, readable
    and writable by its owner, its modification time."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    mode = member.mode & 0o755
    if not mode & 0o100:
        mode &= ~0o111
    mode |= 0o600
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    src = tar.extractfile(member)
    assert src is not None
    fd = os.open(target, flags, 0o600)
    with os.fdopen(fd, "wb") as out:
        left = member.size
        while left > 0:
            data = src.read(min(CHUNK, left))
            if not data:
                raise tarfile.ReadError("unexpected end of data")
            out.write(data)
            left -= len(data)
    os.chmod(target, mode)
    os.utime(target, (member.mtime, member.mtime))
