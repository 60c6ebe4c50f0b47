"""Unit tests of tests/faults/staleness.py on small hand-written histories
of register writes and bounded-stale local reads, valid and not. Each
event of a Script is one second after the one before."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import staleness  # noqa: E402
from history import Script  # noqa: E402


def verdict(s, bound=3.0):
    return staleness.check(s.ops(), lambda read: bound)


def local_read(s, process, result, key="x"):
    s.invoke(process, "local-read", key=key, via="local-host")
    s.complete(process, "ok", result)
    if result is None:  # Script keeps the invocation's value for None
        s.events[-1]["value"] = None


def replaced_long_ago(n_after):
    """x written 1, then 2 (t 0-3), then n_after writes of y (each 2 s,
    values 100, 101, ...): the next event is at t 4 + 2 * n_after."""
    s = Script()
    s.op(1, "write", 1, key="x")
    s.op(1, "write", 2, key="x")
    for n in range(n_after):
        s.op(3, "write", 100 + n, key="y")
    return s


class StalenessTest(unittest.TestCase):
    def test_fresh_reads(self):
        s = Script()
        local_read(s, 2, None)
        s.op(1, "write", 1, key="x")
        local_read(s, 2, 1)
        s.op(1, "cas", [1, 2], key="x")
        local_read(s, 2, 2)
        self.assertEqual(verdict(s), [])

    def test_stale_within_bound(self):
        """A read may return a value replaced less than the bound before
        it began."""
        s = Script()
        s.op(1, "write", 1, key="x")       # t 0-1
        s.op(1, "write", 2, key="x")       # t 2-3
        local_read(s, 2, 1)                # begins at t 4: 1 s after
        self.assertEqual(verdict(s, bound=1.5), [])

    def test_stale_beyond_bound(self):
        """Value 1 was replaced by write 2, acknowledged 5 s before the
        read began: beyond a bound of 3 s."""
        s = replaced_long_ago(2)
        local_read(s, 2, 1)                # begins at t 8
        f = verdict(s)
        self.assertEqual([a.kind for a in f], ["stale-read"])
        self.assertEqual(f[0].replaced.value, 2)
        self.assertAlmostEqual(f[0].late, 2.0)
        self.assertIn("past its bound of 3.000 s", str(f[0]))

    def test_no_row_beyond_bound(self):
        s = Script()
        s.op(1, "write", 1, key="x")       # t 0-1
        for n in range(3):
            s.op(3, "write", 100 + n, key="y")   # t 2-7
        local_read(s, 2, None)             # begins at t 8
        f = verdict(s)
        self.assertEqual([a.kind for a in f], ["stale-read"])
        self.assertIsNone(f[0].wrote)
        self.assertIn("returned no row", str(f[0]))

    def test_concurrent_writes_do_not_prove_an_order(self):
        """Writes 1 and 2 overlap, so 2 may have taken effect first and
        1 be current still: reading 1 long after both is no anomaly."""
        s = Script()
        s.invoke(1, "write", 1, key="x")
        s.invoke(3, "write", 2, key="x")
        s.complete(1, "ok")
        s.complete(3, "ok")
        for n in range(4):
            s.op(4, "write", 100 + n, key="y")
        local_read(s, 2, 1)
        self.assertEqual(verdict(s), [])

    def test_info_write_may_take_effect_late(self):
        """An info write may take effect any time: a value it wrote is
        never proved replaced by it, nor does it replace another."""
        s = Script()
        s.op(1, "write", 1, key="x")
        s.op(3, "write", 2, key="x", type_="info")
        for n in range(4):
            s.op(4, "write", 100 + n, key="y")
        local_read(s, 2, 1)
        local_read(s, 2, 2)
        self.assertEqual(verdict(s), [])

    def test_failed_write_garbage_and_future(self):
        s = Script()
        s.op(1, "write", 1, key="x", type_="fail")
        local_read(s, 2, 1)
        local_read(s, 2, 7)
        local_read(s, 2, 5)
        s.op(1, "write", 5, key="x")
        kinds = [a.kind for a in verdict(s)]
        self.assertEqual(kinds, ["garbage", "failed-write-read",
                                 "future-read"])

    def test_keys_apart_and_failed_reads_ignored(self):
        s = replaced_long_ago(4)
        local_read(s, 2, 103, key="y")
        s.invoke(2, "local-read", key="x", via="local-host")
        s.complete(2, "fail", error="access to kv.v is prohibited")
        self.assertEqual(verdict(s), [])

    def test_bound_per_read(self):
        """The bound is the read's own (its path's allowance)."""
        s = replaced_long_ago(2)
        local_read(s, 2, 1)
        wide = staleness.check(s.ops(), lambda r: 6.0)
        self.assertEqual(wide, [])


if __name__ == "__main__":
    unittest.main()
