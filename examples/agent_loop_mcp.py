#!/usr/bin/env python3
"""The agent loop of agent_loop.py through the MCP server instead of the Python client: a
scripted "agent" (no LLM) that starts `chorus mcp` as an agent's host would, lists its tools,
and through them writes a program with a bug into a live sandbox, runs its tests, reads the
failure, fixes the file, runs the tests again, and closes the sandbox.

    CHORUS_ADDR=127.0.0.1:7070 CHORUS_TOKEN=chorus_v1_submit_... python3 examples/agent_loop_mcp.py

The MCP client here is a few lines of the standard library (JSON-RPC over the server's stdin and
stdout, one message a line), so nothing needs installing; a host such as Claude Desktop does the
same. `--chorus PROGRAM` names the chorus binary (default: CHORUS_BIN, else `chorus` on PATH).
Give an agent a `submit` token, never `manage`. Exits 0 when the tests failed first and passed
after the fix, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_loop import PROGRAM, TESTS, say  # noqa: E402  (the same program and tests)


class McpClient:
    """An MCP client over a server's stdio: requests answered in order, notifications ignored."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.next_id = 1

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if message.get("id") != rid:
                continue  # a notification or a request of the server's: not needed here
            if "error" in message:
                raise RuntimeError(f"{method}: {message['error']}")
            return message["result"]
        raise RuntimeError(f"the MCP server ended before answering {method}")

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """A tool's answer (its JSON); a tool error raises with the server's reason."""
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        text = "".join(c.get("text", "") for c in result.get("content", []))
        if result.get("isError"):
            raise RuntimeError(f"{tool}: {text}")
        structured = result.get("structuredContent")
        return structured if isinstance(structured, dict) else json.loads(text)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def run_tests(mcp: McpClient, sid: str) -> dict[str, Any]:
    say("running the tests in the sandbox (tool sandbox_exec)")
    out = mcp.call("sandbox_exec", id=sid, shell="sh /workspace/test_stats.sh",
                   cwd="/workspace", timeout_s=60)
    for line in out.get("stdout", "").splitlines():
        print("  | " + line, flush=True)
    for line in out.get("stderr", "").splitlines():
        print("  ! " + line, flush=True)
    return out


def fix(mcp: McpClient, sid: str, failure: str) -> bool:
    """What an LLM would do here, scripted: find the failing function, read the file through
    the tools, change its divisor, write it back."""
    m = re.search(r"FAIL (\w+): ", failure)
    if m is None:
        return False
    name = m.group(1)
    say(f"the test of `{name}` fails; reading stats.sh (tool sandbox_read_file)")
    source = mcp.call("sandbox_read_file", id=sid, path="/workspace/stats.sh")["content"]
    line = next((l for l in source.splitlines() if l.startswith(f"{name}()")), None)
    if line is None or "($# + 1)" not in line:
        return False
    fixed_line = line.replace("($# + 1)", "$#")
    say(f"fixing: {line.strip()!r} -> {fixed_line.strip()!r}")
    mcp.call("sandbox_write_file", id=sid, path="/workspace/stats.sh",
             content=source.replace(line, fixed_line), mode="755")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", default=os.environ.get("CHORUS_ADDR"),
                    help="a node's API (default: CHORUS_ADDR)")
    ap.add_argument("--chorus", default=os.environ.get("CHORUS_BIN", "chorus"),
                    help="the chorus program (default: CHORUS_BIN, else chorus on PATH)")
    args = ap.parse_args()
    argv = [args.chorus, "mcp"] + (["--addr", args.addr] if args.addr else [])
    mcp = McpClient(argv)  # the token reaches it as CHORUS_TOKEN, never on the command line
    try:
        mcp.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "chorus-example-agent", "version": "1"},
        })
        mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = [t["name"] for t in mcp.request("tools/list", {})["tools"]]
        say(f"{len(tools)} tools: {', '.join(tools)}")
        sid = mcp.call("sandbox_create", idle_timeout_s=300)["id"]
        say(f"sandbox {sid} (tool sandbox_create)")
        try:
            mcp.call("sandbox_write_file", id=sid, path="/workspace/stats.sh",
                     content=PROGRAM, mode="755")
            mcp.call("sandbox_write_file", id=sid, path="/workspace/test_stats.sh",
                     content=TESTS, mode="755")
            first = run_tests(mcp, sid)
            if first.get("exit_code") == 0:
                say("the tests passed at once: there was no bug to find")
                return 1
            say(f"the tests failed (exit {first.get('exit_code')})")
            if not fix(mcp, sid, first.get("stderr", "")):
                say("no fix for this failure")
                return 1
            second = run_tests(mcp, sid)
            if second.get("exit_code") != 0:
                say(f"the tests still fail after the fix (exit {second.get('exit_code')})")
                return 1
            say("the tests passed after the fix")
        finally:
            mcp.call("sandbox_close", id=sid)
            say(f"closed sandbox {sid} (tool sandbox_close)")
        return 0
    finally:
        mcp.close()


if __name__ == "__main__":
    sys.exit(main())
