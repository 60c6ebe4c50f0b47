"""The fault network's own tests: each mode of a link does what it says,
with plain sockets standing in for the nodes (tests/faults/net.py)."""

import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from net import RTO, Net  # noqa: E402


class Receiver:
    """A listening socket standing in for node 2: collects what arrives,
    with the time of each chunk."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.chunks = []        # (time, connection number, bytes)
        self.eofs = 0
        self.conns = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self._read, args=(c, self.conns),
                             daemon=True).start()

    def _read(self, c, n):
        while True:
            try:
                data = c.recv(65536)
            except OSError:
                data = b""
            if not data:
                with self.lock:
                    self.eofs += 1
                c.close()
                return
            with self.lock:
                self.chunks.append((time.monotonic(), n, data))

    def close(self):
        # shutdown wakes the accepting thread and stops listening.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def data(self):
        with self.lock:
            return b"".join(d for _, _, d in self.chunks)

    def wait(self, cond, timeout=5.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return True
            time.sleep(0.01)
        return False


class NetTest(unittest.TestCase):

    def setUp(self):
        self.rx = Receiver()
        # Node 1's port is never dialled here: only link (1, 2) is used.
        self.net = Net({1: 1, 2: self.rx.port})
        self.net.start()

    def tearDown(self):
        self.net.close()
        self.rx.close()

    def dial(self):
        s = socket.create_connection(("127.0.0.1", self.net.port(1, 2)))
        s.settimeout(2)
        return s

    def test_up_passes_bytes_in_order(self):
        s = self.dial()
        for k in range(100):
            s.sendall(b"%03d" % k)
        want = b"".join(b"%03d" % k for k in range(100))
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == want))
        s.close()

    def test_delay(self):
        self.net.set([(1, 2)], "up", delay=0.3)
        s = self.dial()
        t0 = time.monotonic()
        s.sendall(b"late")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"late"))
        self.assertGreaterEqual(self.rx.chunks[0][0] - t0, 0.28)
        s.close()

    def test_loss_delivers_everything_late_in_order(self):
        """Every chunk lost: each comes a retransmission timeout late,
        doubled for a second loss in a row; no loss: at once; nothing
        missing, nothing reordered."""
        self.net.set([(1, 2)], "up", loss=1.0)
        s = self.dial()
        t0 = time.monotonic()
        s.sendall(b"a")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"a"),
                        self.rx.data())
        self.assertGreaterEqual(self.rx.chunks[0][0] - t0, RTO * 0.95)
        t1 = time.monotonic()
        s.sendall(b"b")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"ab"),
                        self.rx.data())
        self.assertGreaterEqual(self.rx.chunks[1][0] - t1, 2 * RTO * 0.95)
        self.net.set([(1, 2)], "up")
        t2 = time.monotonic()
        s.sendall(b"c")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"abc"),
                        self.rx.data())
        self.assertLess(self.rx.chunks[2][0] - t2, RTO)
        self.assertEqual(self.rx.conns, 1)
        s.close()

    def test_hold_then_release_delivers_everything_late(self):
        s = self.dial()
        s.sendall(b"a")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"a"))
        self.net.set([(1, 2)], "hold")
        s.sendall(b"b")
        s.sendall(b"c")
        time.sleep(0.3)
        self.assertEqual(self.rx.data(), b"a")
        self.net.set([(1, 2)], "up")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"abc"))
        self.assertEqual(self.rx.conns, 1)
        s.close()

    def test_drop_discards_then_resets(self):
        s = self.dial()
        s.sendall(b"a")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"a"))
        self.net.set([(1, 2)], "drop")
        s.sendall(b"lost")
        time.sleep(0.3)
        self.assertEqual(self.rx.data(), b"a")
        self.net.set([(1, 2)], "up")
        # Both ends of the connection are closed: the receiver may hold a
        # partial frame, and the sender must dial again.
        self.assertTrue(self.rx.wait(lambda: self.rx.eofs == 1))
        self.assertEqual(s.recv(10), b"")
        s2 = self.dial()
        s2.sendall(b"new")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"anew"))
        s.close()
        s2.close()

    def test_cut_closes_and_refuses(self):
        s = self.dial()
        s.sendall(b"a")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"a"))
        self.net.set([(1, 2)], "cut")
        self.assertEqual(s.recv(10), b"")
        s2 = self.dial()
        self.assertEqual(s2.recv(10), b"")  # closed on arrival
        self.assertEqual(self.rx.conns, 1)
        self.net.heal()
        s3 = self.dial()
        s3.sendall(b"b")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"ab"))
        for c in (s, s2, s3):
            c.close()

    def test_reset(self):
        s = self.dial()
        s.sendall(b"a")
        self.assertTrue(self.rx.wait(lambda: self.rx.data() == b"a"))
        self.net.reset([(1, 2)])
        self.assertEqual(s.recv(10), b"")
        self.assertTrue(self.rx.wait(lambda: self.rx.eofs == 1))
        s.close()

    def test_receiver_down_ends_the_dial(self):
        self.rx.close()
        s = self.dial()
        self.assertEqual(s.recv(10), b"")
        s.close()

    def test_large_transfer_under_delay(self):
        """Megabytes through a delayed link arrive whole (the proxy stops
        reading at its cap and sends what is due as the socket allows)."""
        self.net.set([(1, 2)], "up", delay=0.05, jitter=0.02)
        s = self.dial()
        blob = os.urandom(4 << 20)
        threading.Thread(target=s.sendall, args=(blob,), daemon=True).start()
        self.assertTrue(self.rx.wait(lambda: len(self.rx.data()) ==
                                     len(blob), timeout=20))
        self.assertEqual(self.rx.data(), blob)
        s.close()


if __name__ == "__main__":
    unittest.main()
