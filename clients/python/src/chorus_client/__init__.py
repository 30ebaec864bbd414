"""A Python client of a CHORUS cluster's HTTP API: live sandboxes (create, run commands with
their output streamed, files, background processes, close) and tasks (submit, get, wait,
logs), blocking or with asyncio. Standard library only.

    from chorus_client import Cluster, Sandbox

    cluster = Cluster("127.0.0.1:7070", token="chorus_v1_submit_...")
    with Sandbox.create(cluster) as sbx:
        sbx.files.write("/workspace/hello.sh", "echo hello")
        print(sbx.run("sh /workspace/hello.sh").stdout)
"""

from ._async import AsyncCluster, AsyncFiles, AsyncSandbox, AsyncTasks
from ._conn import Endpoint, normalize_fingerprint
from ._model import (
    BackgroundProcess,
    CommandResult,
    FileEntry,
    LogChunk,
    ProcessInfo,
    SandboxInfo,
    SyncResult,
)
from ._sync import Cluster, Files, Sandbox, Tasks
from .errors import (
    BadRequest,
    ChorusError,
    CommandFailed,
    Conflict,
    ConnectError,
    Forbidden,
    LimitReached,
    NotFound,
    PinMismatch,
    ProtocolError,
    Refused,
    SandboxGone,
    Unauthorized,
    Unavailable,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncCluster",
    "AsyncFiles",
    "AsyncSandbox",
    "AsyncTasks",
    "BackgroundProcess",
    "BadRequest",
    "ChorusError",
    "Cluster",
    "CommandFailed",
    "CommandResult",
    "Conflict",
    "ConnectError",
    "Endpoint",
    "FileEntry",
    "Files",
    "Forbidden",
    "LimitReached",
    "LogChunk",
    "NotFound",
    "PinMismatch",
    "ProcessInfo",
    "ProtocolError",
    "Refused",
    "Sandbox",
    "SandboxGone",
    "SandboxInfo",
    "SyncResult",
    "Tasks",
    "Unauthorized",
    "Unavailable",
    "normalize_fingerprint",
]
