"""RETURNING rows and safe retries:
raft_query returns the rows of INSERT/UPDATE/DELETE ... RETURNING as
JSON with their types, on the leader, a follower and from another process
(attach); a statement failing after a RETURNING rolls the request back on
every node; raft_exec_id and raft_query_id retried after a forced
"outcome unknown" (the test fault RAFTSQL_TEST_DROP_ID_RESULT drops the
first result of ids starting "drop-") apply once: on the same node, on
another node, after a leader change and after a restart of the caller's
node; a reused id with other SQL is refused.

One cluster for the whole file (cheap): each test uses tables of its own.
"""

import json
import os
import shutil
import tempfile
import unittest

from codes import CODES
from e2e import NODE, stop_cluster, wait_for
from raftsql_cluster import Cluster, NodeError
from test_attach import writer

FAST = "election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=3000"


class QueryTest(unittest.TestCase):
    """A 3-node cluster of raftsql-testhost processes (test builds) that
    drop the first result of the ids starting "drop-"."""

    @classmethod
    def with_fault(cls, start):
        """@start() with the fault in the nodes' environment."""
        os.environ["RAFTSQL_TEST_DROP_ID_RESULT"] = "drop-"
        try:
            return start()
        finally:
            del os.environ["RAFTSQL_TEST_DROP_ID_RESULT"]

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="raftsql-e2e-query-")
        cls.cluster = cls.with_fault(lambda: Cluster(NODE, cls.dir, 3, FAST))
        cls.cluster.wait_leader()

    @classmethod
    def tearDownClass(cls):
        codes = stop_cluster(cls.cluster)
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert codes == [0, 0, 0], "a node exited with an error: %r" % codes

    def leader(self):
        return self.cluster.wait_leader()

    def followers(self):
        lead = self.leader()
        return [n for n in self.cluster.nodes if n.id != lead.id]

    def exec(self, node, sql):
        return node.value("SELECT raft_exec(?)", sql)

    def on_every_node(self, sql):
        """@sql's value on every node, once each applied the leader's
        applied index."""
        self.cluster.wait_applied(self.leader().status()["applied"])
        return [n.value(sql) for n in self.cluster.nodes]

    def test_returning_every_type_on_leader_follower_and_attach(self):
        """Integers (64-bit edges), reals (17 digits, 1.0 a real, +-Inf),
        text with quotes and Unicode, NULL, '' and blobs (NUL bytes, zero
        length) come back typed, wherever raft_query is called."""
        self.exec(self.leader(), "CREATE TABLE ty(id INTEGER PRIMARY KEY, "
                                 "i, r, t, b)")
        sql = ("INSERT INTO ty(i, r, t, b) VALUES "
               "(9223372036854775807, 1.0, 'a\"b''c \u00e9\u20ac', x'00ff00'),"
               "(-9223372036854775808, 0.1, '', x''),"
               "(NULL, 9e999, NULL, NULL), (0, -9e999, 'x', NULL) "
               "RETURNING i, r, t, b")
        want_rows = [
            [9223372036854775807, 1.0, "a\"b'c \u00e9\u20ac",
             {"base64": "AP8A"}],
            [-9223372036854775808, 0.1, "", {"base64": ""}],
            [None, {"real": "inf"}, None, None],
            [0, {"real": "-inf"}, "x", None],
        ]
        callers = [("leader", lambda s: self.leader().value(
                        "SELECT raft_query(?)", s)),
                   ("follower", lambda s: self.followers()[0].value(
                       "SELECT raft_query(?)", s))]

        def attach(s):
            got = writer(self.followers()[1].db,
                         [["SELECT raft_query(?)", s]])
            self.assertIn("rows", got[0], got)
            return got[0]["rows"][0][0]
        callers.append(("attach", attach))
        for name, call in callers:
            with self.subTest(caller=name):
                text = call(sql)
                self.assertIn('9223372036854775807,1.0,', text)
                got = json.loads(text)
                self.assertEqual(got["changes"], 4)
                self.assertEqual(len(got["results"]), 1)
                self.assertEqual(got["results"][0]["columns"],
                                 ["i", "r", "t", "b"])
                self.assertEqual(got["results"][0]["rows"], want_rows)
                self.assertIsInstance(got["results"][0]["rows"][0][1], float)
                self.assertIsInstance(got["results"][0]["rows"][0][0], int)
                self.assertGreater(got["last_insert_rowid"], 0)
        self.assertEqual(self.on_every_node("SELECT count(*) FROM ty"),
                         [12, 12, 12])

    def test_failure_after_returning_rolls_back_on_every_node(self):
        """rqlite #2530: a statement failing after a RETURNING one in the
        same request: no rows, nothing applied on any node."""
        self.exec(self.leader(), "CREATE TABLE rb(id INTEGER PRIMARY KEY, "
                                 "a UNIQUE)")
        self.exec(self.leader(), "INSERT INTO rb(a) VALUES (1)")
        for node in (self.leader(), self.followers()[0]):
            with self.assertRaises(NodeError) as cm:
                node.value("SELECT raft_query(?)",
                           "INSERT INTO rb(a) VALUES (2) RETURNING id; "
                           "UPDATE rb SET a = a + 1 RETURNING a; "
                           "INSERT INTO rb(a) VALUES (1)")
            self.assertIn("UNIQUE constraint failed", str(cm.exception))
        self.assertEqual(self.on_every_node(
            "SELECT group_concat(a) FROM rb"), ["1", "1", "1"])

    def forced_unknown(self, node, rid, sql, fn="raft_exec_id"):
        """Call @fn(@rid, @sql) on @node, expecting "outcome unknown" (the
        fault drops the first result)."""
        with self.assertRaises(NodeError) as cm:
            node.value("SELECT %s(?, ?)" % fn, rid, sql)
        self.assertIn("%s: outcome unknown" % fn, str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_UNKNOWN"])

    def count(self, node, k):
        return node.value("SELECT count(*) FROM once WHERE k = ?", k)

    def test_exec_id_retry_after_unknown_applies_once(self):
        """The same id retried after "outcome unknown", on the same node,
        on another, after a leader change and after a restart of the
        caller's node, applies once and answers the first outcome."""
        self.exec(self.leader(), "CREATE TABLE IF NOT EXISTS once("
                                 "id INTEGER PRIMARY KEY, k)")

        def ins(k):
            return "INSERT INTO once(k) VALUES ('%s')" % k

        # the same node
        f = self.followers()[0]
        self.forced_unknown(f, "drop-same", ins("same"))
        self.assertEqual(f.value("SELECT raft_exec_id(?, ?)", "drop-same",
                                 ins("same")), 1)
        self.assertEqual(self.count(f, "same"), 1)
        # another node
        self.forced_unknown(f, "drop-other", ins("other"))
        other = self.leader()
        self.assertEqual(other.value("SELECT raft_exec_id(?, ?)",
                                     "drop-other", ins("other")), 1)
        self.assertEqual(self.count(other, "other"), 1)
        # after a leader change
        f = self.followers()[0]
        old = self.leader()
        self.forced_unknown(f, "drop-lead", ins("lead"))
        old.value("SELECT raft_transfer(?)", f.id)
        wait_for("the leadership moved", lambda: self.leader().id != old.id)
        for node in self.cluster.nodes:
            self.assertEqual(node.value("SELECT raft_exec_id(?, ?)",
                                        "drop-lead", ins("lead")), 1)
        self.assertEqual(self.on_every_node(
            "SELECT count(*) FROM once WHERE k = 'lead'"), [1, 1, 1])
        # after a restart of the caller's node
        f = self.followers()[0]
        self.forced_unknown(f, "drop-restart", ins("restart"))
        self.assertEqual(f.stop(), 0)
        f = self.cluster.nodes[f.id - 1] = self.with_fault(
            lambda: self.cluster.spawn(f.id))
        self.assertEqual(f.value("SELECT raft_exec_id(?, ?)", "drop-restart",
                                 ins("restart")), 1)
        self.assertEqual(self.on_every_node(
            "SELECT count(*) FROM once WHERE k = 'restart'"), [1, 1, 1])
        # a reused id with other SQL is refused, nothing applied
        with self.assertRaises(NodeError) as cm:
            f.value("SELECT raft_exec_id(?, ?)", "drop-restart", ins("new"))
        self.assertIn("request id 'drop-restart' was used for different SQL",
                      str(cm.exception))
        self.assertEqual(cm.exception.code, 19)  # SQLITE_CONSTRAINT
        self.assertEqual(self.count(f, "new"), 0)

    def test_id_retry_without_a_leader_is_not_denied(self):
        """A retry under an id whose first try committed, on a node that
        reaches no leader (the two others stopped), answers "outcome
        unknown", never "not applied" (a client trusting that would take
        a committed write for a failed one); a plain raft_exec there,
        never sent, stays "not applied". Once a leader is back, the retry
        answers the first outcome, applied once."""
        self.exec(self.leader(), "CREATE TABLE IF NOT EXISTS once("
                                 "id INTEGER PRIMARY KEY, k)")
        f = self.followers()[0]
        sql = "INSERT INTO once(k) VALUES ('no-leader')"
        self.assertEqual(f.value("SELECT raft_exec_id(?, ?)", "no-leader",
                                 sql), 1)
        others = [n.id for n in self.cluster.nodes if n.id != f.id]
        try:
            for i in others:
                self.assertEqual(self.cluster.node(i).stop(), 0)
            wait_for("server %d knows no leader (status: %r)" % (
                f.id, f.status()), lambda: f.status()["leader"] is None)
            with self.assertRaises(NodeError) as cm:
                f.value("SELECT raft_exec_id(?, ?)", "no-leader", sql)
            self.assertIn("raft_exec_id: outcome unknown: no leader "
                          "reachable", str(cm.exception))
            self.assertIn("retry with the same id", str(cm.exception))
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_UNKNOWN"])
            with self.assertRaises(NodeError) as cm:
                f.value("SELECT raft_exec(?)", sql)
            self.assertIn("raft_exec: not applied: no leader reachable",
                          str(cm.exception))
            self.assertEqual(cm.exception.code,
                             CODES["RAFTSQL_NOT_APPLIED"])
        finally:
            for i in others:
                if self.cluster.node(i).proc.poll() is not None:
                    self.cluster.nodes[i - 1] = self.with_fault(
                        lambda i=i: self.cluster.spawn(i))
        self.assertEqual(f.value("SELECT raft_exec_id(?, ?)", "no-leader",
                                 sql), 1)
        self.assertEqual(self.on_every_node(
            "SELECT count(*) FROM once WHERE k = 'no-leader'"), [1, 1, 1])

    def test_query_id_retry_returns_the_same_rows(self):
        """raft_query_id retried after "outcome unknown" returns the rows of
        the first application, also on another node and through attach;
        an INTEGER id is its decimal text."""
        self.exec(self.leader(), "CREATE TABLE qi(id INTEGER PRIMARY KEY, "
                                 "v)")
        f = self.followers()[0]
        sql = "INSERT INTO qi(v) VALUES ('x'), ('y') RETURNING id, v"
        self.forced_unknown(f, "drop-q", sql, "raft_query_id")
        first = f.value("SELECT raft_query_id(?, ?)", "drop-q", sql)
        rows = json.loads(first)["results"][0]["rows"]
        self.assertEqual([r[1] for r in rows], ["x", "y"])
        self.assertEqual(self.leader().value(
            "SELECT raft_query_id(?, ?)", "drop-q", sql), first)
        got = writer(self.followers()[1].db,
                     [["SELECT raft_query_id(?, ?)", "drop-q", sql]])
        self.assertEqual(got[0], {"rows": [[first]]})
        self.assertEqual(self.on_every_node("SELECT count(*) FROM qi"),
                         [2, 2, 2])
        a = self.leader().value("SELECT raft_query_id(42, ?)",
                                "INSERT INTO qi(v) VALUES (1) RETURNING id")
        self.assertEqual(self.leader().value(
            "SELECT raft_query_id('42', ?)",
            "INSERT INTO qi(v) VALUES (1) RETURNING id"), a)
        for bad in ("NULL", "1.5", "''"):
            with self.assertRaises(NodeError) as cm:
                self.leader().value("SELECT raft_exec_id(%s, 'SELECT 1')" %
                                    bad)
            self.assertIn("raft_exec_id: the request id", str(cm.exception))
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])


if __name__ == "__main__":
    unittest.main()
