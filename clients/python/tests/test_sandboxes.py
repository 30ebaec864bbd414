"""Live sandboxes through the blocking client, against a real three-node cluster."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import tempfile
import time
import unittest

from chorus_client import (
    BadRequest,
    Cluster,
    CommandFailed,
    NotFound,
    Refused,
    Sandbox,
    SandboxGone,
    Unauthorized,
)

from support import env, wait_until


class Sandboxes(unittest.TestCase):
    cluster: Cluster
    sbx: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        cls.cluster = Cluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        cls.sbx = Sandbox.create(cls.cluster, env={"MADE_WITH": "create"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sbx.close()

    def test_run_gives_the_exit_code_and_both_outputs(self) -> None:
        r = self.sbx.run("echo out; echo err >&2; exit 3")
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, "out\n", "err\n"))
        self.assertFalse(r.ok)
        # argv: no shell in between.
        r = self.sbx.run(["printf", "%s|", "a b", "$HOME"])
        self.assertEqual((r.exit_code, r.stdout), (0, "a b|$HOME|"))
        self.assertEqual(self.sbx.run("pwd", cwd="/tmp").stdout, "/tmp\n")
        self.assertEqual(self.sbx.run("cat", stdin="fed in").stdout, "fed in")
        self.assertEqual(self.sbx.run("echo $ONCE", env={"ONCE": "1"}).stdout, "1\n")
        self.assertEqual(self.sbx.run("echo ${ONCE:-unset}").stdout, "unset\n")

    def test_a_timeout_is_an_ending_not_an_exception(self) -> None:
        started = time.monotonic()
        r = self.sbx.run("sleep 30", timeout=1)
        self.assertTrue(r.timed_out, r)
        self.assertIsNone(r.exit_code)
        self.assertLess(time.monotonic() - started, 20)

    def test_streamed_output_reaches_the_callback_before_the_command_ends(self) -> None:
        pieces: list[tuple[float, str]] = []
        errs: list[str] = []
        r = self.sbx.run(
            "echo first; sleep 2; echo second; echo oops >&2",
            on_stdout=lambda s: pieces.append((time.monotonic(), s)),
            on_stderr=errs.append,
        )
        ended = time.monotonic()
        self.assertEqual(r.exit_code, 0)
        self.assertEqual("".join(p for _, p in pieces), "first\nsecond\n")
        self.assertEqual((r.stdout, r.stderr, "".join(errs)), ("first\nsecond\n", "oops\n", "oops\n"))
        self.assertTrue(pieces[0][1].startswith("first"), pieces)
        self.assertGreater(ended - pieces[0][0], 1.0, "the first line came only at the end")

    def test_env_set_once_persists_for_later_commands(self) -> None:
        self.assertEqual(self.sbx.run("echo $MADE_WITH").stdout, "create\n")
        self.sbx.set_env({"GREETING": "hello", "OTHER": "x y"})
        self.assertEqual(self.sbx.run('echo "$GREETING/$OTHER"').stdout, "hello/x y\n")
        self.assertEqual(self.sbx.run(["sh", "-c", "echo $GREETING"]).stdout, "hello\n")
        with self.assertRaises(BadRequest) as e:
            self.sbx.set_env({"NOT-A-NAME": "1"})
        self.assertIn("NOT-A-NAME", e.exception.message)

    def test_files_write_read_and_list_text_and_binary(self) -> None:
        blob = bytes(range(256)) * 4
        self.assertEqual(self.sbx.files.write("/workspace/d/blob.bin", blob), len(blob))
        self.sbx.files.write("/workspace/d/note.txt", "héllo\n", mode=0o600)
        self.assertEqual(self.sbx.files.read("/workspace/d/blob.bin"), blob)
        self.assertEqual(self.sbx.files.read_text("/workspace/d/note.txt"), "héllo\n")
        self.sbx.run("mkdir -p /workspace/d/sub")
        listed = {e.name: e for e in self.sbx.files.list("/workspace/d")}
        self.assertEqual(sorted(listed), ["blob.bin", "note.txt", "sub"])
        self.assertEqual((listed["blob.bin"].type, listed["blob.bin"].size), ("file", 1024))
        self.assertEqual((listed["note.txt"].mode, listed["note.txt"].size), (0o600, 7))
        self.assertEqual(listed["sub"].type, "dir")
        self.assertEqual(listed["sub"].path, "/workspace/d/sub")
        with self.assertRaises(CommandFailed):
            self.sbx.files.list("/workspace/none")
        with self.assertRaises(BadRequest):
            self.sbx.files.read("relative/path")
        with self.assertRaises(Refused) as e:
            self.sbx.files.read("/workspace/none")
        self.assertEqual(e.exception.status, 422, e.exception)
        self.assertIn("/workspace/none", e.exception.message)

    def test_a_folder_goes_out_and_in_as_tar_and_is_removed(self) -> None:
        self.sbx.files.write("/workspace/t/a.txt", "A")
        self.sbx.files.write("/workspace/t/sub/b.sh", "echo b\n", mode=0o755)
        self.sbx.run("ln -s /etc/passwd /workspace/t/link")
        archive = self.sbx.files.download("/workspace/t")
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            members = {t.name.lstrip("./"): t for t in tar.getmembers() if t.isfile()}
            names = sorted(t.name.lstrip("./") for t in tar.getmembers())
        self.assertEqual(sorted(members), ["a.txt", "sub/b.sh"], names)
        self.assertNotIn("link", names, "a link never leaves the sandbox")
        self.assertEqual(members["sub/b.sh"].mode & 0o777, 0o755)
        written = self.sbx.files.upload("/workspace/copy", archive)
        self.assertEqual(written["files"], 2, written)
        self.assertEqual(self.sbx.run("sh /workspace/copy/sub/b.sh").stdout, "b\n")
        self.sbx.files.remove("/workspace/copy")
        with self.assertRaises(CommandFailed):
            self.sbx.files.list("/workspace/copy")
        with self.assertRaises(BadRequest):
            self.sbx.files.remove("/")
        self.assertEqual(self.sbx.files.list("/workspace/t/a.txt"), [], "a file has no entries")

    def test_a_local_folder_streams_in_and_out_with_its_bytes_and_modes(self) -> None:
        mib = 1 << 20
        files = {
            "a.txt": (b"A\n", 0o644),
            "run.sh": (b"#!/bin/sh\necho ran\n", 0o755),
            "sub/secret": (b"s" * 1000, 0o600),
            "sub/deep/big.bin": (os.urandom(20 * mib), 0o700),
        }
        total = sum(len(data) for data, _ in files.values())
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.makedirs(os.path.join(src, "empty"))
            for name, (data, mode) in files.items():
                os.makedirs(os.path.dirname(os.path.join(src, name)), exist_ok=True)
                with open(os.path.join(src, name), "wb") as f:
                    f.write(data)
                os.chmod(os.path.join(src, name), mode)
            os.symlink("/etc/passwd", os.path.join(src, "link"))
            os.mkfifo(os.path.join(src, "pipe"))

            got = self.sbx.files.upload_dir(src, "/workspace/up")
            self.assertEqual((got["path"], got["files"], got["bytes"]), ("/workspace/up", 4, total), got)
            self.assertEqual(got["left_out"], {"link": "a symlink", "pipe": "a fifo"})
            self.assertEqual((got["skipped"], got["skipped_more"]), ({}, 0))

            # In the sandbox: the same bytes and permission bits, the empty folder, no link.
            names = sorted(files)
            r = self.sbx.run(["sh", "-c", 'cd /workspace/up && sha256sum "$@" && stat -c "%a %n" "$@" '
                              "&& test -d empty && test ! -e link && test ! -e pipe", "sh", *names])
            self.assertEqual(r.exit_code, 0, r)
            lines = r.stdout.splitlines()
            self.assertEqual(lines[: len(names)],
                             [f"{hashlib.sha256(files[n][0]).hexdigest()}  {n}" for n in names])
            self.assertEqual(lines[len(names):], [f"{files[n][1]:o} {n}" for n in names])

            down = os.path.join(tmp, "down")
            got = self.sbx.files.download_dir("/workspace/up", down)
            self.assertEqual((got["files"], got["bytes"], got["skipped"]), (4, total, {}), got)
            for name, (data, mode) in files.items():
                with open(os.path.join(down, name), "rb") as f:
                    self.assertEqual(f.read(), data, name)
                self.assertEqual(stat.S_IMODE(os.stat(os.path.join(down, name)).st_mode), mode, name)
            self.assertTrue(os.path.isdir(os.path.join(down, "empty")))
            self.assertEqual(sorted(os.listdir(down)), ["a.txt", "empty", "run.sh", "sub"])
        self.sbx.files.remove("/workspace/up")

    def test_a_20_mib_file_streams_in_from_a_file_object_and_out_to_one(self) -> None:
        data = os.urandom(20 << 20)
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "in.bin")
            with open(local, "wb") as f:
                f.write(data)
            with open(local, "rb") as f:
                self.assertEqual(self.sbx.files.write("/workspace/s/big.bin", f, mode=0o640), len(data))
            r = self.sbx.run("sha256sum /workspace/s/big.bin && stat -c %a /workspace/s/big.bin")
            self.assertEqual(r.stdout, f"{hashlib.sha256(data).hexdigest()}  /workspace/s/big.bin\n640\n")
            back = os.path.join(tmp, "out.bin")
            with open(back, "wb") as f:
                self.assertEqual(self.sbx.files.read_to("/workspace/s/big.bin", f), len(data))
            with open(back, "rb") as f:
                self.assertEqual(f.read(), data)
        # A generator of chunks streams too; a file that is not there is the node's refusal.
        size = self.sbx.files.write("/workspace/s/gen.txt", (b"line %d\n" % i for i in range(1000)))
        self.assertEqual(size, sum(len(b"line %d\n" % i) for i in range(1000)))
        with self.assertRaises(Refused) as e:
            self.sbx.files.read_to("/workspace/s/none", io.BytesIO())
        self.assertEqual(e.exception.status, 422, e.exception)
        self.sbx.files.remove("/workspace/s")

    def test_a_keep_alive_starts_the_idle_clock_again(self) -> None:
        before = self.sbx.info()
        time.sleep(1.1)
        kept = self.sbx.keep_alive()
        self.assertEqual(kept.id, self.sbx.id)
        self.assertLessEqual(kept.lifetime_left_ms, before.lifetime_left_ms - 1000)
        self.assertGreaterEqual(kept.idle_left_ms, before.idle_left_ms - 200)

    def test_a_background_process_is_listed_and_killed(self) -> None:
        bg = self.sbx.run("sleep 300", background=True)
        self.assertGreater(bg.pid, 1)
        self.assertEqual(bg.log, f"/tmp/.chorus-bg/{bg.pid}.log")
        running = {p.pid: p for p in self.sbx.processes()}
        self.assertIn(bg.pid, running)
        self.assertIn("sleep 300", running[bg.pid].command)
        self.sbx.kill(bg.pid)
        wait_until(lambda: bg.pid not in {p.pid for p in self.sbx.processes()},
                   what="the killed process is gone")
        # Its log holds what it wrote.
        bg = self.sbx.run(["sh", "-c", "echo logged; sleep 300"], background=True)
        wait_until(lambda: self.sbx.files.read(bg.log) == b"logged\n", what="the log")
        self.sbx.kill(bg.pid)

    def test_another_token_sees_no_such_sandbox(self) -> None:
        other = Cluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_OTHER_TOKEN"))
        theirs = other.sandbox(self.sbx.id)
        with self.assertRaises(NotFound) as e:
            theirs.run("true")
        self.assertEqual(e.exception.status, 404)
        with self.assertRaises(NotFound):
            theirs.files.read("/workspace/d/note.txt")
        with self.assertRaises(NotFound):
            theirs.close()
        self.assertNotIn(self.sbx.id, [s.id for s in other.sandboxes()])
        # And the sandbox is untouched.
        self.assertEqual(self.sbx.run("echo still").stdout, "still\n")

    def test_a_wrong_token_is_unauthorized(self) -> None:
        with self.assertRaises(Unauthorized):
            Cluster(env("CHORUS_TEST_ADDR"), "chorus_v1_submit_0000000000000000_bogus").sandboxes()

    def test_any_node_answers_for_the_sandbox(self) -> None:
        via = Cluster(env("CHORUS_TEST_ADDR_2"), env("CHORUS_TEST_TOKEN"))
        same = via.sandbox(self.sbx.id)
        self.assertEqual(same.run("echo $MADE_WITH").stdout, "create\n")
        got: list[str] = []
        r = same.run("echo a; echo b", on_stdout=got.append)
        self.assertEqual(("".join(got), r.exit_code), ("a\nb\n", 0))
        self.assertEqual(same.info().id, self.sbx.id)


class Closing(unittest.TestCase):
    def test_the_context_manager_closes_and_later_calls_say_closed(self) -> None:
        cluster = Cluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        with Sandbox.create(cluster) as sbx:
            self.assertEqual(sbx.run("echo in").stdout, "in\n")
            self.assertIn(sbx.id, [s.id for s in cluster.sandboxes()])
        with self.assertRaises(SandboxGone) as e:
            sbx.run("true")
        self.assertEqual((e.exception.status, e.exception.reason), (410, "closed"))
        with self.assertRaises(SandboxGone):
            cluster.sandbox(sbx.id).files.write("/workspace/x", "x")
        self.assertNotIn(sbx.id, [s.id for s in cluster.sandboxes()])
        sbx.close()  # closing again from the same object is one close

    def test_an_exception_inside_still_closes(self) -> None:
        cluster = Cluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        with self.assertRaises(ZeroDivisionError):
            with Sandbox.create(cluster, idle_timeout=120, lifetime=600) as sbx:
                1 / 0
        with self.assertRaises(SandboxGone) as e:
            sbx.info()
        self.assertEqual(e.exception.reason, "closed")


if __name__ == "__main__":
    unittest.main()
