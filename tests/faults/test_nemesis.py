"""Unit tests of the link sets of tests/faults/nemesis.py's partitions
(asymmetric and bridge partitions, a minority of 3 and 5 nodes) and of
tests/faults/recovery.py's recovery times on hand-written histories."""

import math
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nemesis  # noqa: E402
import recovery  # noqa: E402
from history import Script  # noqa: E402


def reach(ids, cut):
    """{(a, b)}: the directed links of ids not in cut."""
    return {(a, b) for a in ids for b in ids if a != b} - set(cut)


class PartitionTest(unittest.TestCase):
    def test_minority(self):
        self.assertEqual(nemesis.minority(3), 1)
        self.assertEqual(nemesis.minority(5), 2)

    def test_asym(self):
        """The senders reach the receivers, which reach none of them;
        links within each side stay up."""
        cut = nemesis.asym_pairs([1, 2], [3, 4, 5])
        up = reach(range(1, 6), cut)
        for a in (1, 2):
            for b in (3, 4, 5):
                self.assertIn((a, b), up)
                self.assertNotIn((b, a), up)
        self.assertIn((1, 2), up)
        self.assertIn((2, 1), up)
        self.assertIn((3, 5), up)
        self.assertEqual(len(cut), 6)

    def test_bridge_five(self):
        """Two halves of two that cannot reach each other, both ways, and
        a bridge that reaches and is reached by all."""
        for seed in range(20):
            ids = [1, 2, 3, 4, 5]
            cut, (left, right) = nemesis.bridge_pairs(ids, 3,
                                                      random.Random(seed))
            self.assertEqual(len(left), 2)
            self.assertEqual(len(right), 2)
            self.assertEqual(sorted(left + right), [1, 2, 4, 5])
            up = reach(ids, cut)
            for i in (1, 2, 4, 5):
                self.assertIn((3, i), up)
                self.assertIn((i, 3), up)
            for a in left:
                for b in right:
                    self.assertNotIn((a, b), up)
                    self.assertNotIn((b, a), up)
            self.assertIn((left[0], left[1]), up)
            self.assertIn((right[1], right[0]), up)

    def test_bridge_three(self):
        """The majority (the bridge and one other) reaches everyone; the
        third node sees the bridge only."""
        cut, (left, right) = nemesis.bridge_pairs([1, 2, 3], 2,
                                                  random.Random(7))
        self.assertEqual(len(left) + len(right), 2)
        lone, other = left[0], right[0]
        up = reach([1, 2, 3], cut)
        self.assertEqual(set(cut), {(lone, other), (other, lone)})
        self.assertIn((2, lone), up)
        self.assertIn((lone, 2), up)


class FaultPlanTest(unittest.TestCase):
    def test_a_fault_draws_leave_the_next_as_they_were(self):
        """Seed 451370's replay lost its schedule after a full disk,
        whose number of large writes (each a few draws) depends on how
        long the cluster takes: the faults after one are the same
        however many draws it makes from its own generator."""
        kinds = ["disk", "pause", "reset", "member"]
        plans = []
        for extra in (0, 1, 7):
            rng = random.Random(451370)
            pause, kind, own = nemesis.fault_plan(rng, kinds)
            for _ in range(extra):
                own.random()
            plans.append([(pause, kind)] + [nemesis.fault_plan(rng, kinds)[:2]
                                            for _ in range(5)])
        self.assertEqual(plans[0], plans[1])
        self.assertEqual(plans[0], plans[2])
        self.assertTrue(all(0.2 <= p <= 1.2 and k in kinds
                            for p, k in plans[0]))


def ops_of(events):
    """A Script with events [(process, f, type, via)] in sequence, each
    invoked and completed at once (op k invoked at 2k, completed at
    2k + 1)."""
    s = Script()
    for process, f, type_, via in events:
        s.invoke(process, f, via=via)
        s.complete(process, type_)
    return s.ops()


class RecoveryTest(unittest.TestCase):
    def test_first_ok_write_after_the_heal(self):
        """Reads, failures, writes invoked before the heal and the final
        reads do not count."""
        ops = ops_of([("a", "write", "ok", "exec"),      # 0 -> 1
                      ("a", "read", "ok", "query"),      # 2 -> 3
                      ("a", "insert", "fail", "exec"),   # 4 -> 5
                      ("f", "txn", "ok", "final"),       # 6 -> 7
                      ("a", "transfer", "ok", "exec")])  # 8 -> 9
        got = recovery.times(ops, [("kill", 0.5), ("pause", 8.0),
                                   ("drop", 8.5)])
        self.assertEqual(got[0], ("kill", 8.5))
        self.assertEqual(got[1], ("pause", 1.0))
        self.assertEqual(got[2][0], "drop")
        self.assertTrue(math.isinf(got[2][1]))

    def test_overlap_takes_the_earliest_completion(self):
        """A write invoked later but acknowledged first is the
        recovery."""
        s = Script()
        s.invoke("a", "write", via="exec")    # 0, completes at 3
        s.invoke("b", "stamp", via="exec")    # 1, completes at 2
        s.complete("b", "ok")
        s.complete("a", "ok")
        got = recovery.times(s.ops(), [("hold", 0.0)])
        self.assertEqual(got, [("hold", 2.0)])


class MountProbeTest(unittest.TestCase):
    @unittest.skipUnless(os.geteuid() == 0, "mounting a tmpfs needs root")
    def test_probe_beside_a_file_named_probe(self):
        """The full-disk fault's tmpfs probe is not fooled by a file
        named probe in its folder (a stray /tmp/probe made every run
        skip the fault: "cannot mount a tmpfs ([Errno 17] File exists:
        '/tmp/probe')"), and leaves nothing behind."""
        import tempfile
        from nodes import mount_permitted
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "probe"), "w").close()
            self.assertIsNone(mount_permitted(d))
            self.assertEqual(os.listdir(d), ["probe"])


if __name__ == "__main__":
    unittest.main()
