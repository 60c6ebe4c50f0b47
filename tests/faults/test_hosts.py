"""Tests of the fault suite's host mode (tests/faults/hosts.py): the pure
parts (the kinds of the mode, the leftovers of a killed run, the rules of
the links, which batch failures matter), and, as root, the real network:
each mode of a link and of a host's link does what it says, with small
Python processes in two namespaces standing in for the nodes."""

import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hosts  # noqa: E402
from netns import Netns  # noqa: E402  (hosts put tests/e2e on the path)

IP = {1: "10.77.0.1", 2: "10.77.0.2", 3: "10.77.0.3"}.get


class PureTest(unittest.TestCase):
    def test_kinds(self):
        """By default the kinds without a kernel mechanism here are left
        out; named ones are refused, saying what they need."""
        every = ("partition", "delay", "loss", "hold", "kill", "clock")
        self.assertEqual(hosts.mode_kinds(every, False),
                         ["partition", "kill", "clock"])
        self.assertEqual(hosts.mode_kinds(["kill", "drop"], True),
                         ["kill", "drop"])
        with self.assertRaises(ValueError) as e:
            hosts.mode_kinds(["kill", "delay", "hold"], True)
        self.assertIn("delay (needs netem", str(e.exception))
        self.assertIn("hold (needs a proxy", str(e.exception))
        self.assertNotIn("kill", str(e.exception))

    def test_stale(self):
        """Only the fault suite's namespaces of runs that are gone, the
        bridge's last; e2e namespaces (rsq<pid>...) are not ours."""
        names = ["rsqf12h1 (id: 3)", "rsqf12br (id: 2)", "rsqf12h2",
                 "rsqf99h1", "rsq12h1", "rsqf12x", "other", ""]
        self.assertEqual(hosts.stale(names, lambda pid: pid == 99),
                         ["rsqf12h1", "rsqf12h2", "rsqf12br"])
        self.assertEqual(hosts.stale(names, lambda pid: True), [])

    def test_stale_dirs(self):
        """The tmpfs mounts of a gone run's episode directories, deepest
        first; mounts of live runs, of older names without a pid, and
        elsewhere, stay."""
        mounts = [
            "tmpfs /tmp/raftsql-faults-12-ab/node1-log tmpfs rw 0 0",
            "tmpfs /tmp/raftsql-faults-12-ab/node2-log tmpfs rw 0 0",
            "tmpfs /tmp/raftsql-faults-12-ab tmpfs rw 0 0",
            "tmpfs /tmp/raftsql-faults-99-cd/node1-log tmpfs rw 0 0",
            "tmpfs /tmp/raftsql-faults-xyz/node1-log tmpfs rw 0 0",
            "tmpfs /var/raftsql-faults-12-ab/node1-log tmpfs rw 0 0",
            "proc /proc proc rw 0 0", ""]
        dirs, points = hosts.stale_dirs(mounts, "/tmp/",
                                        lambda pid: pid == 99)
        self.assertEqual(dirs, ["/tmp/raftsql-faults-12-ab"])
        self.assertEqual(points, ["/tmp/raftsql-faults-12-ab/node1-log",
                                  "/tmp/raftsql-faults-12-ab/node2-log",
                                  "/tmp/raftsql-faults-12-ab"])

    def test_rule_lines(self):
        """A link's rule is deleted, then added again unless up: cut
        prohibits, drop routes to the phantom gateway (its neighbour and
        route put back first)."""
        self.assertEqual(hosts.rule_lines(1, {2: "cut", 3: "up"}, IP), [
            "rule del pref 1002",
            "rule add pref 1002 to 10.77.0.2/32 ipproto tcp dport 7001 "
            "prohibit",
            "rule del pref 1003"])
        lines = hosts.rule_lines(2, {1: "drop"}, IP)
        self.assertEqual(lines, [
            "neigh replace 10.77.0.254 lladdr 02:00:00:00:00:fe dev eth0 "
            "nud permanent",
            "route replace 10.77.0.0/24 via 10.77.0.254 dev eth0 table 77",
            "rule del pref 1001",
            "rule add pref 1001 to 10.77.0.1/32 ipproto tcp dport 7001 "
            "table 77"])

    def test_batch_errors(self):
        """A rule that was not there to delete is no failure; any other
        line that failed is."""
        lines = ["rule del pref 1002", "rule add pref 1002 prohibit",
                 "link set eth0 up"]
        err = ("RTNETLINK answers: No such file or directory\n"
               "Command failed -:1\n")
        self.assertEqual(hosts.batch_errors(lines, err), [])
        err += "RTNETLINK answers: File exists\nCommand failed -:2\n"
        self.assertEqual(hosts.batch_errors(lines, err),
                         ["line 2: rule add pref 1002 prohibit"])

    def test_links_by_sender(self):
        self.assertEqual(hosts.by_src([(1, 2), (2, 1), (1, 3)]),
                         {1: [2, 3], 2: [1]})
        self.assertEqual(" ".join(hosts.kill_filter([3, 2], IP)),
                         "state established ( dport = :7001 ) and ( dst "
                         "10.77.0.2 or dst 10.77.0.3 )")


SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7001))
s.listen(16)
print("listening", flush=True)
held = []
while True:
    held.append(s.accept()[0])
"""

CLIENT = """
import socket, sys, time
s = socket.socket()
s.settimeout(float(sys.argv[2]))
t = time.monotonic()
try:
    s.connect((sys.argv[1], 7001))
except OSError as e:
    print("connect failed after %.1f s: %s" % (time.monotonic() - t, e))
    sys.exit()
print("connected", flush=True)
if sys.argv[3] == "hold":
    s.settimeout(20)
    try:
        print("recv: %r" % s.recv(10))
    except OSError as e:
        print("recv failed: %s" % e)
"""


@unittest.skipIf(Netns.unavailable(), Netns.unavailable())
class LiveTest(unittest.TestCase):
    """Two hosts with a listener on each at port 7001."""

    def setUp(self):
        self.net = hosts.HostNet(2)
        self.procs = []
        try:
            self.net.start()
            for i in (1, 2):
                p = self.spawn(i, SERVER, self.net.ip(i))
                self.assertEqual(p.stdout.readline().strip(), "listening")
        except BaseException:
            self.tearDown()
            raise

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
        self.net.close()

    def spawn(self, i, script, *args):
        p = subprocess.Popen(self.net.prefix(i) + [
            "/usr/bin/python3", "-c", script] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.procs.append(p)
        return p

    def dial(self, src, dst, timeout=1.0):
        """What a connect from host src to host dst's port 7001 saw."""
        p = self.spawn(src, CLIENT, self.net.ip(dst), str(timeout), "no")
        out, _ = p.communicate(timeout=30)
        return out.strip()

    def test_cut_is_one_way_and_refused(self):
        """A cut link refuses its sender's connects at once; the other
        way stays up; heal brings it back."""
        self.assertEqual(self.dial(1, 2), "connected")
        self.net.set([(1, 2)], "cut")
        self.assertIn("Permission denied", self.dial(1, 2, 5.0))
        self.assertEqual(self.dial(2, 1), "connected")
        self.net.heal()
        self.assertEqual(self.dial(1, 2), "connected")

    def test_drop_is_a_black_hole(self):
        """A dropped link's connects get no answer at all."""
        self.net.set([(1, 2)], "drop")
        self.assertIn("timed out", self.dial(1, 2))
        self.assertEqual(self.dial(2, 1), "connected")
        self.net.set([(1, 2)], "cut")  # from drop to cut, as the nemesis
        self.assertIn("Permission denied", self.dial(1, 2))
        self.net.heal()
        self.assertEqual(self.dial(1, 2), "connected")

    def test_link_down_and_unplugged(self):
        """eth0 down: the host has no route (connects fail at once);
        bridge port down: its packets vanish. Heal restores both, and a
        black hole works again after a link down flushed its neighbour."""
        self.net.isolate([1], "down")
        self.assertIn("unreachable", self.dial(1, 2, 5.0))
        self.net.heal()
        self.assertEqual(self.dial(1, 2), "connected")
        self.net.isolate([2], "unplug")
        self.assertIn("timed out", self.dial(1, 2))
        self.net.heal()
        self.assertEqual(self.dial(1, 2), "connected")
        self.net.set([(1, 2)], "drop")
        self.assertIn("timed out", self.dial(1, 2))
        self.net.heal()

    def test_reset(self):
        """reset kills the established connections of a link."""
        p = self.spawn(1, CLIENT, self.net.ip(2), "5", "hold")
        self.assertEqual(p.stdout.readline().strip(), "connected")
        end = time.monotonic() + 30
        self.net.reset([(1, 2)])
        while time.monotonic() < end and p.poll() is None:
            time.sleep(0.05)
        out = p.stdout.read().strip()
        self.assertIn("recv failed", out)


if __name__ == "__main__":
    unittest.main()
