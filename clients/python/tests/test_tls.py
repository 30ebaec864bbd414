"""TLS with the node's pinned certificate, as the CLI does: the right pin (in the address, or
given apart, colons allowed) reaches the node; a wrong one is refused right after the
handshake, before any byte of the request — the token — is written."""

from __future__ import annotations

import asyncio
import os
import ssl
import unittest
from typing import Any
from unittest import mock

from chorus_client import AsyncCluster, Cluster, ConnectError, PinMismatch

from support import env


class Pinning(unittest.TestCase):
    def setUp(self) -> None:
        self.addr = env("CHORUS_TEST_TLS_ADDR")
        self.fp = env("CHORUS_TEST_TLS_FINGERPRINT")
        self.token = env("CHORUS_TEST_TLS_TOKEN")

    def test_the_right_pin_reaches_the_node(self) -> None:
        status = Cluster(f"{self.addr}#sha256={self.fp}", self.token).status()
        self.assertIn("node_id", status)
        colons = ":".join(self.fp[i:i + 2].upper() for i in range(0, 64, 2))
        self.assertEqual(Cluster(self.addr, self.token, tls_fingerprint=colons).sandboxes(), [])

    def test_a_wrong_pin_is_refused_before_the_token_is_sent(self) -> None:
        sent: list[bytes] = []
        real_sendall = ssl.SSLSocket.sendall
        real_send = ssl.SSLSocket.send

        def sendall(sock: ssl.SSLSocket, data: Any, *a: Any) -> Any:
            sent.append(bytes(data))
            return real_sendall(sock, data, *a)

        def send(sock: ssl.SSLSocket, data: Any, *a: Any) -> Any:
            sent.append(bytes(data))
            return real_send(sock, data, *a)

        wrong = "0" * 64
        with mock.patch.object(ssl.SSLSocket, "sendall", sendall), \
                mock.patch.object(ssl.SSLSocket, "send", send):
            with self.assertRaises(PinMismatch) as e:
                Cluster(f"{self.addr}#sha256={wrong}", self.token).sandboxes()
            self.assertEqual(sent, [], "bytes were written over TLS to the wrong certificate")
            # The same patch sees what a pinned request writes: the check above is not blind.
            Cluster(f"{self.addr}#sha256={self.fp}", self.token).status()
            self.assertTrue(any(self.token.encode() in s for s in sent), sent)
        err = e.exception
        self.assertEqual((err.got, err.pinned), (self.fp, wrong))
        self.assertIn("nothing was sent", str(err))
        self.assertIsInstance(err, ConnectError)

    def test_a_ca_certificate_is_checked_instead_of_a_pin(self) -> None:
        # The node's own self-signed certificate as the CA: it signed itself, for 127.0.0.1.
        cert = env("CHORUS_TEST_TLS_CERT")
        self.assertIn("node_id", Cluster(self.addr, self.token, ca_cert=cert).status())
        # Other CAs (the system's, where this Python knows them): the handshake fails, and
        # the system's roots are never taken when no CA is given (the test below).
        system = ssl.get_default_verify_paths().cafile
        if system and os.path.exists(system):
            with self.assertRaises(ConnectError) as e:
                Cluster(self.addr, self.token, ca_cert=system).status()
            self.assertIn("CERTIFICATE_VERIFY_FAILED", str(e.exception))

    def test_tls_without_a_pin_or_ca_is_refused_saying_how(self) -> None:
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaises(ValueError) as e:
                Cluster(self.addr, self.token)
        self.assertIn("tls_fingerprint", str(e.exception))

    def test_plain_http_to_a_tls_node_gets_nothing(self) -> None:
        plain = self.addr.replace("https://", "http://")
        with self.assertRaises(ConnectError):
            Cluster(plain, self.token, timeout=5).status()


class AsyncPinning(unittest.IsolatedAsyncioTestCase):
    async def test_pins_over_asyncio_streams(self) -> None:
        addr = env("CHORUS_TEST_TLS_ADDR")
        fp = env("CHORUS_TEST_TLS_FINGERPRINT")
        token = env("CHORUS_TEST_TLS_TOKEN")
        self.assertIn("node_id", await AsyncCluster(f"{addr}#sha256={fp}", token).status())
        written: list[bytes] = []
        real = asyncio.StreamWriter.write

        def write(w: asyncio.StreamWriter, data: Any) -> None:
            written.append(bytes(data))
            real(w, data)

        with mock.patch.object(asyncio.StreamWriter, "write", write):
            with self.assertRaises(PinMismatch):
                await AsyncCluster(f"{addr}#sha256={'1' * 64}", token).sandboxes()
        self.assertEqual(written, [])


if __name__ == "__main__":
    unittest.main()
