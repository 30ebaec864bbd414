"""What the sync and async clients share: the results they return, the bodies they send and
how answers are read — no I/O here."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from .errors import ChorusError, ProtocolError, error_from_answer

Command = Union[str, Sequence[str]]
"""A command: a string runs as ``sh -c`` script, a list as argv (no shell)."""

OutputCallback = Callable[[str], Any]
"""Called with each piece of output as the node streams it (text; a piece need not end a
line)."""

DEFAULT_IMAGE = "chorus/sandbox:latest"
"""The image a task runs in when none is named: the project's own, which every worker has."""

DEFAULT_EXEC_TIMEOUT_S = 600.0
"""The node's timeout of a command that names none."""

MARGIN_S = 30.0
"""How long a call may take beyond what it waits for at the node."""

LOG_FOLLOW_WAIT_S = 20.0
"""How long the worker holds a follow read of a task's log with nothing new."""


@dataclass(frozen=True)
class SandboxInfo:
    """A live sandbox as the node describes it."""

    id: str
    worker: str
    sandbox: str
    idle_left_ms: int
    lifetime_left_ms: int

    @staticmethod
    def of(v: Mapping[str, Any]) -> "SandboxInfo":
        return SandboxInfo(
            id=str(v["id"]),
            worker=str(v.get("worker", "")),
            sandbox=str(v.get("sandbox", "")),
            idle_left_ms=int(v.get("idle_left_ms", 0)),
            lifetime_left_ms=int(v.get("lifetime_left_ms", 0)),
        )


@dataclass(frozen=True)
class SyncResult:
    """What a sync back of a sandbox's read-write repository did (``sync()``, and ``close()`` of
    such a sandbox): files written and deleted on the host, paths not carried (``refused``:
    under a ``.git``, a symlinked place; ``kept``: not a regular file in the sandbox), and why
    it stopped early, if it did. ``complete``: everything came back."""

    written: int
    deleted: int
    refused: list[str]
    kept: list[str]
    incomplete: Optional[str]
    complete: bool

    @staticmethod
    def of(v: Mapping[str, Any]) -> "SyncResult":
        return SyncResult(
            written=int(v.get("written", 0)),
            deleted=int(v.get("deleted", 0)),
            refused=[str(p) for p in v.get("refused") or []],
            kept=[str(p) for p in v.get("kept") or []],
            incomplete=v.get("incomplete"),
            complete=bool(v.get("complete", False)),
        )


def closed_sync(v: Any) -> Optional[SyncResult]:
    """A close's answer: the sync it did, none for a sandbox without a read-write repository;
    a failed sync raises."""
    if isinstance(v, dict) and v.get("sync_error"):
        raise ChorusError(
            200, "sync_failed",
            f"closed, but its repository was not synced back: {v['sync_error']}", v,
        )
    if isinstance(v, dict) and isinstance(v.get("sync"), dict):
        return SyncResult.of(v["sync"])
    return None


@dataclass(frozen=True)
class CommandResult:
    """How a command ended. A timeout or an out-of-memory kill is an ending like an exit, not
    an exception: ``exit_code`` is then ``None`` (timeout) or 137 (OOM), with ``timed_out`` or
    ``oom`` set. ``stdout``/``stderr`` are the output (decoded as UTF-8, bad bytes replaced;
    cut when the node says so)."""

    exit_code: Optional[int]
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: Optional[int] = None
    timed_out: bool = False
    oom: bool = False
    signal: Optional[int] = None
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        """The command exited 0."""
        return self.exit_code == 0

    @staticmethod
    def of(v: Mapping[str, Any], stdout: str = "", stderr: str = "") -> "CommandResult":
        code = v.get("exit_code")
        duration = v.get("duration_ms")
        signal = v.get("signal")
        return CommandResult(
            exit_code=int(code) if code is not None else None,
            stdout=str(v.get("stdout", stdout)),
            stderr=str(v.get("stderr", stderr)),
            stdout_truncated=bool(v.get("stdout_truncated", False)),
            stderr_truncated=bool(v.get("stderr_truncated", False)),
            duration_ms=int(duration) if duration is not None else None,
            timed_out=bool(v.get("timed_out", False)),
            oom=bool(v.get("oom", False)),
            signal=int(signal) if signal is not None else None,
            error=v.get("error"),
        )


