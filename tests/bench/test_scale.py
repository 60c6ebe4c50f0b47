"""The smoke run of bench/scale.sh (make bench-check, part of make test):
one tiny database (about 5 MB), one second per measure, no plot. It checks
that the script works end to end and that its table has every column, a
number in each, for the size run, and that a size whose seven copies do
not fit is skipped with the reason printed."""

import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import scale  # noqa: E402


class ScaleSmokeTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-scale-smoke-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_tiny_run_has_every_column(self):
        # SETTLE_S: the machine's other work may keep pages dirty; the
        # smoke run checks the columns, not a quiet disk.
        env = dict(os.environ, SIZES="0.005 100000", DURATION="1", PLOT="0",
                   SETTLE_S="5",
                   OUT=os.path.join(self.dir, "out"),
                   CACHE=os.path.join(self.dir, "cache"))
        out = subprocess.run([os.path.join(ROOT, "bench", "scale.sh")],
                             env=env, capture_output=True, text=True,
                             timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertRegex(out.stdout, r"scale: skip 100000 GB: seven copies "
                         r"need [0-9.]+ GB, .* has [0-9.]+ GB free")
        tables = os.listdir(os.path.join(self.dir, "out"))
        self.assertEqual(len(tables), 1, tables)
        self.assertTrue(tables[0].endswith(".tsv"), tables)
        with open(os.path.join(self.dir, "out", tables[0])) as f:
            lines = [ln.rstrip("\n") for ln in f if not ln.startswith("#")]
        names = [c for c, _ in scale.COLUMNS]
        self.assertEqual(lines[0].split("\t"), names)
        self.assertEqual(len(lines), 2, lines)
        row = dict(zip(names, lines[1].split("\t")))
        self.assertEqual(len(row), len(names), lines[1])
        values = {k: float(v) for k, v in row.items()}
        for k, v in values.items():
            self.assertFalse(math.isnan(v), "%s is nan: %r" % (k, row))
        self.assertEqual(values["size_gb"], 0.005)
        self.assertGreater(values["rows"], 1000)
        self.assertGreater(values["file_mb"], 3)
        for k in ("join_s", "cp_fsync_s", "w1_wps", "w64_wps", "pw1_wps",
                  "pw64_wps", "pw1_p99_ms", "pw64_p99_ms", "point_rps",
                  "range_rps", "read_s", "write_s", "snap_p99_ms",
                  "w1_p99_ms", "w64_p99_ms", "rss_mb", "anon_mb"):
            self.assertGreater(values[k], 0, "%s: %r" % (k, row))
        self.assertGreaterEqual(values["scan_s"], 0)
        self.assertEqual(values["snap_done"], 1, row)
        # A restart of a few MB serves within seconds (the 2 s target is
        # for the real runs; make test shares a loaded machine).
        self.assertLess(values["read_s"], 5, row)
        self.assertLess(values["write_s"], 5, row)


if __name__ == "__main__":
    unittest.main()
