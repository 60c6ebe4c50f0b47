"""Unit tests of tests/faults/jepsen.py without a cluster: its settings and
their errors, the choice of the next episode, the records kept on disk,
and the summary table of hand-made records."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jepsen  # noqa: E402


def record(seed, nodes, faults, failed=False, recovery=(), ops=None):
    """An episode record as run.Episode.record() makes it."""
    checks = [["register history linearizable (10 ops on 3 keys)", []],
              ["replicas identical", ["node 2 differs"] if failed else []]]
    return {"seed": seed, "nodes": nodes, "kinds": sorted(faults),
            "count": sum(faults.values()), "faults": faults,
            "ops": ops or {"write ok": 3, "write info": 1, "read fail": 2},
            "checks": checks, "findings": [],
            "recovery": [list(r) for r in recovery], "converge_s": 1.5,
            "elapsed": 10.0 * sum(faults.values()), "failed": failed,
            "kept": "/k/seed-%d" % seed if failed else None,
            "replay": "make faults FAULTS_SEED=%d" % seed}


class SettingsTest(unittest.TestCase):
    def test_defaults(self):
        cfg = jepsen.settings({})
        self.assertEqual(cfg["faults"], 1000)
        self.assertEqual(cfg["sizes"], [3, 5])
        self.assertEqual(cfg["kinds"], list(jepsen.run.KINDS))
        self.assertIsNone(cfg["seconds"])
        self.assertEqual(cfg["hosts"], "loopback")
        self.assertTrue(cfg["dir"].endswith(os.path.join("build", "jepsen")))
        self.assertTrue(cfg["record"].endswith(os.path.join(
            "tests", "faults", "campaign", "loopback.jsonl")))

    def test_netns_hosts(self):
        """JEPSEN_HOSTS=netns: the kinds of that mode by default, a
        named kind it lacks refused with the reason, a folder of its
        own."""
        cfg = jepsen.settings({"JEPSEN_HOSTS": "netns"})
        self.assertEqual(cfg["hosts"], "netns")
        self.assertNotIn("delay", cfg["kinds"])
        self.assertIn("partition", cfg["kinds"])
        self.assertTrue(cfg["dir"].endswith(os.path.join("build",
                                                         "jepsen-netns")))
        self.assertTrue(cfg["record"].endswith(os.path.join(
            "campaign", "netns.jsonl")))
        with self.assertRaises(ValueError) as cm:
            jepsen.settings({"JEPSEN_HOSTS": "netns",
                             "JEPSEN_KINDS": "kill,delay"})
        self.assertIn("delay (needs netem", str(cm.exception))

    def test_errors_name_the_variable(self):
        for env, words in (({"JEPSEN_NODES": "3,4"}, "JEPSEN_NODES: '4'"),
                           ({"JEPSEN_NODES": "x"}, "JEPSEN_NODES: 'x'"),
                           ({"JEPSEN_FAULTS": "ten"}, "JEPSEN_FAULTS='ten'"),
                           ({"JEPSEN_FAULTS": "0"}, "JEPSEN_FAULTS=0"),
                           ({"JEPSEN_KINDS": "kill,flood"}, "flood"),
                           ({"JEPSEN_HOSTS": "vm"}, "JEPSEN_HOSTS='vm'")):
            with self.assertRaises(ValueError) as cm:
                jepsen.settings(env)
            self.assertIn(words, str(cm.exception))


class PlanTest(unittest.TestCase):
    def test_next_episode(self):
        """The size with the most faults to inject, the kinds it lacks,
        no more faults than lack but at least MIN_EPISODE; None once
        done."""
        cfg = jepsen.settings({"JEPSEN_FAULTS": "10", "JEPSEN_EPISODE": "25",
                               "JEPSEN_KINDS": "kill,pause"})
        self.assertEqual(jepsen.next_episode([], cfg), (3, ["kill", "pause"],
                                                        20))
        recs = [record(1, 3, {"kill": 10, "pause": 4})]
        self.assertEqual(jepsen.next_episode(recs, cfg),
                         (5, ["kill", "pause"], 20))
        recs.append(record(2, 5, {"kill": 12, "pause": 10}))
        self.assertEqual(jepsen.next_episode(recs, cfg),
                         (3, ["pause"], jepsen.MIN_EPISODE))
        small = dict(cfg, episode=4)
        self.assertEqual(jepsen.next_episode(recs, small), (3, ["pause"], 4))
        recs.append(record(3, 3, {"pause": 6}))
        self.assertIsNone(jepsen.next_episode(recs, cfg))

    def test_records_on_disk(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "campaign", "loopback.jsonl")
            self.assertEqual(jepsen.load(path), [])
            jepsen.append(path, record(1, 3, {"kill": 2}))
            jepsen.append(path, record(2, 5, {"pause": 1}))
            self.assertEqual([r["seed"] for r in jepsen.load(path)], [1, 2])
            with open(path, "a") as f:
                f.write("{\"seed\": 3}\n")
            with self.assertRaises(ValueError) as cm:
                jepsen.load(path)
            self.assertIn("record 3 lacks nodes, faults", str(cm.exception))


class TableTest(unittest.TestCase):
    def test_table(self):
        cfg = jepsen.settings({"JEPSEN_FAULTS": "4",
                               "JEPSEN_KINDS": "kill,bridge"})
        recs = [record(7, 3, {"kill": 2, "bridge": 2},
                       recovery=[("kill", 0.5), ("bridge", 2.25),
                                 ("kill", 3.0), ("bridge", None)]),
                record(8, 5, {"kill": 1}, failed=True,
                       recovery=[("kill", 0.75)])]
        text = "\n".join(jepsen.table(recs, cfg))
        self.assertIn("| kill | 2 (3.0 s, seed 7 fault 3) | "
                      "1 (0.8 s, seed 8 fault 1) |", text)
        self.assertIn("| bridge | 2 (2.2 s, seed 7 fault 2), 1 unmeasured "
                      "| 0 |", text)
        self.assertIn("| write | 3 / 0 / 1 | 3 / 0 / 1 |", text)
        self.assertIn("| all | 3 / 2 / 1 | 3 / 2 / 1 |", text)
        self.assertIn("| register history linearizable | 1 of 1 | 1 of 1 |",
                      text)
        self.assertIn("| replicas identical | 1 of 1 | 0 of 1 |", text)
        self.assertIn("suspicious episodes: 1", text)
        self.assertIn("seed 8 (5 nodes): replicas identical: node 2 differs",
                      text)
        self.assertIn("history and logs: /k/seed-8", text)
        # 4 faults of each kind on each size: 3 nodes lack 2 kills and
        # 2 bridges, 5 nodes 3 kills and 4 bridges.
        self.assertIn("3 nodes: 10.0 s per fault measured; 4 faults to go",
                      text)
        self.assertIn("5 nodes: 10.0 s per fault measured; 7 faults to go",
                      text)
        self.assertNotIn("complete:", text)
        recs += [record(9, 3, {"kill": 2, "bridge": 2}),
                 record(10, 5, {"kill": 3, "bridge": 4})]
        self.assertIn("complete: every kind has 4 faults on each size",
                      jepsen.table(recs, cfg))

    def test_fixed(self):
        """A failed episode listed in JEPSEN_FIXED is shown fixed, with
        its commit, and no longer counts as open; a line that is not
        such an object, or names no failed episode, is refused."""
        cfg = jepsen.settings({"JEPSEN_FAULTS": "4", "JEPSEN_KINDS": "kill"})
        self.assertTrue(cfg["fixed"].endswith(os.path.join(
            "campaign", "loopback-fixed.jsonl")))
        self.assertEqual(jepsen.settings({"JEPSEN_RECORD": "/x/r.jsonl"})[
            "fixed"], "/x/r-fixed.jsonl")
        recs = [record(7, 3, {"kill": 2}, failed=True),
                record(8, 3, {"kill": 2}, failed=True),
                record(9, 3, {"kill": 2})]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "f.jsonl")
            self.assertEqual(jepsen.load_fixed(path, recs), {})
            with open(path, "w") as f:
                f.write('{"seed": 7, "fix": "abc1234", "what": "the '
                        'cause"}\n\n')
            fixed = jepsen.load_fixed(path, recs)
            self.assertEqual(sorted(fixed), [7])
            self.assertEqual([r["seed"] for r in jepsen.unfixed(recs, fixed)],
                             [8])
            text = "\n".join(jepsen.table(recs, cfg, fixed))
            self.assertIn("suspicious episodes: 2 (1 fixed since, 1 open)",
                          text)
            self.assertIn("    fixed in abc1234: the cause", text)
            self.assertEqual(text.count("fixed in"), 1)
            self.assertEqual(jepsen.unfixed(recs[:1], fixed), [])
            for line, words in (
                    ('{"seed": 9, "fix": "a", "what": "b"}',
                     "line 1: seed 9 is no failed episode"),
                    ('{"seed": 7, "fix": "", "what": "b"}',
                     'line 1 is not {"seed": S'),
                    ('{"seed": "7", "fix": "a", "what": "b"}',
                     'line 1 is not {"seed": S'),
                    ("not json", "line 1 is not JSON")):
                with open(path, "w") as f:
                    f.write(line + "\n")
                with self.assertRaises(ValueError) as cm:
                    jepsen.load_fixed(path, recs)
                self.assertIn(words, str(cm.exception))

    def test_repository_record(self):
        """The repository's record and its list of fixed episodes load
        together (every listed seed a failed episode of the record)."""
        cfg = jepsen.settings({})
        recs = jepsen.load(cfg["record"])
        fixed = jepsen.load_fixed(cfg["fixed"], recs)
        for seed in fixed:
            self.assertIn(seed, [r["seed"] for r in recs if r["failed"]])


if __name__ == "__main__":
    unittest.main()