@dataclass(frozen=True)
class BackgroundProcess:
    """A command started in the background: its pid (it leads its own process group) and the
    log file in the sandbox its output goes to."""

    pid: int
    log: str


@dataclass(frozen=True)
class ProcessInfo:
    """A process running in a sandbox."""

    pid: int
    pgid: int
    seconds: int
    command: str


@dataclass(frozen=True)
class FileEntry:
    """One entry of a directory in a sandbox. ``type``: ``file``, ``dir``, ``symlink`` or
    ``other``; ``mode`` the permission bits."""

    name: str
    path: str
    type: str
    size: int
    mode: int


@dataclass(frozen=True)
class LogChunk:
    """A read of one stream of a task's output at its worker."""

    data: bytes
    offset: int
    size: int
    attempt: int
    finished: bool
    cut_at: Optional[int] = None


def sandbox_path(id: str) -> str:
    if not id or not all(c.isascii() and (c.isalnum() or c in "._-") for c in id):
        raise ValueError(f"{id!r} is not a sandbox id")
    return f"/sandboxes/{id}"


def task_path(id: str) -> str:
    if not id or not all(c.isascii() and (c.isalnum() or c in "._-") for c in id):
        raise ValueError(f"{id!r} is not a task id")
    return f"/tasks/{id}"


def quote(s: str) -> str:
    """Every byte but unreserved characters and ``/`` as ``%XX`` (as the CLI does)."""
    return urllib.parse.quote(s, safe="/-._~")


def seconds_ms(s: Optional[float]) -> Optional[int]:
    if s is None:
        return None
    if s <= 0:
        raise ValueError(f"a duration of {s} s: give a positive number of seconds")
    return max(1, int(round(s * 1000)))


def limits(memory_mb: int, cpu_millis: int, pids: int) -> dict[str, int]:
    """The limits a sandbox or task asks for, as the API takes them (0: the worker's default,
    left out)."""
    asked = {"memory_mb": memory_mb, "cpu_millis": cpu_millis, "pids": pids}
    return {k: v for k, v in asked.items() if v}


def create_body(
    image: Optional[str],
    env: Optional[Mapping[str, str]],
    memory_mb: int,
    cpu_millis: int,
    pids: int,
    idle_timeout: Optional[float],
    lifetime: Optional[float],
    key: Optional[str],
    network: bool = False,
    requires: Optional[Sequence[str]] = None,
    repo: Optional[str] = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"env": dict(env or {})}
    if image is not None:
        body["image"] = image
    body.update(limits(memory_mb, cpu_millis, pids))
    if idle_timeout is not None:
        body["idle_timeout_ms"] = seconds_ms(idle_timeout)
    if lifetime is not None:
        body["lifetime_ms"] = seconds_ms(lifetime)
    if key is not None:
        body["key"] = key
    body.update(worker_asks(network, requires, repo))
    return body


def worker_asks(
    network: bool, requires: Optional[Sequence[str]], repo: Optional[str]
) -> dict[str, Any]:
    """What a sandbox or a task asks of its worker, as the API takes it (left out: not asked)."""
    asks: dict[str, Any] = {}
    if network:
        asks["network"] = True
    if requires:
        asks["requires"] = list(requires)
    if repo is not None:
        asks["repo"] = repo_body(repo)
    return asks


def repo_body(repo: str) -> dict[str, Any]:
    """``NAME``, ``NAME:ro`` or ``NAME:rw`` as the API takes it."""
    name, _, access = repo.partition(":")
    if access not in ("", "ro", "rw") or not name:
        raise ValueError(f"repo {repo!r}: NAME, NAME:ro or NAME:rw")
    return {"name": name, "writable": access == "rw"}


