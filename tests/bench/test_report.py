"""bench/report.py's rounds, medians, disk flag and ratios, and
build/proc-cost's figures (bench/README.md), without running a benchmark.

Run: PROC_COST=build/proc-cost /usr/bin/python3 -m unittest
tests/bench/test_report.py (`make bench-check`, part of `make test`).
"""

import os
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
REPORT = os.path.join(ROOT, "bench", "report.py")
PROC_COST = os.environ.get("PROC_COST",
                           os.path.join(ROOT, "build", "proc-cost"))


def result(name, rnd, wps, p50, cpu=None, extra=""):
    """One RESULT line of run @name in round @rnd."""
    line = "RESULT name=%s writes_per_s=%s p50_ms=%s p99_ms=9.0 " \
        "p999_ms=10.0 writes=100 errors=0" % (name, wps, p50)
    if cpu is not None:
        line += " cpu_s_per_write=%s bytes_per_write=20000" % cpu
    return line + (" " + extra if extra else "") + " round=%d" % rnd


# Three rounds; round 2's disk is slow (local-1 p50 3 x the others').
THREE_ROUNDS = [
    result("raftsql-1-leader", 1, 1000, 0.8, 0.0008),
    result("etcd-1", 1, 500, 1.4, 0.0012),
    result("local-1", 1, 5000, 0.12, 0.00005),
    result("raftsql-1-leader", 2, 600, 1.5, 0.0009),
    result("etcd-1", 2, 400, 2.0, 0.0010),
    result("local-1", 2, 1000, 0.36, 0.00006),
    result("raftsql-1-leader", 3, 1200, 0.7, 0.0006),
    "FAILED name=etcd-1 round=3 (exit status 1; log: no leader)",
    result("local-1", 3, 5200, 0.11, 0.00005),
]


class ReportTest(unittest.TestCase):

    def run_report(self, lines, env=None):
        """(exit status, stdout, stderr, text of TXT_OUT) of report.py on
        @lines, without a chart."""
        with tempfile.TemporaryDirectory() as d:
            src, txt = os.path.join(d, "res"), os.path.join(d, "out.txt")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            p = subprocess.run(
                [sys.executable, REPORT, src, txt, "-", "a title", "a note"],
                capture_output=True, text=True, timeout=60,
                env=dict(os.environ, **(env or {})))
            out = open(txt).read() if os.path.exists(txt) else ""
        return p.returncode, p.stdout, p.stderr, out

    def line_of(self, text, start):
        """The first line of @text that starts with @start."""
        for line in text.split("\n"):
            if line.startswith(start):
                return line
        self.fail("no line starting with %r in:\n%s" % (start, text))

    def test_medians_flag_and_ratios(self):
        rc, out, err, _ = self.run_report(THREE_ROUNDS)
        self.assertEqual(rc, 0, err)
        # Median and min-max over the rounds, and the rounds with a value.
        row = self.line_of(out, "raftsql-1-leader          3/3")
        self.assertIn("1000 (600-1200)", row)
        self.assertIn("0.000800 (0.000600-0.000900)", row)
        self.assertIn("450 (400-500)",
                      self.line_of(out, "etcd-1                    2/3"))
        # Round 2's local-1 p50, 0.36 ms, is over 1.5 x the median 0.12.
        self.assertIn("round 2  FLAGGED", out)
        self.assertIn("round 2 FLAGGED: local-1 p50 0.360 ms", out)
        self.assertNotIn("round 1  FLAGGED", out)
        self.assertNotIn("round 3  FLAGGED", out)
        # Ratios within each round: 2.00, 1.50 (flagged), n/a (FAILED).
        ratio = self.line_of(out, "raftsql-1-leader / etcd-1  ")
        self.assertIn("rounds: 2.00 1.50! n/a", ratio)
        self.assertIn("1.75", ratio)  # the median of 2.00 and 1.50
        self.assertIn("(n/a in 1)", ratio)
        cost = out.split("cost ratio")[1]
        self.assertIn("rounds: 0.67 0.90! n/a",
                      self.line_of(cost, "raftsql-1-leader / etcd-1"))
        self.assertIn("not measured (a run not in RUNS): raftsql-1-leader / "
                      "dqlite-1, raftsql-64-leader",
                      out)

    def test_floor(self):
        """floor-1 = 1 / (2 x local-1 p50 + rtt-loopback p50) per round,
        and the one-client runs' ratios to it, raft_exec on the leader
        against its 0.8 target; no floor in a round without the RTT."""
        lines = [
            result("raftsql-1-leader", 1, 1000, 0.8, 0.0008),
            result("local-1", 1, 5000, 0.2, 0.00005),
            "RESULT name=rtt-loopback writes_per_s=n/a p50_ms=0.1 "
            "p99_ms=0.2 p999_ms=0.3 errors=0 round_trips=10 size=1200 "
            "round=1",
            result("raftsql-1-leader", 2, 900, 0.9, 0.0008),
            result("local-1", 2, 5000, 0.2, 0.00005),
            "RESULT name=rtt-loopback writes_per_s=n/a p50_ms=0.3 "
            "p99_ms=0.4 p999_ms=0.5 errors=0 round_trips=10 size=1200 "
            "round=2",
            result("raftsql-1-leader", 3, 900, 0.9, 0.0008),
            result("local-1", 3, 5000, 0.2, 0.00005),
        ]
        rc, out, err, _ = self.run_report(lines)
        self.assertEqual(rc, 0, err)
        # Round 1: 1000 / (0.4 + 0.1) = 2000/s; round 2: 1000 / 0.7.
        floor_rows = [ln for ln in out.split("\n")
                      if ln.startswith("floor-1 ") and "not a run" in ln]
        self.assertEqual(len(floor_rows), 2, out)
        self.assertIn(" 2000 ", floor_rows[0])
        self.assertIn(" 1429 ", floor_rows[1])
        self.assertIn("2 x fsync 0.200 ms", floor_rows[0])
        ratio = [ln for ln in out.split("\n")
                 if ln.startswith("raftsql-1-leader / floor-1")]
        self.assertEqual(len(ratio), 1, out)
        # 1000/2000 = 0.50, 900/1428.6 = 0.63: median 0.565, under 0.8.
        self.assertIn(" 0.56 ", ratio[0])
        self.assertIn("MISSED", ratio[0])
        self.assertIn("rounds: 0.50 0.63 n/a", ratio[0])

    def test_without_local_1(self):
        rc, out, err, _ = self.run_report(
            [x for x in THREE_ROUNDS if "local-1" not in x])
        self.assertEqual(rc, 0, err)
        self.assertIn("local-1 is not among the runs", out)
        self.assertNotIn("FLAGGED", out)

    def test_ratios_chosen(self):
        rc, out, err, _ = self.run_report(
            THREE_ROUNDS, {"RATIOS": "etcd-1/local-1"})
        self.assertEqual(rc, 0, err)
        self.assertIn("rounds: 0.10 0.40! n/a",
                      self.line_of(out, "etcd-1 / local-1"))
        self.assertNotIn("raftsql-1-leader / etcd-1", out)
        rc, out, err, _ = self.run_report(THREE_ROUNDS,
                                          {"RATIOS": "etcd-1"})
        self.assertNotEqual(rc, 0)
        self.assertIn("RATIOS: 'etcd-1' is not A/B", err)

    def test_show_prints_the_file_again(self):
        rc, out, err, txt = self.run_report(THREE_ROUNDS)
        self.assertEqual(rc, 0, err)
        self.assertIn("\n" + THREE_ROUNDS[0] + "\n", txt)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "compare.txt")
            with open(path, "w") as f:
                f.write(txt)
            p = subprocess.run([sys.executable, REPORT, "--show", path, "-"],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, out)


