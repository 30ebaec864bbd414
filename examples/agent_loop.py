#!/usr/bin/env python3
"""An agent loop without an LLM: a scripted "agent" that writes a small program with a bug
into a CHORUS live sandbox, runs its tests there, reads the failure, fixes the file, runs the
tests again, and closes the sandbox — the loop a coding agent runs, through the Python client
(clients/python).

    CHORUS_ADDR=127.0.0.1:7070 CHORUS_TOKEN=chorus_v1_submit_... python3 examples/agent_loop.py

The node address and token come from CHORUS_ADDR and CHORUS_TOKEN (or --addr/--token); give an
agent a `submit` token, never `manage`. Exits 0 when the tests failed first and passed after the
fix, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

try:
    from chorus_client import Cluster, CommandResult, Sandbox
except ImportError:  # run from a checkout without `pip install ./clients/python`
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "clients", "python", "src"))
    from chorus_client import Cluster, CommandResult, Sandbox

# The program the agent writes first: `mean` divides by one too many.
PROGRAM = """\
#!/bin/sh
# stats.sh: small statistics over the numbers given as arguments.
sum() { s=0; for n in "$@"; do s=$((s + n)); done; echo "$s"; }
mean() { echo $(( $(sum "$@") / ($# + 1) )); }
max() { m=$1; for n in "$@"; do [ "$n" -gt "$m" ] && m=$n; done; echo "$m"; }
"""

TESTS = """\
#!/bin/sh
# The tests: each prints ok or FAIL with what it expected; exits 1 on any failure.
. /workspace/stats.sh
failed=0
check() {
    name=$1; want=$2; shift 2
    got=$("$@")
    if [ "$got" = "$want" ]; then echo "ok   $name"
    else echo "FAIL $name: $* gave $got, expected $want" >&2; failed=1; fi
}
check sum  10 sum 1 2 3 4
check mean 4  mean 2 4 6
check max  9  max 3 9 2
exit $failed
"""


def say(text: str) -> None:
    print(f"agent: {text}", flush=True)


def run_tests(sbx: Sandbox) -> CommandResult:
    say("running the tests in the sandbox")
    return sbx.run(
        "sh /workspace/test_stats.sh",
        cwd="/workspace",
        timeout=60,
        on_stdout=lambda s: print("  | " + s.rstrip("\n").replace("\n", "\n  | "), flush=True),
        on_stderr=lambda s: print("  ! " + s.rstrip("\n").replace("\n", "\n  ! "), flush=True),
    )


def fix(sbx: Sandbox, failure: str) -> bool:
    """What an LLM would do here, scripted: find the failing function, read the file, change
    its divisor, write it back. False when the failure is not one this agent knows."""
    m = re.search(r"FAIL (\w+): ", failure)
    if m is None:
        return False
    name = m.group(1)
    say(f"the test of `{name}` fails; reading stats.sh")
    source = sbx.files.read_text("/workspace/stats.sh")
    line = next((l for l in source.splitlines() if l.startswith(f"{name}()")), None)
    if line is None or "($# + 1)" not in line:
        return False
    fixed_line = line.replace("($# + 1)", "$#")
    say(f"fixing: {line.strip()!r} -> {fixed_line.strip()!r}")
    sbx.files.write("/workspace/stats.sh", source.replace(line, fixed_line))
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", default=None, help="a node's API (default: CHORUS_ADDR)")
    ap.add_argument("--token", default=None, help="an API token (default: CHORUS_TOKEN)")
    args = ap.parse_args()
    cluster = Cluster(args.addr, args.token)
    with Sandbox.create(cluster, idle_timeout=300) as sbx:
        say(f"sandbox {sbx.id} on {sbx.worker or 'its worker'}")
        sbx.files.write("/workspace/stats.sh", PROGRAM, mode=0o755)
        sbx.files.write("/workspace/test_stats.sh", TESTS, mode=0o755)
        say("wrote " + ", ".join(e.name for e in sbx.files.list("/workspace")))
        first = run_tests(sbx)
        if first.ok:
            say("the tests passed at once: there was no bug to find")
            return 1
        say(f"the tests failed (exit {first.exit_code})")
        if not fix(sbx, first.stderr):
            say("no fix for this failure")
            return 1
        second = run_tests(sbx)
        if not second.ok:
            say(f"the tests still fail after the fix (exit {second.exit_code})")
            return 1
        say("the tests passed after the fix")
    say(f"closed sandbox {sbx.id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
