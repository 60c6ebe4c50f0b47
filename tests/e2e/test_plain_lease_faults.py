"""End-to-end: two findings of the fault campaign's plain writers
(tests/faults/repro_plain.py, which exits 1 when it reproduces one):

- resend: a follower's COMMIT whose answer the leader's link held, the
  leader killed and restarted, the COMMIT sent again: the restarted
  leader no longer knows the lease, and answered "not applied" although
  the entry was committed and applied on every node. It answers "outcome
  unknown" now (only the process that granted a lease can tell that its
  changeset was not appended).
- fulldisk: a plain write on a follower whose log disk is full took the
  write lease again and again (each time waiting exec_timeout_ms for the
  node to catch up), past its busy timeout, holding every other writer
  back. It is refused at once now, with the reason.
- noquorum: a plain write on a learner while no quorum commits (the
  other follower's log disk full) answered SQLITE_BUSY after 41 s with a
  busy timeout of 5 s: each try waited exec_timeout_ms for entries that
  could not commit. A try now gives up once nothing applied for 500 ms
  (20 ms on the busy handler's retry): about 10 s.
"""

import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
REPRO = os.path.join(ROOT, "tests", "faults", "repro_plain.py")


def repro(*args, timeout=240):
    """Run the reproduction; its exit status and output."""
    out = subprocess.run([sys.executable, REPRO, *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


class PlainLeaseFaultsTest(unittest.TestCase):

    def test_resent_commit_to_a_restarted_leader(self):
        rc, out = repro("resend", "2")
        self.assertEqual(rc, 0, out)
        self.assertIn("outcome unknown", out)

    @unittest.skipUnless(os.geteuid() == 0, "needs root (a tmpfs per node)")
    def test_plain_write_on_a_node_whose_log_disk_is_full(self):
        rc, out = repro("fulldisk", "40")
        self.assertEqual(rc, 0, out)

    @unittest.skipUnless(os.geteuid() == 0, "needs root (a tmpfs per node)")
    def test_plain_write_without_a_quorum(self):
        rc, out = repro("noquorum", "1")
        self.assertEqual(rc, 0, out)
        self.assertIn("database is locked after", out)


if __name__ == "__main__":
    unittest.main()
