"""Unit tests of tests/faults/elle.py on small hand-written list-append
histories: serializable ones, and each anomaly class (G0, G1a, G1b, G1c,
lost update as G-single, write skew as G2-item, duplicated and reordered
appends, internal, garbage and lost appends)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import elle  # noqa: E402
from history import Script  # noqa: E402


def txn(s, p, mops, type_="ok", result=None):
    """Process p runs the transaction mops, completing as type_ with the
    reads of result (mops with every read filled in) when given."""
    s.invoke(p, "txn", mops)
    s.complete(p, type_, result)


def kinds(s, **kw):
    return sorted(a.kind for a in elle.check(s.ops(), **kw))


def A(k, v):
    return ["append", k, v]


def R(k, v=None):
    return ["r", k, v]


class SerializableTest(unittest.TestCase):
    def test_serial(self):
        s = Script()
        txn(s, 1, [A("x", 1), A("y", 1)])
        txn(s, 2, [R("x"), A("x", 2)], result=[R("x", [1]), A("x", 2)])
        txn(s, 1, [R("x"), R("y")], result=[R("x", [1, 2]), R("y", [1])])
        txn(s, 2, [R("z")], result=[R("z", [])])
        self.assertEqual(elle.check(s.ops()), [])

    def test_own_appends_seen(self):
        s = Script()
        txn(s, 1, [A("x", 1), R("x"), A("x", 2), R("x")],
            result=[A("x", 1), R("x", [1]), A("x", 2), R("x", [1, 2])])
        self.assertEqual(elle.check(s.ops()), [])

    def test_info_committed_when_read(self):
        """An info transaction whose append was read took effect; one
        never read is no anomaly."""
        s = Script()
        txn(s, 1, [A("x", 1)], type_="info")
        txn(s, 2, [A("y", 5)], type_="info")
        txn(s, 3, [R("x")], result=[R("x", [1])])
        txn(s, 3, [R("y")], result=[R("y", [])])
        self.assertEqual(elle.check(s.ops()), [])


class AnomalyTest(unittest.TestCase):
    def test_g0(self):
        """Two transactions' appends interleave in opposite orders on two
        keys: a write cycle."""
        s = Script()
        txn(s, 1, [A("x", 1), A("y", 1)])
        txn(s, 2, [A("x", 2), A("y", 2)])
        txn(s, 3, [R("x"), R("y")], result=[R("x", [1, 2]),
                                            R("y", [2, 1])])
        self.assertEqual(kinds(s), ["G0"])
        a = elle.check(s.ops())[0]
        self.assertEqual(len(a.cycle), 2)
        self.assertEqual({e[1] for e in a.cycle}, {"ww"})
        self.assertIn("T0 -ww-> T2", str(a).replace("T2 -ww-> T0",
                                                    "T0 -ww-> T2"))

    def test_g1c(self):
        """Each transaction read the other's append: circular
        information flow."""
        s = Script()
        s.invoke(1, "txn", [A("x", 1), R("y")])
        s.invoke(2, "txn", [A("y", 1), R("x")])
        s.complete(1, "ok", [A("x", 1), R("y", [1])])
        s.complete(2, "ok", [A("y", 1), R("x", [1])])
        self.assertEqual(kinds(s), ["G1c"])

    def test_lost_update(self):
        """Two read-modify-writes read the same empty list and both
        appended: one update was lost (one anti-dependency)."""
        s = Script()
        s.invoke(1, "txn", [R("x"), A("x", 1)])
        s.invoke(2, "txn", [R("x"), A("x", 2)])
        s.complete(1, "ok", [R("x", []), A("x", 1)])
        s.complete(2, "ok", [R("x", []), A("x", 2)])
        txn(s, 3, [R("x")], result=[R("x", [1, 2])])
        self.assertEqual(kinds(s), ["G-single"])
        a = elle.check(s.ops())[0]
        self.assertEqual(sorted(e[1] for e in a.cycle), ["rw", "ww"])

    def test_write_skew(self):
        """Each read both keys empty and appended to a different one: two
        anti-dependencies (G2-item)."""
        s = Script()
        s.invoke(1, "txn", [R("x"), R("y"), A("x", 1)])
        s.invoke(2, "txn", [R("x"), R("y"), A("y", 1)])
        s.complete(1, "ok", [R("x", []), R("y", []), A("x", 1)])
        s.complete(2, "ok", [R("x", []), R("y", []), A("y", 1)])
        txn(s, 3, [R("x"), R("y")], result=[R("x", [1]), R("y", [1])])
        self.assertEqual(kinds(s), ["G2-item"])
        a = elle.check(s.ops())[0]
        self.assertEqual([e[1] for e in a.cycle], ["rw", "rw"])

    def test_g1a(self):
        s = Script()
        txn(s, 1, [A("x", 1)], type_="fail")
        txn(s, 2, [R("x")], result=[R("x", [1])])
        self.assertEqual(kinds(s), ["G1a"])

    def test_g1b(self):
        s = Script()
        txn(s, 1, [A("x", 1), A("x", 2)])
        txn(s, 2, [R("x")], result=[R("x", [1])])
        txn(s, 2, [R("x")], result=[R("x", [1, 2])])
        self.assertEqual(kinds(s), ["G1b"])

    def test_duplicated_append(self):
        """An append applied twice shows its value twice."""
        s = Script()
        txn(s, 1, [A("x", 1)])
        txn(s, 1, [A("x", 2)])
        txn(s, 2, [R("x")], result=[R("x", [1, 2, 1])])
        self.assertIn("duplicate-elements", kinds(s))

    def test_reordered_appends(self):
        """Two reads saw the same appends in different orders."""
        s = Script()
        txn(s, 1, [A("x", 1)])
        txn(s, 1, [A("x", 2)])
        txn(s, 2, [R("x")], result=[R("x", [1, 2])])
        txn(s, 2, [R("x")], result=[R("x", [2, 1])])
        self.assertEqual(kinds(s), ["incompatible-order"])

    def test_duplicate_append_value(self):
        s = Script()
        txn(s, 1, [A("x", 1)])
        txn(s, 2, [A("x", 1)])
        self.assertEqual(kinds(s), ["duplicate-append"])

    def test_internal(self):
        """A transaction that does not read its own append, or whose
        second read of a key differs from its first (that second one is
        also a cycle: the writer of 3 both follows and precedes it)."""
        s = Script()
        txn(s, 1, [A("x", 1), R("x")], result=[A("x", 1), R("x", [])])
        txn(s, 2, [R("y"), R("y")], result=[R("y", []), R("y", [3])])
        txn(s, 3, [A("y", 3)])
        self.assertEqual(kinds(s), ["G-single", "internal", "internal"])

    def test_garbage(self):
        s = Script()
        txn(s, 1, [R("x")], result=[R("x", [42])])
        self.assertEqual(kinds(s), ["garbage"])

    def test_lost_append(self):
        """A final read, after every operation, misses an ok append."""
        s = Script()
        txn(s, 1, [A("x", 1)])
        txn(s, 1, [A("x", 2)])
        txn(s, 2, [R("x")], result=[R("x", [1])])
        fin = s.ops()[-1]
        self.assertEqual(kinds(s), [])
        self.assertEqual(kinds(s, final_reads=[fin]), ["lost-append"])

    def test_scc(self):
        """Tarjan finds the two cycles and leaves the chain out."""
        g = {1: {2: 0}, 2: {1: 0, 3: 0}, 3: {4: 0}, 4: {5: 0}, 5: {3: 0},
             6: {1: 0}}
        self.assertEqual(sorted(sorted(c) for c in elle.scc(g)),
                         [[1, 2], [3, 4, 5]])


if __name__ == "__main__":
    unittest.main()
