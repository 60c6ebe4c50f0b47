"""Unit tests of tests/faults/linearizable.py on small hand-written
register histories, valid and not (stale read, lost update, a read of a
failed write, ...), and a timed check of a large generated one.

LIN_BENCH_OPS (default 10000) sets the generated history's operations
per key; its time is printed, not bounded."""

import os
import random
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import history  # noqa: E402
import linearizable  # noqa: E402
from history import Script  # noqa: E402


def verdict(s):
    return linearizable.check(s.ops())


class SmallHistoryTest(unittest.TestCase):
    def test_sequential_valid(self):
        s = Script()
        s.op(1, "read", key="x", result=None)
        s.op(1, "write", 1, key="x")
        s.op(2, "read", key="x", result=1)
        s.op(2, "cas", [1, 2], key="x")
        s.op(1, "read", key="x", result=2)
        self.assertEqual(verdict(s), [])

    def test_concurrent_read_sees_either(self):
        """A read overlapping a write may return the old or the new
        value; two overlapping reads may even see new then old if both
        overlap the write."""
        for seen in (None, 1):
            s = Script()
            s.invoke(1, "write", 1, key="x")
            s.invoke(2, "read", key="x")
            s.complete(2, "ok", seen)
            s.complete(1, "ok")
            self.assertEqual(verdict(s), [], seen)

    def test_stale_read(self):
        """A read that begins after write 2 was acknowledged returns 1."""
        s = Script()
        s.op(1, "write", 1, key="x")
        s.op(1, "write", 2, key="x")
        s.op(2, "read", key="x", result=1)
        f = verdict(s)
        self.assertEqual(len(f), 1)
        self.assertEqual(f[0].key, "x")
        self.assertEqual(f[0].op.f, "read")
        self.assertEqual(f[0].state, 2)
        self.assertIn("cannot be linearized", str(f[0]))

    def test_read_goes_back(self):
        """Once a read saw 2, a later read may not see 1 again."""
        s = Script()
        s.invoke(1, "write", 1, key="x")
        s.complete(1, "ok")
        s.invoke(1, "write", 2, key="x")
        s.op(2, "read", key="x", result=2)
        s.op(3, "read", key="x", result=1)
        s.complete(1, "ok")
        self.assertEqual(len(verdict(s)), 1)

    def test_lost_update(self):
        """Two compare-and-sets from 0 both succeed: one update lost. One
        of them failing is fine."""
        for second, anomalies in (("ok", 1), ("fail", 0)):
            s = Script()
            s.op(1, "write", 0, key="x")
            s.invoke(1, "cas", [0, 1], key="x")
            s.invoke(2, "cas", [0, 2], key="x")
            s.complete(1, "ok")
            s.complete(2, second)
            s.op(2, "read", key="x", result=1 if second == "fail" else 2)
            self.assertEqual(len(verdict(s)), anomalies, second)

    def test_failed_write_read(self):
        """A failed write took no effect: reading its value is an anomaly."""
        s = Script()
        s.op(1, "write", 7, type_="fail", key="x")
        s.op(2, "read", key="x", result=7)
        self.assertEqual(len(verdict(s)), 1)

    def test_info_write_any_time_after(self):
        """An info write may take effect long after it ended, or never;
        never before its invocation."""
        s = Script()
        s.op(1, "write", 7, type_="info", key="x")
        s.op(2, "read", key="x", result=None)
        s.op(2, "read", key="x", result=7)
        s.op(2, "read", key="x", result=7)
        self.assertEqual(verdict(s), [])
        s = Script()
        s.op(2, "read", key="x", result=7)
        s.op(1, "write", 7, type_="info", key="x")
        self.assertEqual(len(verdict(s)), 1)
        s = Script()
        s.op(1, "write", 7, type_="info", key="x")
        s.op(2, "read", key="x", result=7)
        s.op(2, "read", key="x", result=None)
        self.assertEqual(len(verdict(s)), 1)

    def test_info_read_ignored(self):
        s = Script()
        s.op(1, "write", 1, key="x")
        s.op(2, "read", key="x", type_="info", result=99)
        self.assertEqual(verdict(s), [])

    def test_keys_apart(self):
        """Each key is its own register: a valid key does not hide an
        invalid one, and the failure names its key."""
        s = Script()
        s.op(1, "write", 1, key="a")
        s.op(1, "write", 1, key="b")
        s.op(2, "read", key="a", result=1)
        s.op(2, "read", key="b", result=None)
        f = verdict(s)
        self.assertEqual([x.key for x in f], ["b"])

    def test_budget(self):
        s = Script()
        for p in range(8):
            s.invoke(p, "write", p, key="x")
        for p in range(8):
            s.complete(p, "ok")
        s.op(9, "read", key="x", result=-1)
        with self.assertRaisesRegex(RuntimeError, "key 'x': search over"):
            linearizable.check(s.ops(), budget=50)


