"""Unit tests of tests/faults/monotonic.py on small hand-written
histories of stamped writes and the final read of their table, valid
and not."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import monotonic  # noqa: E402
from history import Script  # noqa: E402

T = "2026-12-03 15:00:0%d.%03d"


def history(outcomes, rows, read="ok"):
    """Stamp writes [1, n] of the outcomes given, then the final read
    returning rows ([rowid, stamp, client, n])."""
    s = Script()
    for n, type_ in enumerate(outcomes, 1):
        s.op(1, "stamp", [1, n], type_=type_)
    s.invoke("final", "clock-read", via="final")
    s.complete("final", read, rows if read == "ok" else None)
    return s


def kinds(s):
    return [a.kind for a in monotonic.check(s.ops())]


class MonotonicTest(unittest.TestCase):
    def test_non_decreasing(self):
        """Equal stamps (one batch, or one millisecond) are fine."""
        s = history(["ok", "ok", "info", "ok"], [
            [1, T % (1, 5), 1, 1], [2, T % (1, 5), 1, 2],
            [3, T % (2, 0), 1, 4]])
        self.assertEqual(kinds(s), [])

    def test_backwards(self):
        """A new leader whose stamp is earlier than its predecessor's."""
        s = history(["ok", "ok", "ok"], [
            [1, T % (1, 5), 1, 1], [2, T % (3, 0), 1, 2],
            [3, T % (2, 999), 1, 3]])
        f = monotonic.check(s.ops())
        self.assertEqual([a.kind for a in f], ["backwards"])
        self.assertIn("row 3 2026-12-03 15:00:02.999", str(f[0]))
        self.assertIn("after row 2 2026-12-03 15:00:03.000", str(f[0]))

    def test_lost_duplicate_failed_garbage(self):
        s = history(["ok", "ok", "fail"], [
            [1, T % (1, 0), 1, 1], [2, T % (1, 1), 1, 1],
            [3, T % (1, 2), 1, 3], [4, T % (1, 3), 9, 9]])
        self.assertEqual(sorted(kinds(s)), ["duplicate", "failed",
                                             "garbage", "lost"])

    def test_unread(self):
        s = history(["ok"], None, read="fail")
        self.assertEqual(kinds(s), ["unread"])
        s = Script()
        s.op(1, "stamp", [1, 1])
        self.assertEqual(kinds(s), ["unread"])


if __name__ == "__main__":
    unittest.main()
