"""End-to-end: Python's sqlite3 module as the host of a raftsql node.

This process loads build/raftsql.so into its own connections (node 1) and
runs two raftsql-testhost processes (nodes 2 and 3). Many threads, each with its
own connection to the same database file, call raft_exec concurrently: the
node belongs to the process and the file, not to one connection.
"""

import json
import sqlite3
import threading
import time
import unittest

from e2e import PythonHostCase, connect  # noqa: E402

TIMING = "election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=10000"
THREADS = 8
WRITES = 25


class PythonHostTest(PythonHostCase):

    TIMING = TIMING

    def test_concurrent_writers_on_many_connections(self):
        deadline = time.monotonic() + 15
        while self.con.execute("SELECT raft_leader()").fetchone()[0] is None:
            self.assertLess(time.monotonic(), deadline, "no leader")
            time.sleep(0.05)
        self.con.execute("SELECT raft_exec('CREATE TABLE w(t, i, "
                         "PRIMARY KEY(t, i))')")
        errors = []
        rowids = []

        def writer(t):
            con = connect(self.db)
            try:
                for i in range(WRITES):
                    n = con.execute("SELECT raft_exec(?, ?, ?)", (
                        "INSERT INTO w VALUES(?, ?)", t, i)).fetchone()[0]
                    if n != 1:
                        errors.append("changes %r" % n)
                    # Read your own write on this very connection.
                    got = con.execute("SELECT count(*) FROM w WHERE t = ? "
                                      "AND i = ?", (t, i)).fetchone()[0]
                    if got != 1:
                        errors.append("write %d/%d not visible" % (t, i))
                    rowids.append(con.execute(
                        "SELECT raft_last_insert_rowid()").fetchone()[0])
            except sqlite3.Error as e:
                errors.append(str(e))
            finally:
                con.close()

        threads = [threading.Thread(target=writer, args=(t,))
                   for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(set(rowids)), THREADS * WRITES)
        total = THREADS * WRITES
        self.assertEqual(self.con.execute(
            "SELECT count(*) FROM w").fetchone()[0], total)
        # The other replicas converge to the same rows.
        applied = json.loads(self.con.execute(
            "SELECT raft_status()").fetchone()[0])["applied"]
        for n in self.peers:
            deadline = time.monotonic() + 20
            while n.status()["applied"] < applied:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.02)
            self.assertEqual(n.value("SELECT count(*) FROM w"), total)

    def test_direct_write_on_other_connection(self):
        """Another connection of the node's process: a write to raftsql's
        own tables is refused when prepared; a plain write is replicated,
        whether this node leads or follows."""
        con = connect(self.db)
        try:
            deadline = time.monotonic() + 15
            while con.execute("SELECT raft_leader()").fetchone()[0] is None:
                self.assertLess(time.monotonic(), deadline, "no leader")
                time.sleep(0.05)
            with self.assertRaises(sqlite3.DatabaseError) as cm:
                con.execute("DELETE FROM raftsql_settings")
            self.assertIn("not authorized", str(cm.exception))
            con.execute("CREATE TABLE direct(x)")
            con.execute("INSERT INTO direct VALUES(1)")
            self.assertEqual(con.execute(
                "SELECT count(*) FROM direct").fetchone()[0], 1)
        finally:
            con.close()

    def test_raft_exec_inside_a_transaction_refused(self):
        """raft_exec inside the caller's own transaction is refused at once
        (before, the node's apply connection waited for that transaction,
        which waited for the write: "outcome unknown" after the timeout)."""
        deadline = time.monotonic() + 15
        while self.con.execute("SELECT raft_leader()").fetchone()[0] is None:
            self.assertLess(time.monotonic(), deadline, "no leader")
            time.sleep(0.05)
        self.con.execute("SELECT raft_exec('CREATE TABLE x(a)')")
        for begin in ("BEGIN IMMEDIATE", "BEGIN"):
            self.con.execute(begin)
            t0 = time.monotonic()
            with self.assertRaises(sqlite3.OperationalError) as cm:
                self.con.execute("SELECT raft_exec('INSERT INTO x VALUES(1)')")
            # Within half of exec_timeout_ms (10 s), which it waited
            # before; the message says why it was refused.
            self.assertLess(time.monotonic() - t0, 5.0)
            self.assertIn("not applied: this connection is inside a "
                          "transaction", str(cm.exception))
            self.con.execute("ROLLBACK")
        self.assertEqual(self.con.execute("SELECT raft_exec('INSERT INTO x "
                                          "VALUES(2)')").fetchone()[0], 1)
        self.assertEqual(self.con.execute("SELECT count(*) FROM x")
                         .fetchone()[0], 1)

if __name__ == "__main__":
    unittest.main()