def generate(n_ops, n_procs, key, rng, start=0.0):
    """n_ops register ops on key by n_procs processes, overlapping, each
    taking effect at a random point of its interval (some info writes
    never): a linearizable history by construction, as events."""
    ops = []
    t = {p: start + rng.random() for p in range(n_procs)}
    for i in range(n_ops):
        p = rng.randrange(n_procs)
        t0 = t[p]
        t1 = t0 + rng.uniform(0.1, 3.0)
        t[p] = t1 + rng.uniform(0, 0.5)
        r = rng.random()
        f = "read" if r < 0.5 else "write" if r < 0.85 else "cas"
        ops.append({"p": "%s-%d" % (key, p), "f": f, "t0": t0, "t1": t1,
                    "lp": rng.uniform(t0, t1), "v": i,
                    "info": f != "read" and rng.random() < 0.05})
    state = None
    for op in sorted(ops, key=lambda o: o["lp"]):
        if op["info"] and rng.random() < 0.5:
            op["effect"] = False
            continue
        if op["f"] == "write":
            state = op["v"]
        elif op["f"] == "read":
            op["result"] = state
        else:
            op["old"] = state if rng.random() < 0.7 else -1
            op["ok"] = op["old"] == state
            if op["ok"]:
                state = op["v"]
    events = []
    for i, op in enumerate(ops):
        value = {"write": op["v"], "read": None,
                 "cas": [op.get("old", -1), op["v"]]}[op["f"]]
        inv = {"id": "%s-%d" % (key, i), "type": "invoke",
               "process": op["p"], "node": 1, "f": op["f"], "key": key,
               "value": value, "via": "exec", "mono": op["t0"],
               "wall": op["t0"]}
        if op["info"]:
            kind = "info"
        elif op["f"] == "cas" and not op["ok"]:
            kind = "fail"
        else:
            kind = "ok"
        done = dict(inv, type=kind, mono=op["t1"], wall=op["t1"])
        if op["f"] == "read":
            done["value"] = op["result"]
        events.append((op["t0"], inv))
        events.append((op["t1"], done))
    events.sort(key=lambda e: e[0])
    return [e for _, e in events]


class LargeHistoryTest(unittest.TestCase):
    def test_large_valid_and_broken(self):
        """A generated history of LIN_BENCH_OPS ops on each of 3 keys
        (5 processes a key) is linearizable; the same with one read made
        stale is not, and the failure names that key. The time of the
        valid check is printed."""
        n = int(os.environ.get("LIN_BENCH_OPS") or 10000)
        rng = random.Random(26)
        events = []
        for key in ("a", "b", "c"):
            events += generate(n, 5, key, rng)
        events.sort(key=lambda e: e["mono"])
        ops = history.pair(events)
        t0 = time.monotonic()
        self.assertEqual(linearizable.check(ops), [])
        took = time.monotonic() - t0
        sys.stderr.write("\nlinearizable: %d ops (%d per key, 3 keys) "
                         "checked in %.2f s\n" % (len(ops), n, took))
        # Make a late read of key b return the first value ever written.
        writes = [o for o in ops if o.key == "b" and o.f == "write" and
                  o.type == "ok"]
        late = [o for o in ops if o.key == "b" and o.f == "read" and
                o.type == "ok" and o.t0 > writes[len(writes) // 2].t1 and
                o.value != writes[0].value]
        late[0].value = writes[0].value
        f = linearizable.check(ops)
        self.assertEqual([x.key for x in f], ["b"])


if __name__ == "__main__":
    unittest.main()
