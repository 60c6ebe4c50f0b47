"""End-to-end: a finding of the bounded-staleness checker of `make jepsen`
(tests/faults/repro_stale.py, which exits 1 when it reproduces one):

- pauseother: a follower paused (SIGSTOP) and continued while another
  process reads its file. Its first tick after SIGCONT renewed the bound
  marker before it judged itself stale and wrote its notice, and in
  between the other process read the follower's state of before the
  pause (seed 335615: a read 2.3 s stale, bound 1.07 s). A test-build
  hold of 300 ms between those two steps (RAFTSQL_TEST_STALL_HOLD_MS)
  makes the window wide; the notice now comes first.
"""

import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
REPRO = os.path.join(ROOT, "tests", "faults", "repro_stale.py")


class StaleReprosTest(unittest.TestCase):

    def test_reads_in_another_process_after_a_pause(self):
        out = subprocess.run([sys.executable, REPRO, "pauseother", "2"],
                             cwd=ROOT, capture_output=True, text=True,
                             timeout=240)
        text = out.stdout + out.stderr
        self.assertEqual(out.returncode, 0, text)
        self.assertIn("after SIGCONT:", text)


if __name__ == "__main__":
    unittest.main()
