"""What needs no node: addresses, fingerprints, tokens, and reading the node's answers."""

from __future__ import annotations

import os
import unittest
from unittest import mock

from chorus_client import (
    BadRequest,
    ChorusError,
    CommandResult,
    Endpoint,
    LimitReached,
    NotFound,
    SandboxGone,
    Unavailable,
    normalize_fingerprint,
)
from chorus_client import _model as m
from chorus_client._conn import choose_token
from chorus_client.errors import error_from_answer


class Addresses(unittest.TestCase):
    def test_addresses_parse_as_the_cli_parses_them(self) -> None:
        plain = Endpoint.parse("127.0.0.1:7070")
        self.assertEqual((plain.tls, plain.host, plain.port, plain.pin), (False, "127.0.0.1", 7070, None))
        self.assertEqual(Endpoint.parse("http://127.0.0.1:7070/"), plain)
        fp = "AB:" * 31 + "AB"
        tls = Endpoint.parse(f"https://[::1]:7443#sha256={fp}")
        self.assertTrue(tls.tls)
        self.assertEqual((tls.host, tls.host_port, tls.pin), ("::1", "[::1]:7443", "ab" * 32))
        for bad in ["ftp://h:1", "h", "h:notaport", "http://h:1/tasks", ":80",
                    "https://h:1#md5=00", "https://h:1#sha256=abc", "h:70000"]:
            with self.assertRaises(ValueError, msg=bad):
                Endpoint.parse(bad)

    def test_fingerprints_are_64_hex_digits_colons_allowed(self) -> None:
        self.assertEqual(normalize_fingerprint(" " + "0A" * 32 + " "), "0a" * 32)
        for bad in ["", "0a" * 31, "zz" * 32, "0a" * 33]:
            with self.assertRaises(ValueError):
                normalize_fingerprint(bad)


class Tokens(unittest.TestCase):
    def test_the_token_comes_from_the_argument_then_the_environment_then_a_file(self) -> None:
        with mock.patch.dict(os.environ, {"CHORUS_TOKEN": "from-env"}, clear=False):
            self.assertEqual(choose_token("given", None), "given")
            self.assertEqual(choose_token(None, None), "from-env")
        with mock.patch.dict(os.environ, {}, clear=True):
            import tempfile
            with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as f:
                f.write("from-file\n")
            try:
                self.assertEqual(choose_token(None, f.name), "from-file")
                with mock.patch.dict(os.environ, {"CHORUS_TOKEN_FILE": f.name}):
                    self.assertEqual(choose_token(None, None), "from-file")
            finally:
                os.unlink(f.name)
            with self.assertRaises(ValueError):
                choose_token("two words", None)
            with self.assertRaises(ValueError):
                choose_token("a\r\nHost: evil", None)


