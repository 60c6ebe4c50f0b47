"""The checks' own tests: each one fails on a history or final state that
breaks its property (tests/faults/checks.py), with no cluster."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
from history import Script  # noqa: E402
from workload import ACCOUNTS, BALANCE, Workload, Write  # noqa: E402


def write(key, kind, outcome, args=None, plain=None):
    w = Write(key, kind, 1, args, plain)
    w.outcome = outcome
    w.error = None if outcome == "ok" else "an error"
    return w


def snap(ops=None, transfers=None, ledger=(), accounts=None, applied=9,
         hashes=None):
    return {"ops": dict(ops or {}), "transfers": dict(transfers or {}),
            "bulk": {}, "ledger": list(ledger),
            "accounts": dict(accounts or {i: BALANCE
                                          for i in range(1, ACCOUNTS + 1)}),
            "hashes": hashes or {"ops": "h"}, "status": {"applied": applied}}


def failing(results):
    return {name for name, problems in results if problems}


class WorkloadStub(Workload):
    def __init__(self):  # no cluster, no threads
        self.leaders, self.reporters = {}, {}
        self.reads, self.bad_reads = 0, []


class ChecksTest(unittest.TestCase):

    def test_writes_hold(self):
        writes = [write("a", "insert", "ok"), write("b", "insert", "failed"),
                  write("c", "insert", "unknown"),
                  write("d", "insert", "unknown")]
        s = snap(ops={"a": 1, "c": 1})
        self.assertEqual(failing(checks.check_writes(writes, {1: s, 2: s})),
                         set())

    def test_each_write_property_fails(self):
        writes = [write("a", "insert", "ok"), write("b", "insert", "failed"),
                  write("c", "insert", "unknown")]
        cases = {
            "acknowledged writes present once": {"a": 2, "c": 1},
            "failed writes absent": {"a": 1, "b": 1},
            "unknown writes at most once": {"a": 1, "c": 2},
            "no write never made": {"a": 1, "zz": 1},
        }
        for name, ops in cases.items():
            got = failing(checks.check_writes(writes, {1: snap(ops=ops)}))
            self.assertEqual(got, {name}, ops)
        # Lost on one node only.
        got = failing(checks.check_writes(
            writes, {1: snap(ops={"a": 1}), 2: snap(ops={})}))
        self.assertEqual(got, {"acknowledged writes present once"})

    def test_replicas(self):
        self.assertFalse(checks.check_replicas({1: snap(), 2: snap()})[1])
        self.assertTrue(checks.check_replicas(
            {1: snap(), 2: snap(hashes={"ops": "other"})})[1])
        self.assertTrue(checks.check_replicas(
            {1: snap(), 2: snap(applied=8)})[1])

    def test_leaders(self):
        wl = WorkloadStub()
        wl.leaders = {3: {1}, 4: {2}}
        wl.reporters = {(3, 1): {1, 2}, (4, 2): {2}}
        self.assertFalse(checks.check_leaders(wl)[1])
        wl.leaders[4].add(3)
        wl.reporters[(4, 3)] = {3}
        self.assertEqual(len(checks.check_leaders(wl)[1]), 1)

    def test_bank(self):
        wl = WorkloadStub()
        t = write("t", "transfer", "ok", (1, 2, 30, None, None))
        moved = {i: BALANCE for i in range(1, ACCOUNTS + 1)}
        moved[1] -= 30
        moved[2] += 30
        good = snap(ledger=[("t", 1, 2, 30, None, None)], accounts=moved)
        self.assertFalse(checks.check_bank(wl, [t], {1: good})[1])
        # The money moved without its record, or the record lies.
        self.assertTrue(checks.check_bank(wl, [t], {1: snap(
            accounts=moved)})[1])
        self.assertTrue(checks.check_bank(wl, [t], {1: snap(
            ledger=[("t", 1, 2, 31, None, None)], accounts=moved)})[1])
        # A plain transfer recorded with other balances read than made.
        p = write("p", "transfer", "ok", (1, 2, 30, 100, 100), "host")
        self.assertFalse(checks.check_bank(wl, [p], {1: snap(
            ledger=[("p", 1, 2, 30, 100, 100)], accounts=moved)})[1])
        self.assertTrue(checks.check_bank(wl, [p], {1: snap(
            ledger=[("p", 1, 2, 30, 100, 99)], accounts=moved)})[1])
        # Money made, and a bad read during the run.
        rich = dict(moved)
        rich[3] += 1
        self.assertTrue(checks.check_bank(wl, [t], {1: snap(
            ledger=[("t", 1, 2, 30, None, None)], accounts=rich)})[1])
        wl.bad_reads.append((2, 799, ACCOUNTS))
        self.assertTrue(checks.check_bank(wl, [t], {1: good})[1])

    def test_plain_reads(self):
        made = [write("a", "transfer", "ok", (1, 2, 30, 100, 100), "host"),
                write("b", "transfer", "ok", (3, 1, 5, None, None)),
                write("c", "transfer", "ok", (1, 3, 10, 75, 95),
                      "attached")]
        ledger = [("a", 1, 2, 30, 100, 100), ("b", 3, 1, 5, None, None),
                  ("c", 1, 3, 10, 75, 95)]
        self.assertFalse(checks.check_plain_reads(
            made, {1: snap(ledger=ledger)})[1])
        # c read account 1 before b's entry, which its entry follows: an
        # update lost (b's 5), though the totals still agree.
        stale = ledger[:2] + [("c", 1, 3, 10, 70, 95)]
        self.assertEqual(len(checks.check_plain_reads(
            made, {1: snap(ledger=ledger), 2: snap(ledger=stale)})[1]), 1)
        # The same ledger in another order.
        self.assertTrue(checks.check_plain_reads(
            made, {1: snap(ledger=[ledger[1], ledger[0], ledger[2]])})[1])
        # No plain transfer acknowledged through a channel: nothing checked.
        self.assertTrue(checks.check_plain_reads(
            made[:2], {1: snap(ledger=ledger[:2])})[1])

    def test_history_checks(self):
        """The history checks hold on a valid history through every path,
        fail on one path missing, a stale read, a lost append."""
        s = Script()
        for via in ("exec", "plain-host", "plain-attached"):
            s.invoke(1, "write", len(s.events), key=1, via=via)
            s.complete(1, "ok")
        for via in ("barrier-host", "barrier-attached", "query"):
            s.invoke(2, "read", key=1, via=via)
            s.complete(2, "ok", s.events[-2]["value"])
        for via in ("exec", "plain-host", "plain-attached"):
            s.invoke(3, "txn", [["append", 1, len(s.events)]], via=via)
            s.complete(3, "ok")
        s.invoke(4, "txn", [["r", 1, None]], via="final")
        s.complete(4, "ok", [["r", 1, [12, 14, 16]]])
        ops = s.ops()
        final = ops[-1:]
        self.assertEqual(failing([checks.check_registers(ops),
                                  checks.check_appends(ops, final)]), set())
        name, problems = checks.check_registers(ops[1:])
        self.assertEqual(problems, ["no ok write through exec"])
        ops[5].value = 0  # the last read returns the first write's value
        self.assertIn("cannot be linearized",
                      checks.check_registers(ops)[1][0])
        ops[-1].value = [["r", 1, [12, 14]]]
        self.assertIn("lost-append", checks.check_appends(ops, final)[1][0])

    def test_staleness_and_clock_checks(self):
        """The local reads' check holds when both paths served a fresh
        read, fails on a path missing and on a stale read; the clock's
        holds on rising stamps, fails on none ok and on one going
        back."""
        s = Script()
        s.invoke(1, "write", 1, key="fresh", via="exec")
        s.complete(1, "ok")
        for via in ("local-host", "local-attached"):
            s.invoke(2, "local-read", key="fresh", via=via)
            s.complete(2, "ok", 1)
        for n in (1, 2):
            s.op(3, "stamp", [3, n])
        s.invoke("final", "clock-read", via="final")
        rows = [[1, "2026-12-03 15:00:00.001", 3, 1],
                [2, "2026-12-03 15:00:00.002", 3, 2]]
        s.complete("final", "ok", rows)
        ops = s.ops()
        self.assertEqual(failing([checks.check_staleness(ops, 500),
                                  checks.check_clock(ops)]), set())
        self.assertEqual(checks.check_staleness(ops[:2], 500)[1],
                         ["no ok local-read through local-attached"])
        self.assertIn("no ok stamp: nothing checked",
                      checks.check_clock(ops[-1:])[1])
        # Value 1 read a second (one tick) after write 2 was acknowledged.
        s2 = Script()
        s2.op(1, "write", 1, key="fresh")
        s2.op(1, "write", 2, key="fresh")
        s2.invoke(2, "local-read", key="fresh", via="local-host")
        s2.complete(2, "ok", 1)
        self.assertIn("stale-read",
                      checks.check_staleness(s2.ops(), 500)[1][0])
        rows.reverse()
        self.assertIn("backwards", checks.check_clock(s.ops())[1][0])


if __name__ == "__main__":
    unittest.main()
