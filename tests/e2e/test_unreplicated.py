"""End-to-end: no direct write to a replica's file is committed
unreplicated, in a process that loaded raftsql.

No node, no write: a replica's file that no node serves (its node
stopped cleanly, killed with SIGKILL, or a copy whose node has not
started) refuses direct writes in every process that loaded raftsql:
Python's sqlite3 and the sqlite3 shell, on another process than the
node's. Before, such a write succeeded without a word, and the node's
next start found the file diverged and repaired the acknowledged row
away. Reads stay allowed (no max_staleness_ms here), a file that never
was a replica is written as before, and a process without raftsql is not
refused (its write is found and repaired, as test_foreign shows).

A replaced guard: Python's set_authorizer(None) removes the guard, and a
direct write then runs, but its commit is vetoed (IntegrityError,
"constraint failed") and rolled back. Before, it was committed.
"""

import os
import shutil
import sqlite3
import unittest

from attach_writers import shell, writer
from e2e import ClusterCase, connect, wait_for, without_raftsql

EXTRA = "election_timeout_ms=1000 heartbeat_ms=50 exec_timeout_ms=10000"
REFUSED = "is a Raft replica (it has a raftsql_applied table) and no " \
          "raftsql node serves it"

# Direct writes of every kind the guard knows, one statement each.
WRITES = [
    "INSERT INTO kv VALUES('direct', 1)",
    "UPDATE kv SET v = v + 1",
    "DELETE FROM kv",
    "REPLACE INTO kv VALUES('a', 7)",
    "CREATE TABLE direct(x)",
    "CREATE INDEX kv_v ON kv(v)",
    "DROP TABLE kv",
    "ALTER TABLE kv ADD COLUMN w",
]


def plain_rows(db):
    """The rows of kv (text, integer), read without raftsql."""
    return [(k, int(v)) for k, v in (
        line.split("|") for line in without_raftsql(
            db, "SELECT k, v FROM kv ORDER BY k"))]


