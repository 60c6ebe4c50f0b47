"""Unit tests of tests/faults/history.py: the outcome of each error, the
recorder, the file format and the pairing of invocations and
completions."""

import math
import os
import tempfile
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import history  # noqa: E402
from history import (History, Script, commit_outcome,  # noqa: E402
                     exec_outcome)


class OutcomeTest(unittest.TestCase):
    def test_exec_codes(self):
        """The "not applied" codes of docs/errors.md fail, the unknown ones
        and a dead or silent process are info, a SQL error of the entry
        fails."""
        cases = [
            (25861, "raft_exec: not applied: no leader", "fail"),
            (26373, "raft_barrier: no quorum confirmed", "fail"),
            (28951, "raft_exec: not applied: VACUUM ...", "fail"),
            (275, "CHECK constraint failed: balance >= 0", "fail"),
            (1, "no such table: kv", "fail"),
            (-1, "node 2 is down (not sent)", "fail"),
            (27393, "raft_exec: outcome unknown: leadership lost", "info"),
            (27913, "raft_exec: interrupted: outcome unknown", "info"),
            (-1, "node 2 exited (see node2.log)", "info"),
            (-2, "node 2 did not answer within 23 s", "info"),
            (None, "something new", "info"),
            (31337 << 8 | 1, "a code this table does not know", "info"),
            (1, "raft_exec: outcome unknown: deadline", "info"),
        ]
        for code, msg, want in cases:
            self.assertEqual(exec_outcome(code, msg), want, (code, msg))

    def test_commit_codes(self):
        """A vetoed COMMIT follows its reason; busy and auth fail; the rest
        of a committing statement's errors are info."""
        cases = [
            (531, "constraint failed", "commit to f refused, rolled back: "
             "the lease was lost", "fail"),
            (531, "constraint failed", "commit to f refused: outcome "
             "unknown: no quorum", "info"),
            (531, "constraint failed", None, "info"),
            (5, "database is locked", None, "fail"),
            (517, "database is locked", None, "fail"),
            (23, "not authorized", "no node", "fail"),
            (13, "database or disk is full", None, "info"),
            (-1, "node 1 exited (see x)", None, "info"),
            (-1, "node 1 exited (not sent)", None, "fail"),
            (-2, "did not answer", None, "info"),
        ]
        for code, msg, reason, want in cases:
            self.assertEqual(commit_outcome(code, msg, reason), want,
                             (code, msg, reason))


class RecorderTest(unittest.TestCase):
    def test_round_trip(self):
        """Events written as JSON lines load back equal, and pair into
        ops with their results; an open op is info, its end infinite."""
        h = History()
        a = h.invoke("p1", 1, "write", 5, "exec", key=3)
        b = h.invoke("p2", 2, "read", None, "barrier", key=3)
        h.complete(b, "ok", 5)
        h.complete(a, "ok", 5)
        h.invoke("p3", 3, "txn", [["append", 1, 1]], "query")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "history.jsonl")
            self.assertEqual(h.write(path), 5)
            evs = history.load(path)
        self.assertEqual(evs, h.events())
        self.assertEqual([e["index"] for e in evs], list(range(5)))
        ops = history.pair(evs)
        self.assertEqual([(o.f, o.type, o.key, o.value) for o in ops],
                         [("write", "ok", 3, 5), ("read", "ok", 3, 5),
                          ("txn", "info", None, [["append", 1, 1]])])
        self.assertLess(ops[0].t0, ops[1].t0)
        self.assertTrue(math.isinf(ops[2].t1))
        self.assertEqual(history.counts(ops), {"write ok": 1, "read ok": 1,
                                               "txn info": 1})

    def test_bad_completions(self):
        h = History()
        a = h.invoke("p", 1, "write", 1, "exec", key=1)
        with self.assertRaisesRegex(ValueError, "want ok, fail or info"):
            h.complete(a, "done")
        h.complete(a, "fail", error="no leader")
        with self.assertRaisesRegex(ValueError, "is not open"):
            h.complete(a, "ok")

    def test_threads(self):
        """Concurrent recorders keep ids and indexes unique and pairs
        whole."""
        h = History()

        def run(p):
            for _ in range(200):
                op = h.invoke(p, 1, "write", p, "exec", key=p)
                h.complete(op, "ok", p)

        ts = [threading.Thread(target=run, args=(p,)) for p in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        ops = history.pair(h.events())
        self.assertEqual(len(ops), 800)
        self.assertTrue(all(o.type == "ok" for o in ops))

    def test_pair_rejects(self):
        s = Script()
        s.invoke(1, "write", 1, key=1)
        s.invoke(1, "write", 2, key=1)
        with self.assertRaisesRegex(ValueError, "while op 0 is open"):
            s.ops()
        evs = [{"id": 7, "type": "ok", "mono": 0.0, "f": "read"}]
        with self.assertRaisesRegex(ValueError, "without an open"):
            history.pair(evs)

    def test_load_names_bad_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "h.jsonl")
            with open(path, "w") as f:
                f.write('{"id": 1}\n[1, 2]\n')
            with self.assertRaisesRegex(ValueError, "h.jsonl:2: not a JSON "
                                        "object"):
                history.load(path)


if __name__ == "__main__":
    unittest.main()