class Answers(unittest.TestCase):
    def test_errors_carry_the_status_reason_and_message(self) -> None:
        gone = error_from_answer(
            410,
            b'{"error":"the sandbox is gone: closed","gone":{"reason":"closed","detail":"closed","ago_ms":12}}',
        )
        self.assertIsInstance(gone, SandboxGone)
        assert isinstance(gone, SandboxGone)
        self.assertEqual((gone.status, gone.reason, gone.ago_ms), (410, "closed", 12))
        self.assertIn("gone", gone.message)
        full = error_from_answer(429, b'{"error":"8 of 8","reason":"per_owner"}')
        self.assertIsInstance(full, LimitReached)
        self.assertEqual(full.reason, "per_owner")
        self.assertIsInstance(error_from_answer(404, b'{"error":"no such sandbox"}'), NotFound)
        self.assertIsInstance(error_from_answer(400, b"not json"), BadRequest)
        down = error_from_answer(503, b'{"error":"not connected"}', "127.0.0.1:1")
        self.assertIsInstance(down, Unavailable)
        self.assertEqual(str(down), "127.0.0.1:1 answered 503: not connected")
        self.assertEqual(down.message, "not connected")

    def test_a_stream_ends_with_its_exit(self) -> None:
        seen: list[str] = []
        lines = [b'{"stdout":"a\\n"}\n', b'{"stderr":"b"}\n', b'{"exit":{"exit_code":2,"duration_ms":5}}\n']
        r = m.whole_stream(lines, seen.append, seen.append, "here")
        self.assertEqual(r, CommandResult(exit_code=2, stdout="a\n", stderr="b", duration_ms=5))
        self.assertEqual(seen, ["a\n", "b"])
        with self.assertRaises(SandboxGone):
            m.whole_stream([b'{"error":"gone","status":410}\n'], None, None, "here")

    def test_a_listing_is_read_from_its_answer(self) -> None:
        answer = {"path": "/w/", "kind": "dir", "entries": [
            {"name": "line\nbreak", "kind": "symlink", "size": 1, "mode": 0o777, "target": "x"},
            {"name": "b.txt", "kind": "file", "size": 3, "mode": 0o644},
            {"name": "dir", "kind": "dir", "size": 4096, "mode": 0o755},
        ]}
        entries = m.listing_of("/w/", answer)
        self.assertEqual([(e.name, e.type, e.size, e.mode) for e in entries],
                         [("b.txt", "file", 3, 0o644), ("dir", "dir", 4096, 0o755),
                          ("line\nbreak", "symlink", 1, 0o777)])
        self.assertEqual(entries[0].path, "/w/b.txt")
        self.assertEqual(m.listing_of("/w/f", {"path": "/w/f", "kind": "file"}), [])

    def test_a_close_says_what_its_sync_carried(self) -> None:
        self.assertIsNone(m.closed_sync({"id": "a-1", "closed": True}))
        synced = m.closed_sync({"id": "a-1", "closed": True, "sync": {
            "written": 2, "deleted": 1, "refused": [".git/config"], "kept": [],
            "incomplete": None, "complete": False}})
        self.assertEqual(synced, m.SyncResult(2, 1, [".git/config"], [], None, False))
        with self.assertRaises(ChorusError) as failed:
            m.closed_sync({"id": "a-1", "closed": True, "sync_error": "disk full"})
        self.assertIn("disk full", str(failed.exception))

    def test_bodies(self) -> None:
        self.assertEqual(m.exec_body("ls", None, None, None, 1.5, False, True),
                         {"shell": "ls", "timeout_ms": 1500, "stream": True})
        self.assertEqual(m.exec_body(["ls", "-l"], "/tmp", {"A": "1"}, None, None, True, False),
                         {"argv": ["ls", "-l"], "cwd": "/tmp", "env": {"A": "1"}, "background": True})
        with self.assertRaises(ValueError):
            m.exec_body("ls", None, None, None, None, True, True)
        self.assertEqual(m.file_write("/a b", b"\xff", 0o600), ("?path=/a%20b&mode=600", m.Raw(b"\xff")))
        self.assertEqual(m.file_write("/a", "é", None), ("?path=/a", m.Raw("é".encode())))
        self.assertEqual(m.encode_body(m.Raw(b"t", "application/x-tar")), (b"t", "application/x-tar"))
        self.assertEqual(m.encode_body({"a": 1}), (b'{"a": 1}', "application/json"))
        self.assertIsNone(m.encode_body(None))
        self.assertEqual(m.submit_body("echo", None, None, None, None, 2, 0, 0, 0, False, None, "r:rw", "k"),
                         {"image": "chorus/sandbox:latest", "command": ["sh", "-c", "echo"],
                          "timeout_ms": 2000, "repo": {"name": "r", "writable": True}, "key": "k"})
        self.assertEqual(m.create_body(None, None, 0, 0, 0, None, None, None, True, ["gpu"], "src:rw"),
                         {"env": {}, "network": True, "requires": ["gpu"],
                          "repo": {"name": "src", "writable": True}})
        self.assertEqual(m.create_body("i", None, 0, 0, 0, 60, None, None),
                         {"env": {}, "image": "i", "idle_timeout_ms": 60000})
        with self.assertRaises(ValueError):
            m.create_body(None, None, 0, 0, 0, None, None, None, False, None, "src:wr")
        with self.assertRaises(ValueError):
            m.sandbox_path("../acl")
        self.assertEqual(m.quote("/a b/ü?"), "/a%20b/%C3%BC%3F")


if __name__ == "__main__":
    unittest.main()
