"""What the tests share: the nodes they talk to, named by environment variables that the Rust
runner (tests/tests/e2e_agents/python.rs) sets after starting real nodes.

- CHORUS_TEST_ADDR, CHORUS_TEST_ADDR_2: two nodes of a three-node cluster running Docker
  sandboxes; CHORUS_TEST_TOKEN and CHORUS_TEST_OTHER_TOKEN: two `submit` tokens of it;
- CHORUS_TEST_TLS_ADDR (https://HOST:PORT, no pin), CHORUS_TEST_TLS_FINGERPRINT,
  CHORUS_TEST_TLS_TOKEN, CHORUS_TEST_TLS_CERT (its certificate's PEM file): a lone node serving
  its API over TLS.

Without them the tests that need nodes skip — unless CHORUS_TEST_REQUIRED is set (the runner
sets it), where a missing one is an error."""

from __future__ import annotations

import os
import time
import unittest
from typing import Callable, Optional, TypeVar

T = TypeVar("T")


def env(name: str) -> str:
    value = os.environ.get(name)
    if value:
        return value
    if os.environ.get("CHORUS_TEST_REQUIRED"):
        raise RuntimeError(f"{name} is not set, and CHORUS_TEST_REQUIRED says it must be")
    raise unittest.SkipTest(
        f"{name} is not set: these tests run against real nodes; "
        "`cargo test -p chorus-tests --test e2e e2e_agents::python` starts them and sets it"
    )


def wait_until(check: Callable[[], Optional[T]], timeout: float = 20.0, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got is not None and got is not False:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)