class UnreplicatedTest(ClusterCase):

    def setUp(self):
        self.start_kv(EXTRA)

    def assert_refused_everywhere(self, db, how):
        """Every write of WRITES, from a Python process and from the
        sqlite3 shell with raftsql loaded, is refused on @db, which keeps
        its rows; reads answer."""
        before = plain_rows(db)
        self.assertEqual(before, [("a", 1)], how)
        answers, err = writer(db, [[w] for w in WRITES] +
                              [["SELECT k, v FROM kv"],
                               ["SELECT raft_last_error()"]], stderr=True)
        # The whole reason, which SQLite's "not authorized" leaves out.
        why = answers[-1]["rows"][0][0]
        self.assertIn(REFUSED, why, how)
        self.assertTrue(why.startswith("direct write to kv refused: "),
                        (how, why))
        for w, a in zip(WRITES, answers):
            self.assertIn("error", a, "%s: %s was not refused: %r" %
                          (how, w, a))
            self.assertIn("not authorized", a["error"], (how, w))
            self.assertEqual(a["code"], sqlite3.SQLITE_AUTH, (how, w))
        self.assertEqual(answers[-2], {"rows": [["a", 1]]}, how)
        self.assertIn("raftsql: direct write to kv refused: %s %s" %
                      (db, REFUSED), err, how)
        self.assertIn("start its node (raft_start) and write again", err,
                      how)
        out = shell(db, "INSERT INTO kv VALUES('shell', 2);")
        self.assertNotEqual(out.returncode, 0, "%s: shell: %r" % (how, out))
        self.assertIn("not authorized", out.stderr, how)
        self.assertIn(REFUSED, out.stderr, how)
        self.assertEqual(plain_rows(db), before, how)

    def test_stopped_killed_and_not_started(self):
        """A follower stopped cleanly, then killed with SIGKILL, and a
        copy of its file with no node: each refuses every direct write.
        The node restarted serves again, and the replicas agree."""
        f = self.followers[0]
        db = f.db
        i = self.cluster.nodes.index(f)
        self.assertEqual(f.stop(), 0)
        self.assert_refused_everywhere(db, "stopped")

        self.cluster.nodes[i] = self.cluster.spawn(f.id)
        wait_for("node %d serves again" % f.id,
                 lambda: self.cluster.nodes[i].status()["applied"] >=
                 self.leader.status()["applied"], 30)
        self.cluster.nodes[i].kill()
        self.assert_refused_everywhere(db, "killed")

        copy = os.path.join(self.dir, "copy.db")
        shutil.copyfile(db, copy)
        self.assert_refused_everywhere(copy, "a copy, not started")

        self.cluster.nodes[i] = self.cluster.spawn(f.id)
        self.exec(self.leader, "INSERT INTO kv VALUES('b', 2)")
        self.cluster.wait_all_applied()
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT k, v FROM kv ORDER BY k"),
                             [["a", 1], ["b", 2]], "node %d" % n.id)
            self.assertIs(n.status()["diverged"], None, "node %d" % n.id)

    def test_plain_files_and_processes_without_raftsql(self):
        """A file that never was a replica is written freely in a process
        that loaded raftsql; a process without raftsql writes a stopped
        replica (it cannot be refused: the node finds it at its start)."""
        plain = os.path.join(self.dir, "plain.db")
        answers, err = writer(plain, [["CREATE TABLE p(x)"],
                                      ["INSERT INTO p VALUES (1)"],
                                      ["SELECT x FROM p"]], stderr=True)
        self.assertEqual(answers, [{"rows": []}, {"rows": []},
                                   {"rows": [[1]]}], err)
        f = self.followers[0]
        self.assertEqual(f.stop(), 0)
        without_raftsql(f.db, "INSERT INTO kv VALUES('plain', 3)")
        self.assertIn(("plain", 3), plain_rows(f.db))

    def test_replaced_authorizer_commits_nothing(self):
        """On a follower's file served by its node, in this process:
        with set_authorizer(None) after the load, an autocommit INSERT,
        executemany in a `with con:` block and an explicit COMMIT each
        fail with IntegrityError and leave the replica as it was; reads
        and TEMP tables work; the node never sees a foreign write."""
        f = self.followers[0]
        con = connect(f.db)
        try:
            con.set_authorizer(None)
            with self.assertRaises(sqlite3.IntegrityError) as cm:
                con.execute("INSERT INTO kv VALUES('x', 1)")
            self.assertIn("constraint failed", str(cm.exception))
            self.assertFalse(con.in_transaction)
            self.assertIn("commit to %s refused, rolled back" % f.db,
                          con.execute("SELECT raft_last_error()")
                          .fetchone()[0])
            con.isolation_level = ""  # Python opens the transactions
            with self.assertRaises(sqlite3.IntegrityError):
                with con:
                    con.executemany("INSERT INTO kv VALUES(?, ?)",
                                    [("m1", 1), ("m2", 2)])
            self.assertFalse(con.in_transaction)
            con.isolation_level = None
            con.execute("BEGIN")
            con.execute("UPDATE kv SET v = 100")
            self.assertEqual(con.execute("SELECT v FROM kv").fetchall(),
                             [(100,)])
            with self.assertRaises(sqlite3.IntegrityError):
                con.execute("COMMIT")
            self.assertFalse(con.in_transaction)
            con.execute("CREATE TEMP TABLE scratch(x)")
            con.execute("INSERT INTO scratch VALUES (1)")
            self.assertEqual(con.execute("SELECT k, v FROM kv").fetchall(),
                             [("a", 1)])
        finally:
            con.close()
        self.assertEqual(plain_rows(f.db), [("a", 1)])
        # The node goes on applying, and finds nothing foreign.
        self.exec(self.leader, "INSERT INTO kv VALUES('b', 2)")
        self.cluster.wait_all_applied()
        self.assertEqual(plain_rows(f.db), [("a", 1), ("b", 2)])
        self.assertIs(f.status()["diverged"], None)


if __name__ == "__main__":
    unittest.main()