class ProcCostTest(unittest.TestCase):

    def sample(self, pid):
        p = subprocess.run([PROC_COST, str(pid)], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        kv = dict(w.split("=", 1) for w in p.stdout.split()[1:])
        return float(kv["cpu_s"]), int(kv["write_bytes"]), int(kv["procs"])

    def test_cpu_and_bytes_of_a_process_and_its_child(self):
        # A parent that waits on its stdin and a child (its descendant)
        # that burns 0.3 s of CPU, writes 1 MiB with fsync, then waits.
        code = r"""
import os, sys, time
if os.fork() == 0:
    sys.stdin.readline()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    with open(sys.argv[1], "wb") as f:
        f.write(b"x" * (1 << 20))
        f.flush()
        os.fsync(f.fileno())
    print("done", flush=True)
    sys.stdin.readline()
    os._exit(0)
os.wait()
"""
        with tempfile.TemporaryDirectory(dir=ROOT + "/build") as d:
            p = subprocess.Popen(
                [sys.executable, "-c", code, os.path.join(d, "f")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 10
                procs = 0
                while procs < 2 and time.monotonic() < deadline:
                    cpu0, wb0, procs = self.sample(p.pid)
                    time.sleep(0.02)
                self.assertEqual(procs, 2, "the child never appeared")
                p.stdin.write("go\n")
                p.stdin.flush()
                self.assertEqual(p.stdout.readline(), "done\n")
                cpu1, wb1, procs = self.sample(p.pid)
                self.assertEqual(procs, 2)
                self.assertGreaterEqual(cpu1 - cpu0, 0.2,
                                        "CPU seen: %.2f s" % (cpu1 - cpu0))
                self.assertGreaterEqual(wb1 - wb0, 1 << 20,
                                        "bytes seen: %d" % (wb1 - wb0))
            finally:
                p.stdin.close()
                p.wait(timeout=10)
                p.stdout.close()

    def test_bad_arguments(self):
        for args, rc, text in ((["x"], 2, "not a process id: 'x'"),
                               (["--watch", "0", "1"], 2, "--watch"),
                               ([], 2, "usage"),
                               (["2147483647"], 1, "none of the 1 processes")):
            p = subprocess.run([PROC_COST] + args, capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(p.returncode, rc, (args, p.stderr))
            self.assertIn(text, p.stderr)


if __name__ == "__main__":
    unittest.main()
