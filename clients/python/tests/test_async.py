"""The asyncio client against the same cluster: create, run (streamed too), files, close."""

from __future__ import annotations

import asyncio
import io
import os
import tempfile
import time
import unittest

from chorus_client import AsyncCluster, AsyncSandbox, NotFound, SandboxGone

from support import env


class AsyncSandboxes(unittest.IsolatedAsyncioTestCase):
    async def test_create_run_files_and_close(self) -> None:
        cluster = AsyncCluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        async with await AsyncSandbox.create(cluster, env={"A": "1"}) as sbx:
            r = await sbx.run("echo $A; echo e >&2; exit 5")
            self.assertEqual((r.exit_code, r.stdout, r.stderr), (5, "1\n", "e\n"))
            blob = bytes(range(256))
            await sbx.files.write("/workspace/b.bin", blob)
            self.assertEqual(await sbx.files.read("/workspace/b.bin"), blob)
            self.assertEqual([e.name for e in await sbx.files.list("/workspace")], ["b.bin"])
            await sbx.set_env({"B": "2"})
            self.assertEqual((await sbx.run(["sh", "-c", "echo $A$B"])).stdout, "12\n")
            bg = await sbx.run("sleep 300", background=True)
            self.assertIn(bg.pid, [p.pid for p in await sbx.processes()])
            await sbx.kill(bg.pid)
            self.assertIn(sbx.id, [s.id for s in await cluster.sandboxes()])
        with self.assertRaises(SandboxGone) as e:
            await sbx.run("true")
        self.assertEqual(e.exception.reason, "closed")

    async def test_streamed_output_comes_while_the_loop_runs_on(self) -> None:
        cluster = AsyncCluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        sbx = await cluster.create_sandbox()
        try:
            pieces: list[tuple[float, str]] = []
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.05)
                    ticks += 1

            async def on_stdout(text: str) -> None:  # a coroutine callback is awaited
                pieces.append((time.monotonic(), text))

            tick = asyncio.create_task(ticker())
            r = await sbx.run("echo first; sleep 2; echo second", on_stdout=on_stdout)
            ended = time.monotonic()
            tick.cancel()
            self.assertEqual((r.exit_code, r.stdout), (0, "first\nsecond\n"))
            self.assertEqual("".join(p for _, p in pieces), "first\nsecond\n")
            self.assertGreater(ended - pieces[0][0], 1.0, "the first line came only at the end")
            self.assertGreater(ticks, 10, "the event loop was blocked while the command ran")
            # Two commands at once in one sandbox, on one loop.
            a, b = await asyncio.gather(sbx.run("sleep 1; echo a"), sbx.run("sleep 1; echo b"))
            self.assertEqual((a.stdout, b.stdout), ("a\n", "b\n"))
        finally:
            await sbx.close()

    async def test_a_folder_and_a_file_stream_both_ways(self) -> None:
        cluster = AsyncCluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        async with await cluster.create_sandbox() as sbx:
            big = os.urandom(3 << 20)
            with tempfile.TemporaryDirectory() as tmp:
                src = os.path.join(tmp, "src")
                os.makedirs(os.path.join(src, "d"))
                with open(os.path.join(src, "d/big.bin"), "wb") as f:
                    f.write(big)
                os.symlink("d", os.path.join(src, "ln"))
                got = await sbx.files.upload_dir(src, "/workspace/t")
                self.assertEqual((got["files"], got["bytes"], got["left_out"]),
                                 (1, len(big), {"ln": "a symlink"}))
                got = await sbx.files.download_dir("/workspace/t", os.path.join(tmp, "down"))
                self.assertEqual((got["files"], got["skipped"]), (1, {}))
                with open(os.path.join(tmp, "down/d/big.bin"), "rb") as f:
                    self.assertEqual(f.read(), big)

            async def pieces():  # an async iterable streams too
                for i in range(4):
                    yield bytes([i]) * (1 << 20)

            self.assertEqual(await sbx.files.write("/workspace/f.bin", pieces()), 4 << 20)
            out = io.BytesIO()
            self.assertEqual(await sbx.files.read_to("/workspace/f.bin", out), 4 << 20)
            self.assertEqual(out.getvalue(), b"".join(bytes([i]) * (1 << 20) for i in range(4)))

    async def test_another_token_sees_no_such_sandbox(self) -> None:
        mine = AsyncCluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        other = AsyncCluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_OTHER_TOKEN"))
        async with await mine.create_sandbox() as sbx:
            with self.assertRaises(NotFound):
                await other.sandbox(sbx.id).run("true")


if __name__ == "__main__":
    unittest.main()
