"""Tasks through both clients: submit, get (through another node too), wait, logs, cancel."""

from __future__ import annotations

import unittest

from chorus_client import AsyncCluster, Cluster, Conflict

from support import env


class Tasks(unittest.TestCase):
    def test_submit_wait_get_and_logs(self) -> None:
        cluster = Cluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        id = cluster.tasks.submit(
            ["sh", "-c", "echo task-out; echo $WHO; echo task-err >&2; exit 4"],
            env={"WHO": "me"},
            timeout=60,
        )
        result = cluster.tasks.wait(id, timeout=120)
        self.assertEqual((result["status"], result["exit_code"]), ("failed", 4), result)
        self.assertEqual(result["stdout"], "task-out\nme\n")
        view = cluster.tasks.get(id)
        self.assertEqual((view["task"], view["phase"]), (id, "done"))
        self.assertIn(id, [t["task"] for t in cluster.tasks.list()])
        # The output, from the worker that ran it (maybe another node: a delegated token).
        self.assertEqual(cluster.tasks.logs(id), b"task-out\nme\n")
        self.assertEqual(cluster.tasks.logs(id, stream="stderr"), b"task-err\n")
        # Through another node: the task's node is asked for it.
        via = Cluster(env("CHORUS_TEST_ADDR_2"), env("CHORUS_TEST_TOKEN"))
        self.assertEqual(via.tasks.get(id)["result"]["exit_code"], 4)
        self.assertEqual(via.tasks.logs(id), b"task-out\nme\n")
        with self.assertRaises(Conflict) as e:
            cluster.tasks.cancel(id)
        self.assertEqual(e.exception.status, 409)

    def test_logs_followed_as_they_come(self) -> None:
        cluster = Cluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        id = cluster.tasks.submit("for i in 1 2 3; do echo line $i; sleep 0.5; done", timeout=60)
        seen: list[str] = []
        out = cluster.tasks.logs(id, follow=True, on_output=seen.append, timeout=120)
        self.assertEqual(out, b"line 1\nline 2\nline 3\n")
        self.assertEqual("".join(seen), "line 1\nline 2\nline 3\n")
        self.assertEqual(cluster.tasks.wait(id, timeout=60)["status"], "succeeded")


class AsyncTasks(unittest.IsolatedAsyncioTestCase):
    async def test_submit_wait_and_logs(self) -> None:
        cluster = AsyncCluster(env("CHORUS_TEST_ADDR"), env("CHORUS_TEST_TOKEN"))
        id = await cluster.tasks.submit("echo async-task", timeout=60)
        result = await cluster.tasks.wait(id, timeout=120)
        self.assertEqual((result["status"], result["exit_code"]), ("succeeded", 0), result)
        self.assertEqual(await cluster.tasks.logs(id), b"async-task\n")
        self.assertEqual((await cluster.tasks.get(id))["phase"], "done")


if __name__ == "__main__":
    unittest.main()