def exec_body(
    cmd: Command,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    stdin: Optional[str],
    timeout: Optional[float],
    background: bool,
    stream: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if isinstance(cmd, str):
        body["shell"] = cmd
    else:
        argv = [str(a) for a in cmd]
        if not argv:
            raise ValueError("an empty command: give a shell string or a non-empty argv")
        body["argv"] = argv
    if cwd is not None:
        body["cwd"] = cwd
    if env:
        body["env"] = dict(env)
    if stdin is not None:
        body["stdin"] = stdin
    if timeout is not None:
        body["timeout_ms"] = seconds_ms(timeout)
    if background:
        if stream:
            raise ValueError("a background command's output goes to its log: no callbacks")
        body["background"] = True
    if stream:
        body["stream"] = True
    return body


def exec_wait(timeout: Optional[float]) -> float:
    """How long an exec call may take: the command's timeout and a margin."""
    return (timeout if timeout is not None else DEFAULT_EXEC_TIMEOUT_S) + MARGIN_S


@dataclass(frozen=True)
class Raw:
    """A request body sent as it is, with its media type: a file's bytes, a tar archive."""

    data: bytes
    kind: str = "application/octet-stream"


def encode_body(body: Any) -> Optional[tuple[bytes, str]]:
    """A request body's bytes and ``Content-Type``: :class:`Raw` as it is, anything else JSON."""
    if body is None:
        return None
    if isinstance(body, Raw):
        return body.data, body.kind
    return json.dumps(body).encode("utf-8"), "application/json"


def file_query(path: str, mode: Optional[int]) -> str:
    """``PUT /sandboxes/{id}/files``' query for a raw body: the path and the octal mode."""
    return f"?path={quote(path)}" + ("" if mode is None else f"&mode={mode:o}")


def file_write(path: str, data: Union[bytes, str], mode: Optional[int]) -> tuple[str, Raw]:
    """``PUT /sandboxes/{id}/files``' query and raw body: the bytes as they are, no base64."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return file_query(path, mode), Raw(raw)


def listing_of(path: str, v: Mapping[str, Any]) -> list[FileEntry]:
    """``GET /sandboxes/{id}/ls``' answer as entries by name (none for a file)."""
    return sorted(
        (
            FileEntry(
                name=str(e.get("name", "")),
                path=path.rstrip("/") + "/" + str(e.get("name", "")),
                type=str(e.get("kind", "other")),
                size=int(e.get("size", 0)),
                mode=int(e.get("mode", 0)),
            )
            for e in v.get("entries") or []
        ),
        key=lambda e: e.name,
    )




def parse_processes(v: Mapping[str, Any]) -> list[ProcessInfo]:
    return [
        ProcessInfo(int(p["pid"]), int(p["pgid"]), int(p["seconds"]), str(p["command"]))
        for p in v.get("processes", [])
    ]


def submit_body(
    command: Command,
    image: Optional[str],
    env: Optional[Mapping[str, str]],
    secret_env: Optional[Mapping[str, str]],
    workdir: Optional[str],
    timeout: Optional[float],
    memory_mb: int,
    cpu_millis: int,
    pids: int,
    network: bool,
    requires: Optional[Sequence[str]],
    repo: Optional[str],
    key: Optional[str],
) -> dict[str, Any]:
    argv = ["sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
    if not argv:
        raise ValueError("an empty command")
    body: dict[str, Any] = {"image": image or DEFAULT_IMAGE, "command": argv}
    if env:
        body["env"] = dict(env)
    if secret_env:
        body["secret_env"] = dict(secret_env)
    if workdir is not None:
        body["workdir"] = workdir
    if timeout is not None:
        body["timeout_ms"] = seconds_ms(timeout)
    body.update(limits(memory_mb, cpu_millis, pids))
    body.update(worker_asks(network, requires, repo))
    if key is not None:
        body["key"] = key
    return body


def run_of(view: Mapping[str, Any]) -> Optional[tuple[str, int]]:
    """The run whose output a task's view points at: (worker, attempt) of its result, or of the
    run going; none before it ran (or cancelled before it ran)."""
    result = view.get("result")
    if isinstance(result, dict):
        if result.get("status") == "cancelled" and not result.get("attempt"):
            return None
        worker, attempt = result.get("worker"), result.get("attempt")
        if worker and attempt:
            return str(worker), int(attempt)
        return None
    worker, attempt = view.get("worker"), view.get("attempt")
    if worker and attempt:
        return str(worker), int(attempt)
    return None


def log_query(id: str, stream: str, attempt: int, offset: int, follow: bool) -> str:
    if stream not in ("stdout", "stderr"):
        raise ValueError(f"stream {stream!r}: stdout or stderr")
    return (
        f"{task_path(id)}/logs?stream={stream}&offset={offset}&attempt={attempt}"
        f"&follow={'true' if follow else 'false'}"
    )


def log_chunk(headers: Mapping[str, str], body: bytes) -> LogChunk:
    def num(name: str, default: int = 0) -> int:
        v = headers.get(name)
        return int(v) if v is not None and v.isdigit() else default

    cut = headers.get("chorus-log-cut-at")
    return LogChunk(
        data=body,
        offset=num("chorus-log-offset"),
        size=num("chorus-log-size"),
        attempt=num("chorus-log-attempt"),
        finished=headers.get("chorus-log-finished") == "true",
        cut_at=int(cut) if cut is not None and cut.isdigit() else None,
    )


def json_of(status: int, body: bytes, where: str) -> Any:
    """The JSON of a 2xx answer; the node's error as an exception otherwise."""
    if not 200 <= status < 300:
        raise error_from_answer(status, body, where)
    try:
        return json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(status, None, f"{where} answered {status} with no JSON: {e}") from e


def parse_stream_line(line: bytes, where: str) -> Optional[tuple[str, Any]]:
    """One NDJSON line of a streaming exec: ``("stdout", text)``, ``("stderr", text)`` or
    ``("exit", the exit's JSON)``; ``None`` for a blank line; an error line raises the node's
    error."""
    line = line.strip()
    if not line:
        return None
    try:
        v = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(200, None, f"{where}: a stream line is not JSON: {e}") from e
    for kind in ("stdout", "stderr", "exit"):
        if kind in v:
            return kind, v[kind]
    if "error" in v:
        body = json.dumps({"error": v["error"]}).encode()
        raise error_from_answer(int(v.get("status", 500)), body, where)
    raise ProtocolError(200, None, f"{where}: an unknown stream line {v!r}")


def stream_line(
    line: bytes,
    on_stdout: Optional[OutputCallback],
    on_stderr: Optional[OutputCallback],
    out: list[str],
    err: list[str],
    where: str,
) -> Optional[CommandResult]:
    """Takes one line of a streaming exec: output goes to its callback, the exit line makes
    the result."""
    parsed = parse_stream_line(line, where)
    if parsed is None:
        return None
    kind, value = parsed
    if kind == "exit":
        return CommandResult.of(value, "".join(out), "".join(err))
    (out if kind == "stdout" else err).append(value)
    cb = on_stdout if kind == "stdout" else on_stderr
    if cb is not None:
        cb(value)
    return None


def whole_stream(
    lines: list[bytes],
    on_stdout: Optional[OutputCallback],
    on_stderr: Optional[OutputCallback],
    where: str,
) -> CommandResult:
    """A streaming exec answered whole (a forwarded one arrives at its end)."""
    out: list[str] = []
    err: list[str] = []
    for line in lines:
        done = stream_line(line, on_stdout, on_stderr, out, err, where)
        if done is not None:
            return done
    raise ProtocolError(200, None, f"{where}: the stream ended without the command's exit")
